"""The golden fixture catalogue (fixtures/): deterministic regeneration, every valid fixture read
(directory and zip) equal to its sidecar, every invalid one refused with the sidecar's kind, and
every array of every valid fixture read bit-identically by zarr-python, the zarrs pipeline and
tensorstore (where they have the codecs: zarrs no strings, tensorstore no strings and no
numcodecs.shuffle).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

from mrec.errors import CorruptionError, RefusalError
from mrec.check.fixtures import INVALID, VALID, describe, make_fixtures, read_all, refusal_kind_of
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore
from mrec.zarr.stores.zip_read import ZipStore

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
VALID_NAMES = [v.name for v in VALID]
INVALID_NAMES = [v.name for v in INVALID]
CATALOGUE_KEYS = ("name", "covers", "rules")


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def sidecar(name: str, invalid: bool = False) -> dict:
    return json.loads((FIXTURES / ("invalid" if invalid else "") / f"{name}.json").read_text(encoding="utf-8"))


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "OUT" or b.dtype.kind in "OUT":
        return [str(x) for x in a.ravel()] == [str(x) for x in b.ravel()]
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_regeneration_is_byte_identical(tmp_path):
    make_fixtures(tmp_path)
    committed, fresh = files(FIXTURES), files(tmp_path)
    assert sorted(committed) == sorted(fresh)
    differ = [k for k in committed if committed[k] != fresh[k]]
    assert not differ, differ[:10]


def test_catalogue_is_small_and_names_known_rules():
    total = sum(len(b) for b in files(FIXTURES).values())
    assert total < 8_000_000, total
    ids = set(re.findall(r"^\| ([A-Za-z0-9.\-]+) \|", (ROOT / "docs/conformance.md").read_text(), re.M))
    for v in [*VALID, *INVALID]:
        assert set(v.rules) <= ids, (v.name, set(v.rules) - ids)
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    assert all(f"`{n}`" in readme for n in VALID_NAMES + INVALID_NAMES)


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_fixture_reads_as_its_sidecar(name):
    side = sidecar(name)
    expected = {k: v for k, v in side.items() if k not in CATALOGUE_KEYS}
    for form in (f"{name}.mrec", f"{name}.mrec.zip"):
        got = json.loads(json.dumps(describe(FIXTURES / form), allow_nan=False))
        assert got == expected, form


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_fixture_is_refused_with_its_kind(name):
    side = sidecar(name, invalid=True)
    assert side["valid"] is False and side["refusal_kind"] and side["what"]
    for form in (f"{name}.mrec", f"{name}.mrec.zip"):
        with pytest.raises((RefusalError, CorruptionError)) as e:
            read_all(FIXTURES / "invalid" / form)
        assert refusal_kind_of(e.value) == side["refusal_kind"], form


# -- the sidecar encoding, checked from the JSON alone (as another implementation would) ------------

NUMPY = {"f64": "<f8", "i8": "<i1", "i16": "<i2", "i32": "<i4", "i64": "<i8", "u8": "<u1", "u16": "<u2",
         "u32": "<u4", "u64": "<u8", "bool": "|b1", "c64": "<c8", "c128": "<c16"}
SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode_leaf(dtype: str, v):
    if dtype == "f64":
        return SPECIAL[v] if isinstance(v, str) else float(v)
    if dtype in ("c64", "c128"):
        return complex(decode_leaf("f64", v[0]), decode_leaf("f64", v[1]))
    if dtype in ("bool", "string"):
        assert isinstance(v, bool if dtype == "bool" else str)
        return v
    if isinstance(v, str):
        assert abs(int(v)) > 2 ** 53 - 1, v            # decimal strings only beyond the safe range
    else:
        assert isinstance(v, int) and not isinstance(v, bool)
    return int(v)


def digest(flat: list, dtype: str) -> str:
    h = hashlib.sha256()
    if dtype == "string":
        for x in flat:
            b = x.encode("utf-8")
            h.update(struct.pack("<I", len(b)) + b)
    else:
        h.update(np.array(flat, dtype=NUMPY[dtype]).tobytes())
    return h.hexdigest()


def columns_in(obj):
    if isinstance(obj, dict):
        if {"dtype", "shape", "sha256"} <= set(obj):
            yield obj
        else:
            for v in obj.values():
                yield from columns_in(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from columns_in(v)


def flatten(values, shape):
    if not shape:
        return [values]
    assert isinstance(values, list) and len(values) == shape[0]
    return [x for v in values for x in flatten(v, shape[1:])]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_sidecar_values_hash_to_their_sha256(name):
    """Every listed column's values, decoded by the documented rules, hash to its sha256 (the NaN
    payloads being the canonical quiet NaN wherever values are listed)."""
    for col in columns_in(sidecar(name)):
        if "values" not in col:
            assert math.prod(col["shape"]) > 4096
            continue
        flat = [decode_leaf(col["dtype"], v) for v in flatten(col["values"], col["shape"])]
        assert digest(flat, col["dtype"]) == col["sha256"], col
        if col["mask"] is not None:
            assert len(col["mask"]) == col["shape"][0]


# -- oracle agreement ----------------------------------------------------------------------------

ZARRS = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}


def dtype_name(a: np.ndarray) -> str:
    return next(k for k, v in NUMPY.items() if np.dtype(v) == a.dtype.newbyteorder("<") or np.dtype(v) == a.dtype)


def _zarr_dir(path: Path):
    return zarr.open_array(str(path), mode="r")[...]


def _zarr_zip(z: Path, array: str):
    store = zarr.storage.ZipStore(str(z), mode="r")
    try:
        return zarr.open_array(store=store, path=array, mode="r")[...]
    finally:
        store.close()


def _ts_dir(path: Path):
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, open=True).result() \
        .read().result()


def _ts_zip(z: Path, array: str):
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "zip", "base": {"driver": "file", "path": str(z)},
                                                   "path": array + "/"}}, open=True).result().read().result()


@pytest.mark.parametrize("name", VALID_NAMES)
def test_every_array_read_identically_by_every_oracle(name):
    arrays = sidecar(name)["arrays"]
    d, z = FIXTURES / f"{name}.mrec", FIXTURES / f"{name}.mrec.zip"
    dstore, zstore = DirectoryStore(str(d)), ZipStore(str(z))
    try:
        for path, info in arrays.items():
            ours = Array.open(dstore, path).read()
            assert same(Array.open(zstore, path).read(), ours), path
            doc = json.loads((d / path / "zarr.json").read_text(encoding="utf-8"))
            chain = json.dumps(doc["codecs"])
            string = doc["data_type"] == "string"
            assert info["shape"] == list(ours.shape)
            flat = [str(x) for x in ours.ravel()] if string else ours.ravel().tolist()
            assert digest(flat, "string" if string else dtype_name(ours)) == info["sha256"], path
            assert same(_zarr_dir(d / path), ours), ("zarr-python", path)
            assert same(_zarr_zip(z, path), ours), ("zarr-python zip", path)
            if not string:
                with zarr.config.set(ZARRS):
                    za = zarr.open_array(str(d / path), mode="r")
                    assert "zarrs" in type(za._async_array.codec_pipeline).__module__
                    assert same(za[...], ours), ("zarrs", path)
                    assert same(_zarr_zip(z, path), ours), ("zarrs zip", path)
            if not string and "numcodecs.shuffle" not in chain:
                assert same(_ts_dir(d / path), ours), ("tensorstore", path)
                assert same(_ts_zip(z, path), ours), ("tensorstore zip", path)
    finally:
        zstore.close()


# -- mrec fixes found while building the catalogue ------------------------------------------------

def test_dict_frame_meta_takes_the_declared_tags(tmp_path):
    """A dict frame's meta is coerced by the declared tags, not inferred first: an f64x3 holding
    Infinity used to be inferred as a json value and refused as non-finite."""
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("a", rows=1)
    s.declare_column("a", "x", "f64")
    s.declare_meta("v", "f64x3")
    s.declare_meta("n", "u64")
    with mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s) as w:
        w.append({"blocks": {"a": {"x": [0.0]}}, "meta": {"v": [1.0, float("inf"), -0.0], "n": 2 ** 64 - 1}})
    f = mrec.TrajectoryReader(tmp_path / "t.mrec")[0]
    assert f.meta_types == {"v": "f64x3", "n": "u64"} and f.meta["n"] == 2 ** 64 - 1
    assert np.asarray(f.meta["v"]).tobytes() == np.array([1.0, np.inf, -0.0]).tobytes()
