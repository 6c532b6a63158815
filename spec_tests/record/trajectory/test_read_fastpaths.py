"""Issue 16, the reader's fast paths: each gives exactly the bytes of the plain decode, and
anything it does not recognise as the plain case is left to the labelled path (which raises).

Nothing here is timed (tools/bench.py issue16 measures)."""
from __future__ import annotations

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings, strategies as st

from mrec.errors import CorruptionError
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.codecs.crc32c_ import crc32c
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.codecs.fused import _unshuffler
from mrec.zarr.pipeline import CodecPipeline


def _pipeline(elementsize: int, shuffle: bool = True) -> CodecPipeline:
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if shuffle:
        codecs.append({"name": "numcodecs.shuffle", "configuration": {"elementsize": elementsize}})
    codecs += [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}, {"name": "crc32c"}]
    return CodecPipeline.from_json(codecs, "x")


DTYPES = ["float64", "int32", "int16", "uint8", "int64", "complex128"]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(1, 300), st.sampled_from([1, 2, 3, 4, 8, 16]), st.booleans(),
       st.booleans(), st.integers(0, 2**32 - 1), st.booleans())
def test_in_place_decoders_give_the_plain_decode(dtype, rows, elementsize, shuffle, release_gil, seed, many):
    """decoder_into (numcodecs' C unshuffle, or numpy's GIL-free transposed copy) writes exactly the
    bytes decode returns, for every element size that divides the chunk (else it declines: None)."""
    dt = DATA_TYPES[dtype]
    spec = ChunkSpec((rows,), dt, 0, "x")
    pipe = _pipeline(elementsize, shuffle)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, rows * dt.numpy.itemsize, dtype=np.uint8).view(dt.numpy)
    raw = pipe.encode(data, spec)
    into = pipe.decoder_into(spec, release_gil=release_gil, many=many)
    if shuffle and elementsize > 1 and (rows * dt.numpy.itemsize) % elementsize:
        assert into is None
        return
    assert into is not None
    dest = np.full(rows, 7, dtype=dt.numpy)
    lane = np.full((rows, 3), 7, dtype=dt.numpy)          # a strided destination: one lane of three
    if many:
        got = into([(raw, dest), (raw, lane[:, 1]), (raw[:-1], np.empty_like(dest))])
        strided_ok = not shuffle or elementsize in (1, dt.numpy.itemsize) or lane[:, 1].flags.c_contiguous
        assert got == [True, strided_ok, False]
    else:
        assert into(raw, dest) is True
        strided_ok = into(raw, lane[:, 1])
    assert dest.tobytes() == pipe.decode(raw, spec).tobytes() == data.tobytes()
    if strided_ok:
        assert lane[:, 1].tobytes() == data.tobytes() and (lane[:, [0, 2]] == 7).all()


def damaged_chunk(damage: str, pipe: CodecPipeline, spec: ChunkSpec, data: np.ndarray) -> tuple[bytes, bytes]:
    """(the good encoded chunk of ``data``, the chunk damaged as ``damage`` says): a flipped bit of
    the body or the crc, a zstd frame or a byte after the frame, a cut, a frame without its size or
    stating (and holding) 8 bytes more or fewer than the chunk, nothing at all."""
    good = pipe.encode(data, spec)
    body = good[:-4]
    shuffled = pipe.bytes_bytes[0].encode(data.tobytes())

    def seal(b: bytes) -> bytes:
        return b + crc32c(b).to_bytes(4, "little")
    return good, {
        "flip body": lambda: bytes([good[0] ^ 1]) + good[1:],
        "flip crc": lambda: good[:-1] + bytes([good[-1] ^ 1]),
        "trailing frame": lambda: seal(body + zstandard.ZstdCompressor().compress(b"x")),
        "trailing bytes": lambda: seal(body + b"\x00"),
        "short": lambda: good[:3],
        "no content size": lambda: seal(zstandard.ZstdCompressor(write_content_size=False).compress(shuffled)),
        "wrong content size": lambda: seal(zstandard.ZstdCompressor().compress(shuffled + b"\x00" * 8)),
        "short content": lambda: seal(zstandard.ZstdCompressor().compress(shuffled[:-8])),
        "empty": lambda: b"",
    }[damage]()


@pytest.mark.parametrize("release_gil", [False, True])
@pytest.mark.parametrize("damage", ["flip body", "flip crc", "trailing frame", "trailing bytes", "short",
                                    "no content size", "wrong content size", "empty"])
