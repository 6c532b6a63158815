"""Whole records: documents, frame-shaped sections, observables, metrics, fixed-size extents,
unknown-content preservation, the system 1:1 rule, atomic creation, and reading the packed form
through mrec, zarr-python's ZipStore, the zarrs pipeline and tensorstore's zip kvstore.

Spec: chunking-and-packing.md ("Fixed-size arrays", "At-rest form"), mrec-notes §1, §2, §3.1, §4,
§5.3, §5.6, §6.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr
from hypothesis import given, settings, strategies as st

import mrec
from mrec.errors import RefusalError
from mrec.fs import PosixFileSystem
from mrec.record.model.dtypes import DTYPES, NUMPY_DTYPES
from mrec.record.sections.fixed import fixed_layout
from mrec.record.sections.metrics import safe_name, unsafe_name
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore
from mrec.zarr.stores.zip_read import ZipStore

SPEC = Path(__file__).resolve().parents[2].parent / "shared" / "spec"
CORE = SPEC / "vectors" / "fixtures" / "schema" / "core"
OBS = SPEC / "vectors" / "fixtures" / "schema" / "observables"


# -- helpers ----------------------------------------------------------------------------------

def tree(root) -> dict[str, bytes]:
    root = Path(root)
    return {str(p.relative_to(root)).replace(os.sep, "/"): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tree_hash(root) -> str:
    h = hashlib.sha256()
    if Path(root).exists():
        for k, v in tree(root).items():
            h.update(k.encode() + b"\0" + v)
    return h.hexdigest()


def zjson(root, node) -> dict:
    return json.loads((Path(root) / node / "zarr.json").read_text())


def set_zjson(root, node, doc) -> None:
    (Path(root) / node / "zarr.json").write_text(json.dumps(doc))


def values_for(dtype: str, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "string":
        return np.array([f"s{i}-é" for i in range(n)], dtype=object).reshape(shape)
    if dtype == "bool":
        return (rng.random(n) > 0.5).reshape(shape)
    dt = NUMPY_DTYPES[dtype]
    if dt.kind == "f":
        v = rng.normal(size=n)
        if n >= 3:
            v[:3] = [np.nan, -0.0, np.inf]
        return v.reshape(shape)
    if dt.kind == "c":
        return (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dt).reshape(shape)
    info = np.iinfo(dt)
    v = rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
    return v.reshape(shape)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype == object or b.dtype == object or a.dtype.kind in "UT" or b.dtype.kind in "UT":
        return [str(x) for x in a.ravel()] == [str(x) for x in b.ravel()]
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


def every_array(root) -> list[str]:
    out = []
    for p in sorted(Path(root).rglob("zarr.json")):
        if json.loads(p.read_text())["node_type"] == "array":
            out.append(str(p.parent.relative_to(root)).replace(os.sep, "/"))
    return out


SYSTEM = {"blocks": {"atoms": {"id": np.arange(4, dtype="u8"), "element": ["O", "H", "H", "Na"],
                               "mass": [15.999, 1.008, 1.008, 22.99]},
                     "bonds": {"atomi": np.array([0, 0], "u8"), "atomj": np.array([1, 2], "u8")}},
          "meta": {"n_molecules": 2, "name": "water + ion"}}


def rich_frame(seed: int = 1) -> mrec.Frame:
    rng = np.random.default_rng(seed)
    blocks = {"atoms": {"x": rng.uniform(0, 10, 4), "pos": rng.uniform(0, 10, (4, 3)),
                        "charge": np.array([-0.8, 0.4, 0.4, 1.0]), "element": ["O", "H", "H", "Na"],
                        "ref": np.array([0, 1, 2, 3], "u8")},
              "grid": {"rho": rng.normal(size=(24,))},
              "empty": {"v": np.zeros(0)},
              "no_columns": {},
              "meta": {"m": np.arange(2, dtype="i4")}}               # 'meta' is a legal block name
    return mrec.Frame(
        blocks=blocks,
        masks={"atoms": {"charge": np.array([True, True, False, True])}},
        precision={"atoms": {"x": 1e-3}},
        counts={"no_columns": 7},
        block_attrs={"grid": {"structural_shape": [2, 3, 4], "producer": {"k": None}},
                     "atoms": {"targets": {"ref": "/system/atoms"}}},
        meta={"pe": -12.5, "step": 10, "label": "NaN", "v": [1, 2, 3], "big": 2 ** 63 + 5, "flag": True},
        meta_types={"v": "i64x3", "label": "string"},
        box=mrec.Box(np.array([[10.0, 2.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 8.0]]), origin=[1.0, 0.0, -0.0],
                     boundary=np.array([True, True, False])),
    )


OBSERVABLES = {
    "energy": {"data": np.linspace(0, 1, 5), "kind": "scalar", "description": "total energy",
               "time_dependent": True, "unit": "eV", "sampling": "per_frame", "x_vendor": None},
    "ir": {"data": np.array([0.1, 0.2, 0.3]), "kind": "spectrum", "description": "ir", "time_dependent": False,
           "axes": ["wavenumber"]},
    "t0": {"data": np.float64(300.0), "kind": "scalar", "description": "0-d", "time_dependent": False},
    "labels": {"data": ["a", "bb", "ccc"], "kind": "vector", "description": "strings", "time_dependent": False},
}

EVENTS = [
    {"type": "scalar", "key": "train/loss", "step": 1, "wall_time": "2026-08-04T12:00:00Z", "value": 0.9},
    {"type": "scalar", "key": "train/loss", "step": 2, "wall_time": "2026-08-04T12:00:01Z", "value": 0.7},
    {"type": "scalar", "key": "train/loss", "step": 1, "wall_time": "2026-08-04T12:00:02Z", "value": 0.8},
    {"type": "scalar", "key": "..", "wall_time": "2026-08-04T12:00:03+02:00", "value": 1.0},
    {"type": "scalar", "key": "..", "wall_time": "2026-08-04T12:00:04+02:00", "value": 1.0},
    {"type": "histogram", "key": "custom", "value": [1, 2]},
]


def full_record(path, **over) -> Path:
    kw = dict(meta={"creator": {"name": "test", "version": "1"}, "created_at": "2026-08-04T00:00:00Z",
                    "x_unknown": None},
              system=SYSTEM, frame=rich_frame(),
              status={"state": "succeeded", "epoch": 3, "progress": {"done": 1.0}, "x_custom": [1]},
              method={"type": "classical", "description": "NVT", "engine": {"name": "molrs", "version": "1"}},
              observables=OBSERVABLES, metrics=EVENTS)
    kw.update(over)
    return mrec.write_record(path, **kw)


# -- documents (mrec-notes §1.2, §1.3, §9.3) ----------------------------------------------------

@pytest.mark.parametrize("section", ["meta", "status", "method"])
def test_document_vectors(tmp_path, section):
    for f in sorted((CORE / section).glob("*.json")):
        doc = json.loads(f.read_text())
        extra = {} if section == "status" else {"status": {"state": "running"}}
        target = tmp_path / f"{f.stem}.mrec"
        if f.name.startswith("valid-"):
            p = mrec.write_record(target, **{section: doc}, **extra)
            assert getattr(mrec.read_record(p), section) == doc, f.name
        else:
            with pytest.raises(RefusalError) as e:
                mrec.write_record(target, **{section: doc}, **extra)
            assert e.value.kind in ("missing_key", "bad_version", "bad_document"), f.name
            assert not target.exists()


@pytest.mark.parametrize("version,ok", [(1, True), (2, True), (3, False), (0, False), (None, False),
                                        (True, False), (1.0, False), ("1", False), (-1, False)])
def test_molrec_version_rule(tmp_path, version, ok):
    """Never required; when present the JSON integer 1 or 2 (mrec-notes §0), on write and on read."""
    frame = {"a": {"x": [1.0]}}
    if ok:
        p = mrec.write_record(tmp_path / "r.mrec", meta={"molrec_version": version}, frame=frame)
        assert mrec.read_record(p).meta == {"molrec_version": version}
        return
    with pytest.raises(RefusalError) as e:
        mrec.write_record(tmp_path / "r.mrec", meta={"molrec_version": version}, frame=frame)
    assert e.value.kind == "bad_version"
    # the same value planted in a stored meta is refused on read
    p = mrec.write_record(tmp_path / "ok.mrec", frame=frame)
    doc = zjson(p, "meta")
    doc["attributes"]["molrec_version"] = version
    set_zjson(p, "meta", doc)
    with pytest.raises(RefusalError) as e:
        mrec.read_record(p)
    assert e.value.kind == "bad_version" and "meta" in str(e.value)


def test_absent_version_and_absent_meta_read(tmp_path):
    p = mrec.write_record(tmp_path / "r.mrec", frame={"a": {"x": [1.0]}})
    assert zjson(p, "meta")["attributes"] == {}
    (p / "meta" / "zarr.json").unlink()
    (p / "meta").rmdir()
    assert mrec.read_record(p).meta == {}                 # a missing meta reads as an empty document


@pytest.mark.parametrize("section,doc,kind", [
    ("status", {"stage": "x"}, "missing_key"),
    ("status", {"state": "running", "epoch": -1}, "bad_document"),
    ("status", {"state": "running", "started_at": "2026-08-04T00:00:00"}, "bad_document"),
    ("status", {"state": "failed", "error": {"type": "X"}}, "missing_key"),
    ("method", {"type": "ml", "description": "x", "engine": {}}, "missing_key"),
    ("method", {"type": "workflow", "description": "w", "engine": {"name": "e"},
                "stages": {"a": {"type": "ml"}}}, "missing_key"),
    ("meta", {"author": {"email": "a@b"}}, "missing_key"),
    ("meta", {"created_at": "yesterday"}, "bad_document"),
    ("meta", {"x": float("nan")}, "bad_document"),
    ("meta", {"modules": {"qm": 3}}, "bad_document"),
])
def test_document_refusals(tmp_path, section, doc, kind):
    with pytest.raises(RefusalError) as e:
        mrec.write_record(tmp_path / "r.mrec", frame={"a": {"x": [1.0]}}, **{section: doc})
    assert e.value.kind == kind
    assert not (tmp_path / "r.mrec").exists() and os.listdir(tmp_path) == []


def test_status_only_record_and_empty_record_refused(tmp_path):
    p = mrec.write_record(tmp_path / "run.mrec", status={"state": "pending"})
    assert mrec.sections(p) == ["meta", "status"]
    with pytest.raises(RefusalError) as e:
        mrec.write_record(tmp_path / "empty.mrec", meta={"a": 1}, method={"type": "ml", "description": "d",
                                                                            "engine": {"name": "e"}})
    assert e.value.kind == "empty_record"
    assert not (tmp_path / "empty.mrec").exists()


# -- the whole record -----------------------------------------------------------------------

def test_full_round_trip_directory_and_zip(tmp_path):
    p = full_record(tmp_path / "full.mrec")
    assert mrec.sections(p) == ["meta", "status", "method", "system", "frame", "observables", "metrics"]
    # root and meta first (mrec-notes §1.1): the root group, then meta/
    assert zjson(p, "")["node_type"] == "group" and zjson(p, "meta")["attributes"]["x_unknown"] is None
    r = mrec.read_record(p)
    assert r.frame == rich_frame().rounded()
    assert r.system == mrec.Frame.from_any(SYSTEM)
    assert r.status["x_custom"] == [1] and r.method["engine"]["name"] == "molrs"
    assert set(r.observables) == set(OBSERVABLES)
    for name, spec in OBSERVABLES.items():
        o = r.observables[name]
        assert same(o.data, np.asarray(spec["data"], dtype=object if name == "labels" else None))
        assert o.meta == {k: v for k, v in spec.items() if k != "data"}
    assert r.unknown == {}
    z = mrec.pack(p)
    assert not p.exists() and z.name == "full.mrec.zip"
    with mrec.read_record(z) as rz:
        assert rz.frame == r.frame and rz.system == r.system and rz.meta == r.meta
        assert rz.status == r.status and rz.method == r.method and rz.metrics == r.metrics
        assert all(rz.observables[k] == r.observables[k] for k in OBSERVABLES)
    assert mrec.read_frame(z) == r.frame
    assert mrec.sections(z) == mrec.sections(tmp_path / "full.mrec.zip")


def test_frame_layout_on_disk(tmp_path):
    p = full_record(tmp_path / "f.mrec")
    attrs = zjson(p, "frame")["attributes"]
    assert attrs["_meta_types"] == {"pe": "f64", "step": "i64", "label": "string", "v": "i64x3", "big": "u64",
                                    "flag": "bool"}
    assert attrs["big"] == str(2 ** 63 + 5) and attrs["label"] == "NaN"          # typed JSON forms
    assert zjson(p, "frame/atoms")["attributes"] == {"count": 4, "targets": {"ref": "/system/atoms"}}
    assert zjson(p, "frame/grid")["attributes"] == {"count": 24, "structural_shape": [2, 3, 4],
                                                    "producer": {"k": None}}
    assert zjson(p, "frame/no_columns")["attributes"] == {"count": 7}
    x = zjson(p, "frame/atoms/x")
    assert x["attributes"] == {"precision": 1e-3}
    assert [c["name"] for c in x["codecs"]] == ["bytes", "numcodecs.shuffle", "zstd", "crc32c"]
    assert [c["name"] for c in zjson(p, "frame/atoms/pos")["codecs"]] == ["bytes", "crc32c"]
    assert [c["name"] for c in zjson(p, "frame/atoms/ref")["codecs"]] == ["bytes", "gzip", "crc32c"]
    assert [c["name"] for c in zjson(p, "frame/atoms/element")["codecs"]] == ["vlen-utf8", "gzip", "crc32c"]
    assert zjson(p, "frame/atoms/pos")["chunk_grid"]["configuration"]["chunk_shape"] == [4, 3]
    m = zjson(p, "frame/atoms/_validity/charge")
    assert m["data_type"] == "bool" and m["shape"] == [4]
    assert not (p / "frame/grid/_validity").exists()             # no masked column, no _validity group
    # the cell: vectors always, origin when not +0.0, boundary when not all true, cell_defined only if false
    assert zjson(p, "frame/box")["attributes"] == {}
    assert {q.name for q in (p / "frame/box").iterdir()} == {"zarr.json", "vectors", "origin", "boundary"}
    # precision values are on the grid, the stored values the rounded ones
    stored = Array.open(DirectoryStore(str(p)), "frame/atoms/x").read()
    q = 2.0 ** -10
    assert np.all(stored / q == np.rint(stored / q))


def test_every_dtype_and_trailing_shape_round_trips(tmp_path):
    blocks = {}
    for i, dt in enumerate(DTYPES):
        blocks[f"b_{dt}"] = {"flat": values_for(dt, (5,), i), "vec": values_for(dt, (5, 3), i + 50),
                             "mat": values_for(dt, (5, 2, 2), i + 100), "zero_width": values_for(dt, (5, 0), i)}
    f = mrec.Frame(blocks=blocks)
    p = mrec.write_record(tmp_path / "d.mrec", frame=f)
    back = mrec.read_frame(p)
    assert back == f
    for dt in DTYPES:
        for c in ("flat", "vec", "mat", "zero_width"):
            a = back.blocks[f"b_{dt}"][c]
            assert same(a, f.blocks[f"b_{dt}"][c]) and (dt == "string" or a.dtype == NUMPY_DTYPES[dt])


def test_undefined_cell(tmp_path):
    f = mrec.Frame(blocks={"a": {"x": [0.0]}}, box=mrec.Box(defined=False, origin=[1.0, 2.0, 3.0]))
    p = mrec.write_record(tmp_path / "u.mrec", frame=f)
    assert zjson(p, "frame/box")["attributes"] == {"cell_defined": False}
    vec = Array.open(DirectoryStore(str(p)), "frame/box/vectors")
    assert same(vec.read(), np.eye(3))                                   # identity vectors written
    assert same(Array.open(DirectoryStore(str(p)), "frame/box/boundary").read(), np.zeros(3, bool))
    # a reader ignores stored vectors of an undefined cell (even zeros)
    vec.write(np.zeros((3, 3)))
    back = mrec.read_frame(p)
    assert not back.box.defined and same(back.box.vectors, np.eye(3)) and same(back.box.origin, [1.0, 2.0, 3.0])


# -- write refusals: a clear kind, nothing on disk --------------------------------------------------

@pytest.mark.parametrize("frame,kind", [
    ({"box": {"x": [1.0]}}, "reserved_block_name"),
    ({"a": {"_validity": [1.0]}}, "reserved_column_name"),
    ({"a": {"x": [1.0, 2.0], "y": [1.0]}}, "row_count_mismatch"),
    ({"a": {"q": np.zeros(2, np.float32)}}, "narrow_float"),
    ({"a": {"x": np.zeros(2, "S3")}}, "unknown_dtype"),
    ({"blocks": {"a": {"x": [1.0]}}, "masks": {"a": {"x": [1]}}}, "bad_validity"),
    ({"blocks": {"a": {"x": [1.0]}}, "masks": {"a": {"x": [True, False]}}}, "bad_validity"),
    ({"blocks": {"a": {"x": [1.0]}}, "masks": {"a": {"y": [False]}}}, "bad_validity"),
    ({"blocks": {"a": {"i": [1]}}, "precision": {"a": {"i": 1e-3}}}, "bad_precision"),
    ({"blocks": {"a": {"x": [1.0]}}, "precision": {"a": {"x": 0.0}}}, "bad_precision"),
    ({"blocks": {"a": {"x": [1.0]}}, "meta": {"_meta_types": 1}}, "reserved_meta_key"),
    ({"blocks": {"a": {"x": [1.0]}}, "meta": {"k": 1.5}, "meta_types": {"k": "i32"}}, "meta_tag_mismatch"),
    ({"blocks": {"a": {"x": [1.0, 2.0]}}, "block_attrs": {"a": {"structural_shape": [3]}}},
     "structural_shape_mismatch"),
    ({"blocks": {"a": {"r": np.array([5], "u8")}}, "block_attrs": {"a": {"targets": {"r": "a"}}}}, "bad_reference"),
    ({"blocks": {"a": {"r": np.array([5], "u8")}}, "block_attrs": {"a": {"targets": {"r": "/system/atoms"}}}},
     "bad_reference"),
    ({"blocks": {"a": {"r": np.array([0], "u8")}}, "block_attrs": {"a": {"targets": {"r": "/trajectory/a"}}}},
     "bad_reference"),
    ({"blocks": {"a": {"x": [1.0]}}, "box": {"vectors": np.eye(3), "boundary": [1, 0, 1]}}, "bad_box"),
])
def test_frame_write_refusals(tmp_path, frame, kind):
    with pytest.raises(RefusalError) as e:
        mrec.write_record(tmp_path / "r.mrec", frame=frame, system=SYSTEM)
    assert e.value.kind == kind, e.value
    assert os.listdir(tmp_path) == []


def test_existing_path_is_refused_and_left_alone(tmp_path):
    p = mrec.write_record(tmp_path / "r.mrec", frame={"a": {"x": [1.0]}})
    before = tree_hash(p)
    with pytest.raises(RefusalError) as e:
        mrec.write_record(p, frame={"a": {"x": [2.0]}})
    assert e.value.kind == "exists" and tree_hash(p) == before
    mrec.write_record(p, frame={"a": {"x": [2.0]}}, overwrite=True)
    assert same(mrec.read_frame(p).blocks["a"]["x"], [2.0])
    assert sorted(os.listdir(tmp_path)) == ["r.mrec"]                  # no temporary left behind


class FullDisk(PosixFileSystem):
    """A file system whose disk fills up after ``after`` file writes (replace)."""

    def __init__(self, after):
        self.left = after

    def replace(self, path, data, *, fsync=False):
        self.left -= 1
        if self.left < 0:
            raise OSError(28, "No space left on device")
        return super().replace(path, data, fsync=fsync)


def test_crash_while_writing_leaves_no_record(tmp_path):
    """The record appears under its name only once complete: a failure part-way leaves nothing."""
    for after in (0, 3, 10, 25):
        with pytest.raises(OSError):
            full_record(tmp_path / "r.mrec", fs=FullDisk(after))
        assert os.listdir(tmp_path) == [], after


# -- read refusals on tampered stores ------------------------------------------------------------

def _tamper_dtype(p):
    d = zjson(p, "frame/a/x")
    d["data_type"] = "float32"
    set_zjson(p, "frame/a/x", d)


def _tamper_count(p):
    d = zjson(p, "frame/a")
    d["attributes"]["count"] = 3
    set_zjson(p, "frame/a", d)


def _tamper_no_count(p):
    d = zjson(p, "frame/a")
    del d["attributes"]["count"]
    set_zjson(p, "frame/a", d)


def _replace_mask(p, values, dtype):
    """Rewrite frame/a's mask of x as ``values`` stored as ``dtype``."""
    store = DirectoryStore(str(p))
    from mrec.record.sections.fixed import write_fixed_array
    for k in list(store.list("frame/a/_validity/x")):
        store.delete(k)
    write_fixed_array(store, "frame/a/_validity/x", values, dtype)


