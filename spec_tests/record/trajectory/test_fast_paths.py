"""The performance fast paths give the same bytes and values as the plain paths they shortcut.

(python -m tools.bench measures them; nothing here is timed.)
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings, strategies as st

from mrec.errors import CorruptionError
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.codecs.shuffle import shuffle_bytes, unshuffle_bytes
from mrec.zarr.codecs.zstd_ import ZstdCodec
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata, json_dumps
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.stores.directory import DirectoryStore

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


# -- the reader's fast paths (perf-reader) -----------------------------------------------------

def _rich_trajectory(path, n_frames=9, atoms=50):
    """Several blocks (a ragged one, a nullable column, a u64 and an i32 column), meta, a cell."""
    import mrec
    rng = np.random.default_rng(11)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=1e-3)
    s.declare_column("atoms", "q", "f64", nullable=True)
    s.declare_column("atoms", "id", "u64")
    s.declare_block("ions")
    s.declare_column("ions", "k", "i32")
    s.declare_meta("pe", "f64")
    s.declare_meta("dip", "f64x3")
    frames = []
    for i in range(n_frames):
        blocks = {"atoms": {c: rng.uniform(0, 20, atoms) for c in "xyz"}}
        blocks["atoms"]["q"] = rng.normal(size=atoms)
        blocks["atoms"]["id"] = np.arange(atoms, dtype=np.uint64)
        f = {"blocks": blocks, "meta": {"pe": -1.25 * i, "dip": [1.0, 2.0, float(i)]},
             "box": np.eye(3) * (20.0 + i % 2)}
        if i % 3 == 0:
            blocks["ions"] = {"k": np.arange(i % 4 + 1, dtype=np.int32)}
        if i % 2:
            f["masks"] = {"atoms": {"q": rng.random(atoms) > 0.3}}
        frames.append(f)
    with mrec.TrajectoryWriter.create(path, s, durable=False) as w:
        for f in frames:
            w.append(f)
    return frames


def _same_frame(a, b):
    assert a.equals(b)
    assert a.counts == b.counts and a.meta_types == b.meta_types
    assert a.precision == b.precision and a.block_attrs == b.block_attrs
    assert list(a.blocks) == list(b.blocks)
    for blk, cols in a.blocks.items():
        assert list(cols) == list(b.blocks[blk])
        for c, v in cols.items():
            w = b.blocks[blk][c]
            assert v.dtype == w.dtype and v.shape == w.shape and v.tobytes() == w.tobytes()
            assert v.flags.writeable and w.flags.writeable
    assert {k: type(v) for k, v in a.meta.items()} == {k: type(v) for k, v in b.meta.items()}


def test_trusted_frames_equal_validated_frames(tmp_path):
    import mrec
    from mrec.record.model.frame import Frame
    path = tmp_path / "r.mrec"
    _rich_trajectory(path)
    fast = mrec.TrajectoryReader(path)
    plain = mrec.TrajectoryReader(path)
    plain._trusted = False                          # every frame through the validating constructor
    assert fast._frames_trusted()
    for i in range(len(fast)):
        a, b = fast[i], plain[i]
        _same_frame(a, b)
        # and both equal a Frame rebuilt by the public constructor from the fast one's parts
        _same_frame(a, Frame(blocks=a.blocks, box=a.box, meta=a.meta, masks=a.masks, meta_types=a.meta_types))


def test_trusted_frames_are_off_for_string_columns(tmp_path):
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "element", "string")
    path = tmp_path / "s.mrec"
    with mrec.TrajectoryWriter.create(path, s, durable=False) as w:
        w.append({"blocks": {"atoms": {"element": ["C", "O"]}}})
    r = mrec.TrajectoryReader(path)
    assert not r._frames_trusted()
    assert r[0].blocks["atoms"]["element"].tolist() == ["C", "O"]


def test_forward_walk_through_a_chunk_decodes_it_once(tmp_path, monkeypatch):
    """Small frames: a chunk verified for rows [0, b) serves the next frame after the same check."""
    import mrec
    from mrec.zarr import pipeline
    path = tmp_path / "w.mrec"
    frames = _rich_trajectory(path, n_frames=40, atoms=30)
    calls = []
    real = pipeline.CodecPipeline.decode
    monkeypatch.setattr(pipeline.CodecPipeline, "decode", lambda self, d, s: calls.append(1) or real(self, d, s))
    r = mrec.TrajectoryReader(path)
    got = [r[i] for i in range(len(r))]
    n_seq = len(calls)
    calls.clear()
    fresh = [mrec.TrajectoryReader(path)[i] for i in range(len(r))]      # no cache to lean on
    assert n_seq < len(calls) / 4
    for a, b, f in zip(got, fresh, frames):
        _same_frame(a, b)
        assert np.allclose(a.blocks["atoms"]["x"], f["blocks"]["atoms"]["x"], atol=1e-3)


def test_whole_chunk_reads_are_fresh_arrays(tmp_path):
    """A frame that is a whole inner chunk is handed out without a copy: it must be the reader's alone."""
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3000)            # 3000 f64 rows: one frame per inner chunk
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    path = tmp_path / "big.mrec"
    rng = np.random.default_rng(5)
    data = [rng.uniform(0, 40, 3000) for _ in range(3)]
    with mrec.TrajectoryWriter.create(path, s, durable=False) as w:
        for d in data:
            w.append({"blocks": {"atoms": {"x": d}}})
    r = mrec.TrajectoryReader(path)
    a = r[1].blocks["atoms"]["x"]
    b = r[1].blocks["atoms"]["x"]
    assert a.flags.writeable and a.flags.c_contiguous and not np.shares_memory(a, b)
    keep = b.copy()
    a[:] = -1
    assert r[1].blocks["atoms"]["x"].tobytes() == keep.tobytes()
    assert r.column("atoms", "x")[1].tobytes() == keep.tobytes()
    assert np.allclose(keep, data[1], atol=1e-3)


