"""Core units: the POSIX I/O layer, fill values, chunk key encodings, codec configurations."""
from __future__ import annotations

import json
import math
import os
import struct

import numpy as np
import pytest
import zarr
from hypothesis import given, settings, strategies as st

from mrec.fs import PosixFileSystem, RecordingFileSystem
from mrec.zarr.array import Array
from mrec.zarr.dtypes import DATA_TYPES, fill_value_to_json, parse_fill_value
from mrec.zarr.metadata import ArrayMetadata, ChunkKeyEncoding
from mrec.zarr.codecs.registry import codec_from_json
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.stores.directory import DirectoryStore


def test_posix_io_layer(tmp_path):
    fs = PosixFileSystem()
    p = str(tmp_path / "f")
    fs.write_at(p, 10, b"abc")
    assert fs.size(p) == 13 and fs.read_range(p, 10, 10) == b"abc"
    fs.write_at(p, 0, b"xy")                                  # never truncates
    assert fs.size(p) == 13 and fs.read(p)[:2] == b"xy"
    fs.replace(p, b"new", fsync=True)
    assert fs.read(p) == b"new"
    assert [n for n in os.listdir(tmp_path) if "tmp" in n] == []  # the temp file was renamed
    fs.truncate(p, 1)
    assert fs.read(p) == b"n"
    fs.fsync(p)
    fs.fsync_dir(str(tmp_path))
    fs.makedirs(str(tmp_path / "a" / "b"))
    assert fs.list_dir(str(tmp_path)) == ["a", "f"] and fs.is_dir(str(tmp_path / "a"))
    fs.remove(p)
    assert not fs.exists(p)


def test_recording_io_logs_in_order(tmp_path):
    fs = RecordingFileSystem(record_reads=True)
    p = str(tmp_path / "g")
    fs.write_at(p, 4, b"1234")
    fs.replace(p, b"zz", fsync=True)
    fs.read_range(p, 0, 2)
    fs.fsync(p)
    kinds = [(o.kind, o.offset, o.length, o.fsync) for o in fs.ops]
    assert kinds == [("write_at", 4, 4, False), ("replace", 0, 2, True), ("read_range", 0, 2, False), ("fsync", None, None, False)]
    assert fs.bytes_written() == 6


@pytest.mark.parametrize("dtype,value,expect", [
    ("float64", "NaN", math.nan), ("float64", "Infinity", math.inf), ("float64", "-Infinity", -math.inf),
    ("float64", "0x3ff0000000000000", 1.0), ("float64", 2.5, 2.5), ("int8", -3, -3), ("uint64", 2**64 - 1, 2**64 - 1),
    ("bool", True, True), ("string", "abc", "abc"), ("complex128", [1.0, "NaN"], complex(1.0, math.nan)),
])
def test_fill_values(dtype, value, expect):
    dt = DATA_TYPES[dtype]
    v = parse_fill_value(value, dt, "a/zarr.json")
    if dtype == "complex128":
        assert v.real == expect.real and math.isnan(v.imag)
    elif isinstance(expect, float) and math.isnan(expect):
        assert math.isnan(v)
    else:
        assert v == expect
    again = parse_fill_value(fill_value_to_json(v, dt), dt, "x")
    assert np.asarray(again).tobytes() == np.asarray(v).tobytes() if dtype != "string" else again == v


def test_nan_payload_fill_round_trips_as_hex():
    dt = DATA_TYPES["float64"]
    odd = struct.unpack(">d", bytes.fromhex("7ff8000000000001"))[0]
    j = fill_value_to_json(np.float64(odd), dt)
    assert j == "0x7ff8000000000001"
    assert np.float64(parse_fill_value(j, dt, "x")).tobytes() == np.float64(odd).tobytes()


@pytest.mark.parametrize("bad", [None, "1", 1.5, [1]])
def test_bad_integer_fill_refused(bad):
    from mrec.errors import MetadataError
    with pytest.raises(MetadataError) as e:
        parse_fill_value(bad, DATA_TYPES["int32"], "arr/zarr.json")
    assert "arr/zarr.json" in str(e.value)


