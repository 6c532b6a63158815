"""Reading the ragged trajectory: logical lengths (the reopen rule) and frame resolution.

:func:`load_layout` turns ``trajectory/`` into a :class:`Layout` — ``nstep``,
steps and times, per-step meta arrays, the cell and every block's updates —
reading only what the reopen rule names: ``nstep``, then each index up to its
logical prefix.  Arrays longer than their logical length (an uncommitted
tail) are tolerated; shorter ones are refused.  :class:`TrajectoryReader`
resolves any ordinal to a :class:`~mrec.record.model.frame.Frame`.
"""
from __future__ import annotations

import math

import json
import os
import posixpath
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ...errors import MetadataError, RefusalError, StoreError
from ...fs.posix import TEMP_MARK
from ...zarr import parallel
from ...zarr.array import MAX_READ_ELEMENTS, Array, read_node, read_together
from ...zarr.metadata import ArrayMetadata, GroupMetadata
from ...zarr.stores.directory import DirectoryStore
from ..model import typed_json
from ..model.dtypes import check_canonical, dtype_from_zarr
from ..model.box import Box
from ..model.frame import Frame, check_row_references
from ..model.schema import SequenceSchema

TRAJ = "trajectory"
#: a frame whose column reads decode at least this many bytes reads them concurrently
PARALLEL_READ_BYTES = 256 * 1024
#: a batch read of many frames (iteration, slices) reads about this many decoded bytes at a time
BATCH_READ_BYTES = 16 << 20
#: and at most this many frames
BATCH_READ_FRAMES = 8192
RESERVED_CHILDREN = ("step", "time", "meta", "box")
RESERVED_BLOCK_CHILDREN = ("offset", "step_index", "_validity")
from ..integrity.lock import LOCK_NAME  # noqa: E402,F401


def tag_layout(tag: str) -> tuple[str, tuple[int, ...]]:
    """(stored column dtype, trailing shape) of a meta tag."""
    t = typed_json.META_TAGS[tag]
    return t.stored_dtype, tuple(t.trailing)


def refuse(kind: str, message: str, path: str | None = None) -> RefusalError:
    return RefusalError(message, path=path, kind=kind)


def open_store(path, *, fs=None, readonly=True, storage_options=None, keep_open=False):
    """A store for a ``*.mrec`` directory or a ``*.mrec.zip`` archive, local or at a URL.

    A URL (``s3://``, ``http(s)://``, anything fsspec knows; ``storage_options`` go to fsspec, or
    JSON in ``MREC_STORAGE_OPTIONS``, narrowed to the URL's protocol: ``fs.remote.options_for``)
    opens read-only through :mod:`mrec.fs.remote`: a URL ending in ``.zip`` is a packed record,
    any other an uploaded directory.  ``keep_open``: a local store
    read through descriptors kept open until its ``close()`` (a reader's snapshot, KeptFiles).
    """
    from ...fs.remote import is_url, resolve_options
    from ...zarr.stores.remote import open_remote_store
    if is_url(path):
        if not readonly:
            from ...fs.remote import refuse_remote_write
            raise refuse_remote_write(path, "open for writing")
        return open_remote_store(path, resolve_options(path, storage_options))
    p = os.fspath(path)
    if os.path.isdir(p):
        return DirectoryStore(p, fs=fs, readonly=readonly, keep_open=keep_open)
    if os.path.isfile(p):
        from ...zarr.stores.zip_read import ZipStore
        return ZipStore(p, keep_open=keep_open, **({"fs": fs} if fs is not None else {}))
    raise StoreError("no such record (neither a *.mrec directory nor a *.mrec.zip file)", path=p)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _node(store, path):
    return read_node(store, path)


def _absent(store, path, lost_if_populated: bool) -> None:
    """A node without zarr.json is absent — but one that must have been published before what
    was read already (a block group, column or mask, made when the trajectory is created; box
    step_index / origin / boundary, landed before vectors) has lost its zarr.json when its folder
    holds files. Other nodes are first published after their chunks, so a crash legitimately
    leaves data without a zarr.json for them."""
    if lost_if_populated and store.list_dir(path):
        raise refuse("broken_index", "zarr.json is missing, but the node's folder holds data",
                     store.describe(f"{path}/zarr.json"))
    return None


def _lost_group_file(store, path) -> bool:
    """A group folder without its zarr.json and holding nothing but leftovers of an atomic replace
    (``.mrec-tmp-*``), in a directory store: the state a lost ``trajectory/box/zarr.json`` leaves
    when the fixed cell lived in its attributes, which no crash leaves (the group is published before
    the commit marker that counts its frames).  An archive or a listing of keys shows no empty
    folder: there the loss is not seen (docs/reliability.md, "Known limits")."""
    is_dir = getattr(store, "is_dir", None)
    return bool(is_dir is not None and is_dir(path)) and all(n.startswith(TEMP_MARK) for n in store.list_dir(path))


def _array(store, path, *, lost_if_populated: bool = False) -> Array | None:
    node = _node(store, path)
    if node is None:
        return _absent(store, path, lost_if_populated)
    if not isinstance(node, ArrayMetadata):
        raise refuse("broken_index", "expected an array, found a group", store.describe(path))
    arr = Array(store, path, node)
    sh = arr.sharding
    # written by appending (a torn or dropped index rewrite is rebuilt).  A shard that is not there
    # reads as the fill value, as for any Zarr array (docs/reliability.md, "Missing chunks")
    arr.appended = sh is not None and sh.index_location == "start"
    return arr


def _group(store, path, *, lost_if_populated: bool = False) -> GroupMetadata | None:
    node = _node(store, path)
    if node is None:
        return _absent(store, path, lost_if_populated)
    if not isinstance(node, GroupMetadata):
        raise refuse("broken_index", "expected a group, found an array", store.describe(path))
    return node


def _logical(arr: Array, n: int, what: str) -> Array:
    if arr.shape[0] < n:
        raise refuse("broken_index", f"{what} has {arr.shape[0]} rows, fewer than its logical length {n}", arr.name)
    return arr


# -- the parts of a layout ------------------------------------------------------

@dataclass
class Progression:
    start: int | float
    stride: int | float | None


