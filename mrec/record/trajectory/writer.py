"""The streaming trajectory writer: a coordinator of four stages, each an object with its own state.

:class:`TrajectoryWriter` is the public class.  A frame meets the stages in this order; only the
writer holds them all, and what crosses between them is a frozen plan or a batch:

==============================  ================================================  ============================
stage (module)                  owns                                              hands on
==============================  ================================================  ============================
:class:`~.plan.FramePlanner`    the schema, the ``system/`` alignment, the batch  a :class:`~.plan.FramePlan`
(:mod:`~.plan`; the writer's    path's spec; reads the buffer's latest state      or :class:`~.plan.RunPlan`
``RunPlanner`` adds the batch   through a read-only view (``LatestState``);       (validated, rounded,
path, :mod:`~.batch_plan`)      no I/O, refuses, changes nothing                  change-detected)
:class:`~.buffer.RowBuffer`     the blocks (latest update, index arrays), the     a :class:`~.buffer.CommitBatch`
(:mod:`~.buffer`)               cell, the step / time progressions, the meta      (:meth:`~.buffer.RowBuffer.take`:
                                arrays, whether frames carry times; one           the arrays in landing order,
                                ``_Writer`` (array + appender) per array, which   the groups, the progressions,
                                it appends rows to; never refuses                 nstep, a pipeline's held rows)
:class:`~.land.Lander`          what happens to the appenders at a commit:        the shard keys written
(:mod:`~.land`)                 held rows handed over (rounded), rows landed in
                                order; the encodes ahead watched (appenders
                                known at the last commit)
:class:`~.commit.Committer`     the order chunks -> ``zarr.json`` -> ``nstep``,   ``committed`` (the frames of
(:mod:`~.commit`)               the unsynced keys, ``_at`` (named by a failure),  the last commit marker)
                                the last marker's attributes, ``committed``, the
                                queue and the committer thread (``pipeline=True``)
==============================  ================================================  ============================

The writer owns the stages, the knobs (``flush_every``, ``durable``, ``pipeline``), the counts
(``nframes``; ``_flushed``, the frames handed to a commit) and the sticky failure (``failed``, kept
in a :class:`~.commit.Guard` with the store's lock, which the committer thread may set).
:mod:`~.opening` (:func:`~.opening.create`, :func:`~.opening.reopen`: the layout, the reopen rule)
builds the stages' initial state.  ``append`` = plan, apply, count; every ``flush_every`` frames
an automatic (not fsynced unless ``durable="always"``) commit takes the buffer's batch and the
committer lands it (on its thread, queued, with ``pipeline=True``); :meth:`TrajectoryWriter.flush`
and :meth:`TrajectoryWriter.close` commit durably when ``durable`` is true.  A commit that fails
raises :class:`~mrec.errors.WriteError` and poisons the writer: every later call refuses, the lock
is released, and :meth:`TrajectoryWriter.open` continues from what is on disk (docs/reliability.md,
"Write errors").
"""
from __future__ import annotations

import itertools

from ...errors import RefusalError, WriteError
from ...fs.urls import refuses_urls
from ..integrity.lock import LOCK_NAME
from . import opening
from .buffer import CommitBatch

__all__ = ["TrajectoryWriter"]