def _tamper_mask_dtype(p):
    _replace_mask(p, np.array([1, 0], "u1"), "u8")


def _tamper_mask_length(p):
    _replace_mask(p, np.array([True, False, True]), "bool")


def _tamper_mask_orphan(p):
    os.rename(p / "frame/a/_validity/x", p / "frame/a/_validity/nothing")


def _tamper_meta_tag(p):
    d = zjson(p, "frame")
    d["attributes"]["k"] = 1.5
    set_zjson(p, "frame", d)


def _tamper_precision_on_int(p):
    d = zjson(p, "frame/a/i")
    d["attributes"]["precision"] = 0.001
    set_zjson(p, "frame/a/i", d)


def _tamper_obs_pair(p):
    import shutil
    shutil.rmtree(p / "observables/meta/e")


def _tamper_obs_meta(p):
    d = zjson(p, "observables/meta/e")
    del d["attributes"]["kind"]
    set_zjson(p, "observables/meta/e", d)


def _tamper_status(p):
    d = zjson(p, "status")
    del d["attributes"]["state"]
    set_zjson(p, "status", d)


def _tamper_target(p):
    d = zjson(p, "system/atoms")
    d["attributes"]["count"] = 1
    set_zjson(p, "system/atoms", d)
    d = zjson(p, "system/atoms/id")
    d["shape"] = [1]
    set_zjson(p, "system/atoms/id", d)


