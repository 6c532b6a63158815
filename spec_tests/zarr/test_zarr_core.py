"""Unit tests of layer 2, the hand-written Zarr V3 core (mrec/zarr).

Covers: every codec's round trip and configuration round trip, metadata
parse/emit, fill values, chunk key encodings, refusals (type, kind, and that
the message names the file), reads of any chunking (hypothesis), I/O locality
of leading-axis reads, sharded append (landings, partial tails, reopen,
set_shape) and the O(chunk + index) cost of a landing, proven on recorded I/O.
"""
from __future__ import annotations

import json
import math
import os
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrec.errors import CorruptionError, MetadataError, MrecError, StoreError, UnsupportedError
from mrec.fs import RecordingFileSystem
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array, meta_key, read_node, write_group
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.codecs.bytes_ import BytesCodec
from mrec.zarr.codecs.crc32c_ import Crc32cCodec, crc32c
from mrec.zarr.codecs.gzip_ import GzipCodec
from mrec.zarr.codecs.sharding import EMPTY, ShardIndex, ShardingCodec
from mrec.zarr.codecs.shuffle import ShuffleCodec
from mrec.zarr.codecs.transpose import TransposeCodec
from mrec.zarr.codecs.vlen_utf8 import VlenUtf8Codec
from mrec.zarr.codecs.zstd_ import ZstdCodec
from mrec.zarr.dtypes import DATA_TYPES, data_type_of, fill_value_to_json, parse_data_type, parse_fill_value
from mrec.zarr.metadata import ArrayMetadata, ChunkKeyEncoding, GroupMetadata, json_dumps, parse_node
from mrec.zarr.codecs.registry import codec_from_json
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.stores.directory import DirectoryStore

NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float64", "complex64", "complex128"]
ALL_TYPES = NUMERIC + ["string"]

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}


# -- helpers -----------------------------------------------------------------------------

def sample(dtype: str, shape, seed: int = 0) -> np.ndarray:
    """Deterministic data of a type, with NaN / -0.0 / inf for floats and unicode strings."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if len(shape) else 1
    if dtype == "string":
        words = ["", "a", "héllo", "日本語", "x" * 40, "tab\tnl\n", "🧪"]
        flat = np.array([words[i % len(words)] + str(i) for i in rng.permutation(n)], dtype=object)
    elif dtype == "bool":
        flat = rng.integers(0, 2, n).astype(bool)
    elif dtype.startswith("int") or dtype.startswith("uint"):
        info = np.iinfo(np.dtype(DATA_TYPES[dtype].numpy))
        flat = rng.integers(info.min, info.max, n, dtype=DATA_TYPES[dtype].numpy, endpoint=True)
        flat[: min(n, 3)] = [info.min, info.max, 0][: min(n, 3)]
    else:
        np_dt = DATA_TYPES[dtype].numpy
        flat = (rng.standard_normal(n) * 100).round(1).astype(np_dt)
        if np_dt.kind == "c":
            flat = flat + 1j * (rng.standard_normal(n) * 10).round(2).astype(np_dt)
        specials = np.array([np.nan, -0.0, np.inf, -np.inf], dtype=np_dt)
        flat[: min(n, 4)] = specials[: min(n, 4)]
    return flat.reshape(shape)


def same(a, b) -> bool:
    """Bitwise equality (NaN payloads and -0.0 included); strings by value."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype == object or b.dtype == object:
        return a.tolist() == b.tolist()
    return a.dtype == b.dtype and np.ascontiguousarray(a).view(np.uint8).tobytes() == np.ascontiguousarray(b).view(np.uint8).tobytes()


def pipeline(entries, where="test") -> CodecPipeline:
    return CodecPipeline.from_json(entries, where)


def make_array(store, path, shape, chunks, dtype, codecs, fill=None, **kw) -> Array:
    dt = DATA_TYPES[dtype]
    meta = ArrayMetadata.create(shape, dt, chunks, pipeline(codecs, path), fill_value=fill, **kw)
    return Array.create(store, path, meta)


def sharded(inner_chunks, inner_codecs=None, location="start"):
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(inner_chunks),
        "codecs": inner_codecs or [BYTES, CRC],
        "index_codecs": [BYTES, CRC],
        "index_location": location}}]


def serializer(dtype):
    return {"name": "vlen-utf8", "configuration": {}} if dtype == "string" else BYTES


def write_json(root, key, doc):
    path = os.path.join(root, *key.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f)


def array_doc(**over):
    doc = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float64",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
           "fill_value": 0.0, "codecs": [BYTES], "attributes": {}}
    doc.update(over)
    return doc


# -- codecs: round trips and configurations -----------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("endian", ["little", "big"])
def test_bytes_codec_round_trip(dtype, endian):
    arr = sample(dtype, (5, 3))
    spec = ChunkSpec((5, 3), DATA_TYPES[dtype], 0)
    c = BytesCodec(endian)
    raw = c.encode(arr, spec)
    assert raw == np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<" if endian == "little" else ">")).tobytes()
    assert same(c.decode(raw, spec), arr)


def test_bytes_codec_corruption_names_chunk():
    spec = ChunkSpec((4,), DATA_TYPES["int32"], 0, "root/a/c/0")
    with pytest.raises(CorruptionError, match="root/a/c/0"):
        BytesCodec("little").decode(b"\0" * 15, spec)
    spec = ChunkSpec((2,), DATA_TYPES["bool"], False, "root/b/c/0")
    with pytest.raises(CorruptionError, match="root/b/c/0"):
        BytesCodec("little").decode(b"\x00\x02", spec)


@pytest.mark.parametrize("codec", [GzipCodec(0), GzipCodec(1), GzipCodec(6), GzipCodec(9),
                                   ZstdCodec(-3, False), ZstdCodec(3, False), ZstdCodec(3, True), ZstdCodec(19, True),
                                   ShuffleCodec(1), ShuffleCodec(2), ShuffleCodec(8), ShuffleCodec(16), Crc32cCodec()],
                         ids=repr)
@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 33, np.arange(1000, dtype="<f8").tobytes()],
                         ids=["empty", "one", "pattern", "f64"])
def test_bytes_bytes_round_trip(codec, payload):
    spec = ChunkSpec((len(payload),), DATA_TYPES["uint8"], 0, "k")     # what the chunk holds bounds the decode
    enc = codec.encode(payload)
    assert codec.decode(enc, spec) == payload
    if codec.encoded_size(len(payload)) is not None:
        assert len(enc) == codec.encoded_size(len(payload))


def test_gzip_is_rfc1952_with_zero_mtime():
    import gzip
    import zlib
    data = b"mrec" * 1000
    for level in range(10):
        enc = GzipCodec(level).encode(data)
        assert enc[:4] == b"\x1f\x8b\x08\x00" and enc[4:8] == b"\0\0\0\0" and enc[9] == 255
        assert gzip.decompress(enc) == data
        assert zlib.decompress(enc, wbits=31) == data
    # concatenated members decode as their concatenation
    assert GzipCodec(1).decode(GzipCodec(1).encode(b"ab") + GzipCodec(1).encode(b"cd"), ChunkSpec((1,), DATA_TYPES["uint8"], 0)) == b"abcd"


