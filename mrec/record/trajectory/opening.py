"""Creating and reopening a trajectory: the layout of a new one, the reopen rule for an existing one.

:func:`create` takes the store's writer lock, refuses a store that already has a trajectory,
creates every declared block's group and arrays (their extents and codecs: :class:`ArrayShapes`,
from :mod:`~mrec.record.extents`: the profile, the size hint) and names them in
``trajectory/zarr.json`` last.  :func:`reopen` takes the lock, repairs torn shard indexes
(:mod:`~mrec.record.trajectory.repair`), optionally lowers the commit marker (a restart:
:mod:`~mrec.record.trajectory.truncate`) and restores the writer's state from the committed layout,
each array shrunk to its logical length (the reopen rule).  Both return a :class:`Start`: the
initial state of the writer's stages (planner, buffer, lander, committer) and its knobs, which
:meth:`TrajectoryWriter.create <mrec.record.trajectory.writer.TrajectoryWriter.create>` and
``open`` make the writer of.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from ...errors import CorruptionError, RefusalError, StoreError, WriteError
from ...fs import DEFAULT_FS, refuse_link
from ...fs.urls import refuses_urls
from ...zarr.array import Array, meta_key, read_node, write_group
from ...zarr.metadata import ArrayMetadata, GroupMetadata, json_dumps
from ...zarr.stores.directory import DirectoryStore
from .. import extents as X
from ..model.dtypes import row_bytes
from ..model.frame import Frame
from ..integrity.leftovers import prepare_for_writing
from ..integrity.lock import lock_store
from ..integrity.replace import recover
from .repair import repair_store
from ..model.names import check_text
from ..model.schema import SequenceSchema
from ..sections.frame_group import VALIDITY
from .buffer import RowBuffer, _BlockState
from .commit import Committer, Guard
from .land import Lander, _Writer, _array_meta, _dense_meta, read_arr
from .layout import TRAJ, load_layout, tag_layout
from .batch_plan import RunPlanner
from .plan import target_max
from .reader import TrajectoryReader


def _write_errors(what: str):
    """An OSError (ENOSPC, EIO ...) out of create / open as a WriteError naming the store (nothing
    was reported committed by the call: retrying it, or reopening, is safe)."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(path, *args, **kw):
            try:
                return fn(path, *args, **kw)
            except OSError as exc:
                where = exc.filename if isinstance(exc.filename, str) else os.fspath(path)
                raise WriteError(f"{what} failed ({exc.strerror or exc})", path=where, errno=exc.errno) from exc
        return call
    return wrap


@dataclass
class Start:
    """A writer's stages as :func:`create` / :func:`reopen` leave them, with its knobs."""
    store: DirectoryStore
    schema: SequenceSchema
    durable: bool | str              # True, False or "always" (checked)
    flush_every: int
    pipeline: bool
    nframes: int                     # the frames committed (reopen: nstep)
    guard: Guard                     # the lock, no failure yet
    planner: RunPlanner
    buffer: RowBuffer
    lander: Lander
    committer: Committer
    removed_temps: list              # temp leftovers removed when the lock was taken
    repair_report: object | None = None     # reopen: the shard indexes repaired (repair_store)


def check_durable(durable) -> None:
    if durable not in (True, False, "always") or isinstance(durable, (int, float)) and not isinstance(durable, bool):
        raise RefusalError(f"durable={durable!r} is not True, False or 'always'", kind="bad_durable")


def _stages(store, schema, durable, guard: Guard, system: dict, buffer: RowBuffer, *, marker: dict,
            committed: int) -> tuple[RunPlanner, Lander, Committer]:
    """The planner (reading the buffer), the lander (watching its arrays) and the committer."""
    lander = Lander(store, buffer.writers)
    return (RunPlanner(schema, system, store.root, buffer), lander,
            Committer(store, schema, lander, guard, marker=marker, committed=committed))


