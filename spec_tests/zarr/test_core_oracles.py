"""Zarr V3 core against the oracles, both directions, over codec × data type × chunking × index_location.

(a) zarr-python writes, mrec reads bit for bit; (b) mrec writes, zarr-python, the zarrs pipeline and
tensorstore read bit for bit (tensorstore lacks numcodecs.shuffle and strings; zarrs lacks strings:
those combinations are excluded by parametrisation); (c) mrec's encoded inner chunks equal
zarr-python's byte for byte where both use the same compression library (gzip: numcodecs writes the
current time into the header's mtime bytes 4..8, so those 4 bytes are masked).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

from mrec.errors import CorruptionError, MetadataError, UnsupportedError
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array, write_group
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.stores.directory import DirectoryStore

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float64", "complex64", "complex128", "string"]
BB = {
    "none": [],
    "gzip": [{"name": "gzip", "configuration": {"level": 1}}],
    "zstd": [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
    "shuffle+zstd": [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
                     {"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
}
CRC = [{"name": "crc32c"}]


def data_for(dtype: str, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "string":
        words = np.array(["", "a", "Ö", "hello", "wörld", "x" * 40], dtype=object)
        return words[rng.integers(0, len(words), size=shape)]
    dt = DATA_TYPES[dtype].numpy
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        a = rng.normal(size=shape) * 1e3
        a.flat[0] = np.nan
        if a.size > 1:
            a.flat[1] = -0.0
        return a
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)


def serializer(dtype):
    if dtype == "string":
        return {"name": "vlen-utf8", "configuration": {}}
    return {"name": "bytes", "configuration": {"endian": "little"}}


def codecs_json(dtype, bb, sharded, loc, inner):
    bbs = json.loads(json.dumps(BB[bb]))
    for c in bbs:
        if c["name"] == "numcodecs.shuffle":
            c["configuration"]["elementsize"] = DATA_TYPES[dtype].itemsize
    chain = [serializer(dtype)] + bbs + CRC
    if not sharded:
        return chain
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(inner), "codecs": chain,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": loc}}]


def meta_json(dtype, shape, chunk, codecs):
    dt = DATA_TYPES[dtype]
    fill = {"bool": False, "string": "", "float64": "NaN", "complex64": [0.0, 0.0], "complex128": [0.0, 0.0]}.get(dtype, 0)
    return {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": dt.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": codecs, "attributes": {}}


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype.kind in "OUT":
        return a.shape == b.shape and [str(x) for x in a.ravel()] == [str(x) for x in b.ravel()]
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


CASES = [(dt, bb, sh, loc) for dt in DTYPES for bb in BB for sh, loc in ((False, None), (True, "start"), (True, "end"))
         if not (bb == "shuffle+zstd" and dt == "string")]


def _mrec_write(root, dtype, bb, sharded, loc, shape=(37, 3), chunk=(16, 3), inner=(4, 3)):
    store = DirectoryStore(root)
    write_group(store, "")
    doc = meta_json(dtype, shape, chunk, codecs_json(dtype, bb, sharded, loc, inner))
    meta = ArrayMetadata.from_json(doc, "a")
    arr = Array.create(store, "a", meta)
    data = data_for(dtype, shape)
    arr.write(data)
    return data


@pytest.mark.parametrize("dtype,bb,sharded,loc", CASES)
def test_zarr_python_writes_mrec_reads(tmp_path, dtype, bb, sharded, loc):
    root = tmp_path / "z"
    root.mkdir()
    (root / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    (root / "a").mkdir()
    shape, chunk, inner = (37, 3), (16, 3), (4, 3)
    (root / "a" / "zarr.json").write_text(json.dumps(meta_json(dtype, shape, chunk, codecs_json(dtype, bb, sharded, loc, inner))))
    data = data_for(dtype, shape, seed=1)
    z = zarr.open_array(str(root / "a"), mode="r+")
    z[:] = data
    z[20:30] = data[0:10] if dtype != "string" else data[0:10]
    data[20:30] = data[0:10]
    mine = Array.open(DirectoryStore(root), "a")
    assert same(mine.read(), data)
    assert same(mine.read(slice(5, 33, 3)), data[5:33:3])


@pytest.mark.parametrize("dtype,bb,sharded,loc", CASES)
def test_mrec_writes_oracles_read(tmp_path, dtype, bb, sharded, loc):
    import tensorstore as ts
    root = tmp_path / "m"
    data = _mrec_write(root, dtype, bb, sharded, loc)
    z = zarr.open_array(str(root / "a"), mode="r")[...]
    assert same(z, data)
    if dtype != "string":
        with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
            za = zarr.open_array(str(root / "a"), mode="r")
            assert "zarrs" in type(za._async_array.codec_pipeline).__module__
            assert same(za[...], data)
        if "shuffle" not in bb:
            t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / "a")}}).result()
            assert same(t.read().result(), data)


@pytest.mark.parametrize("dtype,bb", [(d, b) for d in ["int32", "float64", "uint64", "bool", "complex128", "string"]
                                      for b in BB if not (b == "shuffle+zstd" and d == "string")])
def test_inner_chunk_bytes_equal_zarr_python(tmp_path, dtype, bb):
    shape = (32,)
    data = data_for(dtype, shape, seed=3)
    root = tmp_path / "z"
    root.mkdir()
    (root / "a").mkdir()
    (root / "a" / "zarr.json").write_text(json.dumps(meta_json(dtype, shape, (8,), codecs_json(dtype, bb, False, None, None))))
    zarr.open_array(str(root / "a"), mode="r+")[:] = data
    mine = Array.open(DirectoryStore(root), "a")
    for k in range(4):
        theirs = (root / "a" / "c" / str(k)).read_bytes()
        ours = mine.meta.codecs.encode(np.asarray(data[k * 8:(k + 1) * 8]), mine.chunk_spec(f"a/c/{k}"))
        if bb == "gzip":
            ours, theirs = bytearray(ours), bytearray(theirs)
            ours[4:8] = theirs[4:8] = b"\0\0\0\0"
            # the crc32c after the gzip member covers the mtime bytes: compare the gzip members only
            ours, theirs = bytes(ours[:-4]), bytes(theirs[:-4])
        assert ours == theirs, (dtype, bb, k)


def test_shard_grown_over_many_landings_and_shorter_logical_shape(tmp_path):
    import tensorstore as ts
    root = tmp_path / "g"
    store = DirectoryStore(root)
    write_group(store, "")
    doc = meta_json("float64", (0, 2), (64, 2), codecs_json("float64", "shuffle+zstd", True, "start", (8, 2)))
    arr = Array.create(store, "a", ArrayMetadata.from_json(doc, "a"))
    ap = ShardedAppender(arr)
    rows = []
    for k in range(40):                      # 3 rows a landing: partial tails re-encoded, shards crossed
        r = data_for("float64", (3, 2), seed=k)
        rows.append(r)
        ap.append(r)
        ap.land()
        arr.write_metadata()
    full = np.concatenate(rows)
    assert same(zarr.open_array(str(root / "a"), mode="r")[...], full)
    arr.set_shape((100, 2))                  # the logical shape is shorter than what is on disk
    assert same(zarr.open_array(str(root / "a"), mode="r")[...], full[:100])
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        assert same(zarr.open_array(str(root / "a"), mode="r")[...], full[:100])
    assert same(Array.open(store, "a").read(), full[:100])


# -- refusals name the file --------------------------------------------------------------------

def _doc(**over):
    d = meta_json("float64", (4,), (2,), codecs_json("float64", "none", False, None, None))
    d.update(over)
    return d


@pytest.mark.parametrize("doc,exc,kind", [
    (_doc(data_type="float32"), UnsupportedError, "narrow_float"),
    (_doc(data_type="float16"), UnsupportedError, "narrow_float"),
    (_doc(data_type="fixed_length_utf32"), UnsupportedError, "unknown_dtype"),
    (_doc(data_type="r16"), UnsupportedError, "unknown_dtype"),
    (_doc(storage_transformers=[{"name": "x"}]), UnsupportedError, "unsupported"),
    (_doc(codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "blosc"}]), UnsupportedError, "unsupported_codec"),
    (_doc(chunk_grid={"name": "rectilinear", "configuration": {}}), UnsupportedError, "unsupported"),
    (_doc(my_extension={"must_understand": True}), UnsupportedError, "unsupported"),
    (_doc(shape=[-1]), MetadataError, "bad_metadata"),
])
def test_metadata_refusals_name_the_file(tmp_path, doc, exc, kind):
    root = tmp_path / "r"
    (root / "a").mkdir(parents=True)
    (root / "a" / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(exc) as e:
        Array.open(DirectoryStore(root), "a")
    assert e.value.kind == kind
    assert os.path.join("a", "zarr.json").replace(os.sep, "/") in str(e.value).replace(os.sep, "/")


def test_crc_mismatch_names_array_and_chunk_key(tmp_path):
    root = tmp_path / "c"
    _mrec_write(root, "float64", "none", False, None)
    key = root / "a" / "c" / "1" / "0"
    raw = bytearray(key.read_bytes())
    raw[3] ^= 0x10
    key.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError) as e:
        Array.open(DirectoryStore(root), "a").read()
    assert "a/c/1/0" in str(e.value) and "crc32c" in str(e.value)


def test_missing_chunks_and_inner_chunks_read_as_fill(tmp_path):
    root = tmp_path / "f"
    data = _mrec_write(root, "int32", "gzip", True, "end")
    os.remove(root / "a" / "c" / "1" / "0")
    got = Array.open(DirectoryStore(root), "a").read()
    want = data.copy()
    want[16:32] = 0
    assert same(got, want)