def test_zstd_frames():
    import zstandard
    data = b"abc" * 999
    enc = ZstdCodec(3, True).encode(data)
    assert zstandard.ZstdDecompressor().decompress(enc) == data
    assert zstandard.get_frame_parameters(enc).content_size == len(data)
    assert zstandard.get_frame_parameters(enc).has_checksum
    assert not zstandard.get_frame_parameters(ZstdCodec(3, False).encode(data)).has_checksum
    two = ZstdCodec(1).encode(b"12") + ZstdCodec(1).encode(b"34")
    assert ZstdCodec().decode(two, ChunkSpec((1,), DATA_TYPES["uint8"], 0)) == b"1234"


def test_shuffle_layout():
    data = bytes([1, 2, 3, 1, 2, 3, 1, 2, 3, 9])
    assert ShuffleCodec(3).encode(data) == bytes([1, 1, 1, 2, 2, 2, 3, 3, 3, 9])   # remainder kept as is
    import numcodecs
    arr = np.arange(64, dtype="<u8").tobytes()
    assert ShuffleCodec(8).encode(arr) == bytes(numcodecs.Shuffle(elementsize=8).encode(arr))


def test_crc32c_values():
    assert crc32c(b"123456789") == 0xE3069283      # the CRC-32C check value
    enc = Crc32cCodec().encode(b"123456789")
    assert enc[-4:] == struct.pack("<I", 0xE3069283)


@pytest.mark.parametrize("dtype", ["string"])
def test_vlen_utf8_round_trip_and_layout(dtype):
    arr = np.array([["a", "héllo"], ["", "🧪"]], dtype=object)
    spec = ChunkSpec((2, 2), DATA_TYPES[dtype], "")
    raw = VlenUtf8Codec().encode(arr, spec)
    expect = struct.pack("<I", 4)
    for s in ["a", "héllo", "", "🧪"]:
        b = s.encode()
        expect += struct.pack("<I", len(b)) + b
    assert raw == expect
    assert VlenUtf8Codec().decode(raw, spec).tolist() == arr.tolist()
    for bad in (raw[:-1], raw[:3], struct.pack("<I", 3) + raw[4:], raw[:8] + b"\xff" + raw[9:]):
        with pytest.raises(CorruptionError):
            VlenUtf8Codec().decode(bad, spec.at("r/s/c/0"))


@pytest.mark.parametrize("order", [(1, 0), (0, 1), (2, 0, 1), (1, 2, 0)])     # "C" / "F": test_hostile (V2 orders)
@pytest.mark.parametrize("dtype", ["int16", "complex128", "string"])
def test_transpose_round_trip(order, dtype):
    nd = 2 if (isinstance(order, tuple) and len(order) == 2) else 3
    shape = (2, 3) if nd == 2 else (2, 3, 4)
    arr = sample(dtype, shape)
    codecs = [{"name": "transpose", "configuration": {"order": list(order) if isinstance(order, tuple) else order}},
              serializer(dtype), CRC]
    p = pipeline(codecs)
    spec = ChunkSpec(shape, DATA_TYPES[dtype], 0)
    raw = p.encode(arr, spec)
    perm = order
    plain = pipeline([serializer(dtype), CRC]).encode(np.ascontiguousarray(np.transpose(arr, perm)), spec.with_shape(np.transpose(arr, perm).shape))
    assert raw == plain                            # stored in the transposed C order
    assert same(p.decode(raw, spec), arr)


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("dtype", ["float64", "string", "bool"])
def test_sharding_codec_round_trip(location, dtype):
    arr = sample(dtype, (8, 6))
    p = pipeline(sharded((2, 3), [serializer(dtype), {"name": "gzip", "configuration": {"level": 1}}, CRC], location))
    spec = ChunkSpec((8, 6), DATA_TYPES[dtype], "" if dtype == "string" else 0)
    raw = p.encode(arr, spec)
    sh = p.sharding
    grid = sh.grid((8, 6))
    assert grid == (4, 2)
    index, size = sh.read_index(raw, grid, "w")
    assert size == 4 * 2 * 16 + 4
    assert (raw[:size] if location == "start" else raw[-size:]) == sh.encode_index(index)
    assert same(p.decode(raw, spec), arr)
    # an emptied entry reads as fill
    index.offsets[1, 1] = EMPTY
    index.nbytes[1, 1] = EMPTY
    raw2 = (sh.encode_index(index) + raw[size:]) if location == "start" else (raw[:-size] + sh.encode_index(index))
    want = np.array(arr, copy=True)
    want[2:4, 3:6] = spec.fill_value
    assert same(p.decode(raw2, spec), want)


CONFIGS = [
    ({"name": "bytes", "configuration": {"endian": "little"}}, BytesCodec("little")),
    ({"name": "bytes", "configuration": {"endian": "big"}}, BytesCodec("big")),
    ({"name": "bytes", "configuration": {}}, BytesCodec(None)),
    ({"name": "gzip", "configuration": {"level": 1}}, GzipCodec(1)),
    ({"name": "gzip", "configuration": {"level": 9}}, GzipCodec(9)),
    ({"name": "zstd", "configuration": {"level": 3, "checksum": False}}, ZstdCodec(3, False)),
    ({"name": "zstd", "configuration": {"level": -5, "checksum": True}}, ZstdCodec(-5, True)),
    ({"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}}, ShuffleCodec(8)),
    ({"name": "numcodecs.shuffle", "configuration": {"elementsize": 2}}, ShuffleCodec(2)),
    ({"name": "crc32c"}, Crc32cCodec()),
    ({"name": "vlen-utf8", "configuration": {}}, VlenUtf8Codec()),
    ({"name": "transpose", "configuration": {"order": [2, 0, 1]}}, TransposeCodec((2, 0, 1))),
]


@pytest.mark.parametrize("doc,codec", CONFIGS, ids=lambda v: json.dumps(v) if isinstance(v, dict) else "")
def test_codec_config_round_trip(doc, codec):
    parsed = codec_from_json(doc, "w")
    assert parsed == codec
    assert parsed.to_json() == doc
    assert type(parsed).from_config(doc.get("configuration", {}), "w") == codec
    assert codec_from_json(json.loads(json.dumps(parsed.to_json())), "w") == codec


def test_codec_full_configurations_emitted():
    # defaults filled in on parse are emitted in full (zarrs refuses partial configurations)
    assert codec_from_json({"name": "zstd"}, "w").to_json() == {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
    assert codec_from_json({"name": "gzip"}, "w").to_json() == {"name": "gzip", "configuration": {"level": 5}}
    assert codec_from_json({"name": "numcodecs.shuffle"}, "w").to_json()["configuration"] == {"elementsize": 4}
    assert codec_from_json("crc32c", "w") == Crc32cCodec()
    sh = codec_from_json({"name": "sharding_indexed", "configuration": {"chunk_shape": [4]}}, "w")
    assert sh.to_json() == {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4], "codecs": [BYTES], "index_codecs": [BYTES, CRC], "index_location": "end"}}
    doc = sharded((2, 2), [BYTES, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
                           {"name": "zstd", "configuration": {"level": 3, "checksum": False}}, CRC])
    assert pipeline(doc).to_json() == doc


@pytest.mark.parametrize("doc", [
    {"name": "gzip", "configuration": {"level": 10}},
    {"name": "gzip", "configuration": {"level": True}},
    {"name": "zstd", "configuration": {"level": "3"}},
    {"name": "zstd", "configuration": {"level": 3, "checksum": 1}},
    {"name": "numcodecs.shuffle", "configuration": {"elementsize": 0}},
    {"name": "bytes", "configuration": {"endian": "middle"}},
    {"name": "transpose", "configuration": {"order": [0, 0]}},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [0]}},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "index_location": "middle"}},
    {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "index_codecs": [BYTES, {"name": "gzip", "configuration": {"level": 1}}]}},
    {"name": "gzip", "configuration": [1]},
    {"configuration": {}},
])
def test_bad_codec_configuration(doc):
    with pytest.raises(MetadataError, match="where/zarr.json"):
        codec_from_json(doc, "where/zarr.json")