def _knobs(shapes: ArrayShapes, schema, buffer: RowBuffer, flush_every, pipeline) -> int:
    """``flush_every`` (default: the chapter's automatic K) and ``pipeline``, checked; the first
    returned, the second given to the buffer."""
    k = flush_every if flush_every is not None else shapes.auto_k(schema)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RefusalError(f"flush_every {k!r} is not a positive integer", kind="bad_flush_every")
    if not isinstance(pipeline, bool):
        raise RefusalError(f"pipeline={pipeline!r} is not True or False", kind="bad_pipeline")
    buffer.use_pipeline(pipeline)
    return k


# -- construction ---------------------------------------------------------------
@refuses_urls(path="create a trajectory at")
@_write_errors("creating the trajectory")
def create(path, schema, *, flush_every: int | None = None, compression=None, durable: bool = True,
           meta: dict | None = None, fs=None, profile: str = "reference",
           expected_frames: int | None = None, pipeline: bool = False) -> Start:
    path = os.fspath(path)
    refuse_link(fs or DEFAULT_FS, path, "create a trajectory in")     # kind bad_target
    if profile not in X.PROFILES:
        raise RefusalError(f"profile {profile!r} is not one of {', '.join(X.PROFILES)}", kind="bad_profile")
    if isinstance(schema, (Frame, dict)) and not isinstance(schema, SequenceSchema):
        schema = SequenceSchema.from_frame(Frame.from_any(schema))
    if not isinstance(schema, SequenceSchema):
        raise RefusalError(f"schema {schema!r} is not a SequenceSchema", kind="declaration_mismatch")
    check_text(meta, "meta document", path)
    store = DirectoryStore(path, fs=fs)
    shapes = ArrayShapes(X.Compression.parse(compression))
    check_durable(durable)
    recover(store.fs, os.path.abspath(path))          # an overwrite a crash interrupted (mrec.record.integrity.replace)
    made = not store.fs.is_dir(path)
    store.makedirs("")
    guard = Guard()
    removed = _take_lock(store, guard, made)
    try:
        root = read_node(store, "")
        if root is not None and not isinstance(root, GroupMetadata):
            raise RefusalError("the record root is an array, not a group", path=path, kind="not_a_record")
        if read_node(store, TRAJ) is not None:
            raise RefusalError("the record already has a trajectory: use TrajectoryWriter.open to append",
                               path=store.describe(TRAJ), kind="exists")
        system = _load_system(store, schema, creating=True)
        written: list[str] = []
        if root is None:
            write_group(store, "")                                  # the root first,
            written.append("zarr.json")
        if read_node(store, "meta") is None:
            write_group(store, "meta", meta or {})                  # then meta/
            written.append("meta/zarr.json")
        shapes.use_profile(profile, compression)
        shapes.use_size_hint(expected_frames)
        buffer = RowBuffer(store, schema, shapes.dense_extent)
        shapes.create_layout(store, schema, buffer, written)
        marker = {"sequence_schema": schema.to_json(), "nstep": 0}
        planner, lander, committer = _stages(store, schema, durable, guard, system, buffer, marker=marker,
                                             committed=0)
        flush_every = _knobs(shapes, schema, buffer, flush_every, pipeline)
    except BaseException:
        guard.release_lock()
        if made:
            _remove_if_untouched(store)
        raise
    try:
        if durable:
            committer.sync(written, [])                             # the layout on disk before
            if "zarr.json" not in written:   # an existing record: its root now holds trajectory/
                store.fsync_dir("")
        store.set(meta_key(TRAJ), json_dumps(GroupMetadata(marker).to_json()), fsync=bool(durable))
        if durable:                                                 # the trajectory/zarr.json that names it
            store.fsync_dir(TRAJ)
    except BaseException:
        guard.release_lock()               # a failed create returns no writer, so it holds no lock
        raise
    return Start(store, schema, durable, flush_every, pipeline, 0, guard, planner, buffer, lander, committer, removed)


