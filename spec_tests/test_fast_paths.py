"""The performance fast paths give the same bytes and values as the plain paths they shortcut.

(tools/bench.py measures them; nothing here is timed.)
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import zstandard

from mrec.errors import CorruptionError
from mrec.zarr.array import Array, ShardedAppender
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.codecs.shuffle import shuffle_bytes, unshuffle_bytes
from mrec.zarr.codecs.zstd_ import ZstdCodec
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata, json_dumps
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.store import DirectoryStore

INNER = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
         {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
         {"name": "crc32c"}]


def _sharded(inner_rows: int, chunks: int, trailing=()) -> CodecPipeline:
    return CodecPipeline.from_json([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [inner_rows, *trailing], "codecs": INNER,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "start"}}], "x")


def _reference_shuffle(data: bytes, n: int) -> bytes:
    a = np.frombuffer(data, dtype=np.uint8)
    body = len(a) - len(a) % n
    return a[:body].reshape(-1, n).T.tobytes() + a[body:].tobytes()


@pytest.mark.parametrize("n", range(1, 10))
def test_shuffle_matches_the_byte_transpose_for_every_length(n):
    rng = np.random.default_rng(n)
    for length in range(0, 5 * n + 3):
        data = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        expected = data if n == 1 else _reference_shuffle(data, n)
        assert shuffle_bytes(data, n) == expected
        assert unshuffle_bytes(expected, n) == data


def test_zstd_decode_one_frame_several_frames_and_refusals():
    codec = ZstdCodec(3, False)
    spec = ChunkSpec((100,), DATA_TYPES["float64"], 0.0, "x/c/0")
    a, b = b"a" * 800, bytes(range(256)) * 3
    one = codec.encode(a)
    assert codec.decode(one, spec) == a
    assert codec.decode(one + codec.encode(b), spec) == a + b          # concatenated frames
    no_size = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(a)
    assert codec.decode(no_size, spec) == a
    assert codec.decode(codec.encode(b""), spec) == b""
    for bad in (one[:-3], one + b"x", b"\x00" * 12):
        with pytest.raises(CorruptionError, match="x/c/0"):
            codec.decode(bad, spec)


@pytest.mark.parametrize("shape, dtype, attrs, fill", [
    ((0,), "float64", {}, None),
    ((5, 3), "int32", {"meta_dtype": "f64", "ü": [1, {"a": None}]}, None),
    ((), "float64", {}, float("nan")),
    ((7,), "string", {}, None),
])
def test_metadata_json_template_is_byte_identical(tmp_path, shape, dtype, attrs, fill):
    store = DirectoryStore(str(tmp_path))
    codecs = CodecPipeline.from_json([{"name": "bytes", "configuration": {"endian": "little"}}] if dtype != "string"
                                     else [{"name": "vlen-utf8"}], "x")
    meta = ArrayMetadata.create(shape, DATA_TYPES[dtype], shape or (), codecs, fill_value=fill, attributes=attrs)
    arr = Array(store, "x", meta)
    for new_shape in (shape, tuple(s + 11 for s in shape), tuple(2**40 + s for s in shape)):
        arr.meta = meta.with_shape(new_shape)
        assert arr.metadata_json() == json_dumps(arr.meta.to_json())
    arr.meta = arr.meta.with_attributes({"changed": True})
    assert arr.metadata_json() == json_dumps(arr.meta.to_json())


def test_a_relanded_tail_chunk_is_read_anew(tmp_path):
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (40,), _sharded(8, 5)))
    ap = ShardedAppender(arr)
    data = np.arange(40, dtype=np.float64) * 0.5
    for lo in range(0, 40, 3):                       # partial tail chunks re-encoded at new offsets
        ap.append(data[lo:lo + 3])
        ap.land()
        n = min(40, lo + 3)
        for i in range(n):                           # frame-by-frame reads go through the chunk cache
            assert arr.read(slice(i, i + 1))[0] == data[i]
        assert np.array_equal(arr.read(slice(0, n)), data[:n])
        arr.write_metadata()
        assert np.array_equal(Array.open(store, "x").read(), data[:n])


def test_reads_return_owned_writable_arrays(tmp_path):
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0, 3), DATA_TYPES["float64"], (16, 3), _sharded(8, 2, (3,))))
    ap = ShardedAppender(arr)
    ap.append(np.arange(48, dtype=np.float64).reshape(16, 3))
    ap.land()
    a = arr.read(slice(2, 4))
    a[:] = -1                                        # must not reach the cached chunk
    assert np.array_equal(arr.read(slice(2, 4)), np.arange(6, 12, dtype=np.float64).reshape(2, 3))


def test_a_vanished_directory_is_made_again(tmp_path):
    store = DirectoryStore(str(tmp_path))
    store.write_at("a/b/c", 0, b"one")
    shutil.rmtree(tmp_path / "a")
    store.write_at("a/b/c", 0, b"two")
    store.set("a/b/zarr.json", b"{}")
    shutil.rmtree(tmp_path / "a")
    store.set("a/b/zarr.json", b"{}")
    assert store.get("a/b/zarr.json") == b"{}" and store.get("a/b/c") is None


def test_compact_profile_is_opt_in_and_reads_like_the_reference(tmp_path):
    import mrec
    from mrec.errors import RefusalError
    from mrec.zarr.array import Array
    rng = np.random.default_rng(3)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=700)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=1e-3)
    frames = [{"blocks": {"atoms": {c: rng.uniform(0, 30, 700) for c in "xyz"}}} for _ in range(37)]
    out = {}
    for profile in ("reference", "compact"):
        path = tmp_path / f"{profile}.mrec"
        with mrec.TrajectoryWriter.create(path, s, profile=profile, durable=False) as w:
            for f in frames:
                w.append(f)
        r = mrec.TrajectoryReader(path)
        out[profile] = [r[i].blocks["atoms"]["x"] for i in range(len(r))], r.column("atoms", "y")
        arr = Array.open(DirectoryStore(str(path)), "trajectory/atoms/x")
        sh = arr.sharding
        out[profile + " meta"] = sh.chunk_shape[0], [c.to_json() for c in sh.codecs.bytes_bytes]
    assert out["reference meta"][0] == 2100                     # 3 frames: the 16 KiB rule
    assert out["compact meta"][0] == 700 * 16
    assert {"name": "zstd", "configuration": {"level": 19, "checksum": False}} in out["compact meta"][1]
    for a, b in zip(out["reference"][0], out["compact"][0]):
        assert np.array_equal(a, b)
    assert np.array_equal(out["reference"][1], out["compact"][1])
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryWriter.create(tmp_path / "bad.mrec", s, profile="tiny")
    assert e.value.kind == "bad_profile" and not (tmp_path / "bad.mrec").exists()
