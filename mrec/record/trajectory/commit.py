"""Committing: the commit protocol of the trajectory writer, and what a failure inside it does.

The last stage of :class:`~mrec.record.trajectory.writer.TrajectoryWriter`.  A :class:`Committer`
takes a :class:`~mrec.record.trajectory.buffer.CommitBatch` — every dirty array in the chapter's
order (within a block the index first: offset, then step_index, then columns and masks; box
vectors last; then meta, step and time) and the groups to publish — has the lander
(:mod:`~mrec.record.trajectory.land`) land it and publishes:

1. each touched array: chunk bytes (positional writes into its shard), then
   its ``zarr.json`` replaced atomically; touched block / box groups likewise;
2. if durable: fsync of the data files, their ``zarr.json`` files and their
   directories;
3. ``trajectory/zarr.json`` last, carrying ``nstep`` and the progressions;
4. if durable: fsync of that file and of ``trajectory/``.

In a durable flush every ``zarr.json`` is fsynced as its temporary file, before the
rename (the same fsyncs as after it): the rename can then never reach the disk
ahead of the document's bytes, even on a file system that does not order them
(see docs/reliability.md).  ``durable="always"`` makes automatic flushes durable too;
files written by non-durable commits are remembered (``_unsynced``) and synced by the next
durable one.

The committer owns that order, the unsynced keys, what it is doing (``_at``, named by a failure),
the attributes of the last commit marker and the frames it committed, and — for a pipelined
writer — the queue of commits and the committer thread.  A commit that fails (ENOSPC, EIO from a
write or an fsync, anything) becomes :class:`~mrec.errors.WriteError` naming the file
(:meth:`Committer.failure`) and poisons the writer through its :class:`Guard`: every later call
refuses, the lock is released, and :meth:`TrajectoryWriter.open` continues from what is on disk
(docs/reliability.md, "Write errors").
"""
from __future__ import annotations

import posixpath
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from ...errors import WriteError
from ...zarr.array import meta_key, write_group
from ...zarr.metadata import GroupMetadata, json_dumps
from ...zarr.parallel import one_thread
from .buffer import CommitBatch
from .land import Lander
from .layout import TRAJ


class Guard:
    """The writer's sticky failure and its lock — the writer's own, lent to its committer, whose
    thread must poison the writer the moment a queued commit fails (and, reaching the writer through
    nothing else, keeps it free of reference cycles: an abandoned writer still lets its lock go)."""

    __slots__ = ("failed", "lock")

    def __init__(self, lock=None):
        self.failed: WriteError | None = None       # the first failure: every later call refuses
        self.lock = lock                             # the store's writer lock (mrec.record.integrity.lock)

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def poison(self, failure: WriteError) -> None:
        """(On the committer thread.)  ``failure`` is the writer's; its lock goes now (best effort)."""
        self.failed = failure
        try:
            self.release_lock()
        except OSError:
            pass


