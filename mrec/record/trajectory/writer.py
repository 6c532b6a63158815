"""The streaming trajectory writer: buffering, automatic flush, commit protocol, reopen.

:class:`TrajectoryWriter` is the public class; it coordinates four stages, each a module (and a
mixin class the writer is made of), in the order a frame meets them:

* :mod:`~mrec.record.trajectory.plan` — planning: every frame is validated, rounded to its
  declared precision and change-detected before any state changes, so a refused frame leaves
  writer and store as they were;
* :mod:`~mrec.record.trajectory.buffer` — buffering: the plan becomes rows appended to one
  appender per array and the in-memory state of blocks, cell, steps and times;
* :mod:`~mrec.record.trajectory.land` — landing: the glue to
  :class:`~mrec.zarr.array.ShardedAppender` (encoding, encode-ahead, shard appends);
* :mod:`~mrec.record.trajectory.commit` — committing: the chapter's order of chunk bytes,
  ``zarr.json`` replaces, fsyncs and the commit marker (``nstep``), and what a failure does;

plus :mod:`~mrec.record.trajectory.opening` (``create``, ``open``: the layout, the reopen rule).

Every ``flush_every`` frames an automatic (not fsynced unless ``durable="always"``) commit lands
the buffer (on a committer thread, queued, with ``pipeline=True``); :meth:`TrajectoryWriter.flush` and :meth:`TrajectoryWriter.close` commit durably
when ``durable`` is true.  A commit that fails raises :class:`~mrec.errors.WriteError` and
poisons the writer: every later call refuses, the lock is released, and
:meth:`TrajectoryWriter.open` continues from what is on disk (docs/reliability.md, "Write errors").
"""
from __future__ import annotations

import collections
import itertools

import numpy as np

from ...errors import RefusalError, WriteError
from ...zarr.stores.directory import DirectoryStore
from .. import extents as X
from ..integrity.lock import LOCK_NAME
from ..model.schema import SequenceSchema
from .buffer import Buffering, _BlockState, _BoxState, _Series
from .commit import Committing
from .land import Landing, _Writer
# importable from here as before the split (spec_tests/test_repair.py imports _dense_meta)
from .land import _array_meta, _dense_meta, read_arr
from .opening import Opening
from .plan import Planning

__all__ = ["TrajectoryWriter"]