@refuses_urls(path="append to")
@_write_errors("reopening the trajectory")
def reopen(path, *, flush_every: int | None = None, durable: bool = True, fs=None,
           compression=None, truncate_after_step: int | None = None, pipeline: bool = False) -> Start:
    """Reopen to append.  ``truncate_after_step=S`` first drops every committed frame whose
    step is after S (a restart from a checkpoint at S; see :mod:`mrec.record.trajectory.truncate`)."""
    path = os.fspath(path)
    refuse_link(fs or DEFAULT_FS, path, "append to (or repair, or truncate)")   # kind bad_target
    if truncate_after_step is not None:
        from .truncate import check_step
        truncate_after_step = check_step(truncate_after_step)
    recover(fs or DEFAULT_FS, os.path.abspath(path))  # an overwrite a crash interrupted (mrec.record.integrity.replace)
    if not os.path.isdir(path):
        raise StoreError("a trajectory is appended to in its *.mrec directory (unpack a *.mrec.zip first)", path=path)
    store = DirectoryStore(path, fs=fs)
    held = lock_store(store.fs, path, "writer")       # one writer; links refused, temp leftovers removed
    try:
        removed = prepare_for_writing(store.fs, path, "appending")
        layout = load_layout(store)
        schema = layout.schema
        shapes = ArrayShapes(X.Compression.parse(compression))
        check_durable(durable)
        guard = Guard(held)
        system = _load_system(store, schema, creating=False)
        report = repair_store(store)           # torn / dropped shard index rewrites (mrec.check.repair)
        if not report.ok:
            key, why = report.unrecoverable[0]
            raise CorruptionError(why, path=key)
        if report.repaired:
            layout = load_layout(store)
        if truncate_after_step is not None:
            from .truncate import lower_commit
            if lower_commit(store, layout, truncate_after_step, durable=bool(durable)) < layout.nstep:
                layout = load_layout(store)
        buffer = RowBuffer(store, schema, shapes.dense_extent)
        _restore(store, layout, buffer, shapes, bool(durable))
        n = layout.nstep
        planner, lander, committer = _stages(store, schema, durable, guard, system, buffer,
                                             marker=dict(layout.attrs), committed=n)
        flush_every = _knobs(shapes, schema, buffer, flush_every, pipeline)
    except BaseException:
        held.release()
        raise
    return Start(store, schema, durable, flush_every, pipeline, n, guard, planner, buffer, lander, committer,
                 removed, report)


def _load_system(store, schema, *, creating: bool) -> dict[str, tuple[int, np.ndarray | None]]:
    """Blocks shared with ``system/`` are aligned 1:1 by row order (mrec-notes §3.1): block -> (rows,
    id column or None) of ``system/``."""
    system: dict[str, tuple[int, np.ndarray | None]] = {}
    if not isinstance(read_node(store, "system"), GroupMetadata):
        return system
    from ..sections.frame_group import read_frame_group
    sysf = read_frame_group(store, "system").frame
    for name, decl in schema.blocks.items():
        if name not in sysf.blocks:
            continue
        n = sysf.counts[name]
        if creating and decl.frame_rows is not None and decl.frame_rows != n:
            raise RefusalError(f"trajectory block {name!r} is declared with {decl.frame_rows} rows but the "
                               f"system block of that name has {n}: a block sharing a name with a system "
                               "block is aligned 1:1 by row order", path=store.describe("system"),
                               kind="row_count_mismatch")
        system[name] = (n, sysf.blocks[name].get("id"))
    return system


# -- the lock ---------------------------------------------------------------------
def _take_lock(store, guard: Guard, made: bool) -> list:
    """The store's writer lock (mrec.record.integrity.lock), into ``guard``; then links refused, temp
    leftovers removed (returned)."""
    try:
        guard.lock = lock_store(store.fs, store.root, "writer")
        return prepare_for_writing(store.fs, store.root, "appending")
    except BaseException:
        guard.release_lock()
        if made:
            _remove_if_untouched(store)
        raise