@pytest.mark.parametrize("entries", [
    [{"name": "gzip", "configuration": {"level": 1}}, BYTES],            # bytes->bytes first
    [BYTES, BYTES],                                                        # two serializers
    [BYTES, {"name": "transpose", "configuration": {"order": [0]}}],      # array->array after
    [{"name": "gzip", "configuration": {"level": 1}}],                     # no serializer
    [],
])
def test_bad_pipeline_order(entries):
    with pytest.raises(MetadataError, match="arr/zarr.json"):
        CodecPipeline.from_json(entries, "arr/zarr.json")


# -- data types and fill values ------------------------------------------------------------

def test_data_types_closed_set():
    assert sorted(DATA_TYPES) == sorted(ALL_TYPES)
    for name in ALL_TYPES:
        assert parse_data_type(name, "w").name == name
    for name in NUMERIC:
        assert data_type_of(DATA_TYPES[name].numpy).name == name
    assert data_type_of(np.dtype(">f8")).name == "float64"
    assert data_type_of(np.dtype("U3")).name == "string"
    with pytest.raises(UnsupportedError) as e:
        data_type_of(np.dtype("f4"))
    assert e.value.kind == "narrow_float"


FILLS = [
    ("float64", 0.0, 0.0), ("float64", -0.0, -0.0), ("float64", 1.5, 1.5), ("float64", 3, 3.0),
    ("float64", "NaN", np.nan), ("float64", "Infinity", np.inf), ("float64", "-Infinity", -np.inf),
    ("float64", "0x7ff8000000000001", "0x7ff8000000000001"), ("float64", "0xfff8000000000000", "0xfff8000000000000"),
    ("float64", "0x3ff0000000000000", 1.0),
    ("complex128", [1.0, -2.5], 1 - 2.5j), ("complex128", ["NaN", "Infinity"], None),
    ("complex128", ["0x7ff8000000000002", 0.0], None),
    ("complex64", [0.5, "-Infinity"], complex(0.5, -np.inf)), ("complex64", ["0x7fc00001", 1.0], None),
    ("int8", -128, -128), ("int64", -(2**63), -(2**63)), ("uint64", 2**64 - 1, 2**64 - 1), ("uint8", 7, 7),
    ("bool", True, True), ("bool", False, False),
    ("string", "", ""), ("string", "héllo", "héllo"),
]


@pytest.mark.parametrize("dtype,value,expect", FILLS, ids=[f"{d}-{v}" for d, v, _ in FILLS])
def test_fill_value_round_trip(dtype, value, expect):
    dt = DATA_TYPES[dtype]
    parsed = parse_fill_value(value, dt, "w")
    if isinstance(expect, str) and expect.startswith("0x"):
        assert np.asarray(parsed, ">f8").tobytes().hex() == expect[2:]
    elif expect is not None and not dt.is_string:
        assert same(np.asarray(parsed, dt.numpy), np.asarray(expect, dt.numpy))
    elif dt.is_string:
        assert parsed == expect
    emitted = fill_value_to_json(parsed, dt)
    json.dumps(emitted, allow_nan=False)                 # always valid JSON
    again = parse_fill_value(emitted, dt, "w")
    if dt.is_string:
        assert again == parsed
    else:
        assert same(np.asarray(again, dt.numpy), np.asarray(parsed, dt.numpy))   # bit for bit, payload kept
    if isinstance(value, str) and value.startswith("0x"):
        assert emitted == (1.0 if value == "0x3ff0000000000000" else value)
    if dtype == "complex64" and isinstance(value[0], str) and value[0].startswith("0x"):
        assert emitted[0] == value[0]                     # 4-byte hex for a complex64 component


@pytest.mark.parametrize("dtype,value", [
    ("float64", None), ("float64", True), ("float64", "nan"), ("float64", "0x7ff8"), ("float64", "0xzz"),
    ("float64", [1.0]), ("complex64", 1.0), ("complex128", [1.0]), ("complex128", ["0xqq", 0]),
    ("int8", 128), ("int8", 1.5), ("int8", True), ("uint8", -1), ("bool", 0), ("bool", "true"), ("string", 0),
])
def test_bad_fill_value(dtype, value):
    with pytest.raises(MetadataError, match="a/zarr.json"):
        parse_fill_value(value, DATA_TYPES[dtype], "a/zarr.json")


def test_fill_value_in_metadata_document(tmp_path):
    st = DirectoryStore(tmp_path)
    a = make_array(st, "nanfill", (5,), (2,), "float64", [BYTES], fill=np.frombuffer(bytes.fromhex("7ff8000000000001"), ">f8")[0])
    doc = json.loads((tmp_path / "nanfill" / "zarr.json").read_text())
    assert doc["fill_value"] == "0x7ff8000000000001"
    got = Array.open(st, "nanfill").read()                   # no chunk written: all fill
    assert got.view(np.uint64).tolist() == [0x7FF8000000000001] * 5
    del a


# -- metadata ------------------------------------------------------------------------------

def test_array_metadata_round_trip():
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": [10, 3], "data_type": "complex64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
        "fill_value": ["NaN", -0.0],
        "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                   {"name": "bytes", "configuration": {"endian": "big"}},
                   {"name": "zstd", "configuration": {"level": 5, "checksum": True}}, CRC],
        "attributes": {"precision": 0.001, "nested": {"a": [1, 2]}},
        "dimension_names": ["row", None],
        "my_extension": {"must_understand": False, "x": 1},
    }
    m = ArrayMetadata.from_json(doc, "w")
    assert m.shape == (10, 3) and m.chunk_shape == (4, 3) and m.data_type.name == "complex64"
    assert m.chunk_grid_shape == (3, 1)
    out = m.to_json()
    assert out == doc
    assert ArrayMetadata.from_json(json.loads(json_dumps(out)), "w").to_json() == doc   # NaN fill: compare documents
    assert isinstance(parse_node(json_dumps(out), "w"), ArrayMetadata)
    assert m.with_shape((2, 3)).to_json()["shape"] == [2, 3]


