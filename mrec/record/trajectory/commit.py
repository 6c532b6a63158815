"""Committing: the commit protocol of the trajectory writer, and what a failure inside it does.

The last stage of :class:`~mrec.record.trajectory.writer.TrajectoryWriter`.  A commit lands every
dirty array (:mod:`~mrec.record.trajectory.land`) in the chapter's order — within a block the
index first (offset, then step_index, then columns and masks), box vectors last, then meta,
step and time — and publishes:

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

A commit that fails (ENOSPC, EIO from a write or an fsync, anything) raises
:class:`~mrec.errors.WriteError` naming the file (``_at``) and poisons the writer: every
later call refuses, the lock is released, and :meth:`TrajectoryWriter.open`
continues from what is on disk (docs/reliability.md, "Write errors").
"""
from __future__ import annotations

import posixpath

from ...errors import WriteError
from ...zarr.array import meta_key, write_group
from ...zarr.metadata import GroupMetadata, json_dumps
from ...zarr.parallel import one_thread
from ..sections.frame_group import VALIDITY
from .land import _Writer, settled
from .reader import TRAJ


def _on_committer() -> bool:
    import threading
    return threading.current_thread().name.startswith("mrec-commit")


class Committing:
    """The commit methods of :class:`~mrec.record.trajectory.writer.TrajectoryWriter` (a mixin)."""

    def _refusal(self) -> WriteError:
        f = self.failed
        err = WriteError(f"this writer refuses further work since {f.detail.split(';')[0]}: reopen the store "
                         "(TrajectoryWriter.open) to continue from what is on disk", path=f.path, errno=f.errno)
        err.__cause__ = f
        return err

    def _sync(self, data_keys: list[str], meta_keys: list[str]) -> set:
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

    def _commit(self, durable: bool) -> None:
        """:meth:`_land_and_publish`, all or nothing for this object: any failure inside (ENOSPC,
        EIO from a write or an fsync, anything else) leaves the writer refusing every later call.

        Once a write or fsync has failed the writer cannot know what reached the disk (a failed
        fsync may have dropped the dirty pages: PostgreSQL's "fsyncgate"), and its buffers and shard
        indexes may already describe bytes that never landed; retrying would commit a ``zarr.json``
        that names them.  So it does not retry: the store stays at the last ``nstep`` that landed
        (its arrays may be longer: the reopen rule shrinks them) and reopening re-establishes the
        state from disk (docs/reliability.md, "Write errors")."""
        if self.failed is not None:
            raise self._refusal()
        try:
            self._land_and_publish(durable)
        except BaseException as exc:
            self._fail(exc)
            if isinstance(exc, OSError):
                raise self.failed from exc
            raise

    def _fail(self, exc: BaseException) -> None:
        """A commit failed with ``exc``: the writer's :class:`WriteError` (naming what the commit was
        doing, ``_at``), and the writer poisoned."""
        what, key = self._at
        if isinstance(exc, OSError):
            self.failed = WriteError(
                f"{what} {key or self.store.root} failed ({exc.strerror or exc}); this writer refuses further "
                f"work: frames {self.committed} and later were not reported committed, reopen the store "
                "(TrajectoryWriter.open) to continue from what is on disk",
                path=self.store.describe(key) if key else self.store.root, errno=exc.errno)
        else:
            self.failed = WriteError(f"{what} {key} failed ({type(exc).__name__}: {exc}); this writer refuses "
                                     "further work: reopen the store (TrajectoryWriter.open)",
                                     path=self.store.describe(key) if key else self.store.root)
        self.failed.__cause__ = exc
        self._poisoned()

    # -- the pipelined writer: automatic commits queued to a committer thread ------------------------
    #: queued commits hold at most this many bytes of rows; beyond, the next automatic flush waits
    QUEUE_BYTES = 64 << 20

    def _queue_commit(self, durable: bool) -> None:
        """An automatic commit of a pipelined writer (``pipeline=True``): planned here — exactly what
        :meth:`_commit` would land and publish now, with the rows buffered since the last commit
        handed over — and run on the writer's committer thread, one commit after the other in the
        order they were queued, each in the order of the commit protocol.  Returns at once unless
        the queue holds :attr:`QUEUE_BYTES` (then it waits for the oldest).  A queued commit that
        fails poisons the writer as :meth:`_commit` does; its :class:`WriteError` surfaces at the
        writer's next call (:meth:`_surface`), with the store at its last completed commit."""
        self._surface()
        if self.failed is not None:
            raise self._refusal()
        plan = self._plan_commit()
        moves = []
        for w in plan[0]:
            if w.held:
                moves.append((w, w.held))
                w.held = []
        nbytes = sum(r.nbytes for _w, rows in moves for r in rows)
        queue = self._queue
        while queue and (queue[0][0].done() or self._queued_bytes + nbytes > self.QUEUE_BYTES):
            fut, n = queue.popleft()
            self._producer_waits = True      # a full queue: the committer may use the pool meanwhile
            try:
                fut.result()
            finally:
                self._producer_waits = False
            self._queued_bytes -= n
        if self._committer is None:
            from concurrent.futures import ThreadPoolExecutor
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mrec-commit")
        queue.append((self._committer.submit(self._run_queued, plan, moves, durable), nbytes))
        self._queued_bytes += nbytes

    def _run_queued(self, plan: tuple, moves: list, durable: bool) -> None:
        """(On the committer thread.)  One queued commit; nothing once the writer has failed."""
        if self.failed is not None:
            return
        # encode on this thread alone while it keeps up (the producer's core stays free); on the
        # pool too, asked again at each array's landing, when another commit waits behind this one
        # or the producer waits for the committer (flush, close, a full queue)
        try:
            for w, rows in moves:
                w.appender.append_many(settled(rows))
            with one_thread(self._committer_alone):
                self._land_and_publish(durable, plan)
        except BaseException as exc:
            if self.failed is None:
                self._fail(exc)
                self._unreported = self.failed

    def _committer_alone(self) -> bool:
        """(On the committer thread.)  Whether the commit landing now keeps to its own thread: the
        producer is not waiting for it and no other commit is queued behind it."""
        if self._producer_waits:
            return False
        return sum(1 for fut, _n in list(self._queue) if not fut.done()) <= 1

    def _drain(self) -> None:
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

    def _surface(self) -> None:
        """Raise, once, the :class:`WriteError` of a queued commit that failed since the last call."""
        f = self._unreported
        if f is not None:
            self._unreported = None
            raise f

    def _stop_committer(self) -> None:
        if self._committer is not None:
            self._committer.shutdown(wait=True)
            self._committer = None

    def _poisoned(self) -> None:
        """A failed writer writes nothing more: its lock goes now (best effort), so the store can be
        reopened, in this process or another — after any commit still running on the committer
        thread (which then finds the writer failed and runs nothing more)."""
        if self._queue and not _on_committer():
            self._drain()
        try:
            self._release_lock()
        except OSError:
            pass

    def _plan_commit(self) -> tuple:
        """What the next commit lands and publishes, decided now (no I/O): ``(order, groups, attrs,
        nframes)`` — the arrays to land in the landing order (the index arrays before what they
        index), the groups to publish (their attributes as they are now), the attributes of
        ``trajectory/zarr.json`` and the frame count it commits (``nstep``).  A queued commit
        (:meth:`_queue_commit`) runs it later, on the committer thread."""
        order: list[_Writer] = []        # the landing order (the index arrays before what they index)
        groups = []
        for bs in self.blocks.values():
            order += [w for w in bs.writers() if w.dirty]
            if bs.group_dirty:
                groups.append((bs.path, dict(bs.attrs)))
                bs.group_dirty = False
            if bs.validity_missing:
                groups.append((f"{bs.path}/{VALIDITY}", {}))
                bs.validity_missing = False
        box = [w for w in self.box.writers() if w.dirty]
        order += box
        if self.box.group_dirty or (box and not self.box.group_exists):
            groups.append((f"{TRAJ}/box", dict(self.box.attrs)))
            self.box.group_dirty = False
            self.box.group_exists = True
        rest = list(self.meta.values()) + [s.array for s in (self.step, self.time) if s.array is not None]
        order += [w for w in rest if w.dirty]
        attrs = dict(self.traj_attrs)
        attrs["sequence_schema"] = self.schema.to_json() if "sequence_schema" not in attrs else attrs["sequence_schema"]
        attrs["nstep"] = self.nframes
        for key, s in (("step_progression", self.step), ("time_progression", self.time)):
            a = s.attribute()
            if a is None:
                attrs.pop(key, None)
            else:
                attrs[key] = a
        self._flushed = self.nframes
        return order, groups, attrs, self.nframes

    def _land_and_publish(self, durable: bool, plan: tuple | None = None) -> None:
        st = self.store
        if plan is None:
            plan = self._plan_commit()
            for w in plan[0]:
                if w.held:          # a pipelined writer's flush / close: the rows since its last queued commit
                    w.appender.append_many(settled(w.held))
                    w.held = []
        order, groups, marker, nframes = plan
        data_keys = self._land(order)
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
            done = self._sync(*self._unsynced)
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
        self.traj_attrs = marker
        self.committed = nframes
        self._ahead_apps = None             # the arrays of this commit: checked by _check_encodes
        self._at = ("", "")