@pytest.mark.parametrize("tamper,kind,where", [
    (_tamper_dtype, "narrow_float", "frame/a/x"),
    (_tamper_count, "row_count_mismatch", "frame/a/"),
    (_tamper_no_count, "row_count_mismatch", "frame/a"),
    (_tamper_mask_dtype, "bad_validity", "frame/a/_validity/x"),
    (_tamper_mask_length, "bad_validity", "frame/a/_validity/x"),
    (_tamper_mask_orphan, "bad_validity", "frame/a/_validity/nothing"),
    (_tamper_meta_tag, "meta_tag_mismatch", "frame"),
    (_tamper_precision_on_int, "bad_precision", "frame"),
    (_tamper_obs_pair, "bad_observable", "observables/e"),
    (_tamper_obs_meta, "bad_observable", "observables/meta/e"),
    (_tamper_status, "missing_key", "status"),
    (_tamper_target, "bad_reference", "frame"),
])
@pytest.mark.parametrize("packed", [False, True])
def test_read_refusals(tmp_path, tamper, kind, where, packed):
    p = mrec.write_record(
        tmp_path / "t.mrec", status={"state": "running"},
        system={"atoms": {"id": np.arange(3, dtype="u8")}},
        frame={"blocks": {"a": {"x": [1.0, 2.0], "i": [1, 2], "r": np.array([0, 2], "u8")}},
               "masks": {"a": {"x": [True, False]}}, "meta": {"k": 1}, "meta_types": {"k": "i32"},
               "block_attrs": {"a": {"targets": {"r": "/system/atoms"}}}},
        observables={"e": {"data": [1.0], "kind": "scalar", "description": "e", "time_dependent": False}})
    tamper(p)
    before = tree_hash(p)
    target = mrec.pack(p, keep=True) if packed else p
    with pytest.raises(RefusalError) as e:
        mrec.read_record(target)
    assert e.value.kind == kind, e.value
    assert where in str(e.value)
    assert tree_hash(p) == before                                      # a refused read changes nothing