def test_zarr_python_style_document_is_read():
    doc = array_doc(storage_transformers=[], chunk_key_encoding={"name": "default"}, dimension_names=None)
    m = ArrayMetadata.from_json(doc, "w")
    assert m.chunk_key_encoding == ChunkKeyEncoding("default", "/")
    assert "storage_transformers" not in m.to_json()


def test_group_metadata_round_trip(tmp_path):
    st = DirectoryStore(tmp_path)
    g = write_group(st, "a/b", {"nstep": 3, "s": "x"}, extra={"consolidated_metadata": None})
    assert read_node(st, "a/b") == g
    assert GroupMetadata.from_json(g.to_json(), "w") == g
    assert json.loads((tmp_path / "a" / "b" / "zarr.json").read_text()) == {
        "zarr_format": 3, "node_type": "group", "attributes": {"nstep": 3, "s": "x"}, "consolidated_metadata": None}
    assert read_node(st, "nothing") is None
    with pytest.raises(MetadataError, match="a/b/zarr.json"):
        Array.open(st, "a/b")
    with pytest.raises(StoreError, match="nothing/zarr.json"):
        Array.open(st, "nothing")


def test_metadata_json_strict(tmp_path):
    for raw in (b"{", b'{"zarr_format": NaN}', b"\xff", b"[1]", b'{"zarr_format": 3, "node_type": "x"}'):
        with pytest.raises(MetadataError, match="here/zarr.json"):
            parse_node(raw, "here/zarr.json")
    with pytest.raises(ValueError):
        json_dumps({"x": float("nan")})


# -- chunk key encodings ---------------------------------------------------------------------

@pytest.mark.parametrize("enc,coords,key", [
    (ChunkKeyEncoding("default", "/"), (1, 2, 3), "c/1/2/3"),
    (ChunkKeyEncoding("default", "."), (1, 2, 3), "c.1.2.3"),
    (ChunkKeyEncoding("default", "/"), (), "c"),
    (ChunkKeyEncoding("v2", "."), (1, 2, 3), "1.2.3"),
    (ChunkKeyEncoding("v2", "/"), (0, 5), "0/5"),
    (ChunkKeyEncoding("v2", "."), (), "0"),
])
def test_chunk_key_encoding(enc, coords, key):
    assert enc.key(coords) == key
    assert ChunkKeyEncoding.from_json(enc.to_json(), "w") == enc


def test_chunk_key_defaults():
    assert ChunkKeyEncoding.from_json({"name": "v2"}, "w").separator == "."
    assert ChunkKeyEncoding.from_json({"name": "default"}, "w").separator == "/"
    with pytest.raises(UnsupportedError, match="w/zarr.json"):
        ChunkKeyEncoding.from_json({"name": "suffix"}, "w/zarr.json")
    with pytest.raises(MetadataError, match="w/zarr.json"):
        ChunkKeyEncoding.from_json({"name": "default", "configuration": {"separator": "-"}}, "w/zarr.json")


@pytest.mark.parametrize("enc", [{"name": "default", "configuration": {"separator": "/"}},
                                 {"name": "default", "configuration": {"separator": "."}},
                                 {"name": "v2", "configuration": {"separator": "."}},
                                 {"name": "v2", "configuration": {"separator": "/"}}])
def test_chunk_key_encoding_on_disk(tmp_path, enc):
    st = DirectoryStore(tmp_path)
    data = sample("int32", (5, 4))
    a = make_array(st, "arr", (5, 4), (2, 3), "int32", [BYTES],
                   chunk_key_encoding=ChunkKeyEncoding.from_json(enc, "w"))
    keys = a.write(data)
    sep = enc["configuration"]["separator"]
    pre = ["c"] if enc["name"] == "default" else []
    assert sorted(keys) == sorted("arr/" + sep.join(pre + [str(i), str(j)]) for i in range(3) for j in range(2))
    assert all(st.exists(k) for k in keys)
    assert same(Array.open(st, "arr").read(), data)


# -- refusals: type, kind, and the file named ----------------------------------------------

REFUSALS = [
    ("float16", dict(data_type="float16"), UnsupportedError, "narrow_float"),
    ("float32", dict(data_type="float32"), UnsupportedError, "narrow_float"),
    ("fixed_length_utf32", dict(data_type={"name": "fixed_length_utf32", "configuration": {"length_bytes": 16}}, fill_value=""),
     UnsupportedError, "unknown_dtype"),
    ("fixed_length_utf32_str", dict(data_type="fixed_length_utf32"), UnsupportedError, "unknown_dtype"),
    ("bytes", dict(data_type="bytes"), UnsupportedError, "unknown_dtype"),
    ("variable_length_bytes", dict(data_type="variable_length_bytes"), UnsupportedError, "unknown_dtype"),
    ("r16", dict(data_type="r16"), UnsupportedError, "unknown_dtype"),
    ("storage_transformers", dict(storage_transformers=[{"name": "x"}]), UnsupportedError, None),
    ("blosc", dict(codecs=[BYTES, {"name": "blosc", "configuration": {"cname": "lz4"}}]), UnsupportedError, "unsupported_codec"),
    ("blosc_inner", dict(codecs=sharded((1,), [BYTES, {"name": "blosc"}])), UnsupportedError, "unsupported_codec"),
    ("must_understand", dict(my_extension={"must_understand": True}), UnsupportedError, None),
    ("unknown_field", dict(surprise=1), UnsupportedError, None),
    ("irregular_grid", dict(chunk_grid={"name": "rectilinear", "configuration": {"chunk_shapes": [[1, 3]]}}), UnsupportedError, None),
    ("zarr_v2", dict(zarr_format=2), UnsupportedError, None),
    ("rank_mismatch", dict(chunk_grid={"name": "regular", "configuration": {"chunk_shape": [2, 2]}}), MetadataError, None),
    ("zero_chunk", dict(chunk_grid={"name": "regular", "configuration": {"chunk_shape": [0]}}), MetadataError, None),
    ("bad_shape", dict(shape=[-1]), MetadataError, None),
    ("no_codecs", dict(codecs=[]), MetadataError, None),
    ("string_with_bytes", dict(data_type="string", fill_value=""), MetadataError, None),
    ("vlen_for_numbers", dict(codecs=[{"name": "vlen-utf8"}]), MetadataError, None),
    ("shard_not_multiple", dict(codecs=sharded((3,))), MetadataError, None),
    ("missing_fill", dict(fill_value=None), MetadataError, None),
    ("bad_dims", dict(dimension_names=["a", "b"]), MetadataError, None),
]