def test_the_fused_decoder_declines_what_is_not_plain(damage, release_gil):
    """crc32c + zstd fused: a chunk whose checksum fails, whose zstd frame does not state exactly the
    chunk's size or has bytes after it is never written in place (False or an exception: the caller
    decodes it through the labelled path, which raises or decodes as it always did)."""
    spec = ChunkSpec((64,), DATA_TYPES["float64"], 0.0, "x")
    pipe = _pipeline(8)
    data = np.arange(64, dtype=np.float64)
    good, raw = damaged_chunk(damage, pipe, spec, data)
    into = pipe.decoder_into(spec, release_gil=release_gil)
    dest = np.full(64, -1.0)
    try:
        ok = into(raw, dest)
    except Exception:          # noqa: BLE001 - allowed: the caller treats it as "not plain"
        ok = False
    many = pipe.decoder_into(spec, release_gil=release_gil, many=True)
    assert many([(raw, dest), (good, np.empty(64))]) == [False, True]
    if damage == "no content size":
        # a frame without its size is legal: the labelled path decodes it; the fused one declines
        assert ok is False and pipe.decode(raw, spec).tobytes() == data.tobytes()
        return
    assert ok is False
    with pytest.raises(CorruptionError):
        pipe.decode(raw, spec)


@given(st.integers(1, 64), st.sampled_from([2, 4, 8]), st.integers(0, 2**32 - 1))
def test_gil_free_unshuffle_is_numcodecs_unshuffle(count, n, seed):
    """The numpy unshuffle (byte plane b of element i is byte b * count + i) is numcodecs'."""
    src = np.random.default_rng(seed).integers(0, 256, count * n, dtype=np.uint8).tobytes()
    a, b = np.empty(count * n, np.uint8), np.empty(count * n, np.uint8)
    _unshuffler(n, True)(src, a)
    _unshuffler(n, False)(src, b)
    from numcodecs import Shuffle
    assert a.tobytes() == b.tobytes() == bytes(Shuffle(n).decode(src))


# -- batch frames: made as they are taken ---------------------------------------------------------

def _plain_trajectory(path, n_frames=40, atoms=7):
    import mrec
    w = mrec.TrajectoryWriter.create(path, _xyz_schema(), durable=False)
    rng = np.random.default_rng(3)
    for _ in range(n_frames):
        w.append({"blocks": {"atoms": {c: rng.normal(size=atoms) for c in "xyz"}}})
    w.close()


def _xyz_schema():
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("atoms")
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    return s


@pytest.mark.parametrize("threads", ["1", "2"])
def test_batch_frames_have_every_field_of_the_frame_read_alone(tmp_path, monkeypatch, threads):
    """Iteration over a trajectory of one regular block builds its frames lazily (the empty fields
    made on first access): each has the blocks, counts, meta, masks, types, precision, attributes
    and cell of r[i], compares equal, pickles, copies, and its empty fields are its own."""
    import copy
    import dataclasses
    import pickle

    import mrec
    from mrec.record.model.frame import Frame
    monkeypatch.setenv("MREC_THREADS", threads)
    path = tmp_path / "t.mrec"
    _plain_trajectory(path)
    r = mrec.TrajectoryReader(path)
    ref = mrec.TrajectoryReader(path)
    ref._trusted = False                  # every frame through the general path and the validating constructor
    got = list(r)
    alone = [r[i] for i in range(len(r))]          # r[i] of this plain layout: made lazily too
    assert len(got) == 40
    assert "counts" not in vars(got[0]) and "counts" not in vars(alone[0])   # made lazily indeed
    for i, f in enumerate(got + alone):
        want = ref[i % 40]
        assert type(want.__dict__.get("meta")) is dict            # the validated frame has them all
        assert isinstance(f, Frame) and f == want
        for name in ("counts", "meta", "masks", "meta_types", "precision", "block_attrs", "box"):
            assert getattr(f, name) == getattr(want, name), name
        assert {c: v.tobytes() for c, v in f.blocks["atoms"].items()} == \
            {c: v.tobytes() for c, v in want.blocks["atoms"].items()}
    a, b = got[3], got[4]
    a.meta["k"] = 1
    assert b.meta == {} and a.meta == {"k": 1}
    for clone in (pickle.loads(pickle.dumps(got[5])), copy.deepcopy(got[5]), dataclasses.replace(got[5])):
        assert clone == got[5] and clone.counts == {"atoms": 7}
    assert repr(got[6]) == repr(ref[6]) == repr(alone[6])
    with pytest.raises(AttributeError):
        got[7].no_such_field