def test_unknown_content_preserved_verbatim(tmp_path):
    p = full_record(tmp_path / "u.mrec")
    from mrec.check.fixtures import plant_unknown_nodes
    # an unknown root section, an unknown node inside a block, an array beside the blocks, and a force
    # field table no style names (modelled since issue 13: kept inside the force field, not as bytes)
    plant_unknown_nodes(DirectoryStore(str(p)))
    (p / "metrics" / "metrics.jsonl").write_bytes(b'{"t":"scalar","k":"train/loss","s":9,"w":"2026-08-04T12:00:09Z","v":0.1}\n')
    r = mrec.read_record(p)
    assert "forcefield" in r.sections() and "x_section" in r.sections()
    assert r.forcefield.unnamed_tables() == ["pair.lj%2Fcut"]
    expect = {k: v for k, v in tree(p).items()
              if k.startswith(("x_section/", "frame/atoms/x_vendor_group/", "frame/loose_array/"))}
    assert set(r.unknown) == set(expect)
    out = r.write(tmp_path / "copy.mrec")
    t_in, t_out = tree(p), tree(out)
    for k in [*expect, *(k for k in t_in if k.startswith("forcefield/"))]:
        assert t_out[k] == t_in[k], k
    assert t_out["metrics/metrics.jsonl"] == t_in["metrics/metrics.jsonl"]
    r2 = mrec.read_record(out)
    assert r2.frame == r.frame and r2.system == r.system and r2.meta == r.meta and r2.unknown == r.unknown
    # the whole model re-written equals the original tree, key for key
    assert set(t_out) == set(t_in)