class TrajectoryWriter(Opening, Planning, Buffering, Landing, Committing):
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

    def __init__(self, store: DirectoryStore, schema: SequenceSchema, *, durable, compression: X.Compression):
        if durable not in (True, False, "always") or isinstance(durable, (int, float)) and not isinstance(durable, bool):
            raise RefusalError(f"durable={durable!r} is not True, False or 'always'", kind="bad_durable")
        self.store = store
        self.schema = schema
        self.durable = bool(durable)                 # explicit flush() / close()
        self.durable_auto = durable == "always"      # automatic flushes
        self.compression = compression
        self.nframes = 0
        self.committed = 0
        self.closed = False
        self.failed: WriteError | None = None        # set by a failed commit: every later call refuses
        self._ahead_apps: list | None = None        # see _check_encodes
        self._at = ("", "")                          # (what, key) the commit is doing: named by a failure
        self.blocks: dict[str, _BlockState] = {}
        self.box = _BoxState()
        self.meta: dict[str, _Writer] = {}
        self.step = _Series(True)
        self.time = _Series(False)
        self.has_time: bool | None = None
        self.traj_attrs: dict = {}
        self.flush_every = 1
        self.system: dict[str, tuple[int, np.ndarray | None]] = {}   # block -> (rows, id) of system/
        self._unsynced: tuple[list, list] = ([], [])   # keys written by automatic flushes since the last fsync
        self._flushed = 0                  # frames handed to a commit (run, or queued when pipelined)
        self.pipeline = False              # automatic commits queued to a committer thread (_queue_commit)
        self._queue: collections.deque = collections.deque()    # (future, bytes) of queued commits
        self._queued_bytes = 0
        self._committer = None
        self._unreported: WriteError | None = None   # a queued commit's failure, raised at the next call
        self._producer_waits = False       # the producer waits for the committer (_drain, a full queue)

    # -- append ---------------------------------------------------------------------------------
    def append(self, frame, step=None, time=None) -> None:
        """Validate and buffer one frame (step defaults to last + 1, from 0).

        A regular frame with the default step and no time takes the batch path of :meth:`extend`
        (a run of one frame); the store is the same (``spec_tests/test_extend.py``)."""
        self._check_workers()
        if step is None and time is None and self._extend_run((frame,), 0):
            return
        self._append_checked(frame, step, time)

    def _append_checked(self, frame, step=None, time=None) -> None:
        """The general append: the frame built, validated and planned (a refusal changes nothing), then
        applied.  The caller has checked the encodes ahead (:meth:`_check_encodes`)."""
        self._check_usable()
        self._apply_frame(*self._plan_frame(frame, step, time))
        self._added(1)

    # -- batch append ---------------------------------------------------------------------------
    #: frames taken from ``extend``'s iterable at a time (bounds the stacked copies of one run)
    EXTEND_WINDOW = 4096

    def extend(self, frames) -> None:
        """Append many frames: exactly ``for f in frames: self.append(f)``, at per-batch cost where it can.

        The store, the automatic flush points and every refusal are those of the loop.  Runs of
        *regular* frames (plain ``{"blocks": ...}`` dicts, a dict of blocks or :class:`Frame` objects
        with numpy columns of exactly the declared dtype and trailing shape, the same blocks and row
        counts in each frame, no masks / meta / precision / block attributes, default steps) are
        validated, rounded and change-detected as ``(frames, rows)`` stacks and fed to each array once
        per run (a cell, ``"box"``, is built and change-detected frame by frame as append does); a
        schema with meta keys, ``aligned_with`` or ``targets``, a writer with times, and any other frame
        take :meth:`append` itself.

        Not atomic, like the loop: a frame that :meth:`append` refuses raises the same
        :class:`RefusalError` (the refused frame itself always goes through :meth:`append`); the frames
        before it stay appended (and automatically flushed where the loop would have flushed), the
        refused frame and the rest are not.  A list or tuple is taken :attr:`EXTEND_WINDOW` frames at
        a time.  Any other iterable is taken one frame at a time (each appended before the next is
        asked for), because a generator may refill the same arrays for its next frame: pass a list
        to have runs batched.
        """
        window = self.EXTEND_WINDOW if isinstance(frames, (list, tuple)) else 1
        try:
            it = iter(frames)
        except TypeError:
            raise RefusalError(f"extend takes an iterable of frames, found {type(frames).__name__}",
                               kind="bad_argument") from None
        while True:
            batch = list(itertools.islice(it, window))
            if not batch:
                return
            pos = 0
            while pos < len(batch):
                self._check_workers()
                n = self._extend_run(batch, pos)
                if n:
                    pos += n
                else:
                    self._append_checked(batch[pos])
                    pos += 1

    def _extend_run(self, batch: list, pos: int) -> int:
        """Append the longest run of regular frames from batch[pos] up to the next automatic flush,
        exactly as :meth:`append` one by one would; the number taken (0: batch[pos] goes to append)."""
        run = self._plan_run(batch, pos)
        if run is None:
            return 0
        self._apply_run(*run)
        self._added(run[0])
        return run[0]

    def _added(self, count: int) -> None:
        """``count`` frames were buffered: commit (automatically) when ``flush_every`` are pending."""
        self.nframes += count
        if self.nframes - self._flushed >= self.flush_every:
            if self.pipeline:
                self._queue_commit(durable=self.durable_auto)
            else:
                self._commit(durable=self.durable_auto)

    def _use_pipeline(self, pipeline) -> None:
        """``pipeline=True``: automatic commits are queued to a committer thread (see
        :meth:`~mrec.record.trajectory.commit.Committing._queue_commit`); from now on every array's
        rows wait in its ``_Writer.held`` until their commit is queued."""
        if not isinstance(pipeline, bool):
            raise RefusalError(f"pipeline={pipeline!r} is not True or False", kind="bad_pipeline")
        self.pipeline = pipeline
        if pipeline:
            for w in self._all_writers():
                w.held = []

    def _check_workers(self) -> None:
        """A failure on another thread — a queued commit's, an encode ahead's — raised at this call."""
        self._surface()
        self._check_encodes()

    def _check_usable(self) -> None:
        self._surface()
        if self.failed is not None:
            raise self._refusal()
        if self.closed:
            raise RefusalError("the writer is closed", path=self.store.root, kind="closed")

    def _check_open(self) -> None:
        self._check_workers()
        self._check_usable()

    # -- flush, close ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Land every buffered frame and commit; durable unless the writer was made with durable=False.
        A pipelined writer first waits for its queued commits."""
        self._drain()
        self._check_open()
        self._commit(durable=self.durable)

    def close(self) -> None:
        """The last durable flush; idempotent.  A writer that failed refuses (raises its
        :class:`WriteError`) once, releasing its lock; the store stays as it was left."""
        if self.closed:
            return
        self._drain()
        try:
            self._check_workers()
        except WriteError:
            pass                           # self.failed is set: refused just below
        if self.failed is not None:
            self.closed = True
            self._poisoned()
            self._stop_committer()
            raise self._refusal()
        try:
            self._commit(durable=self.durable)
        finally:
            self.closed = True
            self._stop_committer()
            if self.failed is None:
                try:
                    self._release_lock()
                except OSError as exc:
                    raise WriteError(f"removing the writer lock failed ({exc.strerror or exc}); every frame is "
                                     f"committed (nstep {self.committed})", path=self.store.describe(LOCK_NAME),
                                     errno=exc.errno) from exc

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.failed is not None:
            self.closed = True          # the failure is already propagating: do not raise it again
            self._poisoned()
            self._stop_committer()
            return
        self.close()

    @property
    def path(self) -> str:
        return self.store.root

    def __repr__(self) -> str:
        from ..model.describe import writer_repr
        return writer_repr(self)