@pytest.mark.parametrize("enc,key", [({"name": "default", "configuration": {"separator": "/"}}, "c/1/2"),
                                     ({"name": "default", "configuration": {"separator": "."}}, "c.1.2"),
                                     ({"name": "v2", "configuration": {"separator": "."}}, "1.2"),
                                     ({"name": "v2", "configuration": {"separator": "/"}}, "1/2")])
def test_chunk_key_encodings_read_zarr_python_stores(tmp_path, enc, key):
    assert ChunkKeyEncoding.from_json(enc, "x").key((1, 2)) == key
    root = tmp_path / "k"
    (root / "a").mkdir(parents=True)
    doc = {"zarr_format": 3, "node_type": "array", "shape": [5, 7], "data_type": "int16",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
           "chunk_key_encoding": enc, "fill_value": 0,
           "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}], "attributes": {}}
    (root / "a" / "zarr.json").write_text(json.dumps(doc))
    data = np.arange(35, dtype=np.int16).reshape(5, 7)
    zarr.open_array(str(root / "a"), mode="r+")[:] = data
    assert (root / "a" / key).exists()
    assert np.array_equal(Array.open(DirectoryStore(root), "a").read(), data)


@pytest.mark.parametrize("entry", [
    {"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 9}},
    {"name": "zstd", "configuration": {"level": -1, "checksum": True}},
    {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, {"name": "crc32c"},
    {"name": "vlen-utf8", "configuration": {}}, {"name": "transpose", "configuration": {"order": [1, 0, 2]}},
])
def test_codec_configuration_round_trip(entry):
    assert codec_from_json(entry, "x").to_json() == entry


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 9), min_size=1, max_size=3), chunk=st.lists(st.integers(1, 5), min_size=3, max_size=3),
       start=st.integers(-12, 12), stop=st.integers(-12, 12), step=st.sampled_from([1, 2, -1, 3]),
       transpose=st.booleans())
def test_any_chunking_and_slices(tmp_path_factory, shape, chunk, start, stop, step, transpose):
    root = tmp_path_factory.mktemp("h")
    chunk = chunk[: len(shape)]
    codecs = ([{"name": "transpose", "configuration": {"order": list(reversed(range(len(shape))))}}] if transpose else []) + \
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}]
    doc = {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float64",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
           "fill_value": "NaN", "codecs": codecs, "attributes": {}}
    store = DirectoryStore(root)
    arr = Array.create(store, "a", ArrayMetadata.from_json(doc, "a"))
    data = np.random.default_rng(0).normal(size=shape)
    arr.write(data)
    got = Array.open(store, "a")
    assert got.read().tobytes() == data.tobytes()
    assert got.read(slice(start, stop, step)).tobytes() == data[start:stop:step].tobytes()


@pytest.mark.parametrize("sharded", [False, True])
def test_leading_slice_reads_only_its_chunks(tmp_path, sharded):
    from mrec.record import extents as X
    fs = RecordingFileSystem(record_reads=True)
    store = DirectoryStore(tmp_path / "s", fs=fs)
    inner = X.inner_pipeline("f64", [])
    codecs = X.sharded((10,), inner, "end") if sharded else inner
    chunk = (100,) if sharded else (10,)
    arr = Array.create(store, "a", ArrayMetadata.create((100,), DATA_TYPES["float64"], chunk, codecs))
    data = np.arange(100, dtype=np.float64)
    arr.write(data)
    fs.clear()
    got = Array.open(store, "a").read(slice(42, 47))
    assert got.tolist() == data[42:47].tolist()
    reads = [o for o in fs.ops if o.kind in ("read", "read_range") and not o.path.endswith("zarr.json")]
    if sharded:   # the index (16*10+4 bytes at the end) and inner chunk 4 only
        assert [(o.length) for o in reads] == [164, 84]
    else:
        assert [os.path.basename(o.path) for o in reads] == ["4"]