@pytest.mark.parametrize("codecs", [
    INNER,
    [INNER[0], INNER[2], INNER[3]],
    [INNER[0], INNER[1], {"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}],
    [INNER[0], {"name": "crc32c"}, INNER[1]],
    [INNER[0], {"name": "numcodecs.shuffle", "configuration": {"elementsize": 3}}, {"name": "crc32c"}],
])
def test_copy_free_decoders_give_the_same_values(codecs):
    p = CodecPipeline.from_json(codecs, "x")
    spec = ChunkSpec((101,), DATA_TYPES["float64"], 0.0, "x/c/0")
    a = np.random.default_rng(2).normal(size=101)
    blob = p.encode(a, spec)
    got = p.decode(blob, spec)
    plain = np.frombuffer(_plain_decode(p, blob, spec), dtype="<f8")
    assert got.tobytes() == a.tobytes() == plain.tobytes()
    bad = bytearray(blob)
    bad[len(bad) // 2] ^= 4
    with pytest.raises(CorruptionError, match="x/c/0"):
        p.decode(bytes(bad), spec)


def _plain_decode(p, data, spec):
    for c in reversed(p.bytes_bytes):
        data = c.decode(data, spec)
    return data


def test_read_range_returns_short_reads_at_the_end(tmp_path):
    from mrec.fs.posix import PosixFileSystem
    f = tmp_path / "f"
    f.write_bytes(bytes(range(100)))
    fs = PosixFileSystem()
    assert fs.read_range(str(f), 10, 5) == bytes(range(10, 15))
    assert fs.read_range(str(f), 90, 50) == bytes(range(90, 100))
    assert fs.read_range(str(f), 200, 5) == b"" and fs.read_range(str(f), 0, 0) == b""


def test_concurrent_column_reads_are_bit_identical(tmp_path, monkeypatch):
    import mrec
    from mrec.record.trajectory import reads as trajectory_read
    path = tmp_path / "c.mrec"
    _rich_trajectory(path, n_frames=12, atoms=40)
    serial = [mrec.TrajectoryReader(path)[i] for i in range(12)]
    monkeypatch.setenv("MREC_READ_THREADS", "2")
    monkeypatch.setattr(trajectory_read, "PARALLEL_READ_BYTES", 0)
    r = mrec.TrajectoryReader(path)
    assert r._concurrent([(c, a, 0, 40) for c, a in r.layout.blocks["atoms"].columns.items()])
    for i in range(12):
        _same_frame(r[i], serial[i])
        assert r.read_columns(i, [("atoms", "x"), ("atoms", "q")])[("atoms", "q")].tobytes() == \
            serial[i].blocks["atoms"]["q"].tobytes()


def test_concurrent_column_reads_raise_the_serial_error(tmp_path, monkeypatch):
    """A damaged chunk in the second and third column: both modes name the second one."""
    import mrec
    from mrec.record.trajectory import reads as trajectory_read
    from mrec.zarr.array import Array as A
    path = tmp_path / "d.mrec"
    _rich_trajectory(path, n_frames=6, atoms=3000)           # one frame per inner chunk
    store = DirectoryStore(str(path))
    for col in ("y", "z"):
        arr = A.open(store, f"trajectory/atoms/{col}")
        key = arr.chunk_key((0,))
        index = arr.shard_index(key)
        off, n = int(index.offsets[(2,)]), int(index.nbytes[(2,)])
        p = path / key
        raw = bytearray(p.read_bytes())
        raw[off + n // 2] ^= 1
        p.write_bytes(bytes(raw))
    errors = []
    for threads in ("1", "2"):
        monkeypatch.setenv("MREC_READ_THREADS", threads)
        monkeypatch.setattr(trajectory_read, "PARALLEL_READ_BYTES", 0)
        r = mrec.TrajectoryReader(path)
        assert r[1].blocks["atoms"]["x"].shape == (3000,)
        with pytest.raises(mrec.errors.MrecError) as e:
            r[2]
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1] and "atoms/y" in errors[0][1]


@pytest.mark.parametrize("cut", [None, 7, 60, 200])
def test_coalesced_chunk_reads_match_one_read_per_chunk(tmp_path, monkeypatch, cut):
    """Back-to-back inner chunks fetched as one range: same values, same errors (a truncated shard)."""
    from mrec.fs import RecordingFileSystem
    from mrec.zarr.read import plan as array_mod
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (64,), _sharded(8, 8)))
    ap = ShardedAppender(arr)
    data = np.random.default_rng(4).normal(size=61)
    for lo in range(0, 61, 20):                      # re-landed partial tails leave gaps between runs
        ap.append(data[lo:lo + 20])
        ap.land()
    arr.write_metadata()
    if cut is not None:
        p = tmp_path / "x" / "c" / "0"
        p.write_bytes(p.read_bytes()[:-cut])
    out = {}
    for limit in (0, 4 << 20):
        monkeypatch.setattr(array_mod, "COALESCE_BYTES", limit)
        fs = RecordingFileSystem(record_reads=True)
        a = Array.open(DirectoryStore(str(tmp_path), fs=fs), "x")
        try:
            got = ("ok", a.read().tobytes(), a.read(slice(3, 50)).tobytes())
        except CorruptionError as exc:
            got = ("error", str(exc))
        out[limit] = got, sum(op.length for op in fs.ops if op.kind == "read_range"), len(fs.ops)
    assert out[0][0] == out[4 << 20][0]
    if cut is None:
        assert out[0][0][1] == data.tobytes()
        assert out[4 << 20][2] < out[0][2]           # fewer reads ...
        assert out[4 << 20][1] <= out[0][1]           # ... of no more bytes


@pytest.mark.parametrize("dtype, n, endian", [("float64", 8, "little"), ("int32", 4, "little"), ("int32", 8, "little"),
                                              ("float64", 8, "big"), ("uint8", 2, None), ("bool", 1, None)])
def test_decode_into_matches_decode(dtype, n, endian):
    bytes_codec = {"name": "bytes", "configuration": {"endian": endian}} if endian else {"name": "bytes"}
    p = CodecPipeline.from_json([bytes_codec, {"name": "numcodecs.shuffle", "configuration": {"elementsize": n}},
                                 INNER[2], INNER[3]], "x")
    dt = DATA_TYPES[dtype]
    spec = ChunkSpec((64,), dt, dt.numpy.type(0), "x/c/0")
    a = (np.random.default_rng(7).integers(0, 2, 64) if dtype == "bool" else np.arange(64) * 3).astype(dt.numpy)
    blob = p.encode(a, spec)
    dest = np.full(64, 1, dtype=dt.numpy)
    got = p.decode_into(blob, spec, dest)
    assert got.tobytes() == p.decode(blob, spec).tobytes() == a.tobytes() and got.dtype == a.dtype

    def same_error(bad):                    # decode and decode_into refuse with the same message
        errs = []
        for f in (lambda: p.decode(bad, spec), lambda: p.decode_into(bad, spec, np.empty(64, dt.numpy))):
            with pytest.raises(CorruptionError) as e:
                f()
            errs.append(str(e.value))
        assert errs[0] == errs[1]

    for bad in (blob[:-1], blob[:5] + bytes([blob[5] ^ 1]) + blob[6:]):
        same_error(bad)
    # a chunk that decodes to the wrong size: the bytes codec's error, as decode raises it
    same_error(CodecPipeline.from_json([bytes_codec, {"name": "numcodecs.shuffle", "configuration": {"elementsize": n}},
                                        INNER[2], INNER[3]], "x").encode(a[:32], ChunkSpec((32,), dt, 0, "x")))


def test_column_equals_the_frames_it_stacks(tmp_path):
    import mrec
    for atoms in (40, 3000):
        path = tmp_path / f"c{atoms}.mrec"
        _rich_trajectory(path, n_frames=23, atoms=atoms)
        r = mrec.TrajectoryReader(path)
        frames = [mrec.TrajectoryReader(path)[i] for i in range(len(r))]
        for c in ("x", "q", "id"):
            col = r.column("atoms", c)
            assert col.flags.writeable and col.flags.c_contiguous
            assert col.tobytes() == np.stack([f.blocks["atoms"][c] for f in frames]).tobytes()
            part = r.column("atoms", c, slice(3, 17))
            assert part.tobytes() == col[3:17].tobytes()
            col[:] = 0                                  # the caller's own: later reads are unchanged
            assert r[5].blocks["atoms"][c].tobytes() == frames[5].blocks["atoms"][c].tobytes()


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600), st.integers(1, 17))
def test_shuffle_c_loops_match_numcodecs(data, n):
    """The shuffle calls numcodecs' C loops directly; bytes equal numcodecs.Shuffle's (whole
    elements) and the numpy path's (a partial last element), and unshuffle inverts shuffle."""
    from numcodecs import Shuffle
    from mrec.zarr.codecs.shuffle import ShuffleCodec
    enc = shuffle_bytes(data, n)
    if n > 1 and len(data) % n == 0 and data:
        assert enc == bytes(Shuffle(n).encode(data))
        assert unshuffle_bytes(enc, n) == bytes(Shuffle(n).decode(enc))
    assert unshuffle_bytes(enc, n) == data
    assert bytes(ShuffleCodec(n).decode_view(enc, None)) == data
    assert bytes(ShuffleCodec(n).encode_view(data)) == enc