def test_forcefield_only_record_is_substantive(tmp_path):
    p = mrec.write_record(tmp_path / "a.mrec", frame={"a": {"x": [1.0]}})
    r = mrec.read_record(p)
    r.frame = None
    r.unknown = {"forcefield/zarr.json": json.dumps({"zarr_format": 3, "node_type": "group",
                                                     "attributes": {"name": "ff", "units": {"preset": "real"},
                                                                    "styles": []}}).encode()}
    out = r.write(tmp_path / "ff.mrec")
    assert mrec.sections(out) == ["meta", "forcefield"]


# -- fixed-size extents (chapter "Reference writer: extents") --------------------------------------

@pytest.mark.parametrize("dtype,shape,chunk,inner", [
    ("f64", (10,), [10], None),
    ("f64", (65536,), [65536], None),                     # exactly 512 KiB: one chunk
    ("f64", (65537,), [65536], None),                     # two chunks
    ("f64", (4 * 65536,), [65536], None),                 # four chunks: still plain
    ("f64", (4 * 65536 + 1,), [5 * 65536], [65536]),      # five: one shard, index at the end
    ("f64", (100000, 3), [21845 * 5, 3], [21845, 3]),    # trailing axes never split, rows of 24 bytes
    ("u8", (100,), [100], None),
    ("string", (300000,), [300000], None),                # strings: one chunk
    ("f64", (0,), [1], None),                             # empty leading axis: one chunk
    ("f64", (0, 3), [1, 3], None),
    ("f64", (), [], None),                                # 0-d: one chunk
    ("f64", (5, 0), [5, 1], None),                        # zero-width rows
    ("c128", (100000,), [32768], None),              # 16-byte rows: 4 chunks, plain
    ("c128", (200000,), [32768 * 7], [32768]),
])
def test_fixed_extents(tmp_path, dtype, shape, chunk, inner):
    lay = fixed_layout(dtype, shape)
    assert list(lay.chunk_shape) == chunk
    assert (list(lay.inner) if lay.inner else None) == inner
    data = values_for(dtype, shape)
    p = mrec.write_record(tmp_path / "e.mrec", status={"state": "done"},
                          observables={"a": {"data": data, "kind": "k", "description": "", "time_dependent": False}})
    z = zjson(p, "observables/a")
    assert z["chunk_grid"]["configuration"]["chunk_shape"] == chunk
    outer = z["codecs"][0]
    if inner:
        assert outer["name"] == "sharding_indexed"
        assert outer["configuration"]["index_location"] == "end"
        assert outer["configuration"]["chunk_shape"] == inner
        assert [c["name"] for c in outer["configuration"]["index_codecs"]] == ["bytes", "crc32c"]
        assert len(list((p / "observables/a/c").rglob("*"))) == 1 + len(shape) - 1  # one shard file
    else:
        assert outer["name"] in ("bytes", "vlen-utf8")
    assert same(mrec.read_record(p).observables["a"].data, data)


