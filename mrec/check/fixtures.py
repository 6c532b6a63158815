"""The golden fixture catalogue: one small record per feature and per hard case.

``make_fixtures(out_dir)`` writes, for every valid fixture ``<name>``:

* ``<name>.mrec/`` (the directory form) and ``<name>.mrec.zip`` (``mrec.pack(keep=True)``);
* ``<name>.json``, the sidecar: the record's **expected logical content** in a language-neutral
  encoding (``ENCODING``, described in ``docs/user-guide.md`` "Golden fixtures"), so any
  implementation can check itself without mrec.

and under ``invalid/`` stores a reader must refuse (``<name>.mrec/``, ``<name>.mrec.zip`` and ``<name>.json`` with
``{"valid": false, "refusal_kind": ..., "what": ...}``), built by tampering stores mrec wrote.
``fixtures/README.md`` (the catalogue) is written too.  Generation is deterministic: fixed seeds,
no clock, no randomness outside ``numpy.random.default_rng(seed)``.

The sidecar is produced by :func:`describe`, which reads a record back through mrec; every
builder also checks that what it reads back is what it meant to write (:func:`_expect`).
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import CorruptionError, MetadataError, RefusalError
from ..archive.pack import pack
from ..record.model.dtypes import DTYPES, NUMPY_DTYPES, dtype_of_array
from ..record.sections.forcefield import ForceField
from ..record.sections.fixed import write_fixed_array
from ..record.model.frame import Box, Frame
from ..record.record import read_record, write_record
from ..record.model.schema import SequenceSchema
from ..record.trajectory.reader import tag_layout
from ..record.trajectory.writer import TrajectoryWriter
from ..record.model.typed_json import TAG_NAMES, coerce_meta_value
from ..zarr.array import Array, write_group
from ..zarr.stores.directory import DirectoryStore

__all__ = ["ENCODING", "FixtureInfo", "make_fixtures", "summary", "describe", "encode_column", "read_all",
           "refusal_kind_of", "catalogue_markdown"]

#: Names the sidecar encoding; bump when it changes.
ENCODING = "mrec-fixture-sidecar/1"
#: Columns with more elements than this list no ``values`` (the ``sha256`` still pins them).
MAX_VALUES = 4096
#: Integers beyond +-(2^53 - 1) are written as decimal strings.
SAFE_INTEGER = 2 ** 53 - 1


@dataclass(frozen=True)
class FixtureInfo:
    """One catalogue entry: ``files`` are relative to the output directory."""

    name: str
    covers: str
    rules: tuple[str, ...] = ()
    valid: bool = True
    refusal_kind: str | None = None
    files: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# The value encoding


def _float(x: float) -> Any:
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x                    # json writes the shortest round-trip form; -0.0 stays -0.0


def _int(v: int) -> Any:
    v = int(v)
    return v if -SAFE_INTEGER <= v <= SAFE_INTEGER else str(v)


def _leaf_encoder(dtype: str) -> Callable[[Any], Any]:
    if dtype == "bool":
        return bool
    if dtype == "string":
        return str
    if dtype == "f64":
        return _float
    if dtype in ("c64", "c128"):
        return lambda z: [_float(complex(z).real), _float(complex(z).imag)]
    return _int


def _nested(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(obj, list):
        return [_nested(o, leaf) for o in obj]
    return leaf(obj)


def _digest(a: np.ndarray, dtype: str) -> str:
    """sha256 of the C-order little-endian bytes (strings: u32le byte length + UTF-8, per element)."""
    h = hashlib.sha256()
    if dtype == "string":
        for s in np.asarray(a, dtype=object).ravel(order="C"):
            b = str(s).encode("utf-8")
            h.update(struct.pack("<I", len(b)) + b)
    else:
        dt = NUMPY_DTYPES[dtype].newbyteorder("<") if dtype != "bool" else np.dtype(bool)
        h.update(np.ascontiguousarray(np.asarray(a).astype(dt, copy=False)).tobytes())
    return h.hexdigest()


def encode_column(a: Any, dtype: str | None = None, *, mask: Any = None, precision: float | None = None) -> dict:
    """A column (or any array) in the sidecar encoding."""
    a = np.asarray(a)
    dtype = dtype or dtype_of_array(a)
    out: dict[str, Any] = {"dtype": dtype, "shape": list(a.shape)}
    if a.size <= MAX_VALUES:
        out["values"] = _nested(a.tolist(), _leaf_encoder(dtype))
    out["sha256"] = _digest(a, dtype)
    out["mask"] = None if mask is None else [bool(m) for m in np.asarray(mask)]
    out["precision"] = None if precision is None else _float(precision)
    return out


def _meta_value(tag: str, v: Any) -> Any:
    if tag == "json":
        return v
    element, trailing = tag_layout(tag)
    if trailing:
        return _nested(np.asarray(v).tolist(), _leaf_encoder(element))
    return _leaf_encoder(element)(v)


def _meta(meta: dict, types: dict) -> dict:
    return {k: {"tag": types[k], "value": _meta_value(types[k], meta[k])} for k in sorted(meta)}


def _box(b: Box | None) -> dict | None:
    if b is None:
        return None
    return {"defined": bool(b.defined), "vectors": _nested(np.asarray(b.vectors).tolist(), _float),
            "origin": [_float(x) for x in b.origin], "boundary": [bool(x) for x in b.boundary]}


# ---------------------------------------------------------------------------
# describe: the logical content of a record


def _frame_section(f: Frame) -> dict:
    blocks = {}
    for name in sorted(set(f.blocks) | set(f.counts)):
        attrs = dict(f.block_attrs.get(name, {}))
        cols = f.blocks.get(name, {})
        blocks[name] = {
            "count": int(f.rows(name)),
            "structural_shape": attrs.pop("structural_shape", None),
            "targets": attrs.pop("targets", {}),
            "attrs": attrs,
            "columns": {c: encode_column(cols[c], mask=f.mask(name, c),
                                         precision=f.precision.get(name, {}).get(c))
                        for c in sorted(cols)},
        }
    return {"meta": _meta(f.meta, f.meta_types), "box": _box(f.box), "blocks": blocks}


def _forcefield(ff) -> dict:
    """The force field: its document verbatim and its tables (every block, unnamed ones included) as
    frame blocks (count, structural_shape, targets, attrs, columns)."""
    return {"document": ff.document(), "tables": _frame_section(ff.tables)["blocks"]}


def _trajectory(r) -> dict:
    schema = r.schema
    frames = []
    times = r.times
    for i in range(len(r)):
        f = r[i]
        blocks = {}
        for name, decl in schema.blocks.items():
            j = r.block_update_at(name, i)
            if j is None:
                blocks[name] = {"state": "absent", "update": None}
                continue
            lo, hi = r.layout.blocks[name].rows_of(j)
            cols = f.blocks[name]
            blocks[name] = {
                "state": "present" if hi > lo else "empty", "update": int(j), "count": int(hi - lo),
                "columns": {c: encode_column(cols[c], decl.columns[c].dtype, mask=f.mask(name, c),
                                             precision=decl.columns[c].precision)
                            for c in sorted(cols)}}
        frames.append({"index": i, "step": _int(r.steps[i]),
                       "time": None if times is None else _float(times[i]),
                       "blocks": blocks, "box": _box(f.box), "meta": _meta(f.meta, f.meta_types)})
    attrs = json.loads(r.store.get("trajectory/zarr.json"))["attributes"]
    return {"nstep": int(len(r)), "steps": encode_column(r.steps, "i64"),
            "times": None if times is None else encode_column(times, "f64"),
            "sequence_schema": attrs["sequence_schema"],
            "group_attributes": {k: v for k, v in attrs.items() if k != "sequence_schema"},
            "frames": frames}


def _arrays(store) -> dict:
    out = {}
    for key in store.list(""):
        if not (key == "zarr.json" or key.endswith("/zarr.json")):
            continue
        try:                                    # a document the reader never needed may still be damaged
            doc = json.loads(store.get(key))
        except ValueError as exc:
            raise MetadataError(f"zarr.json is not valid JSON: {exc}", path=key) from None
        if not isinstance(doc, dict) or doc.get("node_type") != "array":
            continue
        path = key[: -len("/zarr.json")]
        a = Array.open(store, path).read()
        dtype = "string" if doc["data_type"] == "string" else dtype_of_array(a)
        out[path] = {"data_type": doc["data_type"], "shape": list(a.shape), "sha256": _digest(a, dtype)}
    return out


def describe(path) -> dict:
    """The logical content of the record at ``path`` (directory or zip) in the sidecar encoding.

    Reads everything (every frame of the trajectory included), so it also serves as "read all".
    """
    with read_record(path) as rec:
        out: dict[str, Any] = {"encoding": ENCODING, "valid": True, "sections": rec.sections(),
                               "documents": {"meta": rec.meta, "status": rec.status, "method": rec.method}}
        for name in ("system", "frame"):
            f = getattr(rec, name)
            out[name] = None if f is None else _frame_section(f)
        out["observables"] = None if rec.observables is None else {
            k: {"meta": o.meta, "data": encode_column(o.data, o.dtype)} for k, o in sorted(rec.observables.items())}
        out["metrics"] = None if rec.metrics is None else {
            k: {"type": s.type, "values": encode_column(s.values, "f64"),
                "steps": None if s.steps is None else encode_column(s.steps, "i64"),
                "wall_time": s.wall_time}
            for k, s in sorted(rec.metrics.series.items())}
        if rec.forcefield is not None:                 # only when present (older sidecars have no such key)
            out["forcefield"] = _forcefield(rec.forcefield)
        out["trajectory"] = None if rec.trajectory is None else _trajectory(rec.trajectory)
        out["unknown_keys"] = sorted(rec.unknown)
        out["arrays"] = _arrays(rec.store)
    return out


def read_all(path) -> dict:
    """Read every part of a record (what a reader checking an invalid fixture does)."""
    return describe(path)


def refusal_kind_of(exc: BaseException) -> str:
    """The sidecar's ``refusal_kind`` of an exception: its ``kind``, or ``corruption``."""
    if isinstance(exc, CorruptionError):
        return "corruption"
    if isinstance(exc, RefusalError):
        return exc.kind
    raise exc