def _remove_if_untouched(store) -> None:
    """A refused create leaves no directory it made."""
    try:
        store.fs.rmdir(store.root)
    except OSError:
        pass


# -- the arrays' extents and codecs -------------------------------------------------------
class ArrayShapes:
    """The extents and codecs of the arrays a writer makes: its compression, and at creation the
    profile and the size hint (frozen after: a reopened writer makes new arrays as the reference
    writer does, with the compression it is given)."""

    profile = "reference"
    expected_frames: int | None = None      # the size hint (create only; extents are frozen after)
    dense_extent = X.DENSE_EXTENT

    def __init__(self, compression: X.Compression):
        self.compression = compression

    def use_profile(self, profile, compression) -> None:
        """``compact``: COMPACT_FRAMES_PER_CHUNK frames per inner chunk and, unless a compression
        is given, zstd at COMPACT_ZSTD_LEVEL (opt-in; a reader needs nothing to know of it)."""
        self.profile = profile
        if profile == "compact" and compression is None:
            self.compression = X.Compression("zstd", X.COMPACT_ZSTD_LEVEL)

    def use_size_hint(self, expected_frames) -> None:
        """``expected_frames``: size chunks and shard indexes for a run of about that many frames (more
        frames are fine: they open more shards).  The reference extents stay the default."""
        if expected_frames is None:
            return
        if isinstance(expected_frames, bool) or not isinstance(expected_frames, int) or expected_frames < 1:
            raise RefusalError(f"expected_frames {expected_frames!r} is not a positive integer",
                               kind="bad_expected_frames")
        self.expected_frames = expected_frames
        self.dense_extent = X.dense_extent(expected_frames)

    def _expected_rows(self, decl) -> int | None:
        if self.expected_frames is None:
            return None
        return self.expected_frames * max(1, decl.frame_rows or 1)

    def block_extent(self, decl) -> tuple[int, dict[str, int]]:
        rbs = {c: row_bytes(cd.dtype, cd.trailing) for c, cd in decl.columns.items()}
        narrow = min(rbs.values()) if rbs else 1
        frames = X.COMPACT_FRAMES_PER_CHUNK if self.profile == "compact" else 1
        rpc = X.rows_per_chunk(decl.frame_rows, narrow, frames)
        return X.hinted_rows_per_chunk(rpc, decl.frame_rows, self.expected_frames), rbs

    def column_meta(self, decl, col: str, rpc: int, rb: int) -> ArrayMetadata:
        cd = decl.columns[col]
        bb = X.bytes_to_bytes(cd.dtype, precision=cd.precision is not None, dense=False, compression=self.compression,
                              chunk_bytes=rpc * rb)
        return _array_meta(cd.dtype, cd.trailing, X.column_extent(rpc, rb, self._expected_rows(decl)), bb)

    def mask_meta(self, rpc: int, decl=None) -> ArrayMetadata:
        rows = self._expected_rows(decl) if decl is not None else None
        return _array_meta("bool", (), X.column_extent(rpc, 1, rows), X.bytes_to_bytes("bool", precision=False, dense=False,
                                                                                      compression=self.compression))

    def create_layout(self, st, schema, buffer: RowBuffer, written: list[str]) -> None:
        """Every declared block's group and arrays, and the meta arrays (into ``buffer``); their
        ``zarr.json`` keys appended to ``written``."""
        for name, decl in schema.blocks.items():
            bs = _BlockState(name, decl)
            if decl.structural_shape is not None:
                bs.attrs["structural_shape"] = list(decl.structural_shape)
            write_group(st, bs.path, bs.attrs)
            written.append(meta_key(bs.path))
            rpc, rbs = self.block_extent(decl)
            if any(cd.nullable for cd in decl.columns.values()):
                # the mask subgroup is a group like any other: its zarr.json (mrec-notes §1.4, §4)
                write_group(st, f"{bs.path}/{VALIDITY}")
                written.append(meta_key(f"{bs.path}/{VALIDITY}"))
            for col, cd in decl.columns.items():
                arr = Array.create(st, f"{bs.path}/{col}", self.column_meta(decl, col, rpc, rbs[col]))
                bs.cols[col] = _Writer(arr, 0, new=False)
                written.append(meta_key(arr.path))
                if cd.nullable:
                    m = Array.create(st, f"{bs.path}/_validity/{col}", self.mask_meta(rpc, decl))
                    bs.masks[col] = _Writer(m, 0, new=False)
                    written.append(meta_key(m.path))
            buffer.blocks[name] = bs
        if schema.meta:
            write_group(st, f"{TRAJ}/meta")
            written.append(meta_key(f"{TRAJ}/meta"))
            for key, md in schema.meta.items():
                dtype, trailing = tag_layout(md.tag)
                arr = Array.create(st, f"{TRAJ}/meta/{key}", _dense_meta(dtype, trailing, {"meta_dtype": md.tag}, self.dense_extent))
                buffer.meta[key] = _Writer(arr, 0, new=False)
                written.append(meta_key(arr.path))

    def auto_k(self, schema) -> int:
        total, largest, fpc = 0, -1, 1
        for decl in schema.blocks.values():
            rpc, rbs = self.block_extent(decl)
            rows = decl.frame_rows or 0
            nbytes = rows * (sum(rbs.values()) + sum(1 for c in decl.columns.values() if c.nullable))
            total += nbytes
            if rows and nbytes > largest:
                largest, fpc = nbytes, rpc // rows
        return X.flush_every(total, fpc)


