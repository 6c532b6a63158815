"""Issue 16: reads decoded on a thread pool give the bits and the refusals of the serial read.

Nothing here is timed (tools/bench.py measures); the pool's size threshold is set to zero so that
even tiny reads take the parallel path.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mrec.errors import MrecError
from mrec.zarr import parallel
from mrec.zarr.array import Array, ShardedAppender
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.store import DirectoryStore

INNER = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
         {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
         {"name": "crc32c"}]


def _sharded(inner, trailing=()):
    return CodecPipeline.from_json([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [inner, *trailing], "codecs": INNER,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "start"}}], "x")


def _appended(path, data, inner, per_shard, landing):
    store = DirectoryStore(str(path))
    trailing = data.shape[1:]
    arr = Array.create(store, "x", ArrayMetadata.create((0, *trailing), DATA_TYPES["float64"],
                                                        (inner * per_shard, *trailing), _sharded(inner, trailing)))
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
        arr._decoder_into = lambda: None
    try:
        return ("ok", arr.read(rows, threads=threads).tobytes())
    except MrecError as exc:
        return ("error", type(exc).__name__, str(exc))


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_DECODE", 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inner=st.integers(1, 9), per_shard=st.integers(1, 6), n=st.integers(0, 120),
       width=st.sampled_from([(), (1,), (3,), (2, 2)]), landing=st.integers(1, 50),
       lo=st.integers(0, 130), span=st.integers(0, 130), threads=st.integers(2, 5))
def test_parallel_read_is_the_serial_read_over_chunkings(tmp_path_factory, inner, per_shard, n, width, landing,
                                                         lo, span, threads):
    path = tmp_path_factory.mktemp("pr")
    rng = np.random.default_rng(n)
    data = np.round(rng.normal(size=(n, *width)), 3)
    store = _appended(path, data, inner, per_shard, landing)
    for rows in (None, slice(lo, lo + span), slice(lo, None, 3)):
        want = data[rows] if rows is not None else data
        got = _outcome(store, rows, threads)
        assert got == ("ok", np.ascontiguousarray(want).tobytes())
        assert got == _outcome(store, rows, 1) == _outcome(store, rows, 1, serial_only=True)


def _chunk_span(store, coord):
    arr = Array.open(store, "x", appended=True)
    index = arr.shard_index("x/c/0")
    return int(index.offsets[coord]), int(index.nbytes[coord])


@pytest.mark.parametrize("damage", ["flip", "truncate", "index", "swap"])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_parallel_read_refuses_as_the_serial_read(tmp_path, damage, threads):
    data = np.round(np.random.default_rng(1).normal(size=(96,)), 3)
    store = _appended(tmp_path, data, 8, 12, 8)
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