_ENCODER_PIPELINES = [
    INNER,
    [INNER[0], INNER[2], INNER[3]],
    [INNER[0], INNER[1], {"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}],
    [INNER[0], {"name": "crc32c"}, INNER[1]],
    [INNER[0], {"name": "numcodecs.shuffle", "configuration": {"elementsize": 3}}, INNER[2]],
    [{"name": "bytes", "configuration": {"endian": "big"}}, INNER[1], INNER[2], INNER[3]],
    [{"name": "bytes", "configuration": {"endian": "little"}}],
    [{"name": "transpose", "configuration": {"order": [0]}}, INNER[0], INNER[3]],
]


@pytest.mark.parametrize("codecs", _ENCODER_PIPELINES)
@pytest.mark.parametrize("dtype", ["float64", "int32", "uint8", "bool", "complex128", "int16"])
def test_resolved_encoder_gives_the_bytes_of_encode(codecs, dtype):
    """CodecPipeline.encoder (the landing's per-array encoder: no bytes copies between codecs)
    gives encode's bytes, for contiguous, strided and wrong-dtype input alike; None where it
    does not apply (array→array codecs, no bytes→bytes codec)."""
    p = CodecPipeline.from_json(codecs, "x")
    dt = DATA_TYPES[dtype]
    spec = ChunkSpec((50,), dt, dt.numpy.type(0), "x/c/0")
    enc = p.encoder(spec)
    if p.array_array or not p.bytes_bytes:
        assert enc is None
        return
    rng = np.random.default_rng(5)
    base = (rng.normal(size=100) * 50).astype(dt.numpy) if dtype != "bool" else rng.integers(0, 2, 100).astype(bool)
    for a in (base[:50], base[::2], base[:50].astype(">" + base.dtype.str[1:]) if base.dtype.itemsize > 1 else base[50:]):
        want = p.encode(a, spec)
        got = enc(a)
        assert isinstance(got, bytes) and got == want
    # a chunk of another shape goes through encode (and its errors)
    assert enc(base[:10]) == p.encode(base[:10], spec)


def test_resolved_encoder_is_none_for_strings():
    p = CodecPipeline.from_json([{"name": "vlen-utf8"}, {"name": "zstd", "configuration": {"level": 1}}], "x")
    assert p.encoder(ChunkSpec((4,), DATA_TYPES["string"], "", "x")) is None


_F64 = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=300, deadline=None)
@given(st.lists(_F64 | st.sampled_from([0.0, -0.0, 0.5, -2.5, 1e300, -1e308, 2.0**60, 5e-324]), min_size=1, max_size=40),
       st.sampled_from([1e-3, 1e-2, 0.5, 0.75, 1.0, 2.0**-1000, 2.0**1000, 3e-7, 1e5]))
def test_round_in_place_is_round_to_precision_or_says_no(values, p):
    """The batch path's in-place rounding: when it says yes the bits equal round_to_precision's
    (signed zeros, ties to even, |x| >= 2^52 q kept); NaN, inf and overflowing x / q say no."""
    from mrec.record.model.precision import round_in_place, round_to_precision
    a = np.array(values, dtype=np.float64)
    want = round_to_precision(a, p)
    b = a.copy()
    if round_in_place(b, p):
        assert b.view(np.uint64).tobytes() == want.view(np.uint64).tobytes()
        assert np.isfinite(a).all()
    else:
        # refused only when the sum of the result is not finite (NaN, inf, overflow)
        with np.errstate(all="ignore"):
            assert not np.isfinite(np.add.reduce(np.rint(a / (2.0 ** (np.frexp(p)[1] - 1))) * (2.0 ** (np.frexp(p)[1] - 1))))


def test_round_in_place_on_a_stack_of_frames():
    from mrec.record.model.precision import round_in_place, round_to_precision
    rng = np.random.default_rng(3)
    a = rng.normal(size=(59, 3000)) * 40
    b = a.copy()
    assert round_in_place(b, 1e-3)
    assert b.tobytes() == round_to_precision(a, 1e-3).tobytes()
    c = a.copy()
    c[7, 11] = np.nan
    assert not round_in_place(c, 1e-3)


@pytest.mark.parametrize("codecs", _ENCODER_PIPELINES)
def test_resolved_decoder_gives_the_values_of_decode(codecs):
    """CodecPipeline.decoder (the read path's per-array decoder, no per-chunk labels) returns
    decode's values; a chunk it cannot decode raises, and the labelled decode names the chunk."""
    p = CodecPipeline.from_json(codecs, "x")
    dt = DATA_TYPES["float64"]
    spec = ChunkSpec((50,), dt, 0.0, "x/c/0")
    dec = p.decoder(spec.at(""))
    if p.array_array or p._view_decoders is None:
        assert dec is None
        return
    a = np.random.default_rng(9).normal(size=50)
    blob = p.encode(a, spec)
    assert dec(blob).tobytes() == p.decode(blob, spec).tobytes() == a.tobytes()
    if any(c["name"] == "crc32c" for c in codecs):
        bad = bytearray(blob)
        bad[len(bad) // 2] ^= 4
        with pytest.raises(CorruptionError):
            dec(bytes(bad))
        with pytest.raises(CorruptionError, match="x/c/0"):
            p.decode(bytes(bad), spec)


def _flip_a_bit(root, store, inner: int, at: float, bit: int) -> None:
    """Flip ``bit`` of the byte at fraction ``at`` into inner chunk ``inner`` of array x's first shard."""
    arr = Array.open(store, "x")
    key = arr.chunk_key((0,))
    index = arr.shard_index(key)
    off, n = int(index.offsets[inner]), int(index.nbytes[inner])
    path = root / key
    raw = bytearray(path.read_bytes())
    raw[off + int(n * at)] ^= bit
    path.write_bytes(bytes(raw))


def test_a_corrupt_chunk_is_reported_with_its_name_through_the_resolved_decoder(tmp_path):
    """The read path decodes through the resolved decoder first; a chunk failing it is decoded
    again through the labelled path, so the refusal still names the shard and inner chunk."""
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (40,), _sharded(8, 5)))
    ap = ShardedAppender(arr)
    data = np.random.default_rng(4).normal(size=40)
    ap.append(data)
    ap.land()
    arr.write_metadata()
    _flip_a_bit(tmp_path, store, inner=1, at=0.5, bit=0x10)
    bad = Array.open(store, "x")
    assert bad.read(slice(0, 8)).tobytes() == data[:8].tobytes()        # its neighbours read
    with pytest.raises(CorruptionError, match=r"inner chunk \[1\]"):
        bad.read(slice(8, 16))
    with pytest.raises(CorruptionError, match=r"inner chunk \[1\]"):
        bad.read(slice(9, 10))