@settings(max_examples=60)
@given(n=st.integers(0, 3 * 10 ** 5), width=st.sampled_from([1, 2, 4, 8, 24, 4096]))
def test_fixed_extent_rule(n, width):
    """rows = min(N, max(1, floor(512 KiB / row_bytes))); <= 4 chunks plain, else one shard."""
    trailing = () if width == 1 else (width,)
    lay = fixed_layout("u8", (n, *trailing))
    if n == 0:
        assert lay.chunk_shape[0] == 1 and lay.inner is None
        return
    rows = min(n, max(1, (512 * 1024) // width))
    chunks = -(-n // rows)
    if chunks <= 4:
        assert lay.chunk_shape[0] == rows and lay.inner is None
    else:
        assert lay.chunk_shape[0] == rows * chunks and lay.inner[0] == rows


# -- observables and metrics ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["valid-ir.json", "invalid-bad-entry.json"])
def test_observables_vectors(tmp_path, name):
    doc = json.loads((OBS / "observables" / name).read_text())["observables"]
    obs = {}
    for k, v in doc.items():
        if "data" in v:
            v = {"data": np.array(v["data"]["values"], dtype=NUMPY_DTYPES[v["data"]["dtype"]]), "meta": v["meta"]}
        obs[k] = v
    if name.startswith("valid"):
        p = mrec.write_record(tmp_path / "o.mrec", status={"state": "x"}, observables=obs)
        r = mrec.read_record(p)
        assert r.observables["ir"].meta == doc["ir"]["meta"]           # unknown kind and null key carried
    else:
        with pytest.raises(RefusalError) as e:
            mrec.write_record(tmp_path / "o.mrec", status={"state": "x"}, observables=obs)
        assert e.value.kind == "bad_observable"


@pytest.mark.parametrize("obs", [
    {"meta": {"data": [1.0], "kind": "s", "description": "", "time_dependent": False}},
    {"a/b": {"data": [1.0], "kind": "s", "description": "", "time_dependent": False}},
    {"a": {"data": [1.0], "description": "", "time_dependent": False}},
    {"a": {"data": [1.0], "kind": "s", "description": "", "time_dependent": 1}},
    {"a": {"data": 1.0, "kind": "s", "description": "", "time_dependent": True}},
    {"a": {"data": [1.0], "kind": "s", "description": "", "time_dependent": False, "axes": "x"}},
    {"a": {"data": [1.0], "kind": "", "description": "", "time_dependent": False}},
])
def test_observable_refusals(tmp_path, obs):
    with pytest.raises(RefusalError) as e:
        mrec.write_record(tmp_path / "o.mrec", status={"state": "x"}, observables=obs)
    assert e.value.kind in ("bad_observable", "reserved_block_name")
    assert os.listdir(tmp_path) == []


def test_metrics_dense_series_layout_and_rules(tmp_path):
    p = full_record(tmp_path / "m.mrec")
    cat = zjson(p, "metrics")["attributes"]
    assert cat["series"] == {
        "train/loss": {"type": "scalar", "count": 2, "latest_step": 2, "latest_timestamp": "2026-08-04T12:00:01Z"},
        "..": {"type": "scalar", "count": 2, "latest_step": None, "latest_timestamp": "2026-08-04T12:00:04+02:00"},
    }
    s = mrec.read_record(p).metrics.series["train/loss"]
    assert same(s.values, np.array([0.8, 0.7])) and same(s.steps, np.array([1, 2], "i8"))   # later wins
    assert s.wall_time == ["2026-08-04T12:00:02Z", "2026-08-04T12:00:01Z"]
    assert (p / "metrics/series/train%2Floss/zarr.json").exists()
    assert (p / "metrics/series/%2E./zarr.json").exists() and not (p / "metrics/steps/%2E.").exists()
    assert zjson(p, "metrics/wall_time/train%2Floss")["data_type"] == "string"


def test_metrics_wal_past_watermark_is_applied(tmp_path):
    p = mrec.write_record(tmp_path / "m.mrec", status={"state": "running"}, metrics=EVENTS[:2])
    line1 = b'{"t":"scalar","k":"train/loss","s":1,"w":"2026-08-04T12:00:00Z","v":0.9}\n'
    line2 = b'{"t":"scalar","k":"train/loss","s":3,"w":"2026-08-04T12:00:05Z","v":"NaN"}\n'
    (p / "metrics/metrics.jsonl").write_bytes(line1 + line2 + b'{"t":"scal')   # torn tail ignored
    d = zjson(p, "metrics")
    d["attributes"]["wal"] = {"lines": 1, "bytes": len(line1)}
    set_zjson(p, "metrics", d)
    s = mrec.read_record(p).metrics.series["train/loss"]
    assert same(s.steps, np.array([1, 2, 3], "i8")) and np.isnan(s.values[2])


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=12))
def test_metrics_safe_names_reversible(key):
    name = safe_name(key)
    assert unsafe_name(name) == key
    assert name not in (".", "..") and not name.startswith("__") and "/" not in name
    assert all(c.isascii() and (c.isalnum() or c in "._-%") for c in name)


# -- the system 1:1 row rule (mrec-notes §3.1) --------------------------------------------------------

def _traj_schema(rows):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=rows)
    s.declare_column("atoms", "x", "f64")
    s.declare_column("atoms", "id", "u64")
    return s


