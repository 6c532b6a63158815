"""Issue 16: the writer encodes inner chunks on the pool while the producer keeps appending.

Encoding ahead moves only *when* a chunk is encoded: the bytes written, their order and the commit
protocol are those of the serial writer (store trees compared byte for byte); the queue is bounded;
an encode that fails on a worker surfaces at the writer's next call and poisons it with the store at
its last commit.  (SIGKILL while encodes are in flight: test_traj_crash.py.)
"""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mrec
from mrec.zarr import parallel
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.stores.directory import DirectoryStore

from test_parallel_read import VARIANTS, _sharded  # noqa: E402  (spec_tests is on sys.path)


def _tree(root) -> dict:
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            if f.startswith(".mrec-writer"):
                continue
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def _land_all(path, batches, lands, inner, per_shard, codecs, ahead, reopen_at=None):
    store = DirectoryStore(str(path))
    trailing = batches[0].shape[1:]
    arr = Array.create(store, "x", ArrayMetadata.create((0, *trailing), DATA_TYPES["float64"],
                                                        (inner * per_shard, *trailing), _sharded(inner, trailing, codecs)))
    ap = ShardedAppender(arr, ahead=ahead)
    for k, b in enumerate(batches):
        ap.append(b)
        if k in lands:
            ap.land()
            arr.write_metadata()
        if reopen_at == k:
            ap.land()
            arr.write_metadata()
            arr = Array.open(store, "x")
            ap = ShardedAppender(arr, ahead=ahead)
    ap.land()
    arr.write_metadata()
    return arr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inner=st.integers(1, 7), per_shard=st.integers(1, 5), sizes=st.lists(st.integers(0, 20), min_size=1, max_size=25),
       width=st.sampled_from([(), (3,)]), data=st.data(), threads=st.sampled_from(["2", "3"]),
       codecs=st.sampled_from(["shuffle", "zstd", "big endian"]))
def test_encode_ahead_writes_the_serial_bytes(tmp_path_factory, monkeypatch, inner, per_shard, sizes, width, data,
                                              threads, codecs):
    rng = np.random.default_rng(len(sizes))
    batches = [np.round(rng.normal(size=(n, *width)), 3) for n in sizes]
    lands = set(data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=6)))
    reopen = data.draw(st.one_of(st.none(), st.integers(0, len(sizes) - 1)))
    monkeypatch.setattr(ShardedAppender, "AHEAD_BYTES", data.draw(st.sampled_from([0, 64, 1 << 20])))
    monkeypatch.setattr(ShardedAppender, "AHEAD_MIN_BYTES", 0)
    a, b = tmp_path_factory.mktemp("serial"), tmp_path_factory.mktemp("ahead")
    monkeypatch.setenv("MREC_THREADS", "1")
    _land_all(a, batches, lands, inner, per_shard, VARIANTS[codecs], False, reopen)
    monkeypatch.setenv("MREC_THREADS", threads)
    arr = _land_all(b, batches, lands, inner, per_shard, VARIANTS[codecs], True, reopen)
    assert _tree(a) == _tree(b)
    want = np.concatenate(batches) if sum(sizes) else np.zeros((0, *width))
    assert arr.read().tobytes() == want.tobytes()


N = 3000


def _schema():
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=N)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "y", "f64")
    return s


def _frame(i):
    rng = np.random.default_rng(i)
    return {"blocks": {"atoms": {"x": rng.normal(size=N), "y": rng.normal(size=N)}}}


def _write(path, frames, *, reopen_at=None, flush_at=(), extend=False):
    w = mrec.TrajectoryWriter.create(path, _schema(), durable=False, flush_every=5)
    if extend:
        w.extend(_frame(i) for i in range(frames))
    for i in range(0 if extend else frames):
        w.append(_frame(i))
        if i in flush_at:
            w.flush()
        if i == reopen_at:
            w.close()
            w = mrec.TrajectoryWriter.open(path, durable=False, flush_every=5)
    w.close()


@pytest.mark.parametrize("kw", [{}, {"reopen_at": 7, "flush_at": (2, 3, 11)}, {"extend": True}])
def test_trajectory_written_with_encode_ahead_is_the_serial_store(tmp_path, monkeypatch, kw):
    monkeypatch.setattr(ShardedAppender, "AHEAD_MIN_BYTES", 0)
    monkeypatch.setenv("MREC_THREADS", "1")
    _write(tmp_path / "a.mrec", 17, **kw)
    monkeypatch.setenv("MREC_THREADS", "2")
    seen = []
    real = ShardedAppender._encode_ahead
    monkeypatch.setattr(ShardedAppender, "_encode_ahead", lambda self, arr: (real(self, arr), seen.append(len(self._futures))))
    _write(tmp_path / "b.mrec", 17, **kw)
    assert max(seen) >= 2                     # chunks were queued ahead of their landing
    assert _tree(tmp_path / "a.mrec") == _tree(tmp_path / "b.mrec")