@dataclass
class BlockLayout:
    name: str
    decl: object
    group: GroupMetadata | None
    columns: dict[str, Array] = field(default_factory=dict)
    masks: dict[str, Array] = field(default_factory=dict)
    regular: bool = False
    uniform_rows: int | None = None
    step_index: np.ndarray | None = None     # logical prefix, uint64
    offset: np.ndarray | None = None         # logical, len n_updates + 1
    n_updates: int = 0

    @property
    def total_rows(self) -> int:
        if self.regular:
            return self.n_updates * (self.uniform_rows or 0)
        return int(self.offset[self.n_updates]) if self.offset is not None and len(self.offset) else 0

    def update_at(self, i: int) -> int | None:
        """The update that resolves ordinal i (None: absent)."""
        if self.n_updates == 0:
            return None
        if self.regular:
            return min(i, self.n_updates - 1)
        j = bisect_right(self.step_index, i) - 1
        return j if j >= 0 else None

    def rows_of(self, j: int) -> tuple[int, int]:
        if self.regular:
            n = self.uniform_rows
            return j * n, (j + 1) * n
        return int(self.offset[j]), int(self.offset[j + 1])

    def ordinals(self) -> np.ndarray:
        if self.regular:
            return np.arange(self.n_updates, dtype=np.uint64)
        if self.step_index is None:          # declared, never presented
            return np.zeros(0, dtype=np.uint64)
        return self.step_index[: self.n_updates]

    def counts(self) -> np.ndarray:
        if self.regular:
            return np.full(self.n_updates, self.uniform_rows, dtype=np.uint64)
        return np.diff(self.offset[: self.n_updates + 1])


@dataclass
class BoxLayout:
    group: GroupMetadata | None
    defined: bool = True
    attr_cell: Box | None = None                 # fixed cell held as attributes
    step_index: np.ndarray | None = None
    vectors: Array | None = None
    origin: Array | None = None
    boundary: Array | None = None
    n_updates: int = 0

    def update_at(self, i: int) -> int | None:
        if self.n_updates == 0:
            return None
        j = bisect_right(self.step_index, i) - 1
        return j if j >= 0 else None


@dataclass
class Layout:
    store: object
    attrs: dict
    schema: SequenceSchema
    nstep: int
    step_prog: Progression | None
    step_array: Array | None
    time_prog: Progression | None
    time_array: Array | None
    has_time: bool
    meta: dict[str, Array]
    box: BoxLayout
    blocks: dict[str, BlockLayout]

    def _materialise(self, what: str) -> int:
        if self.nstep > MAX_READ_ELEMENTS:
            raise RefusalError(f"{what} of {self.nstep} frames exceeds {MAX_READ_ELEMENTS} elements",
                               path=self.store.describe(TRAJ), kind="too_large")
        return self.nstep

    def steps(self) -> np.ndarray:
        n = self._materialise("steps")
        if self.step_prog is not None:
            start, stride = self.step_prog.start, self.step_prog.stride or 0
            return start + stride * np.arange(n, dtype=np.int64)
        if self.step_array is not None:
            return np.asarray(self.step_array.read(slice(0, n)), dtype=np.int64)
        return np.zeros(0, dtype=np.int64)

    def times(self) -> np.ndarray | None:
        n = self._materialise("times")
        if self.time_prog is not None:
            start, stride = float(self.time_prog.start), float(self.time_prog.stride or 0.0)
            return np.float64(start) + np.arange(n, dtype=np.float64) * np.float64(stride)
        if self.time_array is not None:
            return self.time_array.read(slice(0, n)).astype(np.float64)
        return None


def _progression(v, name: str, nstep: int, path: str, *, integer: bool) -> Progression:
    if not isinstance(v, dict) or "start" not in v:
        raise refuse("broken_index", f"{name} {v!r} is not an object with a start", path)
    start, stride = v["start"], v.get("stride")
    ok = _is_int if integer else (lambda x: isinstance(x, (int, float)) and not isinstance(x, bool))
    if not ok(start) or (stride is not None and not ok(stride)):
        raise refuse("broken_index", f"{name} {v!r} holds a non-{'integer' if integer else 'number'} start or stride", path)
    if integer and not all(-(2**63) <= x < 2**63 for x in (start, stride or 0, start + (stride or 0) * max(nstep - 1, 0))):
        raise refuse("broken_index", f"{name} {v!r} leaves the i64 range within {nstep} frames", path)
    if nstep >= 2 and stride is None:
        raise refuse("broken_index", f"{name} lacks a stride for {nstep} frames", path)
    if not integer:
        try:
            first, last = float(start), float(start) + float(stride or 0.0) * max(nstep - 1, 0)
        except OverflowError:
            first = last = math.inf
        if not (math.isfinite(first) and math.isfinite(last)):
            raise refuse("broken_index", f"{name} {v!r} leaves the finite f64 range within {nstep} frames", path)
    return Progression(start, stride)


def _committed_prefix(full: np.ndarray, nstep: int, what: str, where: str) -> int:
    """n_updates of a step_index (the reopen rule): the length of its prefix of entries below
    ``nstep``, which must be strictly ascending.  Entries from the first one at or past ``nstep``
    on are an uncommitted tail, never judged: a re-encoded chunk's padding may follow a new entry
    there (a landing whose commit a crash lost)."""
    below = full < nstep
    n = int(len(full) if below.all() else np.argmin(below))
    if n > 1 and np.any(full[1:n] <= full[:n - 1]):
        raise refuse("broken_index", f"{what} is not strictly ascending", where)
    return n


def _read_index_array(arr: Array | None, n: int, what: str) -> np.ndarray:
    if arr is None:
        raise refuse("broken_index", f"{what} is missing")
    if arr.meta.data_type.name not in ("uint64", "int64"):
        raise refuse("broken_index", f"{what} has data type {arr.meta.data_type.name}, expected uint64", arr.name)
    _logical(arr, n, what)
    return np.asarray(arr.read(slice(0, n))).astype(np.uint64)