@pytest.mark.parametrize("name,over,exc,kind", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_names_zarr_json(tmp_path, name, over, exc, kind):
    doc = array_doc(**over)
    if over.get("fill_value", 0) is None:
        del doc["fill_value"]
    write_json(str(tmp_path), "grp/arr/zarr.json", doc)
    st = DirectoryStore(tmp_path)
    with pytest.raises(exc) as info:
        Array.open(st, "grp/arr")
    assert isinstance(info.value, MrecError)
    assert str(tmp_path / "grp" / "arr" / "zarr.json") in str(info.value)
    if kind is not None:
        assert info.value.kind == kind


def _corrupt_byte(path, offset):
    raw = bytearray(open(path, "rb").read())
    raw[offset] ^= 0xFF
    with open(path, "wb") as f:
        f.write(raw)


def test_crc_mismatch_on_chunk_names_array_and_key(tmp_path):
    st = DirectoryStore(tmp_path)
    a = make_array(st, "traj/x", (6,), (3,), "float64", [BYTES, CRC])
    a.write(np.arange(6.0))
    _corrupt_byte(tmp_path / "traj" / "x" / "c" / "1", 5)
    b = Array.open(st, "traj/x")
    assert same(b.read(slice(0, 3)), np.arange(3.0))          # untouched chunk still reads
    with pytest.raises(CorruptionError, match="crc32c mismatch") as info:
        b.read()
    assert str(tmp_path / "traj" / "x" / "c" / "1") in str(info.value)


def test_crc_mismatch_on_inner_chunk(tmp_path):
    st = DirectoryStore(tmp_path)
    a = make_array(st, "x", (8,), (8,), "int64", sharded((4,), [BYTES, CRC], "end"))
    a.write(np.arange(8))
    _corrupt_byte(tmp_path / "x" / "c" / "0", 40)                    # inside inner chunk 1
    with pytest.raises(CorruptionError, match=r"inner chunk \[1\]") as info:
        Array.open(st, "x").read()
    assert str(tmp_path / "x" / "c" / "0") in str(info.value)


@pytest.mark.parametrize("location", ["start", "end"])
def test_crc_mismatch_on_shard_index(tmp_path, location):
    """Inner chunks without their own crc32c: an index whose crc fails is refused, naming the shard."""
    st = DirectoryStore(tmp_path)
    a = make_array(st, "x", (8,), (8,), "int64", sharded((4,), [BYTES], location))
    a.write(np.arange(8))
    p = tmp_path / "x" / "c" / "0"
    _corrupt_byte(p, 3 if location == "start" else os.path.getsize(p) - 10)
    with pytest.raises(CorruptionError, match=r"shard index.*crc32c mismatch") as info:
        Array.open(st, "x").read()
    assert str(p) in str(info.value)


@pytest.mark.parametrize("location", ["start", "end"])
def test_torn_shard_index_reads_through_inner_crcs(tmp_path, location):
    """Inner chunks closed by crc32c: an index whose own crc fails is never read through (its
    entries could name other chunks that verify: issue 13.4), it is refused naming the shard.
    An appended array (index at the start) rebuilds it from the chunks in append order."""
    st = DirectoryStore(tmp_path)
    a = make_array(st, "x", (8,), (8,), "int64", sharded((4,), [BYTES, CRC], location))
    a.write(np.arange(8))
    p = tmp_path / "x" / "c" / "0"
    isize = 2 * 16 + 4
    crc_at = isize - 4 if location == "start" else os.path.getsize(p) - 4
    _corrupt_byte(p, crc_at)                                          # entries intact, index crc wrong
    with pytest.raises(CorruptionError, match=r"shard index.*crc32c mismatch.*mrec repair") as info:
        Array.open(st, "x").read()
    assert str(p) in str(info.value)
    if location == "start":      # an appended array: the index is rebuilt from the chunks that verify
        c = Array.open(st, "x", appended=True)
        assert same(c.read(), np.arange(8)) and c.unverified_indexes == {"x/c/0"}


def test_unreferenced_shard_bytes_are_not_a_torn_index(tmp_path):
    """The Zarr spec lets a shard hold bytes no entry names: an entry emptied with its chunk's
    bytes left in the file reads as fill.  Only an array written by appending (trajectory/) takes
    an index ending before the file for a dropped rewrite and rebuilds it (found by hypothesis:
    test_read_any_chunking with --hypothesis-seed=2)."""
    st = DirectoryStore(tmp_path)
    a = make_array(st, "x", (8,), (8,), "int64", sharded((4,), [BYTES, CRC], "start"), fill=-1)
    a.write(np.arange(8))
    p = tmp_path / "x" / "c" / "0"
    index = a.shard_index("x/c/0", cached=False)
    index.offsets[1] = EMPTY
    index.nbytes[1] = EMPTY
    raw = bytearray(p.read_bytes())
    enc = a.sharding.encode_index(index)
    raw[:len(enc)] = enc
    p.write_bytes(bytes(raw))
    assert same(Array.open(st, "x").read(), np.array([0, 1, 2, 3, -1, -1, -1, -1]))
    b = Array.open(st, "x", appended=True)          # for an appended array: a dropped index rewrite
    assert same(b.read(), np.arange(8)) and b.unverified_indexes == {"x/c/0"}


def test_truncated_shard(tmp_path):
    st = DirectoryStore(tmp_path)
    a = make_array(st, "x", (8,), (8,), "int64", sharded((4,), [BYTES, CRC], "start"))
    a.write(np.arange(8))
    p = tmp_path / "x" / "c" / "0"
    size = os.path.getsize(p)
    os.truncate(p, size - 7)
    with pytest.raises(CorruptionError, match="truncated shard") as info:
        Array.open(st, "x").read()
    assert str(p) in str(info.value)
    os.truncate(p, 20)                                               # shorter than the index itself
    with pytest.raises(CorruptionError, match="shorter than") as info:
        Array.open(st, "x").read()
    assert str(p) in str(info.value)
    # whole-shard decoding (a pipeline that is not byte-range readable) refuses too
    raw = open(p, "rb").read()
    with pytest.raises(CorruptionError):
        pipeline(sharded((4,), [BYTES, CRC], "start")).decode(raw, ChunkSpec((8,), DATA_TYPES["int64"], 0, "w"))


def test_index_entry_beyond_shard(tmp_path):
    sh = pipeline(sharded((4,), [BYTES], "end")).sharding
    index = ShardIndex.empty((2,))
    index.offsets[0], index.nbytes[0] = 0, 999
    raw = b"\0" * 32 + sh.encode_index(index)
    with pytest.raises(CorruptionError, match="entry \\[0\\] names bytes 0..999, past the end"):
        pipeline(sharded((4,), [BYTES], "end")).decode(raw, ChunkSpec((8,), DATA_TYPES["int64"], 0, "shard/c/0"))


@pytest.mark.parametrize("codec", [{"name": "gzip", "configuration": {"level": 1}},
                                   {"name": "zstd", "configuration": {"level": 3, "checksum": False}}])
@pytest.mark.parametrize("garbage", [b"", b"garbage!" * 4, "truncate"])
def test_compressed_garbage(tmp_path, codec, garbage):
    st = DirectoryStore(tmp_path)
    a = make_array(st, "g", (64,), (32,), "int64", [BYTES, codec])
    a.write(np.arange(64))
    p = tmp_path / "g" / "c" / "1"
    if garbage == "truncate":
        garbage = open(p, "rb").read()[:-5]
    with open(p, "wb") as f:
        f.write(garbage)
    with pytest.raises(CorruptionError) as info:
        Array.open(st, "g").read()
    assert str(p) in str(info.value)
    assert codec["name"] in str(info.value)


def test_zstd_checksum_mismatch(tmp_path):
    st = DirectoryStore(tmp_path)
    a = make_array(st, "z", (64,), (64,), "int64", [BYTES, {"name": "zstd", "configuration": {"level": 3, "checksum": True}}])
    a.write(np.arange(64))
    p = tmp_path / "z" / "c" / "0"
    _corrupt_byte(p, os.path.getsize(p) - 1)
    with pytest.raises(CorruptionError, match=str(p)):
        Array.open(st, "z").read()


# -- reads of any chunking ---------------------------------------------------------------------

@st.composite
def layouts(draw):
    nd = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0 if i == 0 else 1, 13 if i == 0 else 5)) for i in range(nd))
    inner = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    shard_mode = draw(st.sampled_from([None, "start", "end"]))
    if shard_mode is None:
        chunks = inner
    else:
        chunks = tuple(i * draw(st.integers(1, 3)) for i in inner)
    dtype = draw(st.sampled_from(ALL_TYPES))
    bb = draw(st.sampled_from([[], [CRC], [{"name": "gzip", "configuration": {"level": 1}}, CRC],
                               [{"name": "zstd", "configuration": {"level": 1, "checksum": True}}]]))
    transpose = nd > 1 and draw(st.booleans())
    drop = draw(st.integers(0, 2**16))
    return shape, chunks, inner, shard_mode, dtype, bb, transpose, drop