def test_system_alignment_enforced_by_writer(tmp_path):
    p = mrec.write_record(tmp_path / "s.mrec", system={"atoms": {"id": np.arange(3, dtype="u8")}})
    with mrec.TrajectoryWriter.create(p, _traj_schema(3)) as w:
        w.append({"atoms": {"x": np.zeros(3), "id": np.arange(3, dtype="u8")}})
        before = tree_hash(p)
        for bad in ({"atoms": {"x": np.zeros(4), "id": np.arange(4, dtype="u8")}},
                    {"atoms": {"x": np.zeros(3), "id": np.array([2, 1, 0], "u8")}}):
            with pytest.raises(RefusalError) as e:
                w.append(bad)
            assert e.value.kind == "row_count_mismatch"
        assert tree_hash(p) == before
        w.append({"atoms": {"x": np.ones(3), "id": np.arange(3, dtype="u8")}})
    with mrec.TrajectoryWriter.open(p) as w:                            # the rule holds after reopen too
        with pytest.raises(RefusalError):
            w.append({"atoms": {"x": np.zeros(2), "id": np.arange(2, dtype="u8")}})
    r = mrec.read_record(p)
    assert r.sections() == ["meta", "system", "trajectory"] and len(r.trajectory) == 2
    p2 = mrec.write_record(tmp_path / "s2.mrec", system={"atoms": {"id": np.arange(3, dtype="u8")}})
    before = tree_hash(p2)
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryWriter.create(p2, _traj_schema(5))
    assert e.value.kind == "row_count_mismatch" and tree_hash(p2) == before


def test_system_alignment_refused_on_read(tmp_path):
    p = mrec.write_record(tmp_path / "s.mrec", frame={"a": {"x": [1.0]}})
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"atoms": {"x": np.zeros(2)}})
        w.append({"atoms": {"x": np.zeros(3)}})                       # ragged: fine without a system
    from mrec.record.sections.frame_group import write_frame_group
    write_frame_group(DirectoryStore(str(p)), "system", mrec.Frame(blocks={"atoms": {"id": np.arange(2, dtype="u8")}}))
    with pytest.raises(RefusalError) as e:
        mrec.read_record(p)
    assert e.value.kind == "row_count_mismatch" and "trajectory" in str(e.value)