def test_a_failed_encode_on_a_worker_poisons_the_writer_at_its_next_call(tmp_path, monkeypatch):
    monkeypatch.setattr(ShardedAppender, "AHEAD_MIN_BYTES", 0)
    monkeypatch.setenv("MREC_THREADS", "2")
    path = tmp_path / "p.mrec"
    real = ShardedAppender._ahead_encoder
    calls = []

    def failing(self):
        fast = real(self)
        if fast is None:
            return None

        def enc(rows):
            calls.append(1)
            if len(calls) == 9:
                raise MemoryError("no memory for this chunk")
            return fast(rows)
        return enc
    monkeypatch.setattr(ShardedAppender, "_ahead_encoder", failing)
    w = mrec.TrajectoryWriter.create(path, _schema(), durable=False, flush_every=50)
    for i in range(3):
        w.append(_frame(i))
    w.flush()                                  # frames 0-2 committed (encodes 1-6)
    w.append(_frame(3))                        # encodes 7, 8
    w.append(_frame(4))                        # encode 9 fails on a worker
    parallel.call_all([lambda: None, lambda: None])     # let the pool run
    for f in list(w.buffer.blocks["atoms"].writers()):
        for fut in list(f.appender._futures.values()):
            fut.exception()                     # every queued encode has finished
    with pytest.raises(mrec.WriteError) as e:
        w.append(_frame(5))
    msg = str(e.value)
    assert "MemoryError" in msg and "no memory for this chunk" in msg and "trajectory/atoms" in msg
    assert "reopen" in msg
    with pytest.raises(mrec.WriteError):        # poisoned: every later call refuses
        w.flush()
    with pytest.raises(mrec.WriteError):
        w.close()
    r = mrec.TrajectoryReader(path)             # the store is at its last commit
    assert len(r) == 3
    monkeypatch.setattr(ShardedAppender, "_ahead_encoder", real)
    with mrec.TrajectoryWriter.open(path) as w2:   # and reopens (the lock was released)
        assert w2.committed == 3
        w2.append(_frame(3))
    assert len(mrec.TrajectoryReader(path)) == 4


def test_small_chunks_are_encoded_at_the_landing(tmp_path, monkeypatch):
    """Below AHEAD_MIN_BYTES an inner chunk is not handed off alone (it cost more than it gave): small
    chunks go to the pool only as batches of >= AHEAD_BATCH_BYTES (one task a batch, the batch encoder),
    and are encoded at the landing until that many are complete; with one thread nothing is ahead."""
    from mrec.zarr.append import _AheadChunk
    monkeypatch.setenv("MREC_THREADS", "2")
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (64,), _sharded(8)))
    ap = ShardedAppender(arr, ahead=True)
    ap.append(np.arange(40.0))                         # 5 chunks of 64 bytes: below a batch
    assert not ap._futures
    ap.land()
    monkeypatch.setattr(ShardedAppender, "AHEAD_BATCH_BYTES", 128)
    monkeypatch.setattr(ShardedAppender, "AHEAD_GAP", 0.0)        # whatever the time between appends
    ap = ShardedAppender(arr, ahead=True)
    ap.append(np.arange(20.0))                         # 2 complete chunks (128 bytes): one batch
    ap.append(np.arange(20.0, 40.0))                   # the carried half chunk + 20 rows: 3 chunks, a second batch
    assert sorted(ap._futures) == [5, 6, 7, 8, 9] and all(type(f) is _AheadChunk for f in ap._futures.values())
    assert len({f.future for f in ap._futures.values()}) == 2
    ap.land()
    monkeypatch.setattr(ShardedAppender, "AHEAD_MIN_BYTES", 64)
    ap = ShardedAppender(arr, ahead=True)
    ap.append(np.arange(40.0))
    assert ap._futures and not any(type(f) is _AheadChunk for f in ap._futures.values())    # one task a chunk
    ap.land()
    monkeypatch.setenv("MREC_THREADS", "1")
    ap = ShardedAppender(arr, ahead=True)
    ap.append(np.arange(40.0))
    assert not ap._futures and not ap._ahead_on        # decided once per appender
    ap.land()
    arr.write_metadata()
    assert Array.open(store, "x").read().tobytes() == np.tile(np.arange(40.0), 4).tobytes()