# ---------------------------------------------------------------------------
# Building blocks


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _values(dtype: str, shape: tuple, seed: int) -> np.ndarray:
    """Deterministic values with the hard cases of each dtype (extremes, NaN, -0.0, unicode)."""
    rng = _rng(seed)
    n = int(np.prod(shape))
    if dtype == "string":
        pool = ["", "O", "Na+", "Ö", "水", "a b", "\U0001F600", "x" * 20]
        return np.array([pool[(seed + i) % len(pool)] for i in range(n)], dtype=object).reshape(shape)
    if dtype == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    dt = NUMPY_DTYPES[dtype]
    if dt.kind == "f":
        v = rng.normal(size=n)
        specials = [np.nan, -0.0, np.inf, -np.inf, 5e-324, 1.7976931348623157e308]
        v[: min(n, len(specials))] = specials[: min(n, len(specials))]
        return v.reshape(shape)
    if dt.kind == "c":
        v = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dt)
        if n >= 2:
            v[0] = complex(np.nan, -0.0)
            v[1] = complex(np.inf, 1.0)
        return v.reshape(shape)
    info = np.iinfo(dt)
    v = rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
    if n >= 2:
        v[0], v[1] = info.min, info.max
    return v.reshape(shape)


#: The representative frame_rows declared for most blocks: rows_per_chunk = ROWS, so an f64 column's
#: inner chunk is 1 MiB (mostly fill, compressed to a few bytes by COMPRESSION) and its shard index
#: 4 KiB (chunks_per_shard 256) instead of 64 KiB -- what keeps the catalogue small.
ROWS = 1 << 17
#: frame_rows of blocks with string columns: vlen-utf8 chunks decode item by item, so keep them shorter.
STRING_ROWS = 1 << 13
#: The float compressor of most trajectory fixtures (the padded fill must compress).
COMPRESSION = "zstd:3"


def _atoms_schema(rows: int = ROWS, precision: float | None = None) -> SequenceSchema:
    s = SequenceSchema()
    s.declare_block("atoms", rows=rows)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=precision)
    return s


def _atoms(rng: np.random.Generator, n: int = 3) -> dict:
    return {c: rng.normal(size=n) for c in "xyz"}


def _write_traj(path: Path, schema: SequenceSchema, frames: list, steps=None, times=None, **kw) -> None:
    kw.setdefault("compression", COMPRESSION)
    with TrajectoryWriter.create(path, schema, **kw) as w:
        for i, f in enumerate(frames):
            w.append(f, step=None if steps is None else steps[i], time=None if times is None else times[i])


def _expect(path: Path, frames: list, steps=None, times=None) -> None:
    """Check the trajectory at ``path`` resolves to the presented frames (carry-forward applied)."""
    with read_record(path) as rec:
        r = rec.trajectory
        assert len(r) == len(frames), (path, len(r), len(frames))
        resolved: dict[str, dict] = {}
        box = None
        for i, f in enumerate(frames):
            if f.get("box") is not None:
                box = Box.from_any(f["box"])
            assert r[i].box == box, (path, i, "box")
            for key, decl in r.schema.meta.items():
                want = f.get("meta", {}).get(key, decl.fill)
                want = _meta_value(decl.tag, coerce_meta_value(decl.tag, want, key))
                assert _meta_value(decl.tag, r[i].meta[key]) == want, (path, i, key)
            fr = _declared(Frame.from_any({"blocks": f.get("blocks", {}), "masks": f.get("masks", {})},
                                          r.schema.dtype_hints()), r.schema).rounded()
            got = r[i]
            for b in fr.blocks:
                resolved[b] = {c: (fr.blocks[b][c], fr.mask(b, c)) for c in fr.blocks[b]}
            assert set(got.blocks) == set(resolved), (path, i, set(got.blocks), set(resolved))
            for b, cols in resolved.items():
                for c, (v, m) in cols.items():
                    g = got.blocks[b][c]
                    same = (list(g.ravel()) == list(v.ravel())) if g.dtype == object else g.tobytes() == v.tobytes()
                    assert same and g.shape == v.shape, (path, i, b, c)
                    gm = got.mask(b, c)
                    assert (gm is None and m is None) or (gm is not None and m is not None and gm.tolist() == m.tolist()), \
                        (path, i, b, c, "mask")
        if steps is not None:
            assert r.steps.tolist() == list(steps), (path, r.steps.tolist())
        if times is not None:
            assert r.times.tobytes() == np.asarray(times, dtype="<f8").tobytes(), path


def _declared(f: Frame, schema: SequenceSchema) -> Frame:
    """``f`` with the schema's declared precisions (what a writer rounds to)."""
    precision = {b: {c: col.precision for c, col in schema.blocks[b].columns.items()
                     if col.precision is not None and c in f.blocks[b]} for b in f.blocks}
    return Frame(blocks=f.blocks, masks=f.masks, counts=f.counts,
                 precision={b: p for b, p in precision.items() if p})


def _traj(frames_fn: Callable[[], tuple[SequenceSchema, list]], steps=None, times=None, **kw):
    """A builder writing a trajectory-only record from ``frames_fn()`` and checking it reads back."""
    def build(path: Path) -> None:
        schema, frames = frames_fn()
        _write_traj(path, schema, frames, steps=steps, times=times, **kw)
        _expect(path, frames, steps, times)
    return build


# -- trajectory fixtures ----------------------------------------------------------------------


_SHAPES = (("", ()), ("_v3", (3,)), ("_m22", (2, 2)))


_TRAJ_SHAPED = ("f64", "u8", "string", "c64")      # the dtypes also given [N,3] and [N,2,2]


def _dtypes_traj():
    """One single-column block per (dtype, trailing shape), its frame_rows sized to a 1 MiB (floats,
    compressed by zstd) or 512 KiB (gzip) inner chunk: the shard index stays 4-8 KiB."""
    s = SequenceSchema()
    blocks = []
    for dt in DTYPES:
        for suffix, trailing in _SHAPES if dt in _TRAJ_SHAPED else _SHAPES[:1]:
            width = (16 if dt == "string" else NUMPY_DTYPES[dt].itemsize) * int(np.prod(trailing))
            target = 1 << (20 if dt in ("f64", "c64", "c128") else 17 if dt == "string" else 19)
            s.declare_block(f"{dt}{suffix}", rows=target // width)
            s.declare_column(f"{dt}{suffix}", "c", dt, trailing=trailing)
            blocks.append((f"{dt}{suffix}", dt, trailing))
    frames = [{"blocks": {b: {"c": _values(dt, (3, *trailing), 100 * i + k)}
                          for k, (b, dt, trailing) in enumerate(blocks)}} for i in range(3)]
    return s, frames


def _regular():
    rng = _rng(1)
    return _atoms_schema(), [{"blocks": {"atoms": _atoms(rng, 4)}} for _ in range(6)]


def _ragged():
    rng = _rng(2)
    s = SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64")
    s.declare_column("atoms", "id", "u64")
    frames = []
    for n in (3, 3, 5, 0, 2, 4):
        frames.append({"blocks": {"atoms": {"x": rng.normal(size=n), "id": np.arange(n, dtype="<u8") + 10}}})
    return s, frames


def _late():
    rng = _rng(3)
    s = _atoms_schema()
    s.declare_block("ions", rows=ROWS)
    s.declare_column("ions", "q", "f64")
    frames = [{"blocks": {"atoms": _atoms(rng, 2)}} for _ in range(5)]
    frames[3]["blocks"]["ions"] = {"q": np.array([1.0, -1.0])}
    return s, frames


def _empty_vs_absent():
    rng = _rng(4)
    s = _atoms_schema()
    for b in ("never", "empty", "emptied"):
        s.declare_block(b, rows=ROWS)
        s.declare_column(b, "v", "i32")
    frames = [{"blocks": {"atoms": _atoms(rng, 2)}} for _ in range(4)]
    frames[0]["blocks"]["empty"] = {"v": np.zeros(0, "<i4")}             # present and empty from frame 0
    frames[1]["blocks"]["emptied"] = {"v": np.array([5, 6], "<i4")}
    frames[2]["blocks"]["emptied"] = {"v": np.zeros(0, "<i4")}           # then emptied (carried after)
    return s, frames


def _carried():
    rng = _rng(5)
    s = _atoms_schema()
    s.declare_block("bonds", rows=ROWS)
    s.declare_column("bonds", "atomi", "u64")
    s.declare_column("bonds", "atomj", "u64")
    b0 = {"atomi": np.array([0, 0], "<u8"), "atomj": np.array([1, 2], "<u8")}
    frames = [{"blocks": {"atoms": _atoms(rng, 2)}} for _ in range(6)]
    frames[0]["blocks"]["bonds"] = b0
    frames[2]["blocks"]["bonds"] = dict(b0)                              # unchanged: no update written
    frames[4]["blocks"]["bonds"] = {"atomi": np.array([1, 0], "<u8"), "atomj": np.array([2, 1], "<u8")}
    return s, frames


def _regular_then_carried():
    rng = _rng(17)
    s = _atoms_schema()
    s.declare_block("tag", rows=ROWS)
    s.declare_column("tag", "v", "i32")
    frames = [{"blocks": {"atoms": _atoms(rng)}} for _ in range(6)]
    for i in range(3):
        frames[i]["blocks"]["tag"] = {"v": np.array([i, -i], "<i4")}    # updates 0..2 at ordinals 0..2, then carried
    return s, frames


def _build_markers_and_index(path: Path) -> None:
    """A crash between writing a block's index arrays and dropping its markers: the arrays win."""
    s, frames = _ragged()
    _write_traj(path, s, frames)
    _set_attr(path, "trajectory/atoms", "uniform_rows", 3)
    _set_attr(path, "trajectory/atoms", "dense_updates", True)
    _expect(path, frames)


def _aligned():
    s = SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64")
    s.declare_block("types", rows=ROWS, aligned_with="atoms")
    s.declare_column("types", "tid", "u32")
    frames = [
        {"blocks": {"atoms": {"x": np.array([1.0, 2.0, 3.0])}, "types": {"tid": np.array([1, 2, 3], "<u4")}}},
        {"blocks": {"atoms": {"x": np.array([1.5, 2.5, 3.5])}}},                         # types carried
        {"blocks": {"atoms": {"x": np.array([4.0, 5.0])}, "types": {"tid": np.array([7, 8], "<u4")}}},
    ]
    return s, frames


def _structural():
    rng = _rng(6)
    s = SequenceSchema()
    s.declare_block("grid", structural_shape=(2, 3))
    s.declare_column("grid", "rho", "f64")
    s.declare_column("grid", "flag", "bool")
    frames = [{"blocks": {"grid": {"rho": rng.normal(size=6), "flag": np.arange(6) % 2 == i % 2}}} for i in range(3)]
    return s, frames


def _masks():
    rng = _rng(7)
    s = SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "charge", "f64", nullable=True)
    s.declare_column("atoms", "n", "i64")
    s.declare_block("labels", rows=STRING_ROWS)
    s.declare_column("labels", "label", "string", nullable=True)
    frames = []
    for i in range(4):
        blocks = {"atoms": {"charge": rng.normal(size=4), "n": np.arange(4, dtype="<i8") * i},
                  "labels": {"label": np.array(["a", "b", "", "d"], dtype=object)}}
        m = {} if i == 1 else {"atoms": {"charge": np.array([True, i % 2 == 0, False, True])},
                               "labels": {"label": np.array([i == 0, True, True, False])}}
        frames.append({"blocks": blocks, "masks": m})
    return s, frames