# -- straight into an interleaved result ---------------------------------------------------------

from test_parallel_read import VARIANTS, _appended, _chunk_span  # noqa: E402  (spec_tests is on sys.path)


@settings(max_examples=30, deadline=None)
@given(codecs=st.sampled_from(sorted(VARIANTS)), n=st.integers(1, 200), inner=st.integers(1, 9),
       per_shard=st.integers(1, 4), lo=st.integers(0, 210), span=st.integers(0, 210),
       threads=st.sampled_from([1, 2]), damage=st.sampled_from([None, "flip", "truncate"]))
def test_read_into_a_strided_lane_is_the_read(tmp_path_factory, codecs, n, inner, per_shard, lo, span, threads,
                                              damage):
    """Array.read_into one lane of an interleaved (rows, 3) array: the values of Array.read, or the
    error Array.read raises (same type, same text), for every codec variant; on one thread or two."""
    from mrec.errors import MrecError
    from mrec.zarr import parallel
    from mrec.zarr.array import Array
    path = tmp_path_factory.mktemp("ri")
    data = np.random.default_rng(n).normal(size=n)
    store = _appended(path, data, inner, per_shard, 5, VARIANTS[codecs])
    if damage:
        key = "x/c/0"
        off, nb = _chunk_span(store, (0,))
        raw = bytearray(open(store.path(key), "rb").read())
        if damage == "flip":
            raw[off + nb // 2] ^= 0x10
        else:
            del raw[off + nb // 2:]
        open(store.path(key), "wb").write(raw)
    rows = slice(lo, lo + span)

    def outcome(fn):
        try:
            return ("ok", fn().tobytes())
        except MrecError as exc:
            return ("error", type(exc).__name__, str(exc))
    old = parallel.MIN_PARALLEL_DECODE
    parallel.MIN_PARALLEL_DECODE = 0
    try:
        want = outcome(lambda: Array.open(store, "x", appended=True).read(rows, threads=threads))

        def lane():
            a = Array.open(store, "x", appended=True)
            k = len(range(*rows.indices(a.shape[0])))
            out = np.full((k, 3), -7.0)
            a.read_into(rows, out[:, 1], threads=threads)
            assert (out[:, 0] == -7.0).all() and (out[:, 2] == -7.0).all()     # nothing else written
            return np.ascontiguousarray(out[:, 1])
        assert outcome(lane) == want
    finally:
        parallel.MIN_PARALLEL_DECODE = old


def test_positions_of_a_range_are_the_stacked_columns(tmp_path):
    import mrec
    path = tmp_path / "t.mrec"
    _plain_trajectory(path, n_frames=50, atoms=9)
    r = mrec.TrajectoryReader(path)
    for frames in (None, slice(0, 50), slice(3, 41), slice(49, 50), slice(10, 10), slice(0, 50, 2)):
        want = np.stack([r.column("atoms", c, frames) for c in "xyz"], axis=-1)
        got = r.positions(frames)
        assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_read_columns_over_a_range_is_each_frame_stacked(tmp_path):
    """read_columns(frames, ...) with a slice, a list or a mask: each pair's rows of those frames as
    one array, equal to stacking read_columns(i, ...) frame by frame; an int keeps its old answer."""
    import mrec
    path = tmp_path / "t.mrec"
    _plain_trajectory(path, n_frames=30, atoms=6)
    r = mrec.TrajectoryReader(path)
    pairs = [("atoms", "z"), ("atoms", "x")]
    mask = np.zeros(30, bool)
    mask[[2, 3, 17]] = True
    for frames in (slice(None), slice(4, 29), slice(0, 30, 3), [5, 1, 29], mask, slice(7, 7)):
        got = r.read_columns(frames, pairs)
        sel = r.ordinals(frames)
        assert list(got) == pairs
        for p in pairs:
            want = np.stack([r.read_columns(int(k), pairs)[p] for k in sel]) if len(sel) else np.zeros((0, 6))
            assert got[p].reshape(len(sel), 6).tobytes() == want.reshape(len(sel), 6).tobytes()
    assert r.read_columns(3, pairs)[("atoms", "x")].shape == (6,)
    with pytest.raises(KeyError):
        r.read_columns(slice(0, 3), [("atoms", "w")])
    with pytest.raises(IndexError):
        r.read_columns([0, 99], pairs)
    with pytest.raises(TypeError):
        r.read_columns(True, pairs)