# -- reopen -----------------------------------------------------------------------------
def _open_writer(arr: Array | None, logical: int, durable: bool) -> _Writer | None:
    if arr is None:
        return None
    if arr.shape[0] > logical:
        arr.set_shape((logical, *arr.shape[1:]), fsync=durable)   # the reopen rule: shrink to the logical shape
    w = _Writer(arr, logical, new=False)
    w.appender.settle()       # no copy a crash left past the committed ones stays before new ones
    return w


def _restore(st, layout, buf: RowBuffer, shapes: ArrayShapes, durable: bool) -> None:
    """The buffer's state from the committed layout (``layout.nstep`` frames), every array shrunk to
    its logical length (the reopen rule)."""
    opened = functools.partial(_open_writer, durable=durable)
    n = layout.nstep
    reader = TrajectoryReader(None, store=st)
    # steps
    if layout.step_prog is not None:
        buf.step.start, buf.step.stride, buf.step.n = layout.step_prog.start, layout.step_prog.stride, n
    elif layout.step_array is not None:
        buf.step.n = n
        buf.step.array = opened(layout.step_array, n)
    if n:
        buf.step.last = int(reader.steps[-1])
    # times
    if n:
        buf.has_time = layout.has_time
    if layout.time_prog is not None:
        buf.time.start, buf.time.stride, buf.time.n = float(layout.time_prog.start), \
            (float(layout.time_prog.stride) if layout.time_prog.stride is not None else None), n
    elif layout.time_array is not None and n:
        buf.time.n = n
        buf.time.array = opened(layout.time_array, n)
    # meta
    for key, arr in layout.meta.items():
        buf.meta[key] = opened(arr, n)
    for key, md in buf.schema.meta.items():
        if key not in buf.meta:
            dtype, trailing = tag_layout(md.tag)
            arr = Array(st, f"{TRAJ}/meta/{key}", _dense_meta(dtype, trailing, {"meta_dtype": md.tag}, shapes.dense_extent))
            if read_node(st, f"{TRAJ}/meta") is None:
                write_group(st, f"{TRAJ}/meta")
            buf.meta[key] = _Writer(arr, 0, new=True)
    # box
    bl = layout.box
    b = buf.box
    if bl.group is not None:
        b.group_exists = True
        b.attrs = dict(bl.group.attributes)
        b.defined = bl.defined if (bl.n_updates or "cell_defined" in b.attrs) else None
    if bl.n_updates or bl.vectors is not None:     # arrays of an uncommitted first update: reuse them
        b.n_updates = bl.n_updates
        b.last = reader.box_at(n - 1) if bl.n_updates else None
        if bl.attr_cell is not None:
            b.mode = "attrs"
            b.history = [bl.attr_cell]
        else:
            b.mode = "arrays"
            b.si = opened(read_arr(st, f"{TRAJ}/box/step_index"), bl.n_updates)
            if b.si is None:    # the trivial step_index was omitted: write it when the cell next changes
                b.si = _Writer(Array(st, f"{TRAJ}/box/step_index", _dense_meta("u64", extent=shapes.dense_extent)), 0, new=True)
                if bl.n_updates:
                    b.si.append(np.zeros(1, np.uint64))
            b.vectors = opened(bl.vectors, bl.n_updates)
            b.origin = opened(bl.origin, bl.n_updates)
            b.boundary = opened(bl.boundary, bl.n_updates)
            if "vectors" in b.attrs:
                for k in ("vectors", "origin", "boundary"):
                    b.attrs.pop(k, None)
                b.group_dirty = True
    # blocks
    for name, decl in buf.schema.blocks.items():
        bl_ = layout.blocks[name]
        bs = _BlockState(name, decl)
        buf.blocks[name] = bs
        rpc, rbs = shapes.block_extent(decl)
        if bl_.group is None:
            if decl.structural_shape is not None:
                bs.attrs["structural_shape"] = list(decl.structural_shape)
            bs.group_dirty = True
        else:
            bs.attrs = dict(bl_.group.attributes)
        if any(cd.nullable for cd in decl.columns.values()) and \
                not isinstance(read_node(st, f"{bs.path}/{VALIDITY}"), GroupMetadata):
            # a store written before the mask subgroup had its zarr.json: the next commit adds it
            bs.validity_missing = True
        total = bl_.total_rows
        for col, cd in decl.columns.items():
            arr = bl_.columns.get(col)
            bs.cols[col] = opened(arr, total) if arr is not None else \
                _Writer(Array(st, f"{bs.path}/{col}", shapes.column_meta(decl, col, rpc, rbs[col])), 0, new=True)
            if cd.nullable:
                m = bl_.masks.get(col)
                bs.masks[col] = opened(m, total) if m is not None else \
                    _Writer(Array(st, f"{bs.path}/_validity/{col}", shapes.mask_meta(rpc)), 0, new=True)
                if m is None and total:
                    bs.masks[col].append(np.ones(total, dtype=bool))
        bs.n_updates, bs.total_rows = bl_.n_updates, total
        if bl_.regular:
            bs.regular, bs.uniform = True, bl_.uniform_rows
        elif bl_.step_index is not None:
            bs.si = opened(read_arr(st, f"{bs.path}/step_index"), bl_.n_updates)
            off_arr = read_arr(st, f"{bs.path}/offset")
            # offset's leading 0 is committed with the first update, not before: a crash
            # inside the first flush can leave it unwritten (then it is written again)
            bs.off = opened(off_arr, min(off_arr.shape[0], bl_.n_updates + 1 if bl_.n_updates else 0))
            if bs.off.rows == 0:
                bs.off.append(np.zeros(1, np.uint64))
            if "uniform_rows" in bs.attrs or "dense_updates" in bs.attrs:
                bs.attrs.pop("uniform_rows", None)
                bs.attrs.pop("dense_updates", None)
                bs.group_dirty = True
        if bl_.n_updates:
            values, masks = reader._block_rows(bl_, bl_.n_updates - 1)
            full_masks = {c: masks.get(c, np.ones(len(next(iter(values.values()))) if values else 0, bool))
                          for c, cd in decl.columns.items() if cd.nullable}
            lo, hi = bl_.rows_of(bl_.n_updates - 1)
            bs.last = (hi - lo, values, full_masks)
            bs.target_max = target_max(decl, values, full_masks)