def test_read_frame_index_and_missing_sections(tmp_path):
    p = mrec.write_record(tmp_path / "s.mrec", system={"atoms": {"id": np.arange(2, dtype="u8")}})
    with pytest.raises(RefusalError) as e:
        mrec.read_frame(p)
    assert e.value.kind == "missing_section"
    with pytest.raises(RefusalError) as e:
        mrec.read_frame(p, 0)
    assert e.value.kind == "missing_section"
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(3):
            w.append({"atoms": {"x": np.full(2, float(i))}})
    z = mrec.pack(p)
    assert same(mrec.read_frame(z, 2).blocks["atoms"]["x"], np.full(2, 2.0))
    assert same(mrec.read_frame(z, -1).blocks["atoms"]["x"], np.full(2, 2.0))
    with pytest.raises(mrec.StoreError):
        mrec.read_record(tmp_path / "nothing.mrec")


# -- the packed form, read by mrec and by the oracles ------------------------------------------------

def test_pack_unpack_byte_identical_and_zip_reads_equal_directory(tmp_path):
    p = full_record(tmp_path / "r.mrec")
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=4)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(5):
            w.append({"atoms": {"x": np.arange(4.0) + i * 0.1}}, step=10 * i)
    before = tree(p)
    d = mrec.read_record(p)
    z = mrec.pack(p, keep=True)
    with mrec.read_record(z) as rz:
        assert rz.frame == d.frame and rz.system == d.system and len(rz.trajectory) == 5
        assert all(rz.trajectory[i] == d.trajectory[i] for i in range(5))
    with zipfile.ZipFile(z) as zf:
        infos = zf.infolist()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        assert not any(i.filename.endswith("/") for i in infos)
        assert {i.filename: zf.read(i) for i in infos} == before
    import shutil
    shutil.rmtree(p)
    out = mrec.unpack(z)
    assert tree(out) == before


def test_zip_written_by_python_zipfile_reads(tmp_path):
    p = full_record(tmp_path / "r.mrec")
    z = tmp_path / "other.mrec.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_STORED) as zf:
        for k, v in sorted(tree(p).items(), reverse=True):
            zf.writestr(k, v)
    with mrec.read_record(z) as r:
        assert r.frame == mrec.read_record(p).frame and r.observables["labels"].data.tolist() == ["a", "bb", "ccc"]


def _zarr_python_zip(z, path):
    store = zarr.storage.ZipStore(str(z), mode="r")
    try:
        return zarr.open_array(store=store, path=path, mode="r")[...]
    finally:
        store.close()


def _zarrs_zip(z, path):
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}):
        return _zarr_python_zip(z, path)


def _tensorstore_zip(z, path):
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "zip", "base": {"driver": "file", "path": str(z)},
                                                "path": path + "/"}}, open=True).result()
    return t.read().result()


def test_packed_record_read_by_every_oracle(tmp_path):
    """Every array of a packed record reads bit-identically through zarr-python's ZipStore, the zarrs
    pipeline and tensorstore's zip kvstore (where it has the codecs: no strings, no numcodecs.shuffle)."""
    p = full_record(tmp_path / "r.mrec", observables={**OBSERVABLES, "big": {
        "data": np.arange(5 * 65536 + 3, dtype="f8"), "kind": "k", "description": "", "time_dependent": False}})
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=4)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(3):
            w.append({"atoms": {"x": np.arange(4.0) * i}}, time=0.5 * i)
    arrays = every_array(p)
    z = mrec.pack(p)
    store = ZipStore(str(z))
    checked = {"zarr-python": 0, "zarrs": 0, "tensorstore": 0}
    for path in arrays:
        arr = Array.open(store, path)
        ours = arr.read()
        chain = json.dumps(arr.meta.to_json()["codecs"])
        is_string = arr.meta.data_type.name == "string"
        assert same(_zarr_python_zip(z, path), ours), path
        checked["zarr-python"] += 1
        if not is_string:
            assert same(_zarrs_zip(z, path), ours), path
            checked["zarrs"] += 1
        if not is_string and "numcodecs.shuffle" not in chain:
            assert same(_tensorstore_zip(z, path), ours), path
            checked["tensorstore"] += 1
    assert "observables/big" in arrays and all(n >= 10 for n in checked.values()), checked


def test_trajectory_frames_carry_the_declared_meta_tags(tmp_path):
    """A json-tagged bare string stays json (not re-inferred as string) when read back."""
    s = mrec.SequenceSchema()
    s.declare_block("a", rows=1)
    s.declare_column("a", "x", "f64")
    s.declare_meta("j", "json")
    s.declare_meta("n", "i32")
    with mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s) as w:
        w.append({"blocks": {"a": {"x": [1.0]}}, "meta": {"j": "hello", "n": 3}, "meta_types": {"j": "json"}})
    f = mrec.TrajectoryReader(tmp_path / "t.mrec")[0]
    assert f.meta == {"j": "hello", "n": 3} and f.meta_types == {"j": "json", "n": "i32"}


def test_pack_refuses_symbolic_links_and_changes_nothing(tmp_path):
    p = mrec.write_record(tmp_path / "l.mrec", frame={"a": {"x": [1.0]}})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not part of the record")
    os.symlink(outside, p / "linked")
    before = tree_hash(p)
    with pytest.raises(RefusalError) as e:
        mrec.pack(p)
    assert e.value.kind == "bad_layout" and "linked" in str(e.value)
    assert tree_hash(p) == before and not (tmp_path / "l.mrec.zip").exists()
    from mrec.fs import DEFAULT_FS, remove_tree
    remove_tree(DEFAULT_FS, str(p))                     # removing a tree never follows a link
    assert (outside / "secret").exists() and not p.exists()
