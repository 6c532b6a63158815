"""A shard's runs of whole inner chunks decoded a group of runs at a time (issue 29): each run is
still one range read, consecutive runs are decoded by one batch call, and a group holding a chunk
that does not decode is decoded again run by run -- the batch stops at the run holding it, and the
read gives the values or the error of the serial read."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mrec.zarr.read.decode as decode
import mrec.zarr.read.plan as plan
from mrec.zarr import parallel
from test_parallel_read import _appended, _chunk_span, _outcome     # noqa: E402 (spec_tests rooms on sys.path)


def test_run_groups_close_at_the_limit():
    sizes = np.array([10, 10, 10, 10, 10, 10, 10], dtype=np.int64)
    cuts = [0, 2, 3, 5, 7]
    assert plan.run_groups(cuts, sizes, 30) == [[(0, 2), (2, 3)], [(3, 5), (5, 7)]]
    assert plan.run_groups(cuts, sizes, 0) == [[(0, 2)], [(2, 3)], [(3, 5)], [(5, 7)]]
    assert plan.run_groups(cuts, sizes, 10 ** 9) == [[(0, 2), (2, 3), (3, 5), (5, 7)]]
    assert plan.run_groups([0, 0, 4], sizes, 5) == [[(0, 4)]]                 # an empty run is skipped


@pytest.fixture
def runs_of_two(monkeypatch):
    """Runs of two inner chunks (the range-read limit just above two chunks), every read on the pool;
    the batch calls counted (pieces each)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_DECODE", 0)
    calls = []
    real = decode._decode_span

    def spy(batch, pieces, layout, lo, hi, place):
        calls.append(hi - lo)
        return real(batch, pieces, layout, lo, hi, place)
    monkeypatch.setattr(decode, "_decode_span", spy)

    def limit(store):
        monkeypatch.setattr(plan, "COALESCE_BYTES", 2 * _chunk_span(store, (0,))[1] + 1)
    return calls, limit


def test_runs_of_a_group_are_one_batch_call(tmp_path, runs_of_two, monkeypatch):
    calls, limit = runs_of_two
    data = np.round(np.random.default_rng(5).normal(size=(96,)), 3)
    store = _appended(tmp_path, data, 8, 12, 8)
    limit(store)
    assert _outcome(store, None, 2) == ("ok", data.tobytes())
    # 12 chunks in runs of two, grouped by about four runs' bytes: fewer calls, each of whole runs
    assert sum(calls) == 12 and len(calls) < 6 and all(k % 2 == 0 for k in calls) and max(calls) >= 8
    del calls[:]
    monkeypatch.setattr(decode, "GROUP_RUNS", 0)
    assert _outcome(store, None, 2) == ("ok", data.tobytes())
    assert calls == [2] * 6                    # every run its own call


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.integers(0, 11), lo=st.integers(0, 95), n=st.integers(1, 96), group=st.integers(0, 6))
def test_a_damaged_chunk_in_a_group_reads_as_the_serial_read(tmp_path_factory, runs_of_two, monkeypatch,
                                                             damage, lo, n, group):
    _calls, limit = runs_of_two
    path = tmp_path_factory.mktemp("g")
    data = np.round(np.random.default_rng(6).normal(size=(96,)), 3)
    store = _appended(path, data, 8, 12, 8)
    off, size = _chunk_span(store, (damage,))
    shard = os.path.join(str(path), "x", "c", "0")
    raw = bytearray(open(shard, "rb").read())
    raw[off + size // 2] ^= 0x10
    with open(shard, "wb") as f:
        f.write(raw)
    limit(store)
    monkeypatch.setattr(decode, "GROUP_RUNS", group)
    rows = slice(lo, min(96, lo + n))
    got = _outcome(store, rows, 2)
    monkeypatch.undo()
    assert got == _outcome(store, rows, 1, serial_only=True)
