"""The streaming trajectory writer: buffering, automatic flush, commit protocol, reopen.

Every frame is validated and change-detected in :meth:`TrajectoryWriter.append`
before any state changes, so a refused frame leaves writer and store as they
were.  Accepted frames become rows buffered in per-array appenders; a flush
lands them in the chapter's order:

1. each touched array: chunk bytes (positional writes into its shard), then
   its ``zarr.json`` replaced atomically; touched block / box groups likewise;
2. if durable: fsync of the data files, their ``zarr.json`` files and their
   directories;
3. ``trajectory/zarr.json`` last, carrying ``nstep`` and the progressions;
4. if durable: fsync of that file and of ``trajectory/``.

In a durable flush every ``zarr.json`` is fsynced as its temporary file, before the
rename (the same fsyncs as after it): the rename can then never reach the disk
ahead of the document's bytes, even on a file system that does not order them
(see docs/reliability.md).  ``durable="always"`` makes automatic flushes durable too.

A flush that fails (ENOSPC, EIO from a write or an fsync, anything) raises
:class:`~mrec.errors.WriteError` naming the file and poisons the writer: every
later call refuses, the lock is released, and :meth:`TrajectoryWriter.open`
continues from what is on disk (docs/reliability.md, "Write errors").
"""
from __future__ import annotations

import functools
import itertools
import math
import os
import posixpath
import struct

import numpy as np

from ..errors import CorruptionError, RefusalError, StoreError, WriteError
from ..fs import DEFAULT_FS
from ..zarr.array import Array, ShardedAppender, meta_key, read_node, write_group
from ..zarr.dtypes import DATA_TYPES
from ..zarr.metadata import ArrayMetadata, GroupMetadata, json_dumps
from ..zarr.store import DirectoryStore
from . import extents as X
from . import typed_json
from .dtypes import numpy_dtype, row_bytes, zarr_data_type
from .model import Box, Frame
from .leftovers import prepare_for_writing
from .lock import LOCK_NAME, lock_store
from .replace import recover
from .precision import round_to_precision, stack_rounded, stack_rows
from .repair import repair_store
from .schema import ABSENT, SequenceSchema, check_text
from .frame_group import VALIDITY
from .trajectory_read import TRAJ, load_layout, tag_layout, TrajectoryReader

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


_ONE_TRUE, _ONE_FALSE = np.ones(1, bool), np.zeros(1, bool)
_K0, _K_NONE = np.zeros(1, np.int64), np.zeros(0, np.int64)
for _a in (_ONE_TRUE, _ONE_FALSE, _K0, _K_NONE):
    _a.flags.writeable = False