def _codecs_for(dtype, inner, shard_mode, bb, transpose):
    nd = len(inner)
    chain = ([{"name": "transpose", "configuration": {"order": list(reversed(range(nd)))}}] if transpose else []) \
        + [serializer(dtype)] + list(bb)
    if shard_mode is None:
        return chain
    return sharded(inner, chain, shard_mode)


def _fill_for(dtype):
    return {"string": "-", "bool": True, "float64": np.float64(-0.0), "complex64": np.complex64(np.nan)}.get(
        dtype, DATA_TYPES[dtype].numpy.type(3) if dtype != "string" else "")


def _drop_some(st_, arr: Array, drop: int, expect: np.ndarray):
    """Delete some chunks and empty some inner-chunk entries; update the expected array to fill."""
    m = arr.meta
    fill = m.fill_value
    bit = 0
    for coords in np.ndindex(*m.chunk_grid_shape):
        key = arr.chunk_key(coords)
        lo = [c * s for c, s in zip(coords, m.chunk_shape)]
        region = tuple(slice(l, min(l + s, n)) for l, s, n in zip(lo, m.chunk_shape, m.shape))
        if (drop >> (bit % 16)) & 1:
            st_.delete(key)
            expect[region] = fill
        elif arr.sharding is not None:
            sh = arr.sharding
            grid = sh.grid(m.chunk_shape)
            index = arr.shard_index(key, cached=False)
            for j, ic in enumerate(np.ndindex(*grid)):
                if (drop >> ((bit + j + 3) % 16)) & 1 and j % 2:
                    index.offsets[ic] = EMPTY
                    index.nbytes[ic] = EMPTY
                    ilo = [l + c * s for l, c, s in zip(lo, ic, sh.chunk_shape)]
                    expect[tuple(slice(l, min(l + s, n)) for l, s, n in zip(ilo, sh.chunk_shape, m.shape))] = fill
            raw = bytearray(st_.get(key))
            enc = sh.encode_index(index)
            if sh.index_location == "start":
                raw[:len(enc)] = enc
            else:
                raw[len(raw) - len(enc):] = enc
            st_.set(key, bytes(raw))
        bit += 1
    arr.drop_cache()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.data())
def test_read_any_chunking(layout, data):
    shape, chunks, inner, shard_mode, dtype, bb, transpose, drop = layout
    full = sample(dtype, shape, seed=drop)
    with tempfile.TemporaryDirectory() as d:
        st_ = DirectoryStore(d)
        a = make_array(st_, "a", shape, chunks, dtype, _codecs_for(dtype, inner, shard_mode, bb, transpose),
                       fill=_fill_for(dtype))
        a.write(full)
        expect = np.array(full, copy=True)
        _drop_some(st_, a, drop, expect)
        b = Array.open(st_, "a")
        assert same(b.read(), expect)
        n = shape[0]
        for _ in range(3):
            start = data.draw(st.one_of(st.none(), st.integers(-n - 2, n + 2)))
            stop = data.draw(st.one_of(st.none(), st.integers(-n - 2, n + 2)))
            step = data.draw(st.sampled_from([None, 1, 2, 3, -1, -2, -5]))
            sl = slice(start, stop, step)
            assert same(b.read(sl), expect[sl]), sl
            assert same(b[sl], expect[sl])
        if n:
            i = data.draw(st.integers(-n, n - 1))
            assert same(b[i], expect[i])


def test_zero_d_array(tmp_path):
    st_ = DirectoryStore(tmp_path)
    a = make_array(st_, "s", (), (), "float64", [BYTES, CRC], fill=1.5)
    assert same(a.read(), np.float64(1.5).reshape(()))
    a.write(np.array(-0.0))
    assert st_.exists("s/c")
    got = Array.open(st_, "s").read()
    assert same(got, np.array(-0.0)) and got.flags.writeable


def test_partial_edge_chunks(tmp_path):
    st_ = DirectoryStore(tmp_path)
    data = sample("int16", (7, 5, 3))
    a = make_array(st_, "e", (7, 5, 3), (3, 2, 2), "int16", [BYTES], fill=-1)
    a.write(data)
    raw = open(tmp_path / "e" / "c" / "2" / "2" / "1", "rb").read()      # the corner chunk is stored padded
    corner = np.frombuffer(raw, "<i2").reshape(3, 2, 2)
    assert same(corner[:1, :1, :1], data[6:, 4:, 2:])
    assert (corner[1:] == -1).all() and (corner[:, 1:] == -1).all() and (corner[:, :, 1:] == -1).all()
    assert same(Array.open(st_, "e").read(), data)


def test_missing_chunks_read_as_fill(tmp_path):
    st_ = DirectoryStore(tmp_path)
    a = make_array(st_, "m", (10, 2), (4, 2), "complex128", [BYTES], fill=np.complex128(complex(np.nan, -0.0)))
    got = a.read()
    assert got.shape == (10, 2) and same(got, np.full((10, 2), complex(np.nan, -0.0), np.complex128))
    s = make_array(st_, "s", (3,), (2,), "string", [serializer("string")], fill="∅")
    assert s.read().tolist() == ["∅"] * 3


def test_byte_range_readable_only_for_plain_sharding(tmp_path):
    """A sharding codec followed by a bytes→bytes codec (or behind transpose) is decoded whole."""
    st_ = DirectoryStore(tmp_path)
    data = sample("float64", (8, 4))
    for path, codecs in [
        ("gz", sharded((2, 2), [BYTES], "start") + [{"name": "gzip", "configuration": {"level": 1}}]),
        ("tr", [{"name": "transpose", "configuration": {"order": [1, 0]}}] + sharded((2, 4), [BYTES], "end")),
    ]:
        a = make_array(st_, path, (8, 4), (4, 4), "float64", codecs)
        assert a.sharding is None
        a.write(data)
        assert same(Array.open(st_, path).read(), data)
        assert same(Array.open(st_, path).read(slice(3, 6)), data[3:6])