@pytest.mark.parametrize("rows", [1, 100, 1023, 1024, 3000])
def test_stack_rounded_is_round_to_precision_of_the_stack(rows):
    from mrec.record.model.precision import round_to_precision, stack_rounded
    rng = np.random.default_rng(rows)
    srcs = [rng.normal(size=rows) * 40 for _ in range(7)]
    srcs[2][0] = -0.0
    srcs[3][-1] = 2.0 ** 60
    got = stack_rounded(srcs, 1e-2)
    assert got.tobytes() == round_to_precision(np.stack(srcs), 1e-2).tobytes()
    for bad in (np.nan, np.inf, -np.inf):
        s = [a.copy() for a in srcs]
        s[5][rows // 2] = bad
        assert stack_rounded(s, 1e-2) is None
    s = [a.copy() for a in srcs]
    s[1][0] = 1e308                      # x / q overflows for q = 2^-7
    assert stack_rounded(s, 1e-2) is None


def _frame_column(tmp_path, rows=50, frames=30, relands=()):
    """A frame-aligned column (one frame of ``rows`` rows per inner chunk), landed a frame at a time;
    frames in ``relands`` are landed twice as a partial chunk first (the shard holds dead copies)."""
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (rows * 64,),
                                                        _sharded(rows, 64)))
    ap = ShardedAppender(arr)
    data = np.random.default_rng(11).normal(size=(frames, rows))
    for f in range(frames):
        if f in relands:
            ap.append(data[f, :rows // 2])
            ap.land()
            ap.append(data[f, rows // 2:])
        else:
            ap.append(data[f])
        ap.land()
    arr.write_metadata()
    return store, data


@pytest.mark.parametrize("relands", [(), (3, 4, 17)])
def test_forward_walk_reads_ahead_the_same_bytes(tmp_path, monkeypatch, relands):
    """Whole-chunk frame reads walking forward fetch the next back-to-back chunks in one range
    (fewer reads), and give the values of one read per chunk, across dead copies too."""
    store, data = _frame_column(tmp_path, relands=relands)
    calls = []
    orig = DirectoryStore.get_range
    monkeypatch.setattr(DirectoryStore, "get_range", lambda self, k, o, n: (calls.append(n), orig(self, k, o, n))[1])
    arr = Array.open(store, "x")
    got = [arr.read(slice(f * 50, (f + 1) * 50)) for f in range(len(data))]
    assert np.stack(got).tobytes() == data.tobytes()
    walk = len(calls)
    assert walk < len(data) // 2
    calls.clear()
    plain = Array.open(store, "x")
    back = [plain.read(slice(f * 50, (f + 1) * 50)) for f in reversed(range(len(data)))]   # no walk: one read each
    assert np.stack(back[::-1]).tobytes() == data.tobytes()
    assert len(calls) >= len(data)
    for a in got:
        assert a.flags.writeable and a.flags.c_contiguous


def test_a_corrupt_chunk_inside_a_read_ahead_range_is_named(tmp_path):
    store, data = _frame_column(tmp_path)
    _flip_a_bit(tmp_path, store, inner=6, at=1 / 3, bit=0x01)
    arr = Array.open(store, "x")
    for f in range(6):
        assert arr.read(slice(f * 50, (f + 1) * 50)).tobytes() == data[f].tobytes()
    with pytest.raises(CorruptionError, match=r"inner chunk \[6\]"):
        arr.read(slice(300, 350))
    assert arr.read(slice(350, 400)).tobytes() == data[7].tobytes()


def test_read_ahead_stays_inside_the_logical_shape(tmp_path, monkeypatch):
    """Chunks past the array's shape (an uncommitted tail) are never fetched ahead."""
    store, data = _frame_column(tmp_path, frames=20)
    arr = Array.open(store, "x")
    arr.meta = arr.meta.with_shape((10 * 50,))        # as a reader bound by nstep = 10 sees it
    index = arr.shard_index(arr.chunk_key((0,)))
    end10 = int(index.offsets[9]) + int(index.nbytes[9])
    seen = []
    orig = DirectoryStore.get_range
    monkeypatch.setattr(DirectoryStore, "get_range", lambda self, k, o, n: (seen.append(o + n), orig(self, k, o, n))[1])
    for f in range(10):
        assert arr.read(slice(f * 50, (f + 1) * 50)).tobytes() == data[f].tobytes()
    assert max(seen) <= end10


def test_stack_rows_is_np_stack():
    from mrec.record.model.precision import stack_rows
    rng = np.random.default_rng(8)
    for shape in [(5,), (7, 3), (0,), (2, 2, 2)]:
        srcs = [rng.normal(size=shape) for _ in range(9)]
        got, want = stack_rows(srcs), np.stack(srcs)
        assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()
    with pytest.raises(ValueError):
        stack_rows([np.zeros(3), np.zeros(4)])


@settings(max_examples=200, deadline=None)
@given(st.lists(_F64 | st.sampled_from([0.0, -0.0, 0.5, -2.5, 1e300, -1e308, 2.0**60, 5e-324, 2.2e-308]),
                min_size=1, max_size=12),
       st.sampled_from([1e-3, 1e-2, 0.5, 0.75, 1.0, 2.0**-1000, 2.0**1000, 3e-7, 1e5, 2.0**-999 * 1.5]),
       st.sampled_from([1, 1100]))
def test_batch_rounding_multiplies_by_the_exact_inverse_quantum(values, p, rows):
    """The writer's batch rounding (stack_rounded, round_in_place) multiplies by 1/q instead of
    dividing by q: for every admissible p, 1/q is exact, so each stored value is bit for bit what
    round_to_precision stores (subnormals, overflow to inf, signed zeros, |x| >= 2^52 q), or the
    batch path says no (a non-finite result) and the writer rounds with round_to_precision."""
    from mrec.record.model.precision import (inverse_quantum, quantum, round_in_place, round_to_precision,
                                             stack_rounded)
    assert inverse_quantum(p) * quantum(p) == 1.0
    a = np.resize(np.array(values, dtype=np.float64), rows)
    srcs = [a, a[::-1].copy()]
    want = round_to_precision(np.stack(srcs), p)
    got = stack_rounded(srcs, p)
    if got is not None:
        assert got.view(np.uint64).tobytes() == want.view(np.uint64).tobytes()
    b = np.stack(srcs)
    if round_in_place(b, p):
        assert b.view(np.uint64).tobytes() == want.view(np.uint64).tobytes()
    with np.errstate(all="ignore"):
        assert (a * inverse_quantum(p)).view(np.uint64).tobytes() == (a / quantum(p)).view(np.uint64).tobytes()