def _bits_equal(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN equals NaN, -0.0 differs from +0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == object:
        return list(a.ravel()) == list(b.ravel())
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


# -- one appendable array ----------------------------------------------------------

class _Writer:
    """An array under trajectory/ with its appender; knows whether it must be published."""

    def __init__(self, array: Array, rows: int, *, new: bool):
        self.array = array
        self.appender = ShardedAppender(array, rows, ahead=True)      # encodes on the pool as rows arrive
        self.new = new          # zarr.json not yet on disk
        self.meta_dirty = new

    @property
    def path(self) -> str:
        return self.array.path

    @property
    def rows(self) -> int:
        return self.appender.total_rows

    def append(self, rows) -> None:
        self.appender.append(rows)

    @property
    def dirty(self) -> bool:
        return self.meta_dirty or self.appender.pending_rows > 0

    def shard_key(self) -> str:
        """The shard file the next landing writes first (for error messages)."""
        ap = self.appender
        first = ap.rows - (len(ap.tail) if ap.tail is not None else 0)
        return self.array.chunk_key((first // ap.shard_rows,) + (0,) * (self.array.meta.ndim - 1))

    def land(self) -> list[str]:
        keys = self.appender.land()
        if keys:
            self.meta_dirty = True
        return keys

    def publish(self, fsync: bool = False) -> str | None:
        if not self.meta_dirty:
            return None
        self.array.write_metadata(fsync=fsync)
        self.new = self.meta_dirty = False
        return meta_key(self.path)


def _array_meta(dtype: str, trailing, extent: X.Extent, bb: list, attributes=None) -> ArrayMetadata:
    trailing = tuple(int(t) for t in trailing)
    chunk_trailing = tuple(max(1, t) for t in trailing)
    codecs = X.sharded((extent.inner_rows, *chunk_trailing), X.inner_pipeline(dtype, bb), "start")
    return ArrayMetadata.create((0, *trailing), DATA_TYPES[zarr_data_type(dtype)],
                                (extent.shard_rows, *chunk_trailing), codecs, attributes=attributes)


def _dense_meta(dtype: str, trailing=(), attributes=None, extent: X.Extent = X.DENSE_EXTENT) -> ArrayMetadata:
    return _array_meta(dtype, trailing, extent, X.bytes_to_bytes(dtype, precision=False, dense=True,
                                                                          compression=X.Compression()), attributes)


# -- per-section state ----------------------------------------------------------------

class _Series:
    """step or time: an arithmetic progression attribute until the first break, then an array."""

    def __init__(self, integer: bool):
        self.integer = integer
        self.n = 0
        self.start = None
        self.stride = None
        self.last = None
        self.array: _Writer | None = None

    def value_at(self, i: int):
        if self.integer:
            return self.start + i * (self.stride or 0)
        return self.start + float(i) * (self.stride if self.stride is not None else 0.0)

    def fits(self, v) -> bool:
        """Would v keep the progression (exact comparison as specified)?"""
        if self.array is not None:
            return False
        if self.n == 0:
            return self.integer or math.isfinite(v)
        if self.n == 1:
            stride = v - self.start
            if not self.integer and not math.isfinite(stride):
                return False
            if self.integer:
                return True
            return _bits_equal(self.start + 1.0 * stride, v)
        expected = self.value_at(self.n)
        return expected == v if self.integer else _bits_equal(expected, v)

    def history(self) -> np.ndarray:
        dtype = np.int64 if self.integer else np.float64
        if self.integer:
            return self.start + (self.stride or 0) * np.arange(self.n, dtype=np.int64)
        out = np.empty(self.n, dtype=np.float64)
        for i in range(self.n):
            out[i] = self.value_at(i)
        return out.astype(dtype)

    def attribute(self):
        if self.array is not None or self.n == 0:
            return None
        if self.n == 1:
            return {"start": self.start}
        return {"start": self.start, "stride": self.stride}


class _BlockState:
    def __init__(self, name: str, decl):
        self.name = name
        self.decl = decl
        self.path = f"{TRAJ}/{name}"
        self.cols: dict[str, _Writer] = {}
        self.masks: dict[str, _Writer] = {}
        self.si: _Writer | None = None
        self.off: _Writer | None = None
        self.regular = False
        self.uniform: int | None = None
        self.n_updates = 0
        self.total_rows = 0
        self.last: tuple[int, dict, dict] | None = None     # rows, values, masks of the latest update
        self.attrs: dict = {}
        self.group_dirty = False
        self.validity_missing = False                       # _validity/zarr.json to write at the next commit
        self.target_max: dict[str, int] = {}                # max non-null value of referencing columns

    @property
    def resolved_rows(self) -> int | None:
        return None if self.last is None else self.last[0]

    def differs(self, rows: int, values: dict, masks: dict) -> bool:
        if self.last is None:
            return True
        lrows, lvalues, lmasks = self.last
        if rows != lrows:
            return True
        for c, v in values.items():
            if not _same(v, lvalues[c]):
                return True
        for c, m in masks.items():
            if not _same(m, lmasks[c]):
                return True
        return False

    def writers(self):
        # the index lands first, offset before step_index: a step_index on disk implies its
        # offset, and a regular block's columns never grow (read by uniform_rows) before the
        # index that replaces its markers exists
        if self.si is not None:
            yield self.off
            yield self.si
        yield from self.cols.values()
        yield from self.masks.values()


class _BoxState:
    def __init__(self):
        self.mode: str | None = None      # None | "attrs" | "arrays"
        self.defined: bool | None = None
        self.last: Box | None = None
        self.n_updates = 0
        self.si: _Writer | None = None
        self.vectors: _Writer | None = None
        self.origin: _Writer | None = None
        self.boundary: _Writer | None = None
        self.attrs: dict = {}
        self.group_exists = False
        self.group_dirty = False
        self.history: list[Box] = []      # updates, kept only while needed for backfill of origin/boundary

    def writers(self):
        # vectors last: box arrays are read only when vectors exist, so a crash between two
        # of these publishes never shows vectors without the origin / boundary they need
        for w in (self.si, self.origin, self.boundary, self.vectors):
            if w is not None:
                yield w


def _box_equal(a: Box, b: Box) -> bool:
    return (_same(np.asarray(a.vectors, np.float64), np.asarray(b.vectors, np.float64))
            and _same(np.asarray(a.origin, np.float64), np.asarray(b.origin, np.float64))
            and _same(np.asarray(a.boundary, bool), np.asarray(b.boundary, bool)))


def _box_attrs(b: Box) -> dict | None:
    v = np.asarray(b.vectors, np.float64)
    o = np.asarray(b.origin, np.float64)
    if not (np.isfinite(v).all() and np.isfinite(o).all()):
        return None
    attrs = {"vectors": v.tolist()}
    if np.any(o != 0) or np.any(np.signbit(o)):
        attrs["origin"] = o.tolist()
    bd = np.asarray(b.boundary, bool)
    if not bd.all():
        attrs["boundary"] = [bool(x) for x in bd]
    return attrs


# -- the writer -------------------------------------------------------------------------

def _write_errors(what: str):
    """An OSError (ENOSPC, EIO ...) out of create / open as a WriteError naming the store (nothing
    was reported committed by the call: retrying it, or reopening, is safe)."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(cls, path, *args, **kw):
            try:
                return fn(cls, path, *args, **kw)
            except OSError as exc:
                where = exc.filename if isinstance(exc.filename, str) else os.fspath(path)
                raise WriteError(f"{what} failed ({exc.strerror or exc})", path=where, errno=exc.errno) from exc
        return call
    return wrap


def _refuse_url(path, action: str) -> None:
    from ..fs.remote import is_url, refuse_remote_write
    if is_url(path):
        raise refuse_remote_write(path, action)


class TrajectoryWriter:
    """Streams frames into ``trajectory/`` of a ``*.mrec`` directory store.

    Use :meth:`create` for a new trajectory and :meth:`open` to reopen one and
    append.  ``append`` buffers; every ``flush_every`` frames an automatic
    (not fsynced) flush lands the buffer; :meth:`flush` and :meth:`close` are
    durable when ``durable`` is true.  ``durable="always"`` fsyncs automatic
    flushes too: what a file system that orders nothing but fsync needs for every
    commit to survive a power loss (docs/reliability.md).
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

    # -- construction ---------------------------------------------------------------
    @classmethod
    @_write_errors("creating the trajectory")
    def create(cls, path, schema, *, flush_every: int | None = None, compression=None, durable: bool = True,
               meta: dict | None = None, fs=None, profile: str = "reference",
               expected_frames: int | None = None) -> "TrajectoryWriter":
        _refuse_url(path, "create a trajectory at")
        path = os.fspath(path)
        if profile not in X.PROFILES:
            raise RefusalError(f"profile {profile!r} is not one of {', '.join(X.PROFILES)}", kind="bad_profile")
        if isinstance(schema, (Frame, dict)) and not isinstance(schema, SequenceSchema):
            schema = SequenceSchema.from_frame(Frame.from_any(schema))
        if not isinstance(schema, SequenceSchema):
            raise RefusalError(f"schema {schema!r} is not a SequenceSchema", kind="declaration_mismatch")
        check_text(meta, "meta document", path)
        store = DirectoryStore(path, fs=fs)
        w = cls(store, schema, durable=durable, compression=X.Compression.parse(compression))
        recover(store.fs, os.path.abspath(path))          # an overwrite a crash interrupted (mrec.record.replace)
        made = not store.fs.is_dir(path)
        store.makedirs("")
        w._take_lock(made)
        try:
            root = read_node(store, "")
            if root is not None and not isinstance(root, GroupMetadata):
                raise RefusalError("the record root is an array, not a group", path=path, kind="not_a_record")
            if read_node(store, TRAJ) is not None:
                raise RefusalError("the record already has a trajectory: use TrajectoryWriter.open to append",
                                   path=store.describe(TRAJ), kind="exists")
            w._load_system(creating=True)
            written: list[str] = []
            if root is None:
                write_group(store, "")                                  # the root first,
                written.append("zarr.json")
            if read_node(store, "meta") is None:
                write_group(store, "meta", meta or {})                  # then meta/
                written.append("meta/zarr.json")
            w._use_profile(profile, compression)
            w._use_size_hint(expected_frames)
            w._create_layout(written)
            w.flush_every = flush_every if flush_every is not None else w._auto_k()
            w._check_flush_every()
        except BaseException:
            w._release_lock()
            if made:
                w._remove_if_untouched()
            raise
        w.traj_attrs = {"sequence_schema": schema.to_json(), "nstep": 0}
        try:
            if w.durable:
                w._sync(written, [])                                # the layout on disk before
                if "zarr.json" not in written:   # an existing record: its root now holds trajectory/
                    store.fsync_dir("")
            store.set(meta_key(TRAJ), json_dumps(GroupMetadata(w.traj_attrs).to_json()), fsync=w.durable)
            if w.durable:                                           # the trajectory/zarr.json that names it
                store.fsync_dir(TRAJ)
        except BaseException:
            w._release_lock()               # a failed create returns no writer, so it holds no lock
            raise
        return w

    @classmethod
    @_write_errors("reopening the trajectory")
    def open(cls, path, *, flush_every: int | None = None, durable: bool = True, fs=None,
             compression=None, truncate_after_step: int | None = None) -> "TrajectoryWriter":
        """Reopen to append.  ``truncate_after_step=S`` first drops every committed frame whose
        step is after S (a restart from a checkpoint at S; see :mod:`mrec.record.truncate`)."""
        _refuse_url(path, "append to")
        path = os.fspath(path)
        if truncate_after_step is not None:
            from .truncate import check_step
            truncate_after_step = check_step(truncate_after_step)
        recover(fs or DEFAULT_FS, os.path.abspath(path))  # an overwrite a crash interrupted (mrec.record.replace)
        if not os.path.isdir(path):
            raise StoreError("a trajectory is appended to in its *.mrec directory (unpack a *.mrec.zip first)", path=path)
        store = DirectoryStore(path, fs=fs)
        held = lock_store(store.fs, path, "writer")       # one writer; links refused, temp leftovers removed
        try:
            removed = prepare_for_writing(store.fs, path, "appending")
            layout = load_layout(store)
            w = cls(store, layout.schema, durable=durable, compression=X.Compression.parse(compression))
            w._lock, w.removed_temps = held, removed
            w._load_system(creating=False)
            w.repair_report = repair_store(store)           # torn / dropped shard index rewrites (mrec.repair)
            if not w.repair_report.ok:
                key, why = w.repair_report.unrecoverable[0]
                raise CorruptionError(why, path=key)
            if w.repair_report.repaired:
                layout = load_layout(store)
            if truncate_after_step is not None:
                from .truncate import lower_commit
                if lower_commit(store, layout, truncate_after_step, durable=w.durable) < layout.nstep:
                    layout = load_layout(store)
            w._restore(layout)
            w.flush_every = flush_every if flush_every is not None else w._auto_k()
            w._check_flush_every()
        except BaseException:
            held.release()
            raise
        return w

    def _load_system(self, *, creating: bool) -> None:
        """Blocks shared with ``system/`` are aligned 1:1 by row order (mrec-notes §3.1)."""
        if not isinstance(read_node(self.store, "system"), GroupMetadata):
            return
        from .frame_group import read_frame_group
        sysf = read_frame_group(self.store, "system").frame
        for name, decl in self.schema.blocks.items():
            if name not in sysf.blocks:
                continue
            n = sysf.counts[name]
            if creating and decl.frame_rows is not None and decl.frame_rows != n:
                raise RefusalError(f"trajectory block {name!r} is declared with {decl.frame_rows} rows but the "
                                   f"system block of that name has {n}: a block sharing a name with a system "
                                   "block is aligned 1:1 by row order", path=self.store.describe("system"),
                                   kind="row_count_mismatch")
            self.system[name] = (n, sysf.blocks[name].get("id"))

    def _check_system(self, plans: dict, i: int) -> None:
        for name, (rows, values, _masks) in plans.items():
            if name not in self.system:
                continue
            n, ids = self.system[name]
            if rows != n:
                raise RefusalError(f"frame {i}: block {name!r} has {rows} rows but the system block of that name "
                                   f"has {n}; it is aligned 1:1 by row order (a ragged block may not share a "
                                   "name with a system block)", kind="row_count_mismatch")
            if ids is not None and "id" in values and not _same(np.asarray(values["id"]), np.asarray(ids)):
                raise RefusalError(f"frame {i}: block {name!r} id column differs from the system block's id "
                                   "column (aligned blocks hold the same entities in the same order)",
                                   kind="row_count_mismatch")

    def _check_flush_every(self):
        k = self.flush_every
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise RefusalError(f"flush_every {k!r} is not a positive integer", kind="bad_flush_every")

    # -- the lock ---------------------------------------------------------------------
    _lock = None
    removed_temps: list = []

    def _take_lock(self, made: bool) -> None:
        """The store's writer lock (mrec.record.lock); then links refused, temp leftovers removed."""
        try:
            self._lock = lock_store(self.store.fs, self.store.root, "writer")
            self.removed_temps = prepare_for_writing(self.store.fs, self.store.root, "appending")
        except BaseException:
            self._release_lock()
            if made:
                self._remove_if_untouched()
            raise

    def _release_lock(self):
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _remove_if_untouched(self) -> None:
        """A refused create leaves no directory it made."""
        try:
            self.store.fs.rmdir(self.store.root)
        except OSError:
            pass

    # -- layout at creation -------------------------------------------------------------
    profile = "reference"

    def _use_profile(self, profile, compression) -> None:
        """``compact``: COMPACT_FRAMES_PER_CHUNK frames per inner chunk and, unless a compression
        is given, zstd at COMPACT_ZSTD_LEVEL (opt-in; a reader needs nothing to know of it)."""
        self.profile = profile
        if profile == "compact" and compression is None:
            self.compression = X.Compression("zstd", X.COMPACT_ZSTD_LEVEL)

    expected_frames: int | None = None      # the size hint (create only; extents are frozen after)
    dense_extent = X.DENSE_EXTENT

    def _use_size_hint(self, expected_frames) -> None:
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

    def _block_extent(self, decl) -> tuple[int, dict[str, int]]:
        rbs = {c: row_bytes(cd.dtype, cd.trailing) for c, cd in decl.columns.items()}
        narrow = min(rbs.values()) if rbs else 1
        frames = X.COMPACT_FRAMES_PER_CHUNK if self.profile == "compact" else 1
        rpc = X.rows_per_chunk(decl.frame_rows, narrow, frames)
        return X.hinted_rows_per_chunk(rpc, decl.frame_rows, self.expected_frames), rbs

    def _column_meta(self, decl, col: str, rpc: int, rb: int) -> ArrayMetadata:
        cd = decl.columns[col]
        bb = X.bytes_to_bytes(cd.dtype, precision=cd.precision is not None, dense=False, compression=self.compression)
        return _array_meta(cd.dtype, cd.trailing, X.column_extent(rpc, rb, self._expected_rows(decl)), bb)

    def _mask_meta(self, rpc: int, decl=None) -> ArrayMetadata:
        rows = self._expected_rows(decl) if decl is not None else None
        return _array_meta("bool", (), X.column_extent(rpc, 1, rows), X.bytes_to_bytes("bool", precision=False, dense=False,
                                                                                      compression=self.compression))

    def _create_layout(self, written: list[str]) -> None:
        st = self.store
        for name, decl in self.schema.blocks.items():
            bs = _BlockState(name, decl)
            if decl.structural_shape is not None:
                bs.attrs["structural_shape"] = list(decl.structural_shape)
            write_group(st, bs.path, bs.attrs)
            written.append(meta_key(bs.path))
            rpc, rbs = self._block_extent(decl)
            if any(cd.nullable for cd in decl.columns.values()):
                # the mask subgroup is a group like any other: its zarr.json (mrec-notes §1.4, §4)
                write_group(st, f"{bs.path}/{VALIDITY}")
                written.append(meta_key(f"{bs.path}/{VALIDITY}"))
            for col, cd in decl.columns.items():
                arr = Array.create(st, f"{bs.path}/{col}", self._column_meta(decl, col, rpc, rbs[col]))
                bs.cols[col] = _Writer(arr, 0, new=False)
                written.append(meta_key(arr.path))
                if cd.nullable:
                    m = Array.create(st, f"{bs.path}/_validity/{col}", self._mask_meta(rpc, decl))
                    bs.masks[col] = _Writer(m, 0, new=False)
                    written.append(meta_key(m.path))
            self.blocks[name] = bs
        if self.schema.meta:
            write_group(st, f"{TRAJ}/meta")
            written.append(meta_key(f"{TRAJ}/meta"))
            for key, md in self.schema.meta.items():
                dtype, trailing = tag_layout(md.tag)
                arr = Array.create(st, f"{TRAJ}/meta/{key}", _dense_meta(dtype, trailing, {"meta_dtype": md.tag}, self.dense_extent))
                self.meta[key] = _Writer(arr, 0, new=False)
                written.append(meta_key(arr.path))

    def _auto_k(self) -> int:
        total, largest, fpc = 0, -1, 1
        for decl in self.schema.blocks.values():
            rpc, rbs = self._block_extent(decl)
            rows = decl.frame_rows or 0
            nbytes = rows * (sum(rbs.values()) + sum(1 for c in decl.columns.values() if c.nullable))
            total += nbytes
            if rows and nbytes > largest:
                largest, fpc = nbytes, rpc // rows
        return X.flush_every(total, fpc)

    # -- reopen -----------------------------------------------------------------------------
    def _open_writer(self, arr: Array | None, logical: int) -> _Writer | None:
        if arr is None:
            return None
        if arr.shape[0] > logical:
            arr.set_shape((logical, *arr.shape[1:]), fsync=self.durable)   # the reopen rule: shrink to the logical shape
        w = _Writer(arr, logical, new=False)
        w.appender.settle()       # no copy a crash left past the committed ones stays before new ones
        return w

    def _restore(self, layout) -> None:
        st = self.store
        n = layout.nstep
        self.nframes = self.committed = n
        self.traj_attrs = dict(layout.attrs)
        reader = TrajectoryReader(None, store=st)
        # steps
        if layout.step_prog is not None:
            self.step.start, self.step.stride, self.step.n = layout.step_prog.start, layout.step_prog.stride, n
        elif layout.step_array is not None:
            self.step.n = n
            self.step.array = self._open_writer(layout.step_array, n)
        if n:
            self.step.last = int(reader.steps[-1])
        # times
        if n:
            self.has_time = layout.has_time
        if layout.time_prog is not None:
            self.time.start, self.time.stride, self.time.n = float(layout.time_prog.start), \
                (float(layout.time_prog.stride) if layout.time_prog.stride is not None else None), n
        elif layout.time_array is not None and n:
            self.time.n = n
            self.time.array = self._open_writer(layout.time_array, n)
        # meta
        for key, arr in layout.meta.items():
            self.meta[key] = self._open_writer(arr, n)
        for key, md in self.schema.meta.items():
            if key not in self.meta:
                dtype, trailing = tag_layout(md.tag)
                arr = Array(st, f"{TRAJ}/meta/{key}", _dense_meta(dtype, trailing, {"meta_dtype": md.tag}, self.dense_extent))
                if read_node(st, f"{TRAJ}/meta") is None:
                    write_group(st, f"{TRAJ}/meta")
                self.meta[key] = _Writer(arr, 0, new=True)
        # box
        bl = layout.box
        b = self.box
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
                b.si = self._open_writer(read_arr(st, f"{TRAJ}/box/step_index"), bl.n_updates)
                if b.si is None:    # the trivial step_index was omitted: write it when the cell next changes
                    b.si = _Writer(Array(st, f"{TRAJ}/box/step_index", _dense_meta("u64", extent=self.dense_extent)), 0, new=True)
                    if bl.n_updates:
                        b.si.append(np.zeros(1, np.uint64))
                b.vectors = self._open_writer(bl.vectors, bl.n_updates)
                b.origin = self._open_writer(bl.origin, bl.n_updates)
                b.boundary = self._open_writer(bl.boundary, bl.n_updates)
                if "vectors" in b.attrs:
                    for k in ("vectors", "origin", "boundary"):
                        b.attrs.pop(k, None)
                    b.group_dirty = True
        # blocks
        for name, decl in self.schema.blocks.items():
            bl_ = layout.blocks[name]
            bs = _BlockState(name, decl)
            self.blocks[name] = bs
            rpc, rbs = self._block_extent(decl)
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
                bs.cols[col] = self._open_writer(arr, total) if arr is not None else \
                    _Writer(Array(st, f"{bs.path}/{col}", self._column_meta(decl, col, rpc, rbs[col])), 0, new=True)
                if cd.nullable:
                    m = bl_.masks.get(col)
                    bs.masks[col] = self._open_writer(m, total) if m is not None else \
                        _Writer(Array(st, f"{bs.path}/_validity/{col}", self._mask_meta(rpc)), 0, new=True)
                    if m is None and total:
                        bs.masks[col].append(np.ones(total, dtype=bool))
            bs.n_updates, bs.total_rows = bl_.n_updates, total
            if bl_.regular:
                bs.regular, bs.uniform = True, bl_.uniform_rows
            elif bl_.step_index is not None:
                bs.si = self._open_writer(read_arr(st, f"{bs.path}/step_index"), bl_.n_updates)
                off_arr = read_arr(st, f"{bs.path}/offset")
                # offset's leading 0 is committed with the first update, not before: a crash
                # inside the first flush can leave it unwritten (then it is written again)
                bs.off = self._open_writer(off_arr, min(off_arr.shape[0], bl_.n_updates + 1 if bl_.n_updates else 0))
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
                bs.target_max = self._target_max(decl, values, full_masks)

    # -- append -----------------------------------------------------------------------------
    def _check_encodes(self) -> None:
        """An inner chunk encoded ahead on a worker (ShardedAppender ahead=True) that failed poisons
        the writer at its next call, as a failed landing does (docs/reliability.md, "Write errors"):
        nothing of the chunk was written, the store is at its last commit.  The appenders known at
        the last commit are checked here; a newer one's failure surfaces at its landing."""
        apps = self._ahead_apps
        if apps is None:
            apps = self._ahead_apps = [w.appender for w in self._all_writers()]
        for ap in apps:
            exc = ap.ahead_error
            if exc is not None and self.failed is None:
                self.failed = WriteError(
                    f"encoding rows of array {ap.array.path} on a worker thread failed ({type(exc).__name__}: "
                    f"{exc}); this writer refuses further work: frames {self.committed} and later were not "
                    "reported committed, reopen the store (TrajectoryWriter.open) to continue from what is on disk",
                    path=self.store.describe(ap.array.path))
                self.failed.__cause__ = exc
                self._poisoned()
                raise self.failed

    def _check_open(self):
        self._check_encodes()
        if self.failed is not None:
            raise self._refusal()
        if self.closed:
            raise RefusalError("the writer is closed", path=self.store.root, kind="closed")

    def _refusal(self) -> WriteError:
        f = self.failed
        err = WriteError(f"this writer refuses further work since {f.detail.split(';')[0]}: reopen the store "
                         "(TrajectoryWriter.open) to continue from what is on disk", path=f.path, errno=f.errno)
        err.__cause__ = f
        return err

    def _next_step(self, step) -> int:
        last = self.step.last
        if step is None:
            step = 0 if last is None else last + 1
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
            raise RefusalError(f"step {step!r} is not an integer", kind="step_not_increasing")
        step = int(step)
        if not I64_MIN <= step <= I64_MAX:
            raise RefusalError(f"step {step} is outside the i64 range", kind="step_not_increasing")
        if last is not None and step <= last:
            what = "repeats" if step == last else "decreases from"
            raise RefusalError(f"step {step} {what} the previous step {last}: steps must strictly increase",
                               kind="step_not_increasing")
        return step

    def _check_time(self, time):
        if time is not None:
            if isinstance(time, (bool, np.bool_)) or not isinstance(time, (int, float, np.integer, np.floating)):
                raise RefusalError(f"time {time!r} is not a number", kind="partial_time")
            time = float(time)
        if self.has_time is None:
            return time
        if self.has_time and time is None:
            raise RefusalError(f"frame {self.nframes} drops the time every earlier frame had (time is all-or-nothing)",
                               kind="partial_time")
        if not self.has_time and time is not None:
            raise RefusalError(f"frame {self.nframes} gains a time no earlier frame had (time is all-or-nothing)",
                               kind="partial_time")
        return time

    def _check_strings(self, f: Frame, i: int) -> None:
        """Refuse (``bad_string``) a string value UTF-8 cannot encode (a lone surrogate): accepted, it
        would make every later flush fail with the frames after the last commit lost."""
        for name, cols in f.blocks.items():
            for c, cd in self.schema.blocks[name].columns.items():
                if cd.dtype == "string" and c in cols:
                    check_text(cols[c], f"frame {i}: block {name!r} column {c!r}, row", self.store.root)

    def _meta_values(self, f: Frame) -> dict:
        out = {}
        for key, md in self.schema.meta.items():
            if key in f.meta:
                v = f.meta[key]
            elif md.fill is not ABSENT:
                v = md.fill
            else:
                raise RefusalError(f"frame {self.nframes} omits meta key {key!r}, which has no fill",
                                   kind="missing_meta_value")
            v = typed_json.coerce_meta_value(md.tag, v, key)
            if md.tag in ("string", "json"):       # JSON would escape a lone surrogate: refused alike
                check_text(v, f"frame {self.nframes}: meta key {key!r}", self.store.root)
            if md.tag == "json":
                v = typed_json.json_dumps(v)
            out[key] = v
        return out

    @staticmethod
    def _target_max(decl, values: dict, masks: dict) -> dict[str, int]:
        out = {}
        for col in (decl.targets or {}):
            v = values.get(col)
            if v is None or not len(v):
                continue
            m = masks.get(col)
            vv = v[m] if m is not None else v
            if len(vv):
                out[col] = int(np.max(vv))
        return out

    def _plan_blocks(self, f: Frame) -> dict:
        plans = {}
        for name, decl in self.schema.blocks.items():
            if name not in f.blocks:
                continue
            given = f.blocks[name]
            values = {}
            rows = None
            for col, cd in decl.columns.items():
                v = np.asarray(given[col]) if cd.dtype != "string" else np.asarray(given[col], dtype=object)
                want = numpy_dtype(cd.dtype)
                if v.dtype != want:
                    v = v.astype(want)
                if cd.precision is not None:
                    v = round_to_precision(v, cd.precision)
                values[col] = np.ascontiguousarray(v)
                rows = len(v)
            if rows is None:
                rows = 0
            masks = {}
            for col, cd in decl.columns.items():
                if cd.nullable:
                    m = (f.masks.get(name) or {}).get(col)
                    masks[col] = np.ones(rows, bool) if m is None else np.asarray(m, dtype=bool)
            bs = self.blocks[name]
            if bs.differs(rows, values, masks):
                plans[name] = (rows, values, masks)
        return plans

    def _check_resolved(self, plans: dict, i: int) -> None:
        """aligned_with and targets on the frame as it will resolve."""
        def rows_of(name):
            if name in plans:
                return plans[name][0]
            return self.blocks[name].resolved_rows

        for name, decl in self.schema.blocks.items():
            r = rows_of(name)
            if decl.aligned_with and r is not None:
                t = rows_of(decl.aligned_with)
                if t is None:
                    raise RefusalError(f"frame {i}: aligned block {name!r} is present while its target "
                                       f"{decl.aligned_with!r} is absent", kind="aligned_count_mismatch")
                if t != r:
                    raise RefusalError(f"frame {i}: aligned block {name!r} has {r} rows, its target "
                                       f"{decl.aligned_with!r} {t}: restate it when the target's count changes",
                                       kind="aligned_count_mismatch")
            if decl.targets and r:
                maxes = self._target_max(decl, plans[name][1], plans[name][2]) if name in plans else self.blocks[name].target_max
                for col, target in decl.targets.items():
                    if target.startswith("/") or col not in maxes:
                        continue
                    t = rows_of(target) if target in self.schema.blocks else None
                    if t is None:
                        raise RefusalError(f"frame {i}: {name}/{col} references block {target!r}, absent in this frame",
                                           kind="bad_reference")
                    if maxes[col] >= t:
                        raise RefusalError(f"frame {i}: {name}/{col} holds row {maxes[col]}, but {target!r} has {t} rows",
                                           kind="bad_reference")

    def _plan_box(self, f: Frame, i: int):
        if f.box is None:
            return None
        box = f.box if isinstance(f.box, Box) else Box.from_any(f.box)
        b = self.box
        if b.defined is not None and b.defined != box.defined:
            raise RefusalError(f"frame {i}: cell_defined changes from {b.defined} to {box.defined}; a trajectory "
                               "holds one cell_defined flag for every update", kind="bad_box")
        if b.last is not None and _box_equal(b.last, box):
            return None
        return box

    def append(self, frame, step=None, time=None) -> None:
        """Validate and buffer one frame (step defaults to last + 1, from 0).

        A regular frame with the default step and no time takes the batch path of :meth:`extend`
        (a run of one frame); the store is the same (``spec_tests/test_extend.py``)."""
        self._check_encodes()
        if step is None and time is None and self._extend_run((frame,), 0):
            return
        self._append_checked(frame, step, time)

    def _append_checked(self, frame, step=None, time=None) -> None:
        """The general append: the frame built and validated as a :class:`Frame`, then planned."""
        self._check_open()
        f = frame if isinstance(frame, Frame) else self.schema.frame(frame)   # int lists take declared dtypes
        self.schema.check_frame(f)
        i = self.nframes
        step = self._next_step(step)
        time = self._check_time(time)
        meta_values = self._meta_values(f)
        self._check_strings(f, i)
        plans = self._plan_blocks(f)
        self._check_system(plans, i)
        self._check_resolved(plans, i)
        box = self._plan_box(f, i)
        # ---- nothing below refuses: apply -------------------------------------------
        for name, (rows, values, masks) in plans.items():
            self._add_update(self.blocks[name], i, rows, values, masks)
        if box is not None:
            self._add_box(box, i)
        self._add_series(self.step, step, "step", "i64")
        if self.has_time is None:
            self.has_time = time is not None
        if time is not None:
            self._add_series(self.time, time, "time", "f64")
        for key, v in meta_values.items():
            dtype, trailing = tag_layout(self.schema.meta[key].tag)
            row = np.empty((1, *trailing), dtype=numpy_dtype(dtype))
            if dtype == "string":
                row[0] = v
            else:
                row[0] = v
            self.meta[key].append(row)
        self.nframes += 1
        if self.nframes - self.committed >= self.flush_every:
            self._commit(durable=self.durable_auto)

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
        refused frame and the rest are not.  Frames are taken from the iterable
        :attr:`EXTEND_WINDOW` at a time, so a refusal may leave some frames after it consumed.
        """
        it = iter(frames)
        while True:
            batch = list(itertools.islice(it, self.EXTEND_WINDOW))
            if not batch:
                return
            pos = 0
            while pos < len(batch):
                self._check_encodes()
                n = self._extend_run(batch, pos)
                if n:
                    pos += n
                else:
                    self._append_checked(batch[pos])
                    pos += 1

    def _fast_spec(self):
        """block -> (rows fixed by structural_shape or None, [(column, numpy dtype, trailing, precision,
        nullable)]) for blocks the batch path can take; None when the schema rules the batch path out."""
        spec = self.__dict__.get("_fast_spec_cache", False)
        if spec is not False:
            return spec
        spec = {}
        if self.schema.meta:
            spec = None
        else:
            for name, decl in self.schema.blocks.items():
                if decl.aligned_with is not None or decl.targets:
                    spec = None
                    break
                cols = []
                for c, cd in decl.columns.items():
                    if cd.dtype == "string" or 0 in cd.trailing:
                        cols = None
                        break
                    cols.append((c, numpy_dtype(cd.dtype), tuple(cd.trailing), cd.precision, cd.nullable))
                if cols:
                    fixed = math.prod(decl.structural_shape) if decl.structural_shape is not None else None
                    groups: dict = {}
                    for c, dt, tr, p, _n in cols:
                        groups.setdefault((p, tr) if p is not None else (None, c), []).append(c)
                    nullable = [c for c, *_rest, n in cols if n]
                    spec[name] = (fixed, cols, [(k[0], g) for k, g in groups.items()], nullable)
        self._fast_spec_cache = spec
        return spec

    @staticmethod
    def _fast_blocks(fr, spec):
        """(blocks, their (name, rows) signature, the cell as given or None) of ``fr`` when the batch
        path can take it, else None."""
        parts = _plain_parts(fr)
        if parts is None:
            return None
        blocks, box = parts
        sig = []
        for name, given in blocks.items():
            s = spec.get(name) if type(name) is str else None
            if s is None or type(given) is not dict:
                return None
            fixed, cols = s[0], s[1]
            if len(given) != len(cols):
                return None
            rows = -1
            for c, dt, trailing, _p, _n in cols:
                a = given.get(c)
                if type(a) is not np.ndarray or a.dtype != dt or a.shape[1:] != trailing or a.ndim != 1 + len(trailing):
                    return None
                if rows < 0:
                    rows = a.shape[0]
                elif a.shape[0] != rows:
                    return None
            if rows <= 0 or (fixed is not None and rows != fixed):
                return None
            sig.append((name, rows))
        if not sig:
            return None
        return blocks, tuple(sig), box

    @staticmethod
    def _same_structure(fr, tmpl):
        """(blocks, cell or None) of ``fr`` when it has exactly the blocks, columns, dtypes and shapes
        of ``tmpl`` (what :meth:`_fast_blocks` accepted for the run's first frame), else None."""
        parts = _plain_parts(fr)
        if parts is None:
            return None
        blocks, box = parts
        if len(blocks) != len(tmpl):
            return None
        for name, ncols, cols in tmpl:
            given = blocks.get(name)
            if type(given) is not dict or len(given) != ncols:
                return None
            for c, dt, shape in cols:
                a = given.get(c)
                if type(a) is not np.ndarray or a.shape != shape or (a.dtype is not dt and a.dtype != dt):
                    return None
        return blocks, box

    def _extend_run(self, batch: list, pos: int) -> int:
        """Append the longest run of regular frames from batch[pos] up to the next automatic flush,
        exactly as :meth:`append` one by one would; the number taken (0: batch[pos] goes to append)."""
        if self.closed or self.failed is not None or self.has_time:
            return 0
        spec = self._fast_spec()
        if spec is None:
            return 0
        room = self.flush_every - (self.nframes - self.committed)
        last = self.step.last
        first_step = 0 if last is None else last + 1
        end = min(len(batch), pos + max(1, room), pos + max(0, I64_MAX - first_step + 1))
        if end <= pos:
            return 0
        head = self._fast_blocks(batch[pos], spec)
        if head is None:
            return 0
        blocks0, sig, box0 = head
        run, boxes = [blocks0], [box0]
        # the next frames must have the head's exact structure: one shape comparison per column
        tmpl = [(name, len(spec[name][1]), [(c, dt, (rows, *tr)) for c, dt, tr, _p, _n in spec[name][1]])
                for name, rows in sig]
        for k in range(pos + 1, end):
            b = self._same_structure(batch[k], tmpl)
            if b is None:
                break
            run.append(b[0])
            boxes.append(b[1])
        F = len(run)
        # ---- the cells: built and change-detected as _plan_box would, frame after frame ----
        box_updates = []
        cut = F
        bx = self.box
        defined, last_box = bx.defined, bx.last
        for k, raw in enumerate(boxes):
            if raw is None:
                continue
            try:
                box = raw if isinstance(raw, Box) else Box.from_any(raw)
            except Exception:          # a malformed cell: append builds and refuses it
                cut = k
                break
            if defined is not None and defined != box.defined:
                cut = k                # append refuses the cell_defined change
                break
            if last_box is not None and _box_equal(last_box, box):
                continue
            box_updates.append((k, box))
            if defined is None:
                defined = box.defined
            last_box = box
        if cut == 0:
            return 0
        if cut < F:
            run, F = run[:cut], cut
        # ---- plan: stacks, rounding, change detection, the system/ alignment (nothing changes yet) ----
        plans = []
        for name, rows in sig:
            bs = self.blocks[name]
            values, masks = {}, {}
            for p, group in spec[name][2]:
                # the columns of one precision (and trailing shape) are stacked and rounded in one call
                if len(group) == 1 and F == 1:
                    v = run[0][name][group[0]][None]
                    if p is not None:
                        v = round_to_precision(v, p)
                else:
                    srcs = [blk[name][c] for c in group for blk in run]
                    # stacked and rounded in one go unless a value is NaN / inf / huge
                    v = stack_rounded(srcs, p) if p is not None else stack_rows(srcs)
                    if v is None:
                        v = round_to_precision(np.stack(srcs), p)
                v = v.reshape(len(group), F, *v.shape[1:])
                for g, c in enumerate(group):
                    values[c] = np.ascontiguousarray(v[g])
            for c in spec[name][3]:
                masks[c] = np.ones((F, rows), bool)
            first = bs.differs(rows, {c: v[0] for c, v in values.items()}, {c: m[0] for c, m in masks.items()})
            if F == 1:
                upd = _ONE_TRUE if first else _ONE_FALSE
            else:
                upd = np.zeros(F, bool)
                upd[0] = first
                for v in values.values():
                    flat = v.reshape(F, -1)
                    flat = flat.view(np.uint64) if flat.dtype.itemsize == 8 else flat.view(np.uint8)
                    # a moving column differs in its first values: only the frames whose first
                    # 8 values repeat the previous frame's are compared in full
                    head = min(8, flat.shape[1])
                    moved = (flat[1:, :head] != flat[:-1, :head]).any(axis=1)
                    rest = np.flatnonzero(~moved)
                    if len(rest):
                        moved[rest] = (flat[rest + 1] != flat[rest]).any(axis=1)
                    upd[1:] |= moved
            if name in self.system:
                n, ids = self.system[name]
                bad = upd.copy() if rows != n else np.zeros(F, bool)
                if ids is not None and "id" in values and rows == n:
                    ids = np.asarray(ids)
                    v = values["id"]
                    if v.dtype != ids.dtype or v.shape[1:] != ids.shape:
                        same = np.zeros(F, bool)
                    else:
                        want = np.ascontiguousarray(ids).reshape(1, -1).view(np.uint8)
                        same = (v.reshape(F, -1).view(np.uint8) == want).all(axis=1)
                    bad = upd & ~same
                if bad.any():
                    cut = min(cut, int(np.argmax(bad)))
            plans.append((bs, rows, values, masks, upd))
        if cut == 0:
            return 0                   # the first frame is refused: append raises it
        F = cut
        # ---- apply: nothing below refuses ----
        i0 = self.nframes
        for bs, rows, values, masks, upd in plans:
            if F == 1:
                ks = _K0 if upd[0] else _K_NONE
            else:
                ks = np.flatnonzero(upd[:F])
            self._add_updates(bs, i0, rows, values, masks, ks)
        for k, box in box_updates:
            if k >= F:
                break
            self._add_box(box, i0 + k)
        self._add_steps(first_step, F)
        if self.has_time is None:
            self.has_time = False
        self.nframes += F
        if self.nframes - self.committed >= self.flush_every:
            self._commit(durable=self.durable_auto)
        return F

    def _add_updates(self, bs: _BlockState, i0: int, rows: int, values: dict, masks: dict, ks) -> None:
        """_add_update for the run's updates at frames i0 + ks, the contiguous regular / indexed tail at once."""
        u = 0
        n = len(ks)
        while u < n:
            k0 = int(ks[u])
            contiguous = int(ks[-1]) - k0 == n - 1 - u
            if bs.n_updates and bs.regular and rows == bs.uniform and contiguous and i0 + k0 == bs.n_updates:
                sel = slice(k0, int(ks[-1]) + 1)
                frames = None
            elif bs.si is not None and not bs.regular:
                sel = ks[u:]
                frames = i0 + sel
            else:
                k = k0
                self._add_update(bs, i0 + k, rows, {c: v[k] for c, v in values.items()},
                                 {c: m[k] for c, m in masks.items()})
                u += 1
                continue
            cnt = n - u
            if frames is not None:
                bs.si.append(frames.astype(np.uint64))
                bs.off.append(np.uint64(bs.total_rows) + np.arange(1, cnt + 1, dtype=np.uint64) * np.uint64(rows))
            for c, v in values.items():
                bs.cols[c].append(v[sel].reshape(cnt * rows, *v.shape[2:]))
            for c, m in masks.items():
                bs.masks[c].append(m[sel].reshape(cnt * rows))
            last = int(ks[-1])
            if len(ks) > 1:        # the latest rows, not a view holding the run's stack alive
                lv = {c: v[last].copy() for c, v in values.items()}
                lm = {c: m[last].copy() for c, m in masks.items()}
            else:
                lv = {c: v[last] for c, v in values.items()}
                lm = {c: m[last] for c, m in masks.items()}
            bs.n_updates += cnt
            bs.total_rows += cnt * rows
            bs.last = (rows, lv, lm)
            bs.target_max = self._target_max(bs.decl, lv, lm)
            return

    def _add_steps(self, first: int, count: int) -> None:
        """_add_series of the default steps first .. first + count - 1."""
        s = self.step
        k = 0
        while k < count and s.array is None and not (s.n >= 2 and s.stride == 1):
            self._add_series(s, first + k, "step", "i64")
            k += 1
        if k == count:
            return
        if s.array is not None:
            s.array.append(np.arange(first + k, first + count, dtype=np.int64))
        s.n += count - k
        s.last = first + count - 1

    # -- state changes --------------------------------------------------------------------------
    def _new_dense(self, path: str, dtype: str, trailing=()) -> _Writer:
        return _Writer(Array(self.store, path, _dense_meta(dtype, trailing, extent=self.dense_extent)), 0, new=True)

    def _add_series(self, s: _Series, v, name: str, dtype: str) -> None:
        if s.array is None and not s.fits(v):
            w = self._new_dense(f"{TRAJ}/{name}", dtype)
            if s.n:
                w.append(s.history())
            s.array = w
        if s.array is not None:
            s.array.append(np.array([v], dtype=np.int64 if s.integer else np.float64))
        elif s.n == 0:
            s.start = v
        elif s.n == 1:
            s.stride = v - s.start
        s.n += 1
        s.last = v

    def _add_update(self, bs: _BlockState, i: int, rows: int, values: dict, masks: dict) -> None:
        j = bs.n_updates
        if j == 0 and bs.si is None:
            if i == 0 and rows > 0 and bs.decl.columns:
                bs.regular, bs.uniform = True, rows
                bs.attrs["uniform_rows"] = rows
                bs.attrs["dense_updates"] = True
                bs.group_dirty = True
            else:
                self._make_index(bs)
                bs.off.append(np.zeros(1, np.uint64))
                bs.si.append(np.array([i], np.uint64))
                bs.off.append(np.array([rows], np.uint64))
        elif bs.regular:
            if rows != bs.uniform or i != j:
                # the first irregular update: materialise both arrays with the regular history
                self._make_index(bs)
                bs.si.append(np.append(np.arange(j, dtype=np.uint64), np.uint64(i)))
                bs.off.append(np.append(np.arange(j + 1, dtype=np.uint64) * np.uint64(bs.uniform),
                                        np.uint64(j * bs.uniform + rows)))
                bs.regular, bs.uniform = False, None
                bs.attrs.pop("uniform_rows", None)
                bs.attrs.pop("dense_updates", None)
                bs.group_dirty = True
        else:
            bs.si.append(np.array([i], np.uint64))
            bs.off.append(np.array([bs.total_rows + rows], np.uint64))
        for col, v in values.items():
            bs.cols[col].append(v)
        for col, m in masks.items():
            bs.masks[col].append(m)
        bs.n_updates += 1
        bs.total_rows += rows
        bs.last = (rows, values, masks)
        bs.target_max = self._target_max(bs.decl, values, masks)

    def _make_index(self, bs: _BlockState) -> None:
        bs.si = self._new_dense(f"{bs.path}/step_index", "u64")
        bs.off = self._new_dense(f"{bs.path}/offset", "u64")

    def _add_box(self, box: Box, i: int) -> None:
        b = self.box
        if b.defined is None:
            b.defined = box.defined
            if not box.defined:
                b.attrs["cell_defined"] = False
            b.group_dirty = True
        if b.mode is None and i == 0 and _box_attrs(box) is not None:
            b.mode = "attrs"
            for k in ("vectors", "origin", "boundary"):     # leftovers of an uncommitted first cell
                b.attrs.pop(k, None)
            b.attrs.update(_box_attrs(box))
            b.group_dirty = True
            b.history = [box]
        else:
            if b.mode != "arrays":
                prior = b.history if b.mode == "attrs" else []
                b.si = self._new_dense(f"{TRAJ}/box/step_index", "u64")
                b.vectors = self._new_dense(f"{TRAJ}/box/vectors", "f64", (3, 3))
                if prior:
                    b.si.append(np.zeros(1, np.uint64))
                    b.vectors.append(np.asarray(prior[0].vectors, np.float64).reshape(1, 3, 3))
                    if "origin" in b.attrs:
                        b.origin = self._new_dense(f"{TRAJ}/box/origin", "f64", (3,))
                        b.origin.append(np.asarray(prior[0].origin, np.float64).reshape(1, 3))
                    if "boundary" in b.attrs:
                        b.boundary = self._new_dense(f"{TRAJ}/box/boundary", "bool", (3,))
                        b.boundary.append(np.asarray(prior[0].boundary, bool).reshape(1, 3))
                for k in ("vectors", "origin", "boundary"):
                    b.attrs.pop(k, None)
                b.mode = "arrays"
                b.group_dirty = True
            n = b.n_updates
            origin = np.asarray(box.origin, np.float64).reshape(1, 3)
            boundary = np.asarray(box.boundary, bool).reshape(1, 3)
            default_boundary = bool(b.defined)
            if b.origin is None and (np.any(origin != 0) or np.any(np.signbit(origin))):
                b.origin = self._new_dense(f"{TRAJ}/box/origin", "f64", (3,))
                if n:
                    b.origin.append(np.zeros((n, 3)))
            if b.boundary is None and np.any(boundary != default_boundary):
                b.boundary = self._new_dense(f"{TRAJ}/box/boundary", "bool", (3,))
                if n:
                    b.boundary.append(np.full((n, 3), default_boundary))
            b.si.append(np.array([i], np.uint64))
            b.vectors.append(np.asarray(box.vectors, np.float64).reshape(1, 3, 3))
            if b.origin is not None:
                b.origin.append(origin)
            if b.boundary is not None:
                b.boundary.append(boundary)
            b.history = []
        b.n_updates += 1
        b.last = box

    # -- commit ---------------------------------------------------------------------------------
    def _all_writers(self):
        for bs in self.blocks.values():
            yield from bs.writers()
        yield from self.box.writers()
        yield from self.meta.values()
        for s in (self.step, self.time):
            if s.array is not None:
                yield s.array

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
            what, key = self._at
            if isinstance(exc, OSError):
                self.failed = WriteError(
                    f"{what} {key or self.store.root} failed ({exc.strerror or exc}); this writer refuses further "
                    f"work: frames {self.committed} and later were not reported committed, reopen the store "
                    "(TrajectoryWriter.open) to continue from what is on disk",
                    path=self.store.describe(key) if key else self.store.root, errno=exc.errno)
                self._poisoned()
                raise self.failed from exc
            self.failed = WriteError(f"{what} {key} failed ({type(exc).__name__}: {exc}); this writer refuses "
                                     "further work: reopen the store (TrajectoryWriter.open)",
                                     path=self.store.describe(key) if key else self.store.root)
            self.failed.__cause__ = exc
            self._poisoned()
            raise

    def _poisoned(self) -> None:
        """A failed writer writes nothing more: its lock goes now (best effort), so the store can be
        reopened, in this process or another."""
        try:
            self._release_lock()
        except OSError:
            pass

    def _land_and_publish(self, durable: bool) -> None:
        st = self.store
        order: list[_Writer] = []        # the landing order (the index arrays before what they index)
        groups = []
        for bs in self.blocks.values():
            order += [w for w in bs.writers() if w.dirty]
            if bs.group_dirty:
                groups.append((bs.path, bs.attrs))
                bs.group_dirty = False
            if bs.validity_missing:
                groups.append((f"{bs.path}/{VALIDITY}", {}))
                bs.validity_missing = False
        box = [w for w in self.box.writers() if w.dirty]
        order += box
        if self.box.group_dirty or (box and not self.box.group_exists):
            groups.append((f"{TRAJ}/box", self.box.attrs))
            self.box.group_dirty = False
            self.box.group_exists = True
        rest = list(self.meta.values()) + [s.array for s in (self.step, self.time) if s.array is not None]
        order += [w for w in rest if w.dirty]
        data_keys: list[str] = []
        for w in order:
            self._at = (f"landing rows of array {w.path} into", w.shard_key())
            data_keys += w.land()
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
        attrs = dict(self.traj_attrs)
        attrs["sequence_schema"] = self.schema.to_json() if "sequence_schema" not in attrs else attrs["sequence_schema"]
        attrs["nstep"] = self.nframes
        for key, s in (("step_progression", self.step), ("time_progression", self.time)):
            a = s.attribute()
            if a is None:
                attrs.pop(key, None)
            else:
                attrs[key] = a
        self._at = ("committing (nstep)", meta_key(TRAJ))
        st.set(meta_key(TRAJ), json_dumps(GroupMetadata(attrs).to_json()), fsync=durable)
        if durable:
            self._at = ("fsync of the directory", TRAJ)
            st.fsync_dir(TRAJ)
        self.traj_attrs = attrs
        self.committed = self.nframes
        self._ahead_apps = None             # the arrays of this commit: checked by _check_encodes
        self._at = ("", "")

    def flush(self) -> None:
        """Land every buffered frame and commit; durable unless the writer was made with durable=False."""
        self._check_open()
        self._commit(durable=self.durable)

    def close(self) -> None:
        """The last durable flush; idempotent.  A writer that failed refuses (raises its
        :class:`WriteError`) once, releasing its lock; the store stays as it was left."""
        if self.closed:
            return
        try:
            self._check_encodes()
        except WriteError:
            pass                           # self.failed is set: refused just below
        if self.failed is not None:
            self.closed = True
            self._poisoned()
            raise self._refusal()
        try:
            self._commit(durable=self.durable)
        finally:
            self.closed = True
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
            return
        self.close()

    @property
    def path(self) -> str:
        return self.store.root

    def __repr__(self) -> str:
        from .describe import writer_repr
        return writer_repr(self)


def _plain_parts(fr):
    """(blocks, the cell as given or None) of a frame holding nothing but blocks and a box (a
    ``Frame``, ``{"blocks": ..., "box": ...}`` or a bare blocks dict), else None."""
    box = None
    if type(fr) is dict:
        if "blocks" in fr:
            if len(fr) != 1:
                if len(fr) != 2 or "box" not in fr:
                    return None
                box = fr["box"]
            blocks = fr["blocks"]
        else:
            blocks = fr
    elif isinstance(fr, Frame):
        if fr.masks or fr.meta or fr.precision or fr.block_attrs:
            return None
        blocks, box = fr.blocks, fr.box
    else:
        return None
    return (blocks, box) if type(blocks) is dict else None


def read_arr(store, path) -> Array | None:
    node = read_node(store, path)
    return Array(store, path, node) if isinstance(node, ArrayMetadata) else None

