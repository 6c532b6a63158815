"""Issue 16: reads decoded on a thread pool give the bits and the refusals of the serial read.

Nothing here is timed (python -m tools.bench measures); the pool's size threshold is set to zero so that
even tiny reads take the parallel path.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mrec.errors import MrecError
from mrec.zarr import parallel
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.stores.directory import DirectoryStore

INNER = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
         {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
         {"name": "crc32c"}]


VARIANTS = {
    "shuffle": INNER,
    "zstd": [INNER[0], INNER[2], INNER[3]],
    "crc only": [INNER[0], INNER[3]],
    "big endian": [{"name": "bytes", "configuration": {"endian": "big"}}, INNER[2], INNER[3]],
    "gzip+shuffle": [INNER[0], INNER[1], {"name": "gzip", "configuration": {"level": 1}}, INNER[3]],
}


def _sharded(inner, trailing=(), codecs=INNER):
    return CodecPipeline.from_json([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [inner, *trailing], "codecs": codecs,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "start"}}], "x")


def _appended(path, data, inner, per_shard, landing, codecs=INNER):
    store = DirectoryStore(str(path))
    trailing = data.shape[1:]
    arr = Array.create(store, "x", ArrayMetadata.create((0, *trailing), DATA_TYPES["float64"],
                                                        (inner * per_shard, *trailing), _sharded(inner, trailing, codecs)))
    ap = ShardedAppender(arr)
    for lo in range(0, len(data), landing):
        ap.append(data[lo:lo + landing])
        ap.land()
    arr.write_metadata()
    return store


def _outcome(store, rows, threads, serial_only=False):
    """The values (or the error's type and text) of a fresh read of ``rows``."""
    arr = Array.open(store, "x", appended=True)
    if serial_only:                   # the labelled path alone, as before the pool existed
        arr.decoders.into = lambda release_gil=False, many=False: None
    try:
        return ("ok", arr.read(rows, threads=threads).tobytes())
    except MrecError as exc:
        return ("error", type(exc).__name__, str(exc))


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_DECODE", 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inner=st.integers(1, 9), per_shard=st.integers(1, 6), n=st.integers(0, 120),
       width=st.sampled_from([(), (1,), (3,), (2, 2)]), landing=st.integers(1, 50),
       lo=st.integers(0, 130), span=st.integers(0, 130), threads=st.integers(2, 5),
       codecs=st.sampled_from(sorted(VARIANTS)))
def test_parallel_read_is_the_serial_read_over_chunkings(tmp_path_factory, inner, per_shard, n, width, landing,
                                                         lo, span, threads, codecs):
    path = tmp_path_factory.mktemp("pr")
    rng = np.random.default_rng(n)
    data = np.round(rng.normal(size=(n, *width)), 3)
    store = _appended(path, data, inner, per_shard, landing, VARIANTS[codecs])
    for rows in (None, slice(lo, lo + span), slice(lo, None, 3)):
        want = data[rows] if rows is not None else data
        got = _outcome(store, rows, threads)
        assert got == ("ok", np.ascontiguousarray(want).tobytes())
        assert got == _outcome(store, rows, 1) == _outcome(store, rows, 1, serial_only=True)


def _chunk_span(store, coord):
    arr = Array.open(store, "x", appended=True)
    index = arr.shard_index("x/c/0")
    return int(index.offsets[coord]), int(index.nbytes[coord])