class TrajectoryWriter:
    """Streams frames into ``trajectory/`` of a ``*.mrec`` directory store.

    Use :meth:`create` for a new trajectory and :meth:`open` to reopen one and
    append.  ``append`` buffers; every ``flush_every`` frames an automatic
    (not fsynced) flush lands the buffer; :meth:`flush` and :meth:`close` are
    durable when ``durable`` is true.  ``durable="always"`` fsyncs automatic
    flushes too: what a file system that orders nothing but fsync needs for every
    commit to survive a power loss (docs/reliability.md).  ``pipeline=True`` queues the
    automatic flushes to a committer thread (same bytes, same protocol, bounded queue): ``append``
    then only validates, rounds and buffers, and a failure of a queued commit is raised at the
    next call (:mod:`~mrec.record.trajectory.commit`).
    """

    def __init__(self, start: opening.Start):
        self.store = start.store
        self.schema = start.schema
        self.durable = bool(start.durable)              # explicit flush() / close()
        self.durable_auto = start.durable == "always"   # automatic flushes
        self.flush_every = start.flush_every
        self.pipeline = start.pipeline     # automatic commits queued to the committer's thread
        self.nframes = start.nframes
        self._flushed = start.nframes      # frames handed to a commit (run, or queued when pipelined)
        self.closed = False
        self.guard = start.guard           # the sticky failure and the lock
        self.planner = start.planner
        self.buffer = start.buffer
        self.blocks = start.buffer.blocks  # the buffer's block states, read by the writer's repr only
        self.lander = start.lander
        self.committer = start.committer
        self.removed_temps = start.removed_temps
        if start.repair_report is not None:
            self.repair_report = start.repair_report

    # -- construction ---------------------------------------------------------------
    @classmethod
    @refuses_urls(path="create a trajectory at")
    def create(cls, path, schema, *, flush_every: int | None = None, compression=None, durable: bool = True,
               meta: dict | None = None, fs=None, profile: str = "reference",
               expected_frames: int | None = None, pipeline: bool = False) -> TrajectoryWriter:
        """A new trajectory in the record at ``path`` (see :func:`~mrec.record.trajectory.opening.create`)."""
        return cls(opening.create(path, schema, flush_every=flush_every, compression=compression, durable=durable,
                                  meta=meta, fs=fs, profile=profile, expected_frames=expected_frames,
                                  pipeline=pipeline))

    @classmethod
    @refuses_urls(path="append to")
    def open(cls, path, *, flush_every: int | None = None, durable: bool = True, fs=None,
             compression=None, truncate_after_step: int | None = None, pipeline: bool = False) -> TrajectoryWriter:
        """Reopen to append.  ``truncate_after_step=S`` first drops every committed frame whose
        step is after S (a restart from a checkpoint at S; see :mod:`mrec.record.trajectory.truncate`)."""
        return cls(opening.reopen(path, flush_every=flush_every, durable=durable, fs=fs, compression=compression,
                                  truncate_after_step=truncate_after_step, pipeline=pipeline))

    # -- state ----------------------------------------------------------------------
    @property
    def failed(self) -> WriteError | None:
        """The failure that poisoned the writer (every later call refuses), or None."""
        return self.guard.failed

    @failed.setter
    def failed(self, value: WriteError | None) -> None:
        self.guard.failed = value

    @property
    def committed(self) -> int:
        """The frames the last commit marker holds."""
        return self.committer.committed

    # -- append ---------------------------------------------------------------------------------
    def append(self, frame, step=None, time=None) -> None:
        """Validate and buffer one frame (step defaults to last + 1, from 0).

        A regular frame (blocks of numpy columns, a cell, scalar per-step meta values; any step and
        time) takes the batch path of :meth:`extend` (a run of one frame,
        :mod:`~mrec.record.trajectory.batch_plan`); the store is the same
        (``spec_tests/record/trajectory/test_extend.py``)."""
        self._check_workers()
        if self._extend_run((frame,), 0, None if step is None else (step,), None if time is None else (time,)):
            return
        self._append_checked(frame, step, time)

    def _append_checked(self, frame, step=None, time=None) -> None:
        """The general append: the frame built, validated and planned (a refusal changes nothing), then
        applied.  The caller has checked the workers (:meth:`_check_workers`)."""
        self._check_usable()
        self.buffer.apply(self.planner.plan_frame(frame, self.nframes, step, time))
        self._added(1)

    # -- batch append ---------------------------------------------------------------------------
    #: frames taken from ``extend``'s iterable at a time (bounds the stacked copies of one run)
    EXTEND_WINDOW = 4096

    def extend(self, frames, *, steps=None, times=None) -> None:
        """Append many frames: exactly ``for f, s, t in zip(frames, steps, times): self.append(f, s, t)``,
        at per-batch cost where it can.

        ``steps`` / ``times``: None (default steps / no times) or iterables giving each frame's
        ``step`` / ``time`` (an entry None: the default); one shorter than ``frames`` is refused
        (``bad_argument``) when it runs out, the frames before that point appended.

        The store, the automatic flush points and every refusal are those of the loop.  Runs of
        *regular* frames (plain ``{"blocks": ..., "box": ..., "meta": ...}`` dicts, a dict of blocks
        or :class:`Frame` objects with numpy columns of exactly the declared dtype and trailing
        shape, the same blocks and row counts in each frame, no masks / precision / block
        attributes, meta values of a scalar tag given as its own type) are validated, rounded and
        change-detected as ``(frames, rows)`` stacks and fed to each array once per run, with their
        steps, times and meta values (a cell, ``"box"``, is built and change-detected frame by frame
        as append does); a schema with ``aligned_with``, ``targets``, string columns or meta keys of
        other tags, and any other frame take :meth:`append` itself
        (:mod:`~mrec.record.trajectory.batch_plan`).

        Not atomic, like the loop: a frame that :meth:`append` refuses raises the same
        :class:`RefusalError` (the refused frame itself always goes through :meth:`append`); the frames
        before it stay appended (and automatically flushed where the loop would have flushed), the
        refused frame and the rest are not.  A list or tuple is taken :attr:`EXTEND_WINDOW` frames at
        a time.  Any other iterable is taken one frame at a time (each appended before the next is
        asked for), because a generator may refill the same arrays for its next frame: pass a list
        to have runs batched.
        """
        window = self.EXTEND_WINDOW if isinstance(frames, (list, tuple)) else 1
        it = _iterate(frames, "frames")
        step_it = None if steps is None else _iterate(steps, "steps")
        time_it = None if times is None else _iterate(times, "times")
        while True:
            batch = list(itertools.islice(it, window))
            if not batch:
                return
            bsteps = _aligned_values(step_it, len(batch), "steps")
            btimes = _aligned_values(time_it, len(batch), "times")
            n_given = min([len(batch), *(len(v) for v in (bsteps, btimes) if v is not None)])
            given = batch if n_given == len(batch) else batch[:n_given]     # the frames with their steps / times
            pos = 0
            while pos < n_given:
                self._check_workers()
                n = self._extend_run(given, pos, bsteps, btimes)
                if n:
                    pos += n
                else:
                    self._append_checked(batch[pos], None if bsteps is None else bsteps[pos],
                                         None if btimes is None else btimes[pos])
                    pos += 1
            if n_given < len(batch):
                short = "steps" if bsteps is not None and len(bsteps) == n_given else "times"
                raise RefusalError(f"extend: {short} ran out after {self.nframes} frames in all, before the "
                                   "frames did (one value a frame)", kind="bad_argument")

    def _extend_run(self, batch, pos: int, steps=None, times=None) -> int:
        """Append the longest run of regular frames from batch[pos] up to the next automatic flush,
        exactly as :meth:`append` one by one would; the number taken (0: batch[pos] goes to append)."""
        if self.closed or self.guard.failed is not None:
            return 0
        n = self.nframes
        run = self.planner.plan_run(batch, pos, n, self.flush_every - (n - self._flushed), self.pipeline,
                                    steps, times)
        if run is None:
            return 0
        self.buffer.apply_run(run)
        self._added(run.count)
        return run.count

    def _added(self, count: int) -> None:
        """``count`` frames were buffered: commit (automatically) when ``flush_every`` are pending."""
        self.nframes += count
        if self.nframes - self._flushed >= self.flush_every:
            if self.pipeline:
                self._queue_commit(durable=self.durable_auto)
            else:
                self._commit(durable=self.durable_auto)

    def _check_workers(self) -> None:
        """A failure on another thread — a queued commit's, an encode ahead's — raised at this call."""
        self.committer.surface()
        ap = self.lander.failed_encode()
        if ap is not None and self.guard.failed is None:
            raise self._poison(self.lander.encode_error(ap, self.committer.committed))

    def _check_usable(self) -> None:
        self.committer.surface()
        if self.guard.failed is not None:
            raise self._refusal()
        if self.closed:
            raise RefusalError("the writer is closed", path=self.store.root, kind="closed")

    def _check_open(self) -> None:
        self._check_workers()
        self._check_usable()

    # -- commits --------------------------------------------------------------------------------
    def _take(self) -> CommitBatch:
        """The buffer's next commit: every frame buffered so far."""
        batch = self.buffer.take(self.nframes)
        self._flushed = self.nframes
        return batch

    def _commit(self, durable: bool) -> None:
        """The next commit, on this thread, all or nothing for this object: any failure inside (ENOSPC,
        EIO from a write or an fsync, anything else) leaves the writer refusing every later call.

        Once a write or fsync has failed the writer cannot know what reached the disk (a failed
        fsync may have dropped the dirty pages: PostgreSQL's "fsyncgate"), and its buffers and shard
        indexes may already describe bytes that never landed; retrying would commit a ``zarr.json``
        that names them.  So it does not retry: the store stays at the last ``nstep`` that landed
        (its arrays may be longer: the reopen rule shrinks them) and reopening re-establishes the
        state from disk (docs/reliability.md, "Write errors")."""
        if self.guard.failed is not None:
            raise self._refusal()
        try:
            self.committer.commit(self._take(), durable)
        except BaseException as exc:
            self._poison(self.committer.failure(exc))
            if isinstance(exc, OSError):
                raise self.guard.failed from exc
            raise

    def _queue_commit(self, durable: bool) -> None:
        """An automatic commit of a pipelined writer, queued to the committer's thread
        (:meth:`~mrec.record.trajectory.commit.Committer.queue`)."""
        self.committer.surface()
        if self.guard.failed is not None:
            raise self._refusal()
        self.committer.queue(self._take(), durable)

    # -- failure --------------------------------------------------------------------------------
    def _refusal(self) -> WriteError:
        f = self.guard.failed
        err = WriteError(f"this writer refuses further work since {f.detail.split(';')[0]}: reopen the store "
                         "(TrajectoryWriter.open) to continue from what is on disk", path=f.path, errno=f.errno)
        err.__cause__ = f
        return err

    def _poison(self, failure: WriteError) -> WriteError:
        """``failure`` is the writer's from now on (returned); it writes nothing more."""
        self.guard.failed = failure
        self._poisoned()
        return failure

    def _poisoned(self) -> None:
        """A failed writer writes nothing more: its lock goes now (best effort), so the store can be
        reopened, in this process or another — after any commit still running on the committer
        thread (which then finds the writer failed and runs nothing more)."""
        if self.committer.queued:
            self.committer.drain()
        try:
            self.guard.release_lock()
        except OSError:
            pass

    # -- flush, close ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Land every buffered frame and commit; durable unless the writer was made with durable=False.
        A pipelined writer first waits for its queued commits."""
        self.committer.drain()
        self._check_open()
        self._commit(durable=self.durable)

    def close(self) -> None:
        """The last durable flush; idempotent.  A writer that failed refuses (raises its
        :class:`WriteError`) once, releasing its lock; the store stays as it was left."""
        if self.closed:
            return
        self.committer.drain()
        try:
            self._check_workers()
        except WriteError:
            pass                           # self.failed is set: refused just below
        if self.guard.failed is not None:
            self.closed = True
            self._poisoned()
            self.committer.stop()
            raise self._refusal()
        try:
            self._commit(durable=self.durable)
        finally:
            self.closed = True
            self.committer.stop()
            if self.guard.failed is None:
                try:
                    self.guard.release_lock()
                except OSError as exc:
                    raise WriteError(f"removing the writer lock failed ({exc.strerror or exc}); every frame is "
                                     f"committed (nstep {self.committed})", path=self.store.describe(LOCK_NAME),
                                     errno=exc.errno) from exc

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.guard.failed is not None:
            self.closed = True          # the failure is already propagating: do not raise it again
            self._poisoned()
            self.committer.stop()
            return
        self.close()

    @property
    def path(self) -> str:
        return self.store.root

    def __repr__(self) -> str:
        from ..model.describe import writer_repr
        return writer_repr(self)


def _aligned_values(it, n: int, what: str) -> list | None:
    """The next ``n`` values of ``extend``'s ``steps`` / ``times`` iterator (fewer when it runs out)."""
    return None if it is None else list(itertools.islice(it, n))


def _iterate(values, what: str):
    """iter(values), or the refusal (``bad_argument``) naming what was given instead of an iterable."""
    try:
        return iter(values)
    except TypeError:
        raise RefusalError(f"extend takes an iterable of {what}, found {type(values).__name__}",
                           kind="bad_argument") from None