# -- I/O locality of leading-axis reads --------------------------------------------------------

def test_leading_slice_reads_only_its_chunks(tmp_path):
    fs = RecordingFileSystem(record_reads=True)
    st_ = DirectoryStore(tmp_path, fs=fs)
    data = np.arange(100 * 2, dtype="<f8").reshape(100, 2)
    a = make_array(st_, "p", (100, 2), (10, 1), "float64", [BYTES, CRC])
    a.write(data)
    b = Array.open(st_, "p")
    fs.clear()
    assert same(b.read(slice(35, 52)), data[35:52])
    read = sorted(os.path.relpath(op.path, tmp_path) for op in fs.ops if op.kind in ("read", "read_range"))
    assert read == sorted(f"p/c/{i}/{j}" for i in (3, 4, 5) for j in (0, 1))
    assert not [op for op in fs.ops if op.kind not in ("read", "read_range")]
    fs.clear()
    assert same(b.read(slice(51, 29, -7)), data[51:29:-7])
    read = {os.path.relpath(op.path, tmp_path) for op in fs.ops}
    assert read == {f"p/c/{i}/{j}" for i in (3, 4, 5) for j in (0, 1)}


@pytest.mark.parametrize("location", ["start", "end"])
def test_leading_slice_reads_only_index_and_its_inner_chunks(tmp_path, location):
    fs = RecordingFileSystem(record_reads=True)
    st_ = DirectoryStore(tmp_path, fs=fs)
    data = np.arange(64, dtype="<i8")
    a = make_array(st_, "s", (64,), (32,), "int64", sharded((4,), [BYTES, CRC], location))
    a.write(data)
    b = Array.open(st_, "s")
    sh = b.sharding
    isize = sh.index_size((8,))
    chunk = 4 * 8 + 4
    fs.clear()
    assert same(b.read(slice(9, 14)), data[9:14])                  # inner chunks 2 and 3 of shard 0
    ops = [(os.path.relpath(op.path, tmp_path), op.offset, op.length) for op in fs.ops]
    base = isize if location == "start" else 0
    idx_off = 0 if location == "start" else 8 * chunk
    # inner chunks lying back to back are fetched as one byte range: exactly their bytes
    assert ops == [("s/c/0", idx_off, isize), ("s/c/0", base + 2 * chunk, 2 * chunk)]
    assert sum(op.length for op in fs.ops) == isize + 2 * chunk
    fs.clear()
    b.read(slice(40, 41))                                           # shard 1: its index, one inner chunk
    assert [(os.path.relpath(op.path, tmp_path), op.length) for op in fs.ops] == [("s/c/1", isize), ("s/c/1", chunk)]
    fs.clear()
    b.read(slice(8, 12))                                            # the cached index is not re-read
    assert [(os.path.relpath(op.path, tmp_path), op.length) for op in fs.ops] == [("s/c/0", chunk)]


# -- sharded append -----------------------------------------------------------------------------

def _appendable(st_, path="col", dtype="float64", inner=4, per_shard=8, trailing=(), inner_trailing=None,
                bb=(CRC,), fill=None, shard_trailing=None):
    inner_trailing = trailing if inner_trailing is None else inner_trailing
    shard_trailing = trailing if shard_trailing is None else shard_trailing
    codecs = sharded((inner, *inner_trailing), [serializer(dtype), *bb], "start")
    return make_array(st_, path, (0, *trailing), (inner * per_shard, *shard_trailing), dtype, codecs, fill=fill)


@pytest.mark.parametrize("dtype", ["float64", "string", "bool", "complex64"])
def test_append_one_inner_chunk_per_landing(tmp_path, dtype):
    st_ = DirectoryStore(tmp_path)
    a = _appendable(st_, dtype=dtype, bb=({"name": "gzip", "configuration": {"level": 1}}, CRC))
    ap = ShardedAppender(a)
    data = sample(dtype, (4 * 21,))
    for i in range(21):                                             # crosses two shard boundaries
        ap.append(data[4 * i:4 * (i + 1)])
        keys = ap.land()
        assert keys == [f"col/c/{(4 * i) // 32}"]
        assert a.shape == (4 * (i + 1),)
        a.write_metadata()
        assert same(Array.open(st_, "col").read(), data[:4 * (i + 1)])
    assert sorted(st_.list("col")) == ["col/c/0", "col/c/1", "col/c/2", "col/zarr.json"]
    assert ap.land() == []                                          # nothing pending: no I/O


def test_append_partial_tail_reencoded(tmp_path):
    fs = RecordingFileSystem()
    st_ = DirectoryStore(tmp_path, fs=fs)
    a = _appendable(st_, inner=10, per_shard=4, fill=-1.0)
    ap = ShardedAppender(a)
    data = np.arange(100, dtype=np.float64)
    pos, sizes = 0, [3, 3, 5, 9, 1, 19, 30, 20, 10]
    for n in sizes:
        ap.append(data[pos:pos + n])
        pos += n
        ap.land()
        a.write_metadata()
        got = Array.open(st_, "col")
        assert got.shape == (pos,)
        assert same(got.read(), data[:pos])
    chunk = 10 * 8 + 4
    # first landing: 3 rows, padded with the fill value into one inner chunk
    first = [op for op in fs.writes() if op.path.endswith("c/0")][:2]
    assert [(op.offset, op.length) for op in first] == [(4 * 16 + 4, chunk), (0, 4 * 16 + 4)]
    # dead bytes: only re-encoded partial tails
    index = Array.open(st_, "col").shard_index("col/c/0")
    assert index.data_end() <= os.path.getsize(tmp_path / "col" / "c" / "0")
    sh = a.sharding
    raw = open(tmp_path / "col" / "c" / "0", "rb").read()
    off, n = int(index.offsets[0]), int(index.nbytes[0])
    assert same(sh.codecs.decode(raw[off:off + n], ChunkSpec((10,), DATA_TYPES["float64"], -1.0)), data[:10])
    # a reopened appender keeps the tail (rows 100 is aligned: no tail; read again at 95)
    with pytest.raises(MetadataError):
        ShardedAppender(Array.open(st_, "col"), rows=101)


def test_append_trailing_axes_split_into_inner_chunks(tmp_path):
    st_ = DirectoryStore(tmp_path)
    a = _appendable(st_, dtype="int32", inner=3, per_shard=2, trailing=(5, 2), inner_trailing=(2, 2),
                    shard_trailing=(6, 2))
    ap = ShardedAppender(a)
    data = sample("int32", (17, 5, 2))
    for lo in range(0, 17, 4):
        ap.append(data[lo:lo + 4])
        ap.land()
    a.write_metadata()
    assert same(Array.open(st_, "col").read(), data)
    assert same(Array.open(st_, "col").read(slice(2, 11, 3)), data[2:11:3])


