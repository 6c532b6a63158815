"""The committed layout of a trajectory: what the reopen rule lets a reader, a reopening writer,
repair and the validator read.

:func:`load_layout` turns ``trajectory/`` into a :class:`Layout` — ``nstep``,
steps and times, per-step meta arrays, the cell (:class:`BoxLayout`) and every block's updates
(:class:`BlockLayout`) — reading only what the reopen rule names: ``nstep``, then each index up to its
logical prefix.  Arrays longer than their logical length (an uncommitted
tail) are tolerated; shorter ones are refused.  :func:`logical_lengths` lists those lengths per
array path; :func:`tag_layout` gives a meta tag's stored column form.  Frames are resolved by
:class:`~mrec.record.trajectory.reader.TrajectoryReader`.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from ...errors import RefusalError, StoreError
from ...fs.posix import TEMP_MARK
from ...zarr.array import Array, read_node
from ...zarr.read.plan import MAX_READ_ELEMENTS
from ...zarr.metadata import ArrayMetadata, GroupMetadata
from ..model import typed_json
from ..model.dtypes import check_canonical, dtype_from_zarr
from ..model.box import Box
from ..model.schema import SequenceSchema

TRAJ = "trajectory"
RESERVED_CHILDREN = ("step", "time", "meta", "box")
RESERVED_BLOCK_CHILDREN = ("offset", "step_index", "_validity")


def tag_layout(tag: str) -> tuple[str, tuple[int, ...]]:
    """(stored column dtype, trailing shape) of a meta tag."""
    t = typed_json.META_TAGS[tag]
    return t.stored_dtype, tuple(t.trailing)


def refuse(kind: str, message: str, path: str | None = None) -> RefusalError:
    return RefusalError(message, path=path, kind=kind)


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


def _typed_node(store, path, want: type, lost_if_populated: bool):
    """The node at ``path`` when it is a ``want`` (ArrayMetadata or GroupMetadata); None when absent
    (see :func:`_absent`); refused when it is the other kind."""
    node = _node(store, path)
    if node is None:
        return _absent(store, path, lost_if_populated)
    if not isinstance(node, want):
        found = ("an array, found a group", "a group, found an array")[want is GroupMetadata]
        raise refuse("broken_index", f"expected {found}", store.describe(path))
    return node


def _array(store, path, *, lost_if_populated: bool = False) -> Array | None:
    node = _typed_node(store, path, ArrayMetadata, lost_if_populated)
    if node is None:
        return None
    arr = Array(store, path, node)
    sh = arr.sharding
    # written by appending (a torn or dropped index rewrite is rebuilt).  A shard that is not there
    # reads as the fill value, as for any Zarr array (docs/reliability.md, "Missing chunks")
    arr.appended = sh is not None and sh.index_location == "start"
    return arr


def _group(store, path, *, lost_if_populated: bool = False) -> GroupMetadata | None:
    return _typed_node(store, path, GroupMetadata, lost_if_populated)


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