@pytest.mark.parametrize("codecs", ["shuffle", "zstd"])
@pytest.mark.parametrize("damage", ["flip", "truncate", "index", "swap"])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_parallel_read_refuses_as_the_serial_read(tmp_path, damage, threads, codecs):
    data = np.round(np.random.default_rng(1).normal(size=(96,)), 3)
    store = _appended(tmp_path, data, 8, 12, 8, VARIANTS[codecs])
    shard = os.path.join(str(tmp_path), "x", "c", "0")
    off, n = _chunk_span(store, (5,))
    raw = bytearray(open(shard, "rb").read())
    if damage == "flip":                # a bit flipped inside the 6th inner chunk
        raw[off + n // 2] ^= 0x10
    elif damage == "truncate":          # the file cut inside the 6th inner chunk
        del raw[off + 3:]
    elif damage == "index":             # the shard index itself damaged (rebuilt from the chunks)
        raw[20] ^= 0xFF
    else:                               # two chunks' bytes swapped (each verifies, in the wrong place)
        off2, n2 = _chunk_span(store, (6,))
        a, b = bytes(raw[off:off + n]), bytes(raw[off2:off2 + n2])
        raw[off:off2 + n2] = b + a
    with open(shard, "wb") as f:
        f.write(raw)
    for rows in (None, slice(0, 96), slice(8, 56), slice(3, 90, 2)):
        serial = _outcome(store, rows, 1, serial_only=True)
        assert _outcome(store, rows, threads) == serial == _outcome(store, rows, 1)
        if damage == "flip":
            assert serial[0] == "error", serial


@pytest.mark.parametrize("damage", [None, 2, 5, 9])
@pytest.mark.parametrize("rows", [None, slice(0, 96), slice(3, 93), slice(8, 80), slice(20, 21 + 8 * 9)])
def test_leftovers_beside_a_batch_of_whole_chunks_read_as_the_serial_read(tmp_path, monkeypatch, damage, rows):
    """A range read whose whole inner chunks the batch decoder takes run by run (runs of two chunks
    here), leaving partial chunks at either end and, after a damaged chunk, every later run to the
    per-chunk path: the values or the error of the serial read, and the batch reports the runs it
    decoded as one range of inner-chunk rows."""
    import mrec.zarr.read.decode as decode_mod
    import mrec.zarr.read.plan as array_mod
    data = np.round(np.random.default_rng(3).normal(size=(96,)), 3)
    store = _appended(tmp_path, data, 8, 12, 8)
    if damage is not None:
        shard = os.path.join(str(tmp_path), "x", "c", "0")
        off, n = _chunk_span(store, (damage,))
        raw = bytearray(open(shard, "rb").read())
        raw[off + n // 2] ^= 0x10
        with open(shard, "wb") as f:
            f.write(raw)
    monkeypatch.setattr(array_mod, "COALESCE_BYTES", 2 * _chunk_span(store, (0,))[1] + 1)
    spans = []
    whole = decode_mod.batch_whole

    def spy(self, *args, **kwargs):
        got = whole(self, *args, **kwargs)
        spans.append(got)
        return got
    monkeypatch.setattr(decode_mod, "batch_whole", spy)
    got = _outcome(store, rows, 2)             # first: a result buffer that no earlier read filled
    monkeypatch.undo()
    serial = _outcome(store, rows, 1, serial_only=True)
    assert got == serial
    lo, hi = (0, 96) if rows is None else (rows.start, rows.stop)
    hit = damage is not None and 8 * damage < hi and 8 * damage + 8 > lo     # the damaged chunk's rows are read
    assert (serial[0] == "error") == hit
    assert len(spans) == 1 and isinstance(spans[0], range)
    first_whole, last_whole = -(-lo // 8), hi // 8
    assert spans[0].start == first_whole
    want_stop = damage if hit and first_whole <= damage < last_whole else last_whole
    # runs of two chunks: the batch stops at the run holding the damaged chunk
    assert spans[0].stop == (want_stop if want_stop == last_whole else first_whole + (damage - first_whole) // 2 * 2)


def test_threads_default_to_the_machine_and_the_env_var(monkeypatch):
    monkeypatch.delenv("MREC_THREADS", raising=False)
    assert parallel.threads() == max(1, min(8, os.cpu_count() or 1))
    monkeypatch.setenv("MREC_THREADS", "3")
    assert parallel.threads() == 3
    calls = []
    monkeypatch.setattr(parallel, "call_all", lambda cs: calls.append(len(cs)) or [c() for c in cs])
    assert parallel.decode_all(lambda x: x * 2, list(range(10)), 1 << 30) == [x * 2 for x in range(10)]
    assert parallel.decode_all(lambda x: x * 2, list(range(10)), 1 << 30, 2) == [x * 2 for x in range(10)]
    assert parallel.decode_all(lambda x: x, list(range(10)), 1 << 30, 1) == list(range(10))
    assert calls == [3, 2]


def test_a_column_read_uses_the_pool(tmp_path, monkeypatch):
    data = np.round(np.random.default_rng(2).normal(size=(400, 3)), 3)
    store = _appended(tmp_path, data, 10, 40, 37)
    seen = []
    real = parallel.call_all
    monkeypatch.setattr(parallel, "call_all", lambda cs: seen.append(len(cs)) or real(cs))
    arr = Array.open(store, "x", appended=True)
    assert np.array_equal(arr.read(threads=2), data)
    assert seen and all(k == 2 for k in seen)


# -- batch reads of many frames (iteration, slices) --------------------------------------------

from test_fast_paths import _rich_trajectory, _same_frame  # noqa: E402  (spec_tests is on sys.path)


def _frames_of(r, how):
    """The frames (or the error after them) of reader ``r``: by ``r[i]`` one at a time, by iteration,
    or by a slice (all or nothing)."""
    out = []
    try:
        if how == "each":
            for i in range(len(r)):
                out.append(r[i])
        elif how == "iter":
            for f in r:
                out.append(f)
        else:
            out.extend(r[how])
    except MrecError as exc:
        return out, (type(exc).__name__, str(exc))
    return out, None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch_bytes=st.integers(1, 20000), threads=st.sampled_from(["1", "2", "4"]),
       lo=st.integers(0, 30), span=st.integers(0, 30))
def test_batched_frames_are_the_frames_read_one_by_one(tmp_path_factory, monkeypatch, batch_bytes, threads, lo, span):
    import mrec
    from mrec.record.trajectory import reads as tr
    path = tmp_path_factory.mktemp("bf") / "r.mrec"
    _rich_trajectory(path, n_frames=23, atoms=17)
    monkeypatch.setattr(tr, "BATCH_READ_BYTES", batch_bytes)
    monkeypatch.setenv("MREC_THREADS", threads)
    one = mrec.TrajectoryReader(path)
    each, err = _frames_of(one, "each")
    assert err is None and len(each) == 23
    for how in ("iter", slice(lo, lo + span), slice(lo, None)):
        got, err = _frames_of(mrec.TrajectoryReader(path), how)
        assert err is None
        want = each if how == "iter" else each[how]
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same_frame(a, b)
            assert a.box == b.box if a.box is None or b.box is None else \
                np.array_equal(a.box.vectors, b.box.vectors)
            assert {k: list(v) for k, v in a.masks.items()} == {k: list(v) for k, v in b.masks.items()}


def test_batched_frames_of_untrusted_layouts_go_through_the_validating_constructor(tmp_path):
    import mrec
    path = tmp_path / "r.mrec"
    _rich_trajectory(path, n_frames=11, atoms=5)
    plain = mrec.TrajectoryReader(path)
    plain._trusted = False
    ref = mrec.TrajectoryReader(path)
    for a, b in zip(list(plain), [ref[i] for i in range(len(ref))]):
        _same_frame(a, b)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_batched_frames_refuse_at_the_frame_one_by_one_refuses(tmp_path, monkeypatch, damage):
    """A damaged chunk in the middle: iteration yields the frames before it, then raises the error
    r[i] raises there; a slice raises that error."""
    import glob
    import mrec
    from mrec.record.trajectory import reads as tr
    path = tmp_path / "r.mrec"
    _rich_trajectory(path, n_frames=30, atoms=400)
    shard = sorted(glob.glob(str(path / "trajectory" / "atoms" / "y" / "c" / "*")))[0]
    r = mrec.TrajectoryReader(path)
    arr = r.layout.blocks["atoms"].columns["y"]
    index = arr.shard_index(arr.chunk_key((0,)))
    live = [c for c in range(index.offsets.shape[0]) if not index.is_empty((c,))]
    assert len(live) >= 3
    mid = live[len(live) // 2]
    off, n = int(index.offsets[(mid,)]), int(index.nbytes[(mid,)])
    raw = bytearray(open(shard, "rb").read())
    if damage == "flip":
        raw[off + n // 2] ^= 0x40
    else:
        del raw[off + n // 2:]
    open(shard, "wb").write(raw)
    monkeypatch.setattr(tr, "BATCH_READ_BYTES", 1 << 30)     # one batch holding the damage
    each, err_each = _frames_of(mrec.TrajectoryReader(path), "each")
    assert err_each is None or len(each) < 30
    got, err = _frames_of(mrec.TrajectoryReader(path), "iter")
    # one by one raises at the first damaged frame; iterating gives those frames and that error
    first_bad = None
    for i in range(30):
        try:
            mrec.TrajectoryReader(path)[i]
        except MrecError as exc:
            first_bad = (i, (type(exc).__name__, str(exc)))
            break
    assert first_bad is not None and first_bad[0] > 0
    assert len(got) == first_bad[0] and err == first_bad[1]
    for a, b in zip(got, [mrec.TrajectoryReader(path)[i] for i in range(first_bad[0])]):
        _same_frame(a, b)
    sl, err_sl = _frames_of(mrec.TrajectoryReader(path), slice(0, 30))
    assert sl == [] and err_sl == first_bad[1]


def test_column_threads_give_the_serial_column(tmp_path, monkeypatch):
    import mrec
    path = tmp_path / "r.mrec"
    _rich_trajectory(path, n_frames=40, atoms=30)
    r = mrec.TrajectoryReader(path)
    for c in ("x", "q", "id"):
        one = r.column("atoms", c, threads=1)
        for t in (2, 3):
            got = mrec.TrajectoryReader(path).column("atoms", c, threads=t)
            assert got.dtype == one.dtype and got.tobytes() == one.tobytes()
        assert mrec.TrajectoryReader(path).column("atoms", c, slice(3, 31), threads=2).tobytes() == one[3:31].tobytes()


@pytest.mark.parametrize("codecs, in_place", [("shuffle", True), ("zstd", True), ("crc only", True),
                                              ("gzip+shuffle", True), ("big endian", False)])
def test_which_pipelines_decode_in_place(tmp_path, codecs, in_place):
    """The pool's path covers the trajectory's codecs (with and without shuffle); a big-endian column
    takes the serial path (and still reads right: the hypothesis test above)."""
    data = np.arange(40.0)
    store = _appended(tmp_path, data, 8, 5, 8, VARIANTS[codecs])
    arr = Array.open(store, "x", appended=True)
    assert (arr._decoder_into() is not None) == in_place
    assert arr.read(threads=2).tobytes() == data.tobytes()