def _cell(kind: str):
    def fn():
        rng = _rng(8)
        frames = [{"blocks": {"atoms": _atoms(rng)}} for _ in range(5)]
        for i, f in enumerate(frames):
            if kind == "fixed":
                f["box"] = Box(np.diag([10.0, 11.0, 12.0]), origin=[0.0, -0.0, 1.0],
                               boundary=np.array([True, True, False]))
            elif kind == "changing":
                f["box"] = Box(np.array([[10.0 + (i // 2), 1.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0]]),
                               origin=[0.0, 0.0, 0.5 * (i == 3)])
            else:
                f["box"] = Box(defined=False)
        return _atoms_schema(), frames
    return fn


def _cell_late():
    rng = _rng(18)
    frames = [{"blocks": {"atoms": _atoms(rng)}} for _ in range(5)]
    for i in (2, 3, 4):
        frames[i]["box"] = Box(np.eye(3) * (5.0 + (i == 4)))
    return _atoms_schema(), frames


def _meta_schema(fills: bool) -> SequenceSchema:
    s = _atoms_schema()
    for tag, (value, _) in _META_SAMPLES.items():
        if fills:
            s.declare_meta(tag, tag, fill=_META_FILLS[tag])
        else:
            s.declare_meta(tag, tag)
    return s


_META_SAMPLES: dict[str, tuple[Any, Any]] = {
    "bool": (True, False), "i32": (-2 ** 31, 2 ** 31 - 1), "i64": (-2 ** 63, 2 ** 63 - 1),
    "u32": (2 ** 32 - 1, 0), "u64": (2 ** 64 - 1, 2 ** 53 + 1), "f64": (-0.0, float("nan")),
    "string": ("Ö 水", ""), "json": ({"a": [1, None, "x"], "b": {"c": 1.5}}, [1, 2]),
    "bool3": ([True, False, True], [False, False, False]), "i32x3": ([-1, 0, 2 ** 31 - 1], [1, 2, 3]),
    "i64x3": ([-2 ** 63, 0, 2 ** 63 - 1], [4, 5, 6]), "u32x3": ([0, 1, 2 ** 32 - 1], [7, 8, 9]),
    "u64x3": ([0, 2 ** 53 + 1, 2 ** 64 - 1], [1, 1, 1]), "f64x3": ([1.5, float("inf"), -0.0], [0.0, 0.0, 0.0]),
    "f64x6": ([1.0, 2.0, 3.0, 0.1, 0.2, 0.3], [0.0] * 6), "f64x9": ([float(i) for i in range(9)], [1.0] * 9),
}
_META_FILLS = {"bool": False, "i32": 7, "i64": -7, "u32": 7, "u64": 2 ** 63, "f64": float("-inf"), "string": "fill",
               "json": None, "bool3": [True, True, False], "i32x3": [0, 0, -1], "i64x3": [0, 0, -1],
               "u32x3": [0, 0, 1], "u64x3": [0, 0, 1], "f64x3": [0.0, -0.0, 1.0], "f64x6": [0.5] * 6,
               "f64x9": [1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0]}
assert tuple(_META_SAMPLES) == TAG_NAMES


def _meta_tags(fills: bool):
    def fn():
        rng = _rng(9)
        frames = []
        for i in range(3):
            meta = {tag: sample[i % 2] for tag, sample in _META_SAMPLES.items()}
            if fills and i == 1:
                meta = {k: v for k, v in meta.items() if k in ("i32", "f64x9")}      # the rest from fills
            frames.append({"blocks": {"atoms": _atoms(rng, 1)}, "meta": meta})
        return _meta_schema(fills), frames
    return fn


def _precision():
    q = 2.0 ** -10
    s = SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "v", "f64", precision=0.5, trailing=(3,))
    s.declare_column("atoms", "raw", "f64")
    x0 = np.array([0.7572, -1e-4, 2.5 * q, np.nan])
    frames = [{"blocks": {"atoms": {"x": x0, "v": np.arange(12.0).reshape(4, 3) * 0.3, "raw": x0.copy()}}},
              {"blocks": {"atoms": {"x": x0 - q / 4, "v": np.arange(12.0).reshape(4, 3) * 0.3,
                                    "raw": x0.copy()}}},             # sub-quantum change: carried forward
              {"blocks": {"atoms": {"x": x0 + q, "v": np.arange(12.0).reshape(4, 3) * 0.31, "raw": x0 * 2}}}]
    return s, frames


def _strings():
    s = SequenceSchema()
    s.declare_block("atoms", rows=STRING_ROWS)
    s.declare_column("atoms", "element", "string")
    s.declare_column("atoms", "names", "string", trailing=(2,))
    frames = []
    for n in (3, 1, 0, 4):
        frames.append({"blocks": {"atoms": {"element": _values("string", (n,), n),
                                            "names": _values("string", (n, 2), n + 1)}}})
    return s, frames


def _compression_frames(rows: int = ROWS):
    rng = _rng(10)
    s = SequenceSchema()
    s.declare_block("atoms", rows=rows)
    s.declare_column("atoms", "x", "f64")
    s.declare_column("atoms", "f", "f64", precision=1e-2)
    s.declare_column("atoms", "id", "u64")
    s.declare_meta("pe", "f64")
    frames = []
    for i in range(4):
        blk = {"x": rng.normal(size=8), "f": rng.normal(size=8)}
        blk["id"] = np.arange(8, dtype="<u8")
        frames.append({"blocks": {"atoms": blk}, "meta": {"pe": float(-i)}})
    return s, frames


def _progressions():
    rng = _rng(11)
    return _atoms_schema(), [{"blocks": {"atoms": _atoms(rng)}} for _ in range(5)]


def _build_reopened(path: Path) -> None:
    rng = _rng(12)
    s = _atoms_schema()
    s.declare_block("ions", rows=ROWS)
    s.declare_column("ions", "q", "f64")
    s.declare_meta("pe", "f64")
    frames = []
    for i in range(8):
        f = {"blocks": {"atoms": _atoms(rng, 2)}, "meta": {"pe": -float(i)}}
        if i % 3 == 0:
            f["blocks"]["ions"] = {"q": np.ones(i // 3 + 1)}
        frames.append(f)
    steps = [0, 10, 20, 30, 40, 50, 60, 70]
    times = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    _write_traj(path, s, frames[:5], steps=steps[:5], times=times[:5])
    with TrajectoryWriter.open(path) as w:
        for i in range(5, 8):
            w.append(frames[i], step=steps[i], time=times[i])
    _expect(path, frames, steps, times)


def _tail_frames():
    rng = _rng(13)
    s = _atoms_schema()
    s.declare_block("ions", rows=ROWS)
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_meta("pe", "f64")
    frames = []
    for i in range(10):
        f = {"blocks": {"atoms": _atoms(rng, 2)}, "meta": {"pe": float(i)}}
        if i % 2 == 0:
            f["blocks"]["ions"] = {"q": np.full(i // 2 + 1, float(i))}
            f["masks"] = {"ions": {"q": np.arange(i // 2 + 1) % 2 == 0}}
        frames.append(f)
    return s, frames


def _build_tail_flush(path: Path) -> None:
    """A writer stopped after an automatic flush: data for 10 frames landed, the commit says 8."""
    s, frames = _tail_frames()
    tz = path / "trajectory" / "zarr.json"
    saved = None
    with TrajectoryWriter.create(path, s, flush_every=4, compression=COMPRESSION) as w:
        for i, f in enumerate(frames):
            w.append(f, step=3 * i, time=0.25 * i)
            if w.committed == 8 and saved is None:
                saved = tz.read_bytes()
    tz.write_bytes(saved)
    assert _zjson(path, "trajectory/meta/pe")["shape"] == [10], path          # longer than nstep 8
    _expect(path, frames[:8], [3 * i for i in range(8)], [0.25 * i for i in range(8)])


def _build_tail_nstep(path: Path) -> None:
    """Ten frames written, nstep rewritten to 6: arrays (step_index and offset included) longer than logical."""
    s, frames = _tail_frames()
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]
    _write_traj(path, s, frames, steps=steps)
    _set_attr(path, "trajectory", "nstep", 6)
    _expect(path, frames[:6], steps[:6])


def _build_dead_bytes(path: Path) -> None:
    """An explicit flush mid-chunk then more frames: the partial tails are re-encoded (dead bytes)."""
    rng = _rng(14)
    s = _atoms_schema()
    s.declare_block("ions", rows=ROWS)
    s.declare_column("ions", "q", "f64")
    s.declare_meta("pe", "f64")
    frames = [{"blocks": {"atoms": _atoms(rng, 2), "ions": {"q": rng.normal(size=1 + i % 3)}},
               "meta": {"pe": float(i)}} for i in range(7)]
    steps = [0, 1, 3, 4, 9, 10, 12]
    with TrajectoryWriter.create(path, s, compression=COMPRESSION) as w:
        for i, f in enumerate(frames):
            w.append(f, step=steps[i])
            if i in (1, 3):
                w.flush()
    _expect(path, frames, steps)
    assert _dead_bytes(path) > 0, path


def _build_trajectory_only(path: Path) -> None:
    _traj(_regular)(path)
    shutil.rmtree(path / "meta")
    assert describe(path)["documents"]["meta"] == {}, path


def _build_empty_traj(path: Path) -> None:
    s = _atoms_schema()
    s.declare_meta("pe", "f64")
    _write_traj(path, s, [])
    _expect(path, [])


# -- whole-record fixtures ----------------------------------------------------------------------

def _dtypes_frame():
    blocks = {}
    for k, dt in enumerate(DTYPES):
        blocks[f"b_{dt}"] = {"flat": _values(dt, (3,), k), "vec": _values(dt, (3, 3), k + 50),
                             "mat": _values(dt, (3, 2, 2), k + 100), "zero_width": _values(dt, (3, 0), k)}
    return Frame(blocks=blocks)


def _record_frame() -> Frame:
    rng = _rng(15)
    return Frame(
        blocks={"atoms": {"x": rng.uniform(0, 10, 4), "pos": rng.uniform(0, 10, (4, 3)),
                          "charge": np.array([-0.8, 0.4, 0.4, 1.0]), "element": ["O", "H", "H", "Na"],
                          "ref": np.array([0, 1, 2, 3], "<u8")},
                "grid": {"rho": rng.normal(size=(6,))},
                "empty": {"v": np.zeros(0)},
                "no_columns": {}},
        masks={"atoms": {"charge": np.array([True, True, False, True])}},
        precision={"atoms": {"x": 1e-3}},
        counts={"no_columns": 7},
        block_attrs={"grid": {"structural_shape": [2, 3], "producer": {"k": None}},
                     "atoms": {"targets": {"ref": "/system/atoms"}}},
        meta={"pe": -12.5, "label": "NaN", "v": [1, 2, 3], "big": 2 ** 63 + 5, "flag": True},
        meta_types={"v": "i64x3", "label": "string"},
        box=Box(np.array([[10.0, 2.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 8.0]]), origin=[1.0, 0.0, -0.0],
                boundary=np.array([True, True, False])))


_SYSTEM = {"blocks": {"atoms": {"id": np.arange(4, dtype="<u8"), "element": ["O", "H", "H", "Na"],
                                "mass": [15.999, 1.008, 1.008, 22.99]},
                      "bonds": {"atomi": np.array([0, 0], "<u8"), "atomj": np.array([1, 2], "<u8")}},
           "meta": {"n_molecules": 2, "name": "water + ion"}}

_OBSERVABLES = {
    "energy": {"data": np.linspace(0, 1, 5), "kind": "scalar", "description": "total energy",
               "time_dependent": True, "unit": "eV", "sampling": "per_frame", "x_vendor": None},
    "ir": {"data": np.array([[0.1, 0.2], [0.3, 0.4]]), "kind": "spectrum", "description": "ir",
           "time_dependent": False, "axes": ["wavenumber", "component"]},
    "t0": {"data": np.float64(300.0), "kind": "scalar", "description": "0-d", "time_dependent": False},
    "labels": {"data": ["a", "bb", "水"], "kind": "vector", "description": "strings", "time_dependent": False},
    "counts": {"data": np.array([1, 2, 3], "<i4"), "kind": "histogram", "description": "i32",
               "time_dependent": False},
    "z": {"data": np.array([1 + 2j, -0.0 - 1j], "<c16"), "kind": "vector", "description": "complex",
          "time_dependent": False},
}

_EVENTS = [
    {"type": "scalar", "key": "train/loss", "step": 1, "wall_time": "2026-08-04T12:00:00Z", "value": 0.9},
    {"type": "scalar", "key": "train/loss", "step": 2, "wall_time": "2026-08-04T12:00:01Z", "value": 0.7},
    {"type": "scalar", "key": "train/loss", "step": 1, "wall_time": "2026-08-04T12:00:02Z", "value": 0.8},
    {"type": "scalar", "key": "lr", "wall_time": "2026-08-04T12:00:03+02:00", "value": 1e-3},
    {"type": "scalar", "key": "lr", "wall_time": "2026-08-04T12:00:04+02:00", "value": 5e-4},
]


def _build_whole(path: Path) -> None:
    write_record(path, meta={"creator": {"name": "mrec fixtures", "version": "1"},
                             "created_at": "2026-12-03T00:00:00Z", "molrec_version": 2, "x_unknown": None},
                 system=_SYSTEM, frame=_record_frame(),
                 status={"state": "succeeded", "epoch": 3, "progress": {"done": 1.0}, "x_custom": [1]},
                 method={"type": "classical", "description": "NVT", "engine": {"name": "molrs", "version": "1"}},
                 observables=_OBSERVABLES, metrics=_EVENTS)
    with read_record(path) as rec:
        assert rec.frame == _record_frame().rounded() and rec.system == Frame.from_any(_SYSTEM), path
    rng = _rng(16)
    s = SequenceSchema()
    s.declare_block("atoms", rows=4)                   # 1:1 with system/atoms
    s.declare_column("atoms", "pos", "f64", trailing=(3,), precision=1e-3)
    s.declare_meta("pe", "f64")
    frames = [{"blocks": {"atoms": {"pos": rng.normal(size=(4, 3))}}, "meta": {"pe": -float(i)},
               "box": Box(np.eye(3) * 10.0)} for i in range(4)]
    with TrajectoryWriter.create(path, s) as w:
        for i, f in enumerate(frames):
            w.append(f, time=0.5 * i)
    _expect(path, frames)


def plant_unknown_nodes(store) -> None:
    """Add content mrec does not model to a record with ``frame/atoms``: a force field whose only table no
    style names (kept inside the force field), a child group inside a block, an array beside the blocks, an
    unknown section."""
    write_group(store, "forcefield", {"name": "tip3p", "units": {"preset": "real"}, "styles": []})
    write_group(store, "forcefield/pair.lj%2Fcut", {"count": 2})
    write_fixed_array(store, "forcefield/pair.lj%2Fcut/name", np.array(["a", "b"], dtype=object), "string")
    write_group(store, "frame/atoms/x_vendor_group", {"k": None})
    write_fixed_array(store, "frame/loose_array", np.arange(3.0), "f64")
    write_group(store, "x_section", {"anything": [1, {"b": None}]})


def _build_unknown_content(path: Path) -> None:
    """Unknown sections, nodes and keys a reader must keep (and a WAL line past the metrics watermark)."""
    write_record(path, meta={"x_unknown": None}, frame={"blocks": {"atoms": {"x": [1.0, 2.0]}}},
                 metrics=_EVENTS[:2])
    plant_unknown_nodes(DirectoryStore(str(path)))
    applied = b'{"t":"scalar","k":"train/loss","s":2,"w":"2026-08-04T12:00:01Z","v":0.7}\n'
    past = b'{"t":"scalar","k":"train/loss","s":9,"w":"2026-08-04T12:00:09Z","v":"NaN"}\n'
    (path / "metrics" / "metrics.jsonl").write_bytes(applied + past + b'{"t":"scal')     # a torn tail is ignored
    _set_attr(path, "metrics", "wal", {"lines": 1, "bytes": len(applied)})
    with read_record(path) as rec:
        assert {"forcefield", "x_section"} <= set(rec.sections()) and rec.unknown, path
        assert rec.metrics.series["train/loss"].steps.tolist() == [1, 2, 9], path


def _build_forcefield_only(path: Path) -> None:
    write_record(path, meta={"creator": {"name": "x"}}, forcefield={"name": "ff", "units": {"preset": "real"},
                                                                   "styles": []})


def tip3p_forcefield() -> dict:
    """A TIP3P force field: atom, bond and pair styles, nulls (absent parameters), annotations, source,
    special_bonds and an unknown document key."""
    return {"name": "TIP3P", "units": {"preset": "real", "angle": "degree"},
            "source": {"format": "lammps", "uri": "tip3p.lmp", "sha256": "0" * 63 + "f"},
            "special_bonds": {"lj": [0.0, 0.0, 0.5], "coul": [0.0, 0.0, 0.8333]},
            "styles": [{"category": "atom", "style": "full"}, {"category": "bond", "style": "harmonic"},
                       {"category": "angle", "style": "harmonic"},
                       {"category": "pair", "style": "lj/cut/coul/long",
                        "params": {"cutoff": 10.0, "mixing": "arithmetic"}}],
            "tables": {("atom", "full"): {"name": ["OW", "HW"], "element": ["O", "H"], "mass": [15.999, 1.008],
                                          "charge": [-0.834, 0.417], "desc": ["water oxygen", None]},
                       ("bond", "harmonic"): {"name": ["OW-HW"], "itom": ["OW"], "jtom": ["HW"],
                                              "k": [529.581], "r0": [0.9572]},
                       ("angle", "harmonic"): {"name": ["HW-OW-HW"], "itom": ["HW"], "jtom": ["OW"],
                                               "ktom": ["HW"], "k": [34.05], "theta0": [104.52]},
                       ("pair", "lj/cut/coul/long"): {"name": ["OW", "HW", "OW-HW"], "itom": ["OW", "HW", "OW"],
                                                      "jtom": ["OW", "HW", "HW"], "epsilon": [0.1521, None, None],
                                                      "sigma": [3.1507, None, None]}},
            "x_vendor": {"note": "unknown keys are kept", "null": None}}


def _cmap_forcefield() -> dict:
    grid = np.round(np.sin(np.arange(2 * 24 * 24, dtype="<f8") / 7.0), 6).reshape(2, 24, 24)
    return {"name": "cmap-and-more", "units": {"length": "nm", "energy": "kJ/mol", "angle": "degree"},
            "styles": [{"category": "atom", "style": "full"},
                       {"category": "cmap", "style": "charmm"},
                       {"category": "bond", "style": "harmonic", "endpoint_key": "class"},
                       {"category": "constraint", "style": "fixed", "endpoint_key": "smirks"},
                       {"category": "urey_bradley", "style": "harm", "expression": "k_ub*(distance(p1,p3)-r_ub)^2"},
                       {"category": "dihedral", "style": "nharmonic"},
                       {"category": "pair", "style": "coul/cut", "params": {"cutoff": 1.2}}],
            "tables": {("atom", "full"): {"name": ["C", "N"], "class": ["c", "n"], "atomic_number":
                                          np.array([6, 7], "<u8")},
                       ("cmap", "charmm"): {"name": ["1", "2"], **{e: ["C", ""] for e in
                                                                   ("itom", "jtom", "ktom", "ltom", "mtom")},
                                            "grid": grid},
                       ("bond", "harmonic"): {"name": ["c-n"], "itom": ["c"], "jtom": ["n"], "k": [1000.0],
                                              "r0": [0.13]},
                       ("constraint", "fixed"): {"name": ["c1"], "smirks": ["[#6:1]-[#1:2]"], "r0": [None]},
                       ("urey_bradley", "harm"): {"name": ["u"], "itom": ["C"], "jtom": ["N"], "ktom": ["C"],
                                                  "k_ub": [1.5], "r_ub": [0.25]},
                       ("dihedral", "nharmonic"): {"name": ["d"], **{e: ["C"] for e in ("itom", "jtom", "ktom",
                                                                                          "ltom")},
                                                   "a1": [1.0], "a2": [-0.5], "a3": [0.25]},
                       ("pair", "coul/cut"): {},
                       "x.table_no_style_names": {"v": ["kept"]}}}


def _build_forcefield_with_system(path: Path) -> None:
    system = {"blocks": {"atoms": {"type": ["OW", "HW", "HW", "NA"], "x": [0.0, 0.96, -0.24, 5.0]},
                         "bonds": {"atomi": np.array([0, 0], "<u8"), "atomj": np.array([1, 2], "<u8"),
                                   "type": ["OW-HW", "OW-HW"], "style": ["harmonic", "harmonic"]}}}
    write_record(path, meta={"creator": {"name": "x"}}, system=system, forcefield=tip3p_forcefield())


def _record(**kw):
    def build(path: Path) -> None:
        write_record(path, **kw)
        with read_record(path) as rec:
            for name in ("frame", "system"):
                if name in kw:
                    assert getattr(rec, name) == Frame.from_any(kw[name]).rounded(), (path, name)
            if "forcefield" in kw:
                assert rec.forcefield == ForceField.from_any(kw["forcefield"]), path
    return build


def _fixed(n: int, *, sharded: bool):
    def build(path: Path) -> None:
        flags = ((np.arange(n) // 65536) % 7).astype("<u1")     # long runs: gzip keeps each chunk tiny
        _record(frame={"blocks": {"big": {"flags": flags}}})(path)
        codecs = [c["name"] for c in _zjson(path, "frame/big/flags")["codecs"]]
        chunks = sorted(p.name for p in (path / "frame/big/flags/c").iterdir())
        assert (codecs == ["sharding_indexed"]) == sharded and len(chunks) == (1 if sharded else 4), (codecs, chunks)
    return build


def _dead_bytes(path: Path) -> int:
    """Bytes of the trajectory's shard files that no index entry references (re-encoded partial tails)."""
    dead = 0
    for zj in sorted((path / "trajectory").rglob("zarr.json")):
        doc = json.loads(zj.read_text(encoding="utf-8"))
        if doc.get("node_type") != "array":
            continue
        cfg = doc["codecs"][0]["configuration"]
        n = int(np.prod(np.array(doc["chunk_grid"]["configuration"]["chunk_shape"]) // np.array(cfg["chunk_shape"])))
        for shard in (p for p in (zj.parent / "c").rglob("*") if p.is_file()):
            raw = shard.read_bytes()
            index = np.frombuffer(raw[: 16 * n], dtype="<u8").reshape(n, 2)
            live = int(index[index[:, 0] != 2 ** 64 - 1, 1].sum())
            dead += len(raw) - (16 * n + 4) - live
    return dead


# ---------------------------------------------------------------------------
# The catalogue


@dataclass(frozen=True)
class _Valid:
    name: str
    covers: str
    rules: tuple[str, ...]
    build: Callable[[Path], None]


@dataclass(frozen=True)
class _Invalid:
    name: str
    what: str
    kind: str
    rules: tuple[str, ...]
    base: Callable[[Path], None]
    tamper: Callable[[Path], None]


CHUNK = 512 * 1024          # rows of a u8 fixed-size chunk

VALID: list[_Valid] = [
    _Valid("dtypes_frame", "every dtype (13) x trailing shapes [N], [N,3], [N,2,2], [N,0] in frame/, with NaN, -0.0, "
           "+-Infinity, subnormals, integer extremes, unicode", ("N-1.4a",), _record(frame=_dtypes_frame())),
    _Valid("dtypes_trajectory", "every dtype (13) as [N] in a trajectory block; [N,3] and [N,2,2] for f64, u8, "
           "string, c64",
           ("N-3.9", "C-EXT-2", "C-CODECS-1"), _traj(_dtypes_traj)),
    _Valid("block_regular", "a regular block (uniform_rows / dense_updates, no index)", ("N-3.9", "C-REOPEN-3"),
           _traj(_regular)),
    _Valid("block_ragged", "a ragged block: CSR step_index / offset, a zero-row update", ("N-3.8",),
           _traj(_ragged)),
    _Valid("block_late", "a block first presented at frame 3 (absent before)", ("N-3.11", "N-3.8"), _traj(_late)),
    _Valid("block_empty_vs_absent", "a block never presented (absent), one present with zero rows (empty), "
           "one emptied later", ("N-3.11",), _traj(_empty_vs_absent)),
    _Valid("block_carried_forward", "omitted blocks carry forward; an unchanged restatement writes no update",
           ("N-3.11",), _traj(_carried)),
    _Valid("block_regular_then_carried", "a regular block updated at frames 0-2 then carried forward: "
           "n_updates 3 < nstep 6 with the markers kept", ("N-3.9", "C-REOPEN-3", "N-3.11"),
           _traj(_regular_then_carried)),
    _Valid("block_markers_and_index", "a ragged block whose group also carries uniform_rows / dense_updates (a "
           "crash between the two writes): the index arrays win", ("N-3.9",), _build_markers_and_index),
    _Valid("block_aligned", "aligned_with: the aligned block carried, then restated when the target's count "
           "changes", ("N-3.13",), _traj(_aligned)),
    _Valid("block_structural_shape", "a block with structural_shape [2,3]", ("N-3.6s",), _traj(_structural)),
    _Valid("masks", "nullable f64 and string columns with _validity masks; a frame presented without masks",
           ("N-2.2",), _traj(_masks)),
    _Valid("cell_fixed", "a fixed cell stored as box/ attributes (origin with -0.0, one open boundary)",
           ("N-3.7",), _traj(_cell("fixed"))),
    _Valid("cell_changing", "a changing cell: migrated to box/ arrays with backfill, carry-forward",
           ("N-3.7",), _traj(_cell("changing"))),
    _Valid("cell_undefined", "an undefined cell (cell_defined false, identity vectors, all-false boundary)",
           ("N-2.4",), _traj(_cell("undefined"))),
    _Valid("cell_late", "no cell on frames 0-1, a cell from frame 2, changed at frame 4 (box/ follows the "
           "block rule)", ("N-3.7",), _traj(_cell_late)),
    _Valid("meta_tags", "every meta tag (16) with extremes (2^64-1, -2^63, -0.0, NaN, Infinity, unicode), "
           "no fills", ("N-3.5",), _traj(_meta_tags(False))),
    _Valid("meta_fills", "every meta tag (16) with a fill; frame 1 omits all keys but two", ("N-3.5",),
           _traj(_meta_tags(True))),
    _Valid("steps_times_progressions", "regular steps and times: step_progression / time_progression, no "
           "arrays", ("N-3.4",), _traj(_progressions, steps=[5, 15, 25, 35, 45], times=[0.0, 0.5, 1.0, 1.5, 2.0])),
    _Valid("steps_irregular", "irregular steps: the step array materialised (times regular)", ("N-3.4",),
           _traj(_progressions, steps=[0, 10, 20, 35, 2 ** 40], times=[0.0, 0.25, 0.5, 0.75, 1.0])),
    _Valid("times_irregular", "irregular times: the time array materialised (steps regular)", ("N-3.4",),
           _traj(_progressions, times=[0.0, 0.1, 0.2, 0.30000000000000004 + 1e-9, -0.0])),
    _Valid("no_time", "a trajectory without time (steps only)", ("N-3.1b",), _traj(_progressions)),
    _Valid("precision", "precision columns (1e-3 and 0.5, a trailing axis), rounding, a sub-quantum change "
           "carried forward", ("N-2.3", "C-CODECS-1"), _traj(_precision)),
    _Valid("strings", "ragged string columns (empty strings, unicode, a [N,2] trailing axis, a zero-row update)",
           ("C-CODEC-1",), _traj(_strings)),
    _Valid("compression_none", "the compression knob: None (the default), at a realistic frame_rows of 8 "
           "(16 KiB inner chunks, 4096-entry shard indexes: the reference extents unmodified)",
           ("C-CODECS-1", "C-EXT-1", "C-EXT-2", "C-EXT-3"),
           _traj(lambda: _compression_frames(8), compression=None)),
    _Valid("compression_gzip_1", "the compression knob: gzip:1", ("C-CODECS-2",),
           _traj(_compression_frames, compression="gzip:1")),
    _Valid("compression_gzip_9", "the compression knob: gzip:9", ("C-CODECS-2",),
           _traj(_compression_frames, compression="gzip:9")),
    _Valid("compression_zstd_3", "the compression knob: zstd:3", ("C-CODECS-2",),
           _traj(_compression_frames, compression="zstd:3")),
    _Valid("compression_zstd_19", "the compression knob: zstd:19", ("C-CODECS-2",),
           _traj(_compression_frames, compression="zstd:19")),
    _Valid("reopened_appended", "5 frames, closed, reopened with TrajectoryWriter.open, 3 more appended",
           ("C-REOPEN-4",), _build_reopened),
    _Valid("uncommitted_tail_flush", "a writer stopped after an automatic flush: arrays hold 10 frames, "
           "nstep 8", ("C-GUAR-1", "C-REOPEN-1", "C-REOPEN-2"), _build_tail_flush),
    _Valid("uncommitted_tail_nstep", "10 frames written, nstep lowered to 6: step, step_index, offset, meta and "
           "columns longer than logical", ("C-REOPEN-1", "C-REOPEN-2", "C-REOPEN-3"), _build_tail_nstep),
    _Valid("dead_bytes", "explicit flush() mid-chunk twice, then more frames: re-encoded partial tails",
           ("C-COMPACT",), _build_dead_bytes),
    _Valid("empty_trajectory", "a declared trajectory with no frames (nstep 0)", ("C-REOPEN-1",),
           _build_empty_traj),
    _Valid("fixed_chunks", "a fixed-size u8 array of 4 chunks (plain, no shard)", ("C-EXT-F1", "C-EXT-F2"),
           _fixed(3 * CHUNK + 5, sharded=False)),
    _Valid("fixed_shard", "a fixed-size u8 array of 7 chunks: one shard, index at the end",
           ("C-EXT-F1", "C-EXT-F2"), _fixed(6 * CHUNK + 7, sharded=True)),
    _Valid("whole_record", "meta, status, method, system, frame (masks, precision, targets, structural_shape, "
           "a block without columns, the box), observables (0-d, strings, complex), metrics, trajectory",
           ("N-1.1a", "N-1.2", "N-1.4a", "N-1.5", "N-6.1", "N-6.2", "N-3.1s"), _build_whole),
    _Valid("trajectory_only", "a record holding only a trajectory, without even a meta/ group (a missing meta "
           "reads as an empty document)", ("N-1.1b",), _build_trajectory_only),
    _Valid("frame_undefined_cell", "frame/ with an undefined cell", ("N-2.4f",),
           _record(frame={"blocks": {"a": {"x": [0.0]}}, "box": Box(defined=False, origin=[1.0, 2.0, 3.0])})),
    _Valid("unknown_content", "an unknown root section (x_section), a force-field table no style names, an unknown "
           "group inside a block, an array beside the blocks, an unknown meta key with null, a metrics WAL line past the watermark (and a torn "
           "one)",
           ("N-1.1c", "N-6.2"), _build_unknown_content),
    _Valid("forcefield_only", "meta plus a force field (no styles) only: a force-field package", ("N-1.1b", "FF-16"),
           _build_forcefield_only),
    _Valid("forcefield_tip3p", "a force field: atom / bond / angle / pair styles, percent-encoded block names, "
           "absent parameters as nulls, an annotation, source, special_bonds, an unknown document key",
           ("FF-1", "FF-2", "FF-3", "FF-4", "FF-5", "FF-6", "FF-8", "FF-9", "FF-10", "FF-11", "FF-16"),
           _record(meta={"creator": {"name": "x"}}, forcefield=tip3p_forcefield())),
    _Valid("forcefield_cmap", "cmap grids f64[2,24,24], a class-keyed and a smirks-keyed style, a category outside "
           "the registry with an expression, nharmonic a1..a3, a u64 canonical parameter, a 0-row table, a table "
           "no style names", ("FF-7", "FF-9", "FF-11", "FF-13"),
           _record(meta={"creator": {"name": "x"}}, forcefield=_cmap_forcefield())),
    _Valid("forcefield_with_system", "a system linked to a force field by name (atoms.type, bonds.type + style); "
           "NA resolves to no row (a validator warning, never a refusal)", ("FF-17",),
           _build_forcefield_with_system),
    _Valid("status_only", "meta plus status: the smallest substantive record", ("N-1.1b",),
           _record(meta={"creator": {"name": "x"}}, status={"state": "queued"})),
]


# -- invalid fixtures: tampered stores -----------------------------------------------------------


def _zjson(path: Path, node: str) -> dict:
    return json.loads((path / node / "zarr.json").read_text(encoding="utf-8"))


def _set_zjson(path: Path, node: str, doc: dict) -> None:
    (path / node / "zarr.json").write_bytes(json.dumps(doc, indent=2, ensure_ascii=False).encode("utf-8"))


def _edit_json(node: str, edit: Callable[[dict], Any]):
    """A tamper applying ``edit`` to the parsed ``<node>/zarr.json``."""
    def t(path: Path) -> None:
        doc = _zjson(path, node)
        edit(doc)
        _set_zjson(path, node, doc)
    return t


def _set_attr(path: Path, node: str, key: str, value: Any) -> None:
    _edit_json(node, lambda d: d["attributes"].__setitem__(key, value))(path)


def _del_attr(node: str, key: str):
    return _edit_json(node, lambda d: d["attributes"].pop(key))


def _set_field(node: str, key: str, value: Any, **more):
    return _edit_json(node, lambda d: d.update({key: value, **more}))


def _rewrite(node: str, values, dtype: str | None = None):
    def t(path: Path) -> None:
        store = DirectoryStore(str(path))
        arr = Array.open(store, node)
        arr.write(np.asarray(values, dtype=dtype or arr.dtype))
    return t


def _replace_fixed(node: str, values, dtype: str):
    def t(path: Path) -> None:
        store = DirectoryStore(str(path))
        for k in list(store.list(node)):
            store.delete(k)
        write_fixed_array(store, node, np.asarray(values), dtype)
    return t


def _flip_byte(key: str, offset: int):
    def t(path: Path) -> None:
        p = path / key
        b = bytearray(p.read_bytes())
        b[offset] ^= 0x01
        p.write_bytes(bytes(b))
    return t


def _remove(node: str):
    def t(path: Path) -> None:
        shutil.rmtree(path / node)
    return t


def _rename_codec(node: str, old: str, new: str):
    def t(path: Path) -> None:
        text = (path / node / "zarr.json").read_text(encoding="utf-8")
        assert f'"{old}"' in text
        (path / node / "zarr.json").write_text(text.replace(f'"{old}"', f'"{new}"', 1), encoding="utf-8")
    return t


def _both(*ts):
    def t(path: Path) -> None:
        for f in ts:
            f(path)
    return t


def _ragged_base(path: Path, nullable: bool = False) -> None:
    s = SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64", nullable=nullable)
    s.declare_column("atoms", "n", "i64")
    rng = _rng(20)
    _write_traj(path, s, [{"blocks": {"atoms": {"x": rng.normal(size=n), "n": np.arange(n, dtype="<i8")}}}
                          for n in (2, 3, 1)])


def _nullable_base(path: Path) -> None:
    _ragged_base(path, nullable=True)


def _regular_base(path: Path) -> None:
    rng = _rng(21)
    _write_traj(path, _atoms_schema(), [{"blocks": {"atoms": _atoms(rng, 2)}} for _ in range(3)])


def _dense_base(path: Path) -> None:
    rng = _rng(23)
    s = _atoms_schema()
    s.declare_meta("pe", "f64")
    _write_traj(path, s, [{"blocks": {"atoms": _atoms(rng, 2)}, "meta": {"pe": float(i)}} for i in range(3)],
                steps=[0, 1, 5], times=[0.0, 1.0, 1.5])


def _frame_base(path: Path) -> None:
    write_record(path, status={"state": "running"},
                 system={"atoms": {"id": np.arange(3, dtype="<u8")}},
                 frame={"blocks": {"a": {"x": [1.0, 2.0], "i": [1, 2], "r": np.array([0, 2], "<u8")}},
                        "masks": {"a": {"x": [True, False]}}, "meta": {"k": 1}, "meta_types": {"k": "i32"},
                        "block_attrs": {"a": {"targets": {"r": "/system/atoms"}}}},
                 observables={"e": {"data": [1.0, 2.0], "kind": "scalar", "description": "e",
                                    "time_dependent": False}})


def _undefined_cell_base(path: Path) -> None:
    write_record(path, frame={"blocks": {"a": {"x": [0.0]}}, "box": Box(defined=False)})


def _schema_column(doc: dict, block: str, column: str) -> dict:
    return doc["attributes"]["sequence_schema"]["blocks"][block]["columns"][column]


def _system_traj_base(path: Path) -> None:
    write_record(path, system={"atoms": {"id": np.arange(2, dtype="<u8")}})
    s = SequenceSchema()
    s.declare_block("atoms", rows=2)                   # 1:1 with system/atoms
    s.declare_column("atoms", "x", "f64")
    with TrajectoryWriter.create(path, s, compression=COMPRESSION) as w:
        for i in range(2):
            w.append({"blocks": {"atoms": {"x": np.array([1.0, 2.0]) * i}}})


def _ff_base(path: Path) -> None:
    write_record(path, meta={"creator": {"name": "x"}}, forcefield=tip3p_forcefield())


def _ff_attrs(edit: Callable[[dict], Any]):
    return _edit_json("forcefield", lambda d: edit(d["attributes"]))


_FF_PAIR = "forcefield/pair.lj%2Fcut%2Fcoul%2Flong"


def _set_system_rows(path: Path) -> None:
    _set_attr(path, "system/atoms", "count", 3)
    _replace_fixed("system/atoms/id", np.arange(3, dtype="<u8"), "u64")(path)


INVALID: list[_Invalid] = [
    _Invalid("non_monotonic_offset", "trajectory offset [0, 2, 1, 6] decreases", "non_monotonic_offset",
             ("N-3.8r",), _ragged_base, _rewrite("trajectory/atoms/offset", [0, 2, 1, 6])),
    _Invalid("offset_not_zero", "trajectory offset[0] is 1", "broken_index", ("N-3.8r",), _ragged_base,
             _rewrite("trajectory/atoms/offset", [1, 2, 5, 6])),
    _Invalid("step_index_not_ascending", "trajectory step_index [0, 2, 2] repeats a frame", "broken_index",
             ("N-3.8r",), _ragged_base, _rewrite("trajectory/atoms/step_index", [0, 2, 2])),
    _Invalid("marker_missing", "a regular block with uniform_rows but no dense_updates", "broken_index",
             ("N-3.9r",), _regular_base, _del_attr("trajectory/atoms", "dense_updates")),
    _Invalid("nstep_not_integer", "trajectory nstep is true", "broken_index", ("N-3.9r",), _regular_base,
             lambda p: _set_attr(p, "trajectory", "nstep", True)),
    _Invalid("progression_without_nstep", "step_progression present, nstep removed", "broken_index", ("N-3.9r",),
             _regular_base, _del_attr("trajectory", "nstep")),
    _Invalid("uniform_rows_zero", "a regular block with uniform_rows 0", "broken_index", ("N-3.9r",), _regular_base,
             lambda p: _set_attr(p, "trajectory/atoms", "uniform_rows", 0)),
    _Invalid("dense_updates_false", "a regular block with dense_updates false", "broken_index", ("N-3.9r",),
             _regular_base, lambda p: _set_attr(p, "trajectory/atoms", "dense_updates", False)),
    _Invalid("step_index_without_offset", "a ragged block whose offset array is removed", "broken_index",
             ("N-3.8r",), _ragged_base, _remove("trajectory/atoms/offset")),
    _Invalid("column_shorter_than_offset", "a ragged block column of 4 rows where offset ends at 6", "broken_index",
             ("N-3.8r",), _ragged_base, _set_field("trajectory/atoms/n", "shape", [4])),
    _Invalid("nstep_past_arrays", "trajectory nstep 9 with step, time and meta arrays of 3 rows", "broken_index",
             ("N-3.3",), _dense_base, lambda p: _set_attr(p, "trajectory", "nstep", 9)),
    _Invalid("narrow_float_trajectory", "a trajectory column with data_type float32", "narrow_float", ("N-1.6",),
             _ragged_base, _set_field("trajectory/atoms/x", "data_type", "float32")),
    _Invalid("narrow_float_frame", "a frame column with data_type float32", "narrow_float", ("N-1.6", "N-1.4c"),
             _frame_base, _set_field("frame/a/x", "data_type", "float32")),
    _Invalid("unknown_dtype", "a frame column with data_type variable_length_bytes", "unknown_dtype", ("N-1.6",),
             _frame_base, _set_field("frame/a/i", "data_type", "variable_length_bytes")),
    _Invalid("mask_not_bool_trajectory", "a trajectory _validity mask with data_type uint8", "bad_validity",
             ("N-2.2r",), _nullable_base, _set_field("trajectory/atoms/_validity/x", "data_type", "uint8",
                                                  fill_value=0)),
    _Invalid("mask_not_bool_frame", "a frame _validity mask stored as u8", "bad_validity", ("N-1.4c",),
             _frame_base, _replace_fixed("frame/a/_validity/x", np.array([1, 0], "<u1"), "u8")),
    _Invalid("mask_wrong_length", "a frame _validity mask of 3 rows for a block of 2", "bad_validity",
             ("N-1.4c",), _frame_base, _replace_fixed("frame/a/_validity/x", np.array([True, False, True]), "bool")),
    _Invalid("crc_tampered_frame", "one byte flipped in a frame chunk (crc32c mismatch)", "corruption",
             ("N-4e",), _frame_base, _flip_byte("frame/a/x/c/0", 3)),
    _Invalid("crc_tampered_trajectory", "one byte flipped in a trajectory inner chunk", "corruption",
             ("N-4e",), _regular_base, lambda p: _flip_byte("trajectory/atoms/x/c/0",
                                                            (p / "trajectory/atoms/x/c/0").stat().st_size - 6)(p)),
    _Invalid("row_count_mismatch", "a frame block count 3 for columns of 2 rows", "row_count_mismatch",
             ("N-1.4c",), _frame_base, lambda p: _set_attr(p, "frame/a", "count", 3)),
    _Invalid("count_missing", "a frame block without its count attribute", "row_count_mismatch", ("N-1.4c",),
             _frame_base, _del_attr("frame/a", "count")),
    _Invalid("system_rows_mismatch", "system/atoms has 3 rows, the trajectory block atoms 2 (the 1:1 rule)",
             "row_count_mismatch", ("N-3.1s",), _system_traj_base, _set_system_rows),
    _Invalid("precision_on_int", "a precision attribute on an i64 frame column", "bad_precision", ("N-1.4c",),
             _frame_base, lambda p: _set_attr(p, "frame/a/i", "precision", 0.001)),
    _Invalid("mask_orphan", "a frame _validity mask naming no column", "bad_validity", ("N-1.4c",), _frame_base,
             lambda p: (p / "frame/a/_validity/x").rename(p / "frame/a/_validity/nothing")),
    _Invalid("targets_into_trajectory", "a frame targets value /trajectory/a", "bad_reference", ("N-2.6a",),
             _frame_base, lambda p: _set_attr(p, "frame/a", "targets", {"r": "/trajectory/a"})),
    _Invalid("undefined_cell_true_boundary", "an undefined frame cell with a True boundary flag", "bad_box",
             ("N-2.4f",), _undefined_cell_base,
             _replace_fixed("frame/box/boundary", np.array([True, False, False]), "bool")),
    _Invalid("meta_types_unknown_tag", "frame _meta_types naming the tag f32", "meta_tag_mismatch", ("N-1.5",),
             _frame_base, _edit_json("frame", lambda d: d["attributes"]["_meta_types"].update(k="f32"))),
    _Invalid("meta_array_dtype_mismatch", "trajectory meta/pe (tag f64) stored as int64", "meta_tag_mismatch",
             ("N-3.5",), _dense_base, _set_field("trajectory/meta/pe", "data_type", "int64", fill_value=0)),
    _Invalid("schema_narrow_dtype", "a sequence_schema column declared f32", "narrow_float", ("N-1.6",),
             _ragged_base, _edit_json("trajectory", lambda d: _schema_column(d, "atoms", "n").update(dtype="f32"))),
    _Invalid("schema_array_dtype_mismatch", "a sequence_schema column declared u64 stored as int64",
             "declaration_mismatch", ("N-3.6",), _ragged_base,
             _edit_json("trajectory", lambda d: _schema_column(d, "atoms", "n").update(dtype="u64"))),
    _Invalid("nstep_negative", "trajectory nstep is -1", "broken_index", ("N-3.9r",), _regular_base,
             lambda p: _set_attr(p, "trajectory", "nstep", -1)),
    _Invalid("unsupported_chunk_grid", "a frame column with a rectilinear chunk grid", "unsupported", ("N-4e",),
             _frame_base, _set_field("frame/a/x", "chunk_grid",
                                     {"name": "rectilinear", "configuration": {"chunk_shapes": [[2]]}})),
    _Invalid("molrec_version_3", "meta.molrec_version is 3", "bad_version", ("N-0",), _frame_base,
             lambda p: _set_attr(p, "meta", "molrec_version", 3)),
    _Invalid("observable_without_meta", "observables/e without observables/meta/e", "bad_observable",
             ("N-6.1",), _frame_base, _remove("observables/meta/e")),
    _Invalid("observable_meta_missing_kind", "an observable meta without kind", "bad_observable", ("N-6.1",),
             _frame_base, _del_attr("observables/meta/e", "kind")),
    _Invalid("unsupported_codec_frame", "a frame column whose gzip codec is renamed blosc", "unsupported_codec",
             ("C-CODEC-1", "N-4e"), _frame_base, _rename_codec("frame/a/i", "gzip", "blosc")),
    _Invalid("unsupported_codec_trajectory", "a trajectory column whose crc32c codec is renamed lz4",
             "unsupported_codec", ("C-CODEC-1", "N-4e"), _ragged_base,
             _rename_codec("trajectory/atoms/n", "gzip", "lz4")),
    _Invalid("meta_tag_mismatch", "frame meta k tagged i32 holding 1.5", "meta_tag_mismatch", ("N-1.5",),
             _frame_base, lambda p: _set_attr(p, "frame", "k", 1.5)),
    _Invalid("status_without_state", "status document without state", "missing_key", ("N-1.2",), _frame_base,
             _del_attr("status", "state")),
    _Invalid("target_out_of_range", "a frame targets column pointing past system/atoms", "bad_reference",
             ("N-2.6a",), _frame_base, _both(lambda p: _set_attr(p, "system/atoms", "count", 1),
                                             _set_field("system/atoms/id", "shape", [1]))),
    _Invalid("ff_no_units", "a force-field document without units", "missing_units", ("FF-3",), _ff_base,
             _ff_attrs(lambda a: a.pop("units"))),
    _Invalid("ff_units_disagree", "units {preset: real, angle: radian}: a quantity disagreeing with its preset",
             "bad_units", ("FF-3",), _ff_base, _ff_attrs(lambda a: a.update(units={"preset": "real",
                                                                                   "angle": "radian"}))),
    _Invalid("ff_unknown_preset", "units.preset gromacs", "bad_units", ("FF-3",), _ff_base,
             _ff_attrs(lambda a: a["units"].update(preset="gromacs"))),
    _Invalid("ff_no_name", "a force-field document without name", "missing_key", ("FF-2",), _ff_base,
             _ff_attrs(lambda a: a.pop("name"))),
    _Invalid("ff_category_case", "a style of category 'Bond'", "bad_forcefield", ("FF-6",), _ff_base,
             _ff_attrs(lambda a: a["styles"][1].update(category="Bond"))),
    _Invalid("ff_style_twice", "the (category, style) pair bond harmonic declared twice", "bad_forcefield",
             ("FF-6",), _ff_base, _ff_attrs(lambda a: a["styles"].append({"category": "bond", "style": "harmonic"}))),
    _Invalid("ff_missing_table", "a declared style whose table group is gone (bond.harmonic renamed)",
             "missing_table", ("FF-7",), _ff_base,
             lambda p: (p / "forcefield/bond.harmonic").rename(p / "forcefield/bond.harm")),
    _Invalid("ff_duplicate_name", "a pair table whose name column repeats a name", "bad_name", ("FF-8",), _ff_base,
             _replace_fixed(f"{_FF_PAIR}/name", np.array(["OW", "OW", "x"], dtype=object), "string")),
    _Invalid("ff_endpoint_beyond_arity", "a bond table with a ktom column (arity 2)", "bad_endpoint", ("FF-9",),
             _ff_base, _replace_fixed("forcefield/bond.harmonic/ktom", np.array(["X"], dtype=object), "string")),
    _Invalid("ff_parameter_integer", "a bond parameter k stored as int32 (parameters are f64 or string)",
             "bad_parameter", ("FF-11",), _ff_base,
             _replace_fixed("forcefield/bond.harmonic/k", np.array([529], "<i4"), "i32")),
    _Invalid("ff_parameter_nan", "a NaN in a non-null parameter row (absent is a null, never NaN)",
             "bad_parameter", ("FF-11",), _ff_base,
             _replace_fixed("forcefield/bond.harmonic/r0", np.array([float("nan")]), "f64")),
    _Invalid("ff_precision", "a precision attribute on a force-field column", "bad_precision", ("FF-12",),
             _ff_base, lambda p: _set_attr(p, "forcefield/bond.harmonic/k", "precision", 0.001)),
    _Invalid("ff_pair_conflict", "two pair rows naming {OW, OW} with different epsilon", "pair_conflict",
             ("FF-14",), _ff_base, _replace_fixed(f"{_FF_PAIR}/jtom", np.array(["OW", "HW", "OW"], dtype=object),
                                                  "string")),
    _Invalid("ff_meta_types", "a _meta_types key in the (untyped) force-field document", "reserved_meta_key",
             ("FF-2",), _ff_base, _ff_attrs(lambda a: a.update(_meta_types={"name": "string"}))),
]


# ---------------------------------------------------------------------------
# Writing the catalogue


def _clear(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=False, sort_keys=False) + "\n").encode("utf-8")


def _make_valid(out: Path, v: _Valid) -> FixtureInfo:
    d, z, j = out / f"{v.name}.mrec", out / f"{v.name}.mrec.zip", out / f"{v.name}.json"
    _clear(d, z, j)
    v.build(d)
    side = describe(d)
    pack(d, keep=True)
    side = {"name": v.name, "covers": v.covers, "rules": list(v.rules), **side}
    j.write_bytes(_dump(side))
    return FixtureInfo(v.name, v.covers, v.rules, files=(d.name, z.name, j.name))


def _refusal(path: Path) -> str:
    try:
        read_all(path)
    except (RefusalError, CorruptionError) as exc:
        return refusal_kind_of(exc)
    raise AssertionError(f"invalid fixture {path}: mrec reads it")


def _make_invalid(out: Path, v: _Invalid) -> FixtureInfo:
    out.mkdir(parents=True, exist_ok=True)
    d, z, j = out / f"{v.name}.mrec", out / f"{v.name}.mrec.zip", out / f"{v.name}.json"
    _clear(d, z, j)
    v.base(d)
    v.tamper(d)
    pack(d, keep=True)
    for form in (d, z):
        got = _refusal(form)
        if got != v.kind:
            raise AssertionError(f"invalid fixture {form}: mrec refuses it as {got!r}, the catalogue says {v.kind!r}")
    j.write_bytes(_dump({"name": v.name, "encoding": ENCODING, "valid": False, "refusal_kind": v.kind,
                         "what": v.what, "rules": list(v.rules)}))
    return FixtureInfo(v.name, v.what, v.rules, valid=False, refusal_kind=v.kind,
                       files=tuple(f"invalid/{p.name}" for p in (d, z, j)))


def catalogue_markdown(infos: list[FixtureInfo]) -> str:
    lines = ["# Golden fixtures", "",
             "Generated by `python tools/make_fixtures.py` (`mrec.check.fixtures.make_fixtures`); do not edit by hand.",
             "The sidecar encoding is described in `docs/user-guide.md` (\"Golden fixtures\"); rule ids are those "
             "of `docs/conformance.md`.", "",
             "Each valid fixture is `<name>.mrec/`, `<name>.mrec.zip` and the sidecar `<name>.json`. Each invalid "
             "one is `invalid/<name>.mrec/`, `invalid/<name>.mrec.zip` and `invalid/<name>.json` (`valid: false`, "
             "`refusal_kind`, `what`); "
             "a reader must refuse it when reading the whole record (every section, every trajectory frame). "
             "`refusal_kind` is mrec's kind, or `corruption` for a checksum failure.", "",
             "## Valid", "", "| fixture | covers | rules |", "|---|---|---|"]
    for i in infos:
        if i.valid:
            lines.append(f"| `{i.name}` | {i.covers} | {', '.join(i.rules)} |")
    lines += ["", "## Invalid (`invalid/`)", "", "| fixture | refusal_kind | what | rules |", "|---|---|---|---|"]
    for i in infos:
        if not i.valid:
            lines.append(f"| `{i.name}` | `{i.refusal_kind}` | {i.covers} | {', '.join(i.rules)} |")
    return "\n".join(lines) + "\n"


def summary(out_dir, infos: list[FixtureInfo]) -> str:
    """One line about a written catalogue (for ``tools/make_fixtures.py`` and ``mrec fixtures DIR``)."""
    out = Path(out_dir)
    sizes = [p.stat().st_size for p in out.rglob("*") if p.is_file()]
    valid = sum(i.valid for i in infos)
    return (f"{out}: {valid} valid and {len(infos) - valid} invalid fixtures, "
            f"{len(sizes)} files, {sum(sizes)} bytes")


def make_fixtures(out_dir) -> list[FixtureInfo]:
    """Write the whole catalogue under ``out_dir`` (created) and return its entries."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    infos = [_make_valid(out, v) for v in VALID]
    infos += [_make_invalid(out / "invalid", v) for v in INVALID]
    (out / "README.md").write_bytes(catalogue_markdown(infos).encode("utf-8"))
    return infos