class Committer:
    """The last stage: lands and publishes a :class:`~mrec.record.trajectory.buffer.CommitBatch` in
    the commit protocol's order, now (:meth:`commit`) or queued to its thread (:meth:`queue`).

    ``marker`` is the attributes of the last ``trajectory/zarr.json`` it published, ``committed``
    the frames that commit holds."""

    #: queued commits hold at most this many bytes of rows; beyond, the next automatic flush waits
    QUEUE_BYTES = 64 << 20

    def __init__(self, store, schema, lander: Lander, guard: Guard, *, marker: dict, committed: int):
        self.store = store
        self.schema = schema
        self.lander = lander
        self.guard = guard
        self.marker = marker
        self.committed = committed
        self._at = ("", "")                          # (what, key) the commit is doing: named by a failure
        self._unsynced: tuple[list, list] = ([], [])   # keys written by automatic flushes since the last fsync
        self._queue: deque = deque()                 # (future, bytes) of queued commits
        self._queued_bytes = 0
        self._thread: ThreadPoolExecutor | None = None
        self._unreported: WriteError | None = None   # a queued commit's failure, raised at the next call
        self._producer_waits = False       # the producer waits for the committer (drain, a full queue)

    def _note(self, what: str, key: str) -> None:
        self._at = (what, key)

    def sync(self, data_keys: list[str], meta_keys: list[str]) -> set:
        """fsync the files, then every directory that holds them (deepest first) up to
        trajectory/; returns the directories synced."""
        st = self.store
        dirs: list[str] = []
        for k in data_keys + meta_keys:
            self._at = ("fsync of", k)
            st.fsync(k)
            d = posixpath.dirname(k)
            while d not in dirs:
                dirs.append(d)
                if not d.startswith(TRAJ + "/"):
                    break
                d = posixpath.dirname(d)
        for d in sorted(dirs, key=lambda x: -x.count("/")):
            self._at = ("fsync of the directory", d)
            st.fsync_dir(d)
        return set(dirs)

    def _sync_dirs(self, key: str, done: set) -> None:
        """fsync the directory of ``key`` (its entry just changed), then its parents up to
        trajectory/ that no fsync in this commit has covered yet."""
        d = posixpath.dirname(key)
        self._at = ("fsync of the directory", d)
        self.store.fsync_dir(d)
        done.add(d)
        while d.startswith(TRAJ + "/"):
            d = posixpath.dirname(d)
            if d not in done:
                self._at = ("fsync of the directory", d)
                self.store.fsync_dir(d)
                done.add(d)

    def _pend(self, data_keys: list[str], meta_keys: list[str]) -> None:
        for pending, keys in zip(self._unsynced, (data_keys, meta_keys)):
            pending.extend(k for k in keys if k not in pending)

    def failure(self, exc: BaseException) -> WriteError:
        """The writer's :class:`WriteError` for a commit that failed with ``exc``, naming what the
        commit was doing (``_at``)."""
        what, key = self._at
        if isinstance(exc, OSError):
            err = WriteError(
                f"{what} {key or self.store.root} failed ({exc.strerror or exc}); this writer refuses further "
                f"work: frames {self.committed} and later were not reported committed, reopen the store "
                "(TrajectoryWriter.open) to continue from what is on disk",
                path=self.store.describe(key) if key else self.store.root, errno=exc.errno)
        else:
            err = WriteError(f"{what} {key} failed ({type(exc).__name__}: {exc}); this writer refuses "
                             "further work: reopen the store (TrajectoryWriter.open)",
                             path=self.store.describe(key) if key else self.store.root)
        err.__cause__ = exc
        return err

    def next_marker(self, batch: CommitBatch) -> dict:
        """The attributes of ``trajectory/zarr.json`` that commits ``batch``: ``nstep`` and the
        progressions over the last marker's."""
        attrs = dict(self.marker)
        attrs["sequence_schema"] = self.schema.to_json() if "sequence_schema" not in attrs else attrs["sequence_schema"]
        attrs["nstep"] = batch.nframes
        for key, a in batch.progressions:
            if a is None:
                attrs.pop(key, None)
            else:
                attrs[key] = a
        return attrs

    def commit(self, batch: CommitBatch, durable: bool) -> None:
        """Land and publish ``batch`` now, on the calling thread (the writer turns a failure into its
        own: :meth:`failure`)."""
        marker = self.next_marker(batch)
        self.lander.hand_over(batch.moves)       # a pipelined writer's flush / close: the rows since its last queued commit
        self._land_and_publish(batch, marker, durable)

    # -- the pipelined writer: automatic commits queued to a committer thread ------------------------
    def queue(self, batch: CommitBatch, durable: bool) -> None:
        """An automatic commit of a pipelined writer (``pipeline=True``): ``batch`` (taken now, with
        the rows buffered since the last commit handed over) is run on the committer thread, one
        commit after the other in the order they were queued, each in the order of the commit
        protocol.  Returns at once unless the queue holds :attr:`QUEUE_BYTES` (then it waits for the
        oldest).  A queued commit that fails poisons the writer (:class:`Guard`); its
        :class:`WriteError` surfaces at the writer's next call (:meth:`surface`), with the store at
        its last completed commit."""
        marker = self.next_marker(batch)
        nbytes = sum(r.nbytes for _w, rows in batch.moves for r in rows)
        queue = self._queue
        while queue and (queue[0][0].done() or self._queued_bytes + nbytes > self.QUEUE_BYTES):
            fut, n = queue.popleft()
            self._producer_waits = True      # a full queue: the committer may use the pool meanwhile
            try:
                fut.result()
            finally:
                self._producer_waits = False
            self._queued_bytes -= n
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mrec-commit")
        queue.append((self._thread.submit(self._run_queued, batch, marker, durable), nbytes))
        self._queued_bytes += nbytes

    def _run_queued(self, batch: CommitBatch, marker: dict, durable: bool) -> None:
        """(On the committer thread.)  One queued commit; nothing once the writer has failed."""
        guard = self.guard
        if guard.failed is not None:
            return
        # encode on this thread alone while it keeps up (the producer's core stays free); on the
        # pool too, asked again at each array's landing, when another commit waits behind this one
        # or the producer waits for the committer (flush, close, a full queue)
        try:
            self.lander.hand_over(batch.moves)
            with one_thread(self._alone):
                self._land_and_publish(batch, marker, durable)
        except BaseException as exc:
            if guard.failed is None:
                guard.poison(self.failure(exc))
                self._unreported = guard.failed

    def _alone(self) -> bool:
        """(On the committer thread.)  Whether the commit landing now keeps to its own thread: the
        producer is not waiting for it and no other commit is queued behind it."""
        if self._producer_waits:
            return False
        return sum(1 for fut, _n in list(self._queue) if not fut.done()) <= 1

    @property
    def queued(self) -> bool:
        """Commits are queued (not all of them waited for yet)."""
        return bool(self._queue)

    def drain(self) -> None:
        """Wait for every queued commit (flush, close, a failure elsewhere)."""
        queue = self._queue
        self._producer_waits = True          # the committer may use the pool meanwhile
        try:
            while queue:
                fut, n = queue.popleft()
                fut.result()
                self._queued_bytes -= n
        finally:
            self._producer_waits = False

    def surface(self) -> None:
        """Raise, once, the :class:`WriteError` of a queued commit that failed since the last call."""
        f = self._unreported
        if f is not None:
            self._unreported = None
            raise f

    def stop(self) -> None:
        """The committer thread ends (after its queued commits)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def _land_and_publish(self, batch: CommitBatch, marker: dict, durable: bool) -> None:
        st = self.store
        order, groups = batch.order, batch.groups
        data_keys = self.lander.land(order, self._note)
        if not durable:
            meta_keys = []
            for w in order:
                self._at = ("publishing", meta_key(w.path))
                k = w.publish()
                if k:
                    meta_keys.append(k)
            for path, attrs in groups:
                self._at = ("publishing", meta_key(path))
                write_group(st, path, attrs)
                meta_keys.append(meta_key(path))
            self._pend(data_keys, meta_keys)
        else:
            # the chunks are on disk before any zarr.json names their rows (a durable flush makes
            # every frame up to it durable: files only automatic flushes touched are synced too);
            # then each zarr.json, fsynced as written, and its directory before the next one, so
            # the publishes reach the disk in their order (offset before step_index, box vectors
            # last, a group rewrite that drops what its arrays now hold after them) whatever order
            # the file system would give different directories
            self._pend(data_keys, [])
            done = self.sync(*self._unsynced)
            self._unsynced = ([], [])
            for w in order:
                self._at = ("publishing", meta_key(w.path))
                k = w.publish(True)
                if k:
                    self._sync_dirs(k, done)
            for path, attrs in groups:
                self._at = ("publishing", meta_key(path))
                write_group(st, path, attrs, fsync=True)
                self._sync_dirs(meta_key(path), done)
        self._at = ("committing (nstep)", meta_key(TRAJ))
        st.set(meta_key(TRAJ), json_dumps(GroupMetadata(marker).to_json()), fsync=durable)
        if durable:
            self._at = ("fsync of the directory", TRAJ)
            st.fsync_dir(TRAJ)
        self.marker = marker
        self.committed = batch.nframes
        self.lander.landed()                # the arrays of this commit: checked for failed encodes
        self._at = ("", "")