def _load_block(store, name: str, decl, nstep: int) -> BlockLayout:
    path = f"{TRAJ}/{name}"
    group = _group(store, path, lost_if_populated=True)
    b = BlockLayout(name, decl, group)
    if group is None:
        return b
    where = store.describe(path)
    for col, cdecl in decl.columns.items():
        arr = _array(store, f"{path}/{col}", lost_if_populated=True)
        if arr is None:
            continue
        dt = dtype_from_zarr(arr.meta.data_type.name, arr.name)
        if dt != cdecl.dtype or tuple(arr.shape[1:]) != tuple(cdecl.trailing):
            # a canonical key (an exactly-u64 identifier / endpoint ...) stored at another dtype or
            # shape breaks the vocabulary before the declaration (mrec-notes §7.1)
            check_canonical(name, col, dt, arr.shape[1:], arr.name)
            raise refuse("declaration_mismatch",
                         f"column is {dt}{list(arr.shape[1:])}, declared {cdecl.dtype}{list(cdecl.trailing)}", arr.name)
        b.columns[col] = arr
        mask = _array(store, f"{path}/_validity/{col}", lost_if_populated=cdecl.nullable)
        if mask is not None:
            if mask.meta.data_type.name != "bool" or mask.meta.ndim != 1:
                raise refuse("bad_validity", f"mask is {mask.meta.data_type.name}{list(mask.shape[1:])}, expected bool[N]", mask.name)
            b.masks[col] = mask
    attrs = group.attributes
    has_u, has_d = "uniform_rows" in attrs, "dense_updates" in attrs
    si = _array(store, f"{path}/step_index")
    off = _array(store, f"{path}/offset")
    if si is not None and off is None:
        raise refuse("broken_index", "step_index present without offset (offset lands first: it was lost)",
                     store.describe(f"{path}/offset/zarr.json"))
    if si is not None:
        # arrays win over markers (a crash between the two writes)
        # a prefix of ascending ordinals below nstep has at most nstep entries: entries past
        # that are an uncommitted tail, never read (they may be torn after a power loss)
        n_si = min(si.shape[0], nstep)
        full = _read_index_array(si, n_si, f"{where}/step_index")
        n = _committed_prefix(full, nstep, "step_index", si.name)
        b.step_index = full[:n]
        b.n_updates = n
        if off.shape[0] < n + 1 and not (n == 0 and off.shape[0] == 0):
            raise refuse("broken_index", f"offset has {off.shape[0]} entries, needs {n + 1}", off.name)
        # offset's leading 0 is committed with the first update: with none, nothing of it is read
        offs = _read_index_array(off, min(off.shape[0], n + 1), f"{where}/offset") if n else np.zeros(1, np.uint64)
        if len(offs) == 0:
            offs = np.zeros(1, np.uint64)
        if offs[0] != 0:
            raise refuse("broken_index", f"offset[0] is {int(offs[0])}, not 0", off.name)
        if len(offs) > 1 and np.any(offs[1:] < offs[:-1]):
            bad = int(np.argmax(offs[1:] < offs[:-1]))
            raise refuse("non_monotonic_offset", f"offset decreases at entry {bad + 1} ({int(offs[bad])} -> {int(offs[bad + 1])})", off.name)
        b.offset = offs
        total = int(offs[n])
        for col, arr in list(b.columns.items()) + [(f"_validity/{c}", m) for c, m in b.masks.items()]:
            if arr.shape[0] < total:
                kind = "bad_validity" if col.startswith("_validity/") else "broken_index"
                raise refuse(kind, f"holds {arr.shape[0]} rows, fewer than total_rows {total}", arr.name)
        return b
    if has_u or has_d:
        if not (has_u and has_d):
            raise refuse("broken_index", "one of uniform_rows / dense_updates without the other", where)
        u = attrs["uniform_rows"]
        if not _is_int(u) or u <= 0:
            raise refuse("broken_index", f"uniform_rows {u!r} is not a positive integer", where)
        if attrs["dense_updates"] is not True:
            raise refuse("broken_index", f"dense_updates {attrs['dense_updates']!r} is not true", where)
        if not decl.columns:
            raise refuse("broken_index", "regular-block markers on a block with no columns", where)
        if len(b.columns) < len(decl.columns):
            missing = sorted(set(decl.columns) - set(b.columns))
            raise refuse("broken_index", f"regular block lacks column arrays {missing}", where)
        lengths = [a.shape[0] for a in b.columns.values()]
        b.regular = True
        b.uniform_rows = u
        b.n_updates = min(min(lengths) // u, nstep)
        for c, m in b.masks.items():
            if m.shape[0] < b.n_updates * u:
                raise refuse("bad_validity", f"mask holds {m.shape[0]} rows, fewer than {b.n_updates * u}", m.name)
        return b
    # declared block with no updates: zero-length columns, no markers, no index
    return b


def _box_from_attrs(attrs, defined: bool, where: str) -> Box | None:
    if "vectors" not in attrs:
        return None
    try:
        return Box(np.asarray(attrs["vectors"], dtype=np.float64).reshape(3, 3),
                   np.asarray(attrs.get("origin", [0.0, 0.0, 0.0]), dtype=np.float64).reshape(3),
                   np.asarray(attrs.get("boundary", [defined] * 3), dtype=bool).reshape(3),
                   defined)
    except (ValueError, TypeError) as exc:
        raise refuse("bad_box", f"box attributes do not form a cell: {exc}", where) from None


def _load_box(store, nstep: int) -> BoxLayout:
    path = f"{TRAJ}/box"
    group = _group(store, path)
    bl = BoxLayout(group)
    if group is None:
        si_arr = _array(store, f"{path}/step_index") if nstep else None
        if si_arr is not None and si_arr.shape[0] and int(si_arr.read(slice(0, 1))[0]) < nstep \
                and read_node(store, f"{path}/vectors") is not None:
            # the group is written in the commit that first lands box arrays: committed arrays
            # without it mean it was lost
            raise refuse("broken_index", "box arrays hold committed cell updates but the group's zarr.json is missing",
                         store.describe(f"{path}/zarr.json"))
        if nstep and _lost_group_file(store, path):
            raise refuse("broken_index", "the box group's folder is there but its zarr.json is missing: the fixed "
                         "cell its attributes held is lost (every frame would read without its cell)",
                         store.describe(f"{path}/zarr.json"))
        return bl
    where = store.describe(path)
    cd = group.attributes.get("cell_defined", True)
    if not isinstance(cd, bool):
        raise refuse("bad_box", f"cell_defined {cd!r} is not a bool", where)
    bl.defined = cd
    vec = _array(store, f"{path}/vectors")
    if vec is None:
        cell = _box_from_attrs(group.attributes, cd, where)
        si_arr = _array(store, f"{path}/step_index") if cell is None and nstep else None
        if si_arr is not None and si_arr.shape[0] and int(si_arr.read(slice(0, 1))[0]) < nstep:
            # vectors land last: a committed box step_index without them means vectors were lost
            raise refuse("broken_index", "box step_index names committed cell updates but vectors is missing",
                         store.describe(f"{path}/vectors/zarr.json"))
        if cell is not None and nstep > 0:
            bl.attr_cell = cell
            bl.step_index = np.zeros(1, dtype=np.uint64)
            bl.n_updates = 1
        return bl
    si_arr = _array(store, f"{path}/step_index", lost_if_populated=True)
    if si_arr is None:
        full = np.zeros(1, dtype=np.uint64)      # a trivial step_index may be omitted
    else:
        full = _read_index_array(si_arr, min(si_arr.shape[0], nstep), f"{where}/step_index")
    n = _committed_prefix(full, nstep, "box step_index", si_arr.name if si_arr is not None else where)
    bl.step_index = full[:n]
    bl.n_updates = n
    bl.vectors = _logical(vec, n, "box vectors")
    bl.origin = _array(store, f"{path}/origin", lost_if_populated=True)
    bl.boundary = _array(store, f"{path}/boundary", lost_if_populated=True)
    for a in (bl.origin, bl.boundary):
        if a is not None:
            _logical(a, n, "box array")
    return bl


def _load_meta(store, schema: SequenceSchema, nstep: int) -> dict[str, Array]:
    out = {}
    for key, mdecl in schema.meta.items():
        arr = _array(store, f"{TRAJ}/meta/{key}")
        if arr is None:
            if nstep:
                raise refuse("missing_meta_value", f"declared meta key {key!r} has no array", store.describe(f"{TRAJ}/meta/{key}"))
            continue
        tag = arr.meta.attributes.get("meta_dtype")
        if tag is None:
            raise refuse("meta_tag_mismatch", "meta array has no meta_dtype attribute", arr.name)
        if tag != mdecl.tag:
            raise refuse("meta_tag_mismatch", f"meta_dtype {tag!r} disagrees with the declared {mdecl.tag!r}", arr.name)
        elem, trailing = tag_layout(tag)
        dt = dtype_from_zarr(arr.meta.data_type.name, arr.name)
        if dt != elem or tuple(arr.shape[1:]) != tuple(trailing):
            raise refuse("meta_tag_mismatch", f"stored {dt}{list(arr.shape[1:])} does not match tag {tag}", arr.name)
        out[key] = _logical(arr, nstep, f"meta {key!r}")
    return out


def derive_schema(store) -> SequenceSchema:
    """Declaration of a store without ``sequence_schema`` (a foreign writer): from its groups."""
    schema = SequenceSchema()
    for name in store.list_dir(TRAJ):
        if name in RESERVED_CHILDREN:
            continue
        g = read_node(store, f"{TRAJ}/{name}")
        if not isinstance(g, GroupMetadata):
            continue
        schema.declare_block(name)
        for col in store.list_dir(f"{TRAJ}/{name}"):
            if col in RESERVED_BLOCK_CHILDREN:
                continue
            a = read_node(store, f"{TRAJ}/{name}/{col}")
            if isinstance(a, ArrayMetadata):
                nullable = read_node(store, f"{TRAJ}/{name}/_validity/{col}") is not None
                schema.declare_column(name, col, dtype_from_zarr(a.data_type.name, store.describe(f"{TRAJ}/{name}/{col}")),
                                      trailing=tuple(a.shape[1:]), nullable=nullable)
    for key in store.list_dir(f"{TRAJ}/meta"):
        a = read_node(store, f"{TRAJ}/meta/{key}")
        if isinstance(a, ArrayMetadata) and "meta_dtype" in a.attributes:
            schema.declare_meta(key, a.attributes["meta_dtype"])
    return schema


def load_layout(store) -> Layout:
    group = _group(store, TRAJ)
    where = store.describe(TRAJ)
    if group is None:
        raise StoreError("record has no trajectory", path=where)
    attrs = group.attributes
    if "sequence_schema" in attrs:
        schema = SequenceSchema.from_json(attrs["sequence_schema"], where)
    else:
        schema = derive_schema(store)
    step_arr = _array(store, f"{TRAJ}/step")
    if "nstep" in attrs:
        nstep = attrs["nstep"]
        if not _is_int(nstep) or nstep < 0:
            raise refuse("broken_index", f"nstep {nstep!r} is not a non-negative integer", where)
    else:
        if "step_progression" in attrs or "time_progression" in attrs:
            raise refuse("broken_index", "a progression without nstep", where)
        nstep = step_arr.shape[0] if step_arr is not None else 0
    step_prog = _progression(attrs["step_progression"], "step_progression", nstep, where, integer=True) \
        if "step_progression" in attrs else None
    time_prog = _progression(attrs["time_progression"], "time_progression", nstep, where, integer=False) \
        if "time_progression" in attrs else None
    if step_prog is None:
        if nstep and step_arr is None:
            raise refuse("broken_index", f"{nstep} frames but neither step_progression nor a step array",
                         store.describe(f"{TRAJ}/step/zarr.json"))
        if step_arr is not None:
            _logical(step_arr, nstep, "step")
    time_arr = _array(store, f"{TRAJ}/time") if time_prog is None else None
    if time_arr is not None:
        _logical(time_arr, nstep, "time")
    has_time = time_prog is not None or (time_arr is not None and nstep > 0)
    return Layout(store, attrs, schema, nstep, step_prog, step_arr if step_prog is None else None,
                  time_prog, time_arr, has_time, _load_meta(store, schema, nstep), _load_box(store, nstep),
                  {name: _load_block(store, name, decl, nstep) for name, decl in schema.blocks.items()})


# -- frame resolution -------------------------------------------------------------

def _json_value(text, where: str):
    """A stored ``json`` meta value: JSON text nesting at most MAX_JSON_DEPTH levels."""
    from ...zarr.metadata import MAX_JSON_DEPTH, json_depth_exceeds
    try:
        doc = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        why = f"nests deeper than {MAX_JSON_DEPTH} levels" if isinstance(exc, RecursionError) else f"is not JSON ({exc})"
        raise RefusalError(f"a stored json meta value {why}", path=where, kind="meta_tag_mismatch") from None
    if json_depth_exceeds(doc):
        raise RefusalError(f"a stored json meta value nests deeper than {MAX_JSON_DEPTH} levels", path=where,
                           kind="meta_tag_mismatch")
    return doc


def _meta_value(tag: str, v, where: str = ""):
    elem, trailing = tag_layout(tag)
    if trailing:
        return np.asarray(v)
    if tag == "json":
        return _json_value(v, where)
    if elem == "bool":
        return bool(v)
    if elem == "f64":
        return float(v)
    if elem == "string":
        return str(v)
    return int(v)


def logical_lengths(lay: Layout) -> dict[str, int]:
    """Array path -> rows within the reopen rule's logical length, for every trajectory array."""
    out: dict[str, int] = {"trajectory/step": lay.nstep, "trajectory/time": lay.nstep}
    for key in lay.meta:
        out[f"trajectory/meta/{key}"] = lay.nstep
    for name, bl in lay.blocks.items():
        rows = bl.total_rows
        for c in bl.columns:
            out[f"trajectory/{name}/{c}"] = rows
        for c in bl.masks:
            out[f"trajectory/{name}/_validity/{c}"] = rows
        out[f"trajectory/{name}/offset"] = bl.n_updates + 1 if bl.n_updates else 0
        out[f"trajectory/{name}/step_index"] = bl.n_updates
    for a in ("vectors", "origin", "boundary", "step_index"):
        out[f"trajectory/box/{a}"] = lay.box.n_updates
    return out


def _lazy_frames(cols, nf: int):
    """The frames of a batch whose values are read (``cols``: (block, column names, one tuple of
    views a frame)), each made when it is taken (Frame._trusted_blocks: what _make_frame makes of
    these parts); a frame not kept is freed before the next is made."""
    if len(cols) == 1:
        name, keys, rows = cols[0]
        return Frame._trusted_rows(name, tuple(keys), rows)
    return _lazy_blocks(cols, nf)


def _lazy_blocks(cols, nf: int):
    """:func:`_lazy_frames` of several blocks."""
    make = Frame._trusted_blocks
    for k in range(nf):
        yield make({name: dict(zip(keys, rows[k])) for name, keys, rows in cols})


def _read_all(arrs, rows: slice) -> list:
    """``[a.read(rows) for a in arrs]``: the columns of a block decoded together by one batch call on
    every core (``mrec.zarr.array.read_together``) where they are plain, else one after the other,
    each on every core.  Same values and errors.  (One column a thread was measured slower: stop 14,
    docs/performance.md.)"""
    got = read_together(arrs, rows.start, rows.stop)
    if got is not None:
        return got
    return [a.read(rows) for a in arrs]


def _reopen_reader(path, storage_options):
    return TrajectoryReader(path, storage_options=storage_options)


class TrajectoryReader:
    """Random access to the committed frames of a trajectory (``*.mrec`` or ``*.mrec.zip``)."""

    def __init__(self, path, *, fs=None, store=None, storage_options=None):
        self.path = os.fspath(path) if path is not None else None
        self.storage_options = storage_options
        # a reader is a snapshot: the files it reads are kept open until close() (KeptFiles)
        self.store = store if store is not None else open_store(path, fs=fs, storage_options=storage_options,
                                                                keep_open=True)
        self.layout = load_layout(self.store)
        self._steps: np.ndarray | None = None
        self._times: np.ndarray | None = None
        self._trusted: bool | None = None          # see _frames_trusted
        self._plain_plan: list | bool | None = None  # see _make_plain_plan
        self._read_threads = parallel.read_threads()  # MREC_READ_THREADS, read when the reader opens
        # declared row references within a frame (block -> column -> block), checked on every frame
        # made (the writer's rule; absolute targets name sections, which the writer does not check)
        self._refs = {name: {c: t for c, t in (b.targets or {}).items() if not t.startswith("/")}
                      for name, b in self.layout.schema.blocks.items() if b.targets}
        self._check_alignment()

    # -- basics ----------------------------------------------------------------
    def __len__(self) -> int:
        return self.layout.nstep

    @property
    def nstep(self) -> int:
        return self.layout.nstep

    @property
    def schema(self) -> SequenceSchema:
        return self.layout.schema

    @property
    def steps(self) -> np.ndarray:
        if self._steps is None:
            self._steps = self.layout.steps()
        return self._steps

    @property
    def times(self) -> np.ndarray | None:
        if self._times is None and self.layout.has_time:
            self._times = self.layout.times()
        return self._times

    def close(self) -> None:
        self.store.close()

    def __reduce__(self):
        """Pickled by path or URL + ``storage_options`` (a Dask worker reopens it; nothing read travels)."""
        if self.path is None:
            raise TypeError("a TrajectoryReader opened on a store object cannot be pickled: open it by path or URL")
        return (_reopen_reader, (self.path, self.storage_options))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ordinal(self, i) -> int:
        n = self.layout.nstep
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"frame ordinal {i!r} is not an integer")
        j = int(i) + (n if i < 0 else 0)
        if not 0 <= j < n:
            raise IndexError(f"frame {i} out of range for a trajectory of {n} frames")
        return j

    # -- resolution ------------------------------------------------------------
    def block_update_at(self, block: str, i: int) -> int | None:
        """Index of the update of ``block`` that resolves frame ``i`` (None: absent)."""
        if block not in self.layout.blocks:
            raise KeyError(f"block {block!r} is not declared")
        return self.layout.blocks[block].update_at(self._ordinal(i))

    def box_at(self, i: int) -> Box | None:
        i = self._ordinal(i)
        bl = self.layout.box
        j = bl.update_at(i)
        if j is None:
            return None
        if bl.attr_cell is not None:
            return bl.attr_cell
        vec = bl.vectors.read(slice(j, j + 1))[0]
        origin = bl.origin.read(slice(j, j + 1))[0] if bl.origin is not None else np.zeros(3)
        if bl.boundary is not None:
            boundary = bl.boundary.read(slice(j, j + 1))[0]
        else:
            boundary = np.full(3, bl.defined, dtype=bool)
        return Box(vec, origin, boundary, bl.defined)

    def _block_rows(self, b: BlockLayout, j: int, columns=None) -> tuple[dict, dict]:
        values, masks = {}, {}
        reads = self._plan_rows(b, j, columns, values)
        if self._concurrent(reads):
            got = parallel.call_all([partial(arr.read, slice(lo, hi)) for _c, arr, lo, hi in reads])
            for (col, _arr, _lo, _hi), v in zip(reads, got):
                values[col] = v
            self._read_masks(b, reads, masks)
        else:                                  # one column after the other, each with its mask
            for read in reads:
                col, arr, lo, hi = read
                values[col] = arr.read(slice(lo, hi))
                self._read_masks(b, (read,), masks)
        if len(values) > len(reads):          # a column without an array: keep declaration order
            values = {c: values[c] for c in b.decl.columns if c in values}
        return values, masks

    def _plan_rows(self, b: BlockLayout, j: int, columns, values: dict) -> list[tuple]:
        """The column reads of update ``j`` of ``b``, in declaration order, as (col, array, lo, hi);
        a column without an array (the block has no rows) goes into ``values`` directly."""
        lo, hi = b.rows_of(j)
        reads = []
        for col, cdecl in b.decl.columns.items():
            if columns is not None and col not in columns:
                continue
            arr = b.columns.get(col)
            if arr is None:
                if hi > lo:
                    raise refuse("broken_index", f"column {col!r} has no array but the block has rows", self.store.describe(f"{TRAJ}/{b.name}"))
                from ..model.dtypes import numpy_dtype
                values[col] = np.zeros((0, *cdecl.trailing), dtype=numpy_dtype(cdecl.dtype))
                continue
            reads.append((col, arr, lo, hi))
        return reads

    @staticmethod
    def _read_masks(b: BlockLayout, reads, masks: dict) -> None:
        for col, _arr, lo, hi in reads:
            m = b.masks.get(col)
            if m is not None:
                mv = m.read(slice(lo, hi))
                if not mv.all():
                    masks[col] = mv

    def _concurrent(self, reads) -> bool:
        """Whether to run these column reads concurrently (zstd and crc32c release the GIL): only
        with ``MREC_READ_THREADS`` >= 2 (read when the reader was opened) and when they decode enough bytes to be worth a thread hop.
        Same arrays, same results, same errors: the first failing read, in order, raises (see
        :func:`mrec.zarr.parallel.call_all`)."""
        if len(reads) < 2 or self._read_threads < 2:
            return False
        n = 0
        for _c, arr, lo, hi in reads:
            n += arr.decode_estimate(lo, hi)
        return n >= PARALLEL_READ_BYTES

    def _frames_trusted(self) -> bool:
        """Whether every frame this reader builds passes Frame's checks by construction (see
        :meth:`Frame._trusted`): the names, dtypes and canonical keys are those of the layout
        checked on open, so they are checked here once instead of in every frame."""
        ok = self._trusted
        if ok is None:
            from ..model.dtypes import NUMPY_DTYPES, check_canonical
            from ..model.names import FRAME_RESERVED_BLOCKS, FRAME_RESERVED_COLUMNS, check_node_name
            ok = True
            try:
                for name, b in self.layout.blocks.items():
                    check_node_name(name, "block", "reserved_block_name")
                    if name in FRAME_RESERVED_BLOCKS:
                        ok = False
                    for col, cdecl in b.decl.columns.items():
                        check_node_name(col, "column", "reserved_column_name")
                        arr = b.columns.get(col)
                        dt = NUMPY_DTYPES.get(cdecl.dtype)
                        if col in FRAME_RESERVED_COLUMNS or cdecl.dtype == "string" or dt is None \
                                or (arr is not None and arr.dtype != dt):
                            ok = False
                        check_canonical(name, col, cdecl.dtype, tuple(cdecl.trailing))
            except RefusalError:
                ok = False
            self._trusted = ok
        return ok

    def __getitem__(self, i):
        if type(i) is not int or not 0 <= i < self.layout.nstep:    # the usual call skips these
            if isinstance(i, slice):
                return list(self._iter_frames(range(*i.indices(len(self)))))
            if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
                return [self[int(k)] for k in self.ordinals(i)]
            i = self._ordinal(i)
        plan = self._plain_plan
        if plan is None:
            plan = self._plain_plan = self._make_plain_plan()
        if plan and self._read_threads < 2:
            # the common layout (regular blocks without masks, no meta, no cell, trusted names and
            # dtypes): each column's rows, straight into a frame -- what the general path below reads
            # and makes of these parts
            blocks = {}
            for name, cols, u, n in plan:
                if n:
                    lo = min(i, n - 1) * u
                    rows = slice(lo, lo + u)
                    blocks[name] = {col: arr.read(rows) for col, arr in cols}
            return Frame._trusted_blocks(blocks)
        blocks, masks = {}, {}
        for name, b in self.layout.blocks.items():
            j = b.update_at(i)
            if j is None:
                continue
            blocks[name], m = self._block_rows(b, j)
            if m:
                masks[name] = m
        meta = {}
        types = {}
        if self.layout.meta:
            tags = self.schema.meta
            for key, arr in self.layout.meta.items():
                tag = types[key] = tags[key].tag
                meta[key] = _meta_value(tag, arr.read(slice(i, i + 1))[0], arr.name)
        box = self.box_at(i) if self.layout.box.n_updates else None
        return self._make_frame(blocks, box, meta, masks, types, i)

    def _make_plain_plan(self) -> list | bool:
        """[(block, [(column, array)], rows a frame, updates)] when every frame of this reader is
        read by the plain path of ``__getitem__`` (see there); False otherwise.  Made once: the
        layout of an open reader does not change."""
        lay = self.layout
        if lay.meta or lay.box.n_updates or self._refs or not self._frames_trusted():
            return False
        plan = []
        for name, b in lay.blocks.items():
            if b.n_updates and not b.regular:
                return False
            if b.masks or any(b.columns.get(c) is None for c in b.decl.columns):
                return False
            plan.append((name, [(c, b.columns[c]) for c in b.decl.columns], b.uniform_rows, b.n_updates))
        return plan

    def _make_frame(self, blocks: dict, box, meta: dict, masks: dict, types: dict, i: int) -> Frame:
        if self._frames_trusted():
            if meta:
                from ..model.typed_json import coerce_meta_document
                meta, types = coerce_meta_document(meta, types)
            f = Frame._trusted(blocks, box, meta, masks, types)
        else:
            f = Frame(blocks=blocks, box=box, meta=meta, masks=masks, meta_types=types)
        if self._refs:
            check_row_references(f, self._refs, path=self.store.describe(TRAJ), where=f"frame {i}: ")
        return f

    def __iter__(self):
        return self._iter_frames(range(len(self)))

    # -- batch reads of many frames ----------------------------------------------------
    def _frame_bytes(self) -> int:
        """Roughly how many decoded bytes one frame's block rows take (a batch size hint only)."""
        n = 0
        for b in self.layout.blocks.values():
            if not b.n_updates:
                continue
            rows = b.uniform_rows if b.regular else -(-b.total_rows // b.n_updates)
            for arr in b.columns.values():
                n += (rows or 0) * arr.dtype.itemsize * math.prod(arr.shape[1:])
        return max(n, 1)

    def _batch_frames(self) -> int:
        """Frames a batch read takes: about BATCH_READ_BYTES of decoded rows (at most
        BATCH_READ_FRAMES), a whole number of inner chunks' frames when every regular block's
        columns hold a whole number of frames a chunk (no chunk decoded by two batches)."""
        k = max(1, min(BATCH_READ_FRAMES, BATCH_READ_BYTES // self._frame_bytes()))
        step = 1
        for b in self.layout.blocks.values():
            if not b.regular or not b.uniform_rows:
                continue
            for arr in b.columns.values():
                sh = arr.sharding
                if sh is None or sh.chunk_shape[0] % b.uniform_rows:
                    return k
                step = math.lcm(step, sh.chunk_shape[0] // b.uniform_rows)
        return k if step > k else k // step * step

    def _iter_frames(self, idx: range):
        """``self[i] for i in idx``, read in batches: each column's rows for a run of consecutive
        frames in one :meth:`Array.read` (every inner chunk decoded once for all the frames it holds,
        on the pool), then cut into frames equal to what ``self[i]`` returns.  A batch that fails in
        any way is read again frame by frame, so the frames before a damaged one are yielded and the
        error raised is the one ``self[i]`` raises, at the same frame.  A step other than 1 reads
        frame by frame.

        (Reading the next batch on the pool while this one's frames are taken was tried and measured
        slower: the frames are made in Python while the reading thread waits for the GIL after every
        zstd call -- docs/performance.md, "Issue 16".)"""
        if idx.step != 1 or len(idx) < 2:
            for i in idx:
                yield self[i]
            return
        k = self._batch_frames()
        for s in range(idx.start, idx.stop, k):
            e = min(idx.stop, s + k)
            try:
                frames = self._frame_batch(s, e)
            except Exception:          # noqa: BLE001 - read again frame by frame: same frames, same error
                frames = None
            if frames is None:
                for i in range(s, e):
                    yield self[i]
            else:
                yield from frames

    def _frame_batch(self, s: int, e: int):
        """Frames ``s .. e-1`` (valid ordinals), each equal to ``self[i]``, as a list or an iterator
        (every value is read before this returns: only frames are made as they are taken); None
        when a block has a column without an array (the frame-by-frame path handles it).

        A block updated at every frame of the batch with one row count (a regular block) gives each
        frame a view of its own rows of the batch's array (the frames never share rows; a frame kept
        keeps its batch's array alive); any other block gives each frame a copy of its rows."""
        nf = e - s
        per_block = []
        for name, b in self.layout.blocks.items():
            if b.regular and e <= b.n_updates:           # update j = frame j: no carry-forward
                ups = None
                lo, hi = b.rows_of(s)[0], b.rows_of(e - 1)[1]
            else:
                ups = [b.update_at(i) for i in range(s, e)]
                present = [j for j in ups if j is not None]
                if not present:
                    continue
                lo, hi = b.rows_of(present[0])[0], b.rows_of(present[-1])[1]
            values, masks = {}, {}
            arrs = [b.columns.get(col) for col in b.decl.columns]
            if any(arr is None for arr in arrs):
                return None
            got = _read_all(arrs, slice(lo, hi))
            for col, arr, v in zip(b.decl.columns, arrs, got):
                if ups is None:
                    v = list(v.reshape(nf, b.uniform_rows, *v.shape[1:]))    # one view a frame
                values[col] = v
                m = b.masks.get(col)
                if m is not None:
                    masks[col] = m.read(slice(lo, hi))
            per_block.append((name, b, ups, values, masks, lo))
        metas = []
        if self.layout.meta:
            tags = self.schema.meta
            for key, arr in self.layout.meta.items():
                metas.append((key, tags[key].tag, arr.read(slice(s, e)), arr.name))
        has_box = bool(self.layout.box.n_updates)
        make = self._make_frame
        # the common case (regular blocks, no masks, meta or cell): frames straight from the views
        if not metas and not has_box and all(ups is None and not bm for _n, _b, ups, _v, bm, _lo in per_block):
            cols = [(name, list(values), list(zip(*values.values())) if values else [()] * nf)
                    for name, _b, _u, values, _m, _lo in per_block]
            if self._frames_trusted() and not self._refs:
                return _lazy_frames(cols, nf)       # made as they are taken: the values are read
            return [make({name: dict(zip(keys, rows[k])) for name, keys, rows in cols}, None, {}, {}, {}, s + k)
                    for k in range(nf)]
        out = []
        for k, i in enumerate(range(s, e)):
            blocks, masks = {}, {}
            for name, b, ups, values, bmasks, lo in per_block:
                if ups is None:
                    j = i
                    blocks[name] = {col: v[k] for col, v in values.items()}
                else:
                    j = ups[k]
                    if j is None:
                        continue
                    a, z = b.rows_of(j)
                    blocks[name] = {col: v[a - lo:z - lo].copy() for col, v in values.items()}
                if bmasks:
                    a, z = b.rows_of(j)
                    got = {}
                    for col, mv in bmasks.items():
                        part = mv[a - lo:z - lo]
                        if not part.all():
                            got[col] = part.copy()
                    if got:
                        masks[name] = got
            meta, types = {}, {}
            for key, tag, batch, where in metas:
                types[key] = tag
                meta[key] = _meta_value(tag, batch[k], where)
            box = self.box_at(i) if has_box else None
            out.append(make(blocks, box, meta, masks, types, i))
        return out

    def read_columns(self, i, columns, *, threads: int | None = None) -> dict:
        """Selected ``(block, column)`` pairs of frame ``i``; an absent block is left out.

        ``i`` a slice (or a list of ordinals, a boolean mask): each pair's rows of those frames as
        one ``[frames, rows, *trailing]`` array, :meth:`column`'s (every inner chunk decoded once,
        on ``threads`` threads; no Frame is made), with its refusals for a ragged block or a block
        absent in a frame asked for."""
        wanted: dict[str, set] = {}
        for block, col in columns:
            if block not in self.layout.blocks or col not in self.layout.blocks[block].decl.columns:
                raise KeyError(f"{block}/{col} is not declared")
            wanted.setdefault(block, set()).add(col)
        if not isinstance(i, (int, np.integer, bool, np.bool_)):      # a bool is refused by _ordinal
            if not isinstance(i, slice):
                self.ordinals(i)          # TypeError / IndexError for what is not frames
            return {(block, col): self.column(block, col, i, threads=threads) for block, col in columns}
        i = self._ordinal(i)
        out = {}
        for block, cols in wanted.items():
            b = self.layout.blocks[block]
            j = b.update_at(i)
            if j is None:
                continue
            values, _ = self._block_rows(b, j, cols)
            for col in cols:
                out[(block, col)] = values[col]
        return out

    def column(self, block: str, column: str, frames: slice | None = None, *, threads: int | None = None) -> np.ndarray:
        """One ndarray ``[frames, rows, *trailing]`` of a regular block's column.

        Its inner chunks are decoded on ``threads`` threads (default ``MREC_THREADS``, else the
        machine's cores; 1 = serial): the same values and errors."""
        if block not in self.layout.blocks:
            raise KeyError(f"block {block!r} is not declared")
        b = self.layout.blocks[block]
        if column not in b.decl.columns:
            raise KeyError(f"{block}/{column} is not declared")
        if frames is not None and not isinstance(frames, slice):
            sel = self.ordinals(frames)
            if not len(sel):
                return self.column(block, column, slice(0, 0))
            lo = int(sel.min())
            return self.column(block, column, slice(lo, int(sel.max()) + 1))[sel - lo]
        idx = range(*(frames or slice(None)).indices(len(self)))
        if not b.regular and b.n_updates:
            counts = b.counts()
            if len(set(counts.tolist())) != 1:
                raise refuse("row_count_mismatch", f"block {block!r} is ragged: column() needs one row count", self.store.describe(f"{TRAJ}/{block}"))
        if b.n_updates == 0:
            raise refuse("row_count_mismatch", f"block {block!r} is absent in every frame", self.store.describe(f"{TRAJ}/{block}"))
        if len(idx) and idx[0] < int(b.ordinals()[0]):
            raise refuse("row_count_mismatch", f"block {block!r} is absent at frame {idx[0]}", self.store.describe(f"{TRAJ}/{block}"))
        arr = b.columns[column]
        if b.regular and idx.step == 1 and len(idx) and idx[-1] < b.n_updates:
            n = b.uniform_rows
            data = arr.read(slice(idx[0] * n, (idx[-1] + 1) * n), threads=threads)
            return data.reshape(len(idx), n, *data.shape[1:])
        ups = [b.update_at(i) for i in idx]
        uniq = sorted(set(ups))
        if not uniq:
            return np.zeros((0, 0, *arr.shape[1:]), dtype=arr.dtype)
        lo, _ = b.rows_of(uniq[0])
        _, hi = b.rows_of(uniq[-1])
        data = arr.read(slice(lo, hi), threads=threads)
        parts = []
        for j in ups:
            a, z = b.rows_of(j)
            parts.append(data[a - lo:z - lo])
        return np.stack(parts)

    # -- conveniences (issue 14) -------------------------------------------------------
    def ordinals(self, frames) -> np.ndarray:
        """``frames`` as an int64 array of ordinals: an int, a slice, a sequence / array of ints
        (negative ones count from the end) or a boolean mask of ``len(self)`` entries.  Out of
        range is ``IndexError``; anything else ``TypeError``."""
        n = len(self)
        if isinstance(frames, slice):
            return np.arange(*frames.indices(n), dtype=np.int64)
        if isinstance(frames, (int, np.integer)) and not isinstance(frames, (bool, np.bool_)):
            return np.array([self._ordinal(frames)], dtype=np.int64)
        a = np.asarray(frames)
        if a.dtype.kind == "b":
            if a.shape != (n,):
                raise IndexError(f"a boolean frame mask needs {n} entries, found shape {list(a.shape)}")
            return np.flatnonzero(a).astype(np.int64)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"frames {frames!r} are not integers, a slice or a boolean mask")
        a = a.astype(np.int64)
        bad = (a < -n) | (a >= n)
        if bad.any():
            raise IndexError(f"frame {int(a[bad][0])} out of range for a trajectory of {n} frames")
        return np.where(a < 0, a + n, a)

    def __contains__(self, i) -> bool:
        """``i in r``: whether ``r[i]`` names a frame (an integer in ``-len(r) .. len(r) - 1``);
        nothing is read or decoded.  Anything but an integer is never in a reader."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            return False
        return -len(self) <= int(i) < len(self)

    def positions(self, frames=None, block: str = "atoms") -> np.ndarray:
        """Coordinates from ``block``'s columns ``x y z``: frame ``i`` (an int) as (N, 3); several
        frames (a slice, a list of ordinals, a boolean mask; None = all) as (F, N, 3), which needs
        a regular block (one row count).  ``KeyError`` when the block lacks x, y or z."""
        if block not in self.layout.blocks or not all(c in self.layout.blocks[block].decl.columns for c in "xyz"):
            raise KeyError(f"block {block!r} has no x, y, z columns")
        if isinstance(frames, (int, np.integer)) and not isinstance(frames, (bool, np.bool_)):
            cols = self.read_columns(frames, [(block, c) for c in "xyz"])
            if not cols:
                raise KeyError(f"block {block!r} is absent at frame {frames}")
            return np.stack([cols[(block, c)] for c in "xyz"], axis=1)
        fast = self._positions_range(block, frames)
        if fast is not None:
            return fast
        return np.stack([self.column(block, c, frames) for c in "xyz"], axis=-1)

    def _positions_range(self, block: str, frames) -> np.ndarray | None:
        """``positions(frames)`` for a run of frames of a regular block whose x, y, z are 1-d columns
        of one dtype: each column decoded straight into its lane of the (F, N, 3) result (no stack
        of three column copies).  None when that does not apply (the general path reads it)."""
        if frames is not None and not isinstance(frames, slice):
            return None
        b = self.layout.blocks[block]
        idx = range(*(frames or slice(None)).indices(len(self)))
        if not b.regular or idx.step != 1 or not len(idx) or idx[-1] >= b.n_updates:
            return None
        arrs = [b.columns.get(c) for c in "xyz"]
        if any(a is None or a.meta.ndim != 1 for a in arrs) or len({a.dtype for a in arrs}) != 1:
            return None
        n = b.uniform_rows
        out = np.empty((len(idx), n, 3), dtype=arrs[0].dtype)
        rows = slice(idx[0] * n, (idx[-1] + 1) * n)
        lanes = out.reshape(-1, 3)
        if parallel.threads() > 1 and sum(a.decode_estimate(rows.start, rows.stop) for a in arrs) >= PARALLEL_READ_BYTES:
            # one column a thread, each decoded in its batch form (see _read_all)
            parallel.call_all([partial(arr.read_into, rows, lanes[:, k], threads=1) for k, arr in enumerate(arrs)])
            return out
        for k, arr in enumerate(arrs):
            arr.read_into(rows, lanes[:, k])          # a strided view of lane k
        return out

    def __repr__(self) -> str:
        from ..model.describe import reader_repr
        return reader_repr(self)

    # -- invariants checked on open --------------------------------------------------
    def _check_alignment(self) -> None:
        blocks = self.layout.blocks
        for name, b in blocks.items():
            target = b.decl.aligned_with
            if not target or target not in blocks:
                continue
            t = blocks[target]
            changes = sorted(set(b.ordinals().tolist()) | set(t.ordinals().tolist()))
            for i in changes:
                j = b.update_at(i)
                if j is None:
                    continue
                k = t.update_at(i)
                rows = b.rows_of(j)
                if k is None:
                    raise refuse("aligned_count_mismatch", f"aligned block {name!r} is present at frame {i} while its target {target!r} is absent",
                                 self.store.describe(f"{TRAJ}/{name}"))
                trows = t.rows_of(k)
                if rows[1] - rows[0] != trows[1] - trows[0]:
                    raise refuse("aligned_count_mismatch",
                                 f"aligned block {name!r} has {rows[1] - rows[0]} rows at frame {i}, its target {target!r} {trows[1] - trows[0]}",
                                 self.store.describe(f"{TRAJ}/{name}"))