@pytest.mark.parametrize("logical", [0, 5, 8, 13, 32, 40, 45])
def test_reopen_with_uncommitted_tail(tmp_path, logical):
    st_ = DirectoryStore(tmp_path)
    a = _appendable(st_, inner=4, per_shard=8)
    ap = ShardedAppender(a)
    committed = np.arange(50, dtype=np.float64)
    ap.append(committed)
    ap.land()
    a.write_metadata()                                              # on disk: 50 rows (the tail beyond `logical` is uncommitted)
    b = Array.open(st_, "col")
    ap2 = ShardedAppender(b, rows=logical)                           # shorter than the shape
    assert ap2.rows == logical and ap2.total_rows == logical
    new = -np.arange(1, 31, dtype=np.float64)
    ap2.append(new[:7])
    ap2.land()
    ap2.append(new[7:])
    ap2.land()
    assert b.shape == (logical + 30,)
    b.write_metadata()
    want = np.concatenate([committed[:logical], new])
    assert same(Array.open(st_, "col").read(), want)
    # stale entries past the new end were emptied
    last = Array.open(st_, "col")
    key = f"col/c/{(logical + 29) // 32}"
    index = last.shard_index(key)
    end_inner = -(-((logical + 30) - 32 * ((logical + 29) // 32)) // 4)
    assert all(index.is_empty((i,)) for i in range(end_inner, 8))


def test_reopen_after_set_shape_shrink(tmp_path):
    st_ = DirectoryStore(tmp_path)
    a = _appendable(st_, inner=4, per_shard=4)
    ap = ShardedAppender(a)
    ap.append(np.arange(40.0))
    ap.land()
    a.write_metadata()
    b = Array.open(st_, "col")
    b.set_shape((18,))                                              # the reopen rule: shrink to the logical shape
    assert json.loads((tmp_path / "col" / "zarr.json").read_text())["shape"] == [18]
    assert same(Array.open(st_, "col").read(), np.arange(18.0))
    ap = ShardedAppender(Array.open(st_, "col"))
    ap.append(np.full(3, 7.0))
    ap.land()
    ap.array.write_metadata()
    assert same(Array.open(st_, "col").read(), np.concatenate([np.arange(18.0), np.full(3, 7.0)]))


def test_set_shape_grow_and_shrink(tmp_path):
    st_ = DirectoryStore(tmp_path)
    data = sample("int64", (10, 3))
    a = make_array(st_, "g", (10, 3), (4, 2), "int64", [BYTES], fill=9)
    a.write(data)
    a.set_shape((6, 3))
    assert same(Array.open(st_, "g").read(), data[:6])
    a.set_shape((14, 3))                  # growing exposes whatever the chunks hold, fill beyond them
    got = Array.open(st_, "g").read()
    assert same(got[:10], data) and (got[12:] == 9).all()
    a.set_shape((14, 5))
    got = Array.open(st_, "g").read()
    assert got.shape == (14, 5) and (got[:, 4:] == 9).all()
    a.set_shape((0, 3))
    assert Array.open(st_, "g").read().shape == (0, 3)


def test_appender_refusals(tmp_path):
    st_ = DirectoryStore(tmp_path)
    plain = make_array(st_, "p", (0,), (4,), "float64", [BYTES])
    with pytest.raises(MetadataError, match="p"):
        ShardedAppender(plain)
    end = make_array(st_, "e", (0,), (8,), "float64", sharded((4,), [BYTES], "end"))
    with pytest.raises(MetadataError, match="index_location"):
        ShardedAppender(end)
    ok = _appendable(st_, trailing=(3,))
    ap = ShardedAppender(ok)
    with pytest.raises(MetadataError):
        ap.append(np.zeros((2, 4)))
    with pytest.raises(MetadataError):
        ap.append(np.zeros((2, 3), dtype=np.int64))


def test_landing_cost_is_chunk_plus_index(tmp_path):
    """256 landings of one inner chunk each into one shard: every landing writes exactly
    (encoded chunk + index) bytes — the chunk at the file tail first, then the index at
    offset 0 — and never rewrites the shard."""
    fs = RecordingFileSystem()
    st_ = DirectoryStore(tmp_path, fs=fs)
    inner, n = 2048, 256
    a = _appendable(st_, inner=inner, per_shard=n, bb=(CRC,))
    sh = a.sharding
    index_size = sh.index_size((n,))
    assert index_size == n * 16 + 4
    chunk_size = inner * 8 + 4
    rng = np.random.default_rng(1)
    ap = ShardedAppender(a)
    fs.clear()
    path = str(tmp_path / "col" / "c" / "0")
    tail = index_size
    for i in range(n):
        ap.append(rng.standard_normal(inner))
        ap.land()
        ops = [op for op in fs.ops if op.kind != "mkdir"]
        assert [op.kind for op in ops] == ["write_at", "write_at"], ops
        chunk_op, index_op = ops
        assert chunk_op.path == path and index_op.path == path
        assert (chunk_op.offset, chunk_op.length) == (tail, chunk_size)        # at the tail, first
        assert (index_op.offset, index_op.length) == (0, index_size)           # index in place, last
        assert fs.bytes_written() == chunk_size + index_size
        assert os.path.getsize(path) == tail + chunk_size
        tail += chunk_size
        fs.clear()
    assert os.path.getsize(path) == index_size + n * chunk_size          # no dead bytes
    a.write_metadata()
    assert Array.open(st_, "col").shape == (n * inner,)


def test_landing_cost_with_compression_is_encoded_chunk_plus_index(tmp_path):
    fs = RecordingFileSystem(keep_data=True)
    st_ = DirectoryStore(tmp_path, fs=fs)
    bb = ({"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
          {"name": "zstd", "configuration": {"level": 3, "checksum": False}}, CRC)
    a = _appendable(st_, inner=512, per_shard=64, bb=bb)
    ap = ShardedAppender(a)
    sh = a.sharding
    isize = sh.index_size((64,))
    for i in range(64):
        rows = np.round(np.sin(np.arange(512) + 512 * i), 3)
        expect = sh.codecs.encode(rows, ChunkSpec((512,), DATA_TYPES["float64"], 0.0))
        fs.clear()
        ap.append(rows)
        ap.land()
        w = [op for op in fs.ops if op.kind == "write_at"]
        assert [op.data for op in w][0] == expect
        assert [op.length for op in w] == [len(expect), isize] and w[1].offset == 0
    a.write_metadata()
    got = Array.open(st_, "col").read()
    assert same(got[-512:], np.round(np.sin(np.arange(512) + 512 * 63), 3))


# -- layering ------------------------------------------------------------------------------------

def test_lower_layers_never_import_upper_ones():
    """mrec/fs imports only mrec.errors; mrec/zarr only mrec.fs, mrec.errors and itself."""
    import ast
    from pathlib import Path
    pkg = Path(__file__).resolve().parents[2] / "mrec"
    allowed = {"fs": {"mrec.errors", "mrec.fs"}, "zarr": {"mrec.errors", "mrec.fs", "mrec.zarr"}}
    for layer, ok in allowed.items():
        for f in (pkg / layer).rglob("*.py"):
            parts = ["mrec", *f.relative_to(pkg).with_suffix("").parts]
            package = parts[:-1]                      # the package a relative import starts from
            tree = ast.parse(f.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package[: len(package) - (node.level - 1)]
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    names = [target]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for t in names:
                    if t.startswith("mrec"):
                        assert any(t == a or t.startswith(a + ".") for a in ok), f"{f}: imports {t}"
