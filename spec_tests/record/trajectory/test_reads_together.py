"""The public reads of several columns over a run of frames decoded by one batch call (issue 29):
``read_columns(slice, ...)`` and ``positions(slice)`` read a regular block's columns together
(``read_together``, across shards) and equal, element for element, what ``column()`` returns for
each column alone -- the same values for every run of frames, on one thread or two, and the same
error at a damaged chunk."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mrec
from mrec.errors import CorruptionError
from mrec.zarr import parallel

ATOMS = 700                  # 2100-row inner chunks: three frames a chunk
FRAMES = 40


def _write(path, frames: int = FRAMES, expected: int | None = 6) -> None:
    """x, y, z (precision 1e-3) and q (no precision) of a regular block; ``expected``: the size hint
    that makes shards of two inner chunks (six frames), so runs of frames span shards."""
    rng = np.random.default_rng(11)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=ATOMS)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=1e-3)
    s.declare_column("atoms", "q", "f64")
    pos = np.cumsum(rng.normal(0, 0.05, (frames, ATOMS, 4)), axis=0)
    kw = {"expected_frames": expected} if expected else {}
    with mrec.TrajectoryWriter.create(path, s, durable=False, **kw) as w:
        w.extend([{"atoms": {"x": p[:, 0], "y": p[:, 1], "z": p[:, 2], "q": p[:, 3]}} for p in pos])


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    path = tmp_path_factory.mktemp("together") / "t.mrec"
    _write(path)
    return path


@pytest.fixture(params=["1", "2"])
def threads(request, monkeypatch):
    monkeypatch.setenv("MREC_THREADS", request.param)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_DECODE", 0)          # the pool even for small reads
    return int(request.param)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_the_record_spans_shards(record):
    with mrec.TrajectoryReader(record) as r:
        x = r.layout.blocks["atoms"].columns["x"]
        assert x.meta.chunk_shape[0] == 2 * x.sharding.chunk_shape[0] == 2 * 3 * ATOMS
        assert x.shape[0] == FRAMES * ATOMS


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lo=st.integers(-FRAMES - 2, FRAMES + 2), hi=st.integers(-FRAMES - 2, FRAMES + 2) | st.none(),
       step=st.sampled_from([None, 1, 2, -1]),
       pairs=st.lists(st.sampled_from(["x", "y", "z", "q"]), min_size=1, max_size=5))
def test_read_columns_of_a_run_is_each_column_alone(record, threads, lo, hi, step, pairs):
    frames = slice(lo, hi, step)
    cols = [("atoms", c) for c in pairs]
    with mrec.TrajectoryReader(record) as r:
        got = r.read_columns(frames, cols, threads=threads)
        assert list(got) == list(dict.fromkeys(cols))
        for (block, c), v in got.items():
            _same(v, r.column(block, c, frames, threads=1))
            assert v.flags.c_contiguous


@pytest.fixture(params=["one group", "groups of two inner chunks"])
def groups(request, monkeypatch):
    """positions decodes a run a group of frames at a time: the default (every run here one group)
    and groups of two inner chunks (runs of several groups, their ends inside inner chunks)."""
    import mrec.record.trajectory.reads as reads
    if request.param != "one group":
        monkeypatch.setattr(reads, "POSITIONS_GROUP_BYTES", 3 * 8 * 2 * 3 * ATOMS)
    return request.param


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lo=st.integers(-FRAMES - 2, FRAMES + 2), hi=st.integers(-FRAMES - 2, FRAMES + 2) | st.none(),
       step=st.sampled_from([None, 1, 3, -2]))
def test_positions_of_a_run_are_the_columns_stacked(record, threads, groups, lo, hi, step):
    frames = slice(lo, hi, step)
    with mrec.TrajectoryReader(record) as r:
        want = np.stack([r.column("atoms", c, frames, threads=1) for c in "xyz"], axis=-1)
        got = r.positions(frames)
        _same(got, want)
        assert got.flags.c_contiguous


def test_the_columns_are_read_by_one_batch_call(record, threads, monkeypatch):
    """A run of frames of x, y, z (or of x and z) is decoded by one read_together call, across the
    shards, the inner chunks at its ends decoded whole and cut; q (stored without zstd: another
    pipeline) with x is read column by column."""
    import mrec.record.trajectory.reads as reads
    calls = []

    def spy(real, ok):
        def call(*a, **k):
            got = real(*a, **k)
            calls.append((a[1:3], ok(got)))
            return got
        return call
    monkeypatch.setattr(reads, "read_together", spy(reads.read_together, lambda got: got is not None))
    monkeypatch.setattr(reads, "read_together_into", spy(reads.read_together_into, bool))
    with mrec.TrajectoryReader(record) as r:
        want = {c: r.column("atoms", c) for c in "xyzq"}
        got = r.read_columns(slice(1, 38), [("atoms", "z"), ("atoms", "x")], threads=threads)
        _same(got[("atoms", "z")], want["z"][1:38])
        _same(got[("atoms", "x")], want["x"][1:38])
        pos = r.positions(slice(4, None))
        _same(pos, np.stack([want[c][4:] for c in "xyz"], axis=-1))
    assert calls == [((1 * ATOMS, 38 * ATOMS), True), ((4 * ATOMS, 40 * ATOMS), True)]
    del calls[:]
    with mrec.TrajectoryReader(record) as r:
        got = r.read_columns(slice(0, 9), [("atoms", "x"), ("atoms", "q")], threads=threads)
        _same(got[("atoms", "q")], want["q"][:9])
    assert calls == [((0, 9 * ATOMS), False)]


def test_a_damaged_chunk_raises_what_column_raises(tmp_path, threads, groups):
    path = tmp_path / "t.mrec"
    _write(path)
    with mrec.TrajectoryReader(path) as r:
        y = r.layout.blocks["atoms"].columns["y"]
        key = y.chunk_key((2,))
        index = y.shard_index(key)
        off, n = int(index.offsets[1]), int(index.nbytes[1])
    shard = path / "trajectory" / "atoms" / "y" / "c" / "2"
    raw = bytearray(shard.read_bytes())
    raw[off + n // 2] ^= 0x08
    shard.write_bytes(bytes(raw))
    with mrec.TrajectoryReader(path) as r:
        with pytest.raises(CorruptionError) as alone:
            r.column("atoms", "y", slice(0, FRAMES))
        with pytest.raises(CorruptionError) as together:
            r.read_columns(slice(0, FRAMES), [("atoms", c) for c in "xyz"], threads=threads)
        assert str(together.value) == str(alone.value)
        with pytest.raises(CorruptionError) as pos:
            r.positions(slice(0, FRAMES))
        assert str(pos.value) == str(alone.value)
        # runs that do not hold the damaged chunk read together as ever
        _same(r.positions(slice(0, 12)), np.stack([r.column("atoms", c, slice(0, 12)) for c in "xyz"], axis=-1))


def test_together_spans_are_the_shards_of_a_run():
    from mrec.zarr.read import plan
    geo = (20, 5, (0,), 120)                   # shards of 20 rows, inner chunks of 5
    assert plan.together_spans(geo, 15, 45) == [(0, 3, 1), (1, 0, 4), (2, 0, 1)]
    assert plan.together_spans(geo, 25, 35) == [(1, 1, 2)] and plan.together(geo, 25, 35) == (1, 1, 2)
    assert plan.together(geo, 15, 45) is None                      # one shard only
    assert plan.together_spans(geo, 16, 45) is None                # not whole inner chunks
    assert plan.together_spans(geo, 15, 15) is None


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lo=st.integers(0, FRAMES * ATOMS - 1), n=st.integers(1, FRAMES * ATOMS))
def test_read_together_across_shards_is_each_array_read(record, threads, lo, n):
    """read_together over any rows: across shards, and with edges=True from and to any row (the end
    chunks decoded whole and cut); without edges a range off the inner-chunk grid is None."""
    from mrec.zarr.read.path import read_together
    hi = min(FRAMES * ATOMS, lo + n)
    with mrec.TrajectoryReader(record) as r:
        cols = [r.layout.blocks["atoms"].columns[c] for c in "xyz"]
        ir = cols[0].sharding.chunk_shape[0]
        got = read_together(cols, lo, hi, threads, edges=True)
        assert got is not None
        for a, g in zip(cols, got):
            _same(g, a.read(slice(lo, hi), threads=1))
        plain = read_together(cols, lo, hi, threads)
        if lo % ir or (hi - lo) % ir:
            assert plain is None
        else:
            for a, g in zip(cols, plain):
                _same(g, a.read(slice(lo, hi), threads=1))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")
def test_a_dropped_reader_closes_its_files_at_once(record):
    """A reader dropped without close() frees its arrays (and the files it keeps open) as soon as the
    last reference goes: no cycle through an array's shard indexes or decoders waits for the
    garbage collector."""
    import gc

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))
    gc.collect()
    gc.disable()
    try:
        before = fds()
        r = mrec.TrajectoryReader(record)
        r.positions(slice(0, FRAMES))
        r.read_columns(slice(0, 5), [("atoms", "q")])
        assert fds() > before
        del r
        assert fds() == before
    finally:
        gc.enable()
