"""Issue 16, the writer on both cores: the batch encoder (``mrec.zarr.pipeline.batch_encoder``).

A landing's inner chunks are shuffled by one numpy copy per run, compressed by one
``multi_compress_to_buffer`` call per thread and checksummed; the bytes must be exactly those of
``CodecPipeline.encode`` chunk by chunk (zstd frames of ``ZstdCompressor.compress``, content size
included), for every plain pipeline, dtype, chunk shape, chunk count, cut into runs and threads; a
landing through it writes the store the per-chunk path writes, byte for byte.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.codecs.batch import batch_encoder
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.stores.directory import DirectoryStore

from test_encode_ahead import _land_all, _tree  # noqa: E402  (spec_tests is on sys.path)
from test_parallel_read import VARIANTS, _sharded  # noqa: E402
from test_traj_crash import _check_ahead  # noqa: E402

DTYPES = {"float64": "<f8", "int32": "<i4", "uint8": "u1", "complex128": "<c16", "int16": "<i2", "uint64": "<u8"}


def _pipeline(endian, shuffle, level, checksum):
    codecs = [{"name": "bytes", "configuration": {"endian": endian}}]
    if shuffle is not None:
        codecs.append({"name": "numcodecs.shuffle", "configuration": {"elementsize": shuffle}})
    codecs += [{"name": "zstd", "configuration": {"level": level, "checksum": checksum}}, {"name": "crc32c"}]
    return CodecPipeline.from_json(codecs, "x")


def _values(rng, dtype, shape):
    dt = np.dtype(DTYPES[dtype])
    if dt.kind == "f":
        return np.round(np.cumsum(rng.normal(size=shape), axis=0), 3).astype(dt)
    if dt.kind == "c":
        return (np.round(rng.normal(size=shape), 2) + 1j * np.round(rng.normal(size=shape), 2)).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, endpoint=True).astype(dt)


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(sorted(DTYPES)), endian=st.sampled_from(["little", "big"]),
       shuffle=st.sampled_from([None, 1, 2, 4, 8, 16]), level=st.sampled_from([-7, 1, 3, 9, 19]),
       checksum=st.booleans(), rows=st.integers(1, 300), trailing=st.sampled_from([(), (3,), (2, 5)]),
       count=st.integers(1, 24), threads=st.integers(1, 3), data=st.data())
def test_batch_encode_is_the_pipeline_encode_chunk_by_chunk(dtype, endian, shuffle, level, checksum, rows, trailing,
                                                            count, threads, data):
    p = _pipeline(endian, shuffle, level, checksum)
    spec = ChunkSpec((rows, *trailing), DATA_TYPES[dtype], 0, "x")
    enc = batch_encoder(p, spec)
    nbytes = np.dtype(DTYPES[dtype]).itemsize * rows * int(np.prod(trailing, dtype=int))
    if shuffle is not None and nbytes % shuffle:
        assert enc is None                 # partial shuffle elements: the per-chunk path's
        return
    assert enc is not None
    vals = _values(np.random.default_rng(rows * count), dtype, (count * rows, *trailing))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, count - 1), max_size=4)) if count > 1 else []))
    bounds = [0, *cuts, count]
    runs = [vals[a * rows:b * rows].reshape(b - a, rows, *trailing) for a, b in zip(bounds, bounds[1:])]
    sizes, pieces = enc(runs, threads)
    want = [p.encode(vals[i * rows:(i + 1) * rows], spec) for i in range(count)]
    assert sizes == [len(w) for w in want]
    assert b"".join(pieces) == b"".join(want)


@pytest.mark.parametrize("codecs", ["gzip+shuffle", "crc only"])
def test_batch_encoder_declines_other_pipelines(codecs):
    p = CodecPipeline.from_json(VARIANTS[codecs], "x")
    assert batch_encoder(p, ChunkSpec((4,), DATA_TYPES["float64"], 0, "x")) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inner=st.integers(1, 7), per_shard=st.integers(1, 12), sizes=st.lists(st.integers(0, 40), min_size=1, max_size=20),
       width=st.sampled_from([(), (3,)]), data=st.data(), threads=st.sampled_from(["1", "2", "3"]),
       codecs=st.sampled_from(["shuffle", "zstd", "big endian"]))
def test_landing_through_the_batch_encoder_writes_the_per_chunk_store(tmp_path_factory, monkeypatch, inner, per_shard,
                                                                     sizes, width, data, threads, codecs):
    rng = np.random.default_rng(len(sizes))
    batches = [np.round(rng.normal(size=(n, *width)), 3) for n in sizes]
    lands = set(data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=6)))
    reopen = data.draw(st.one_of(st.none(), st.integers(0, len(sizes) - 1)))
    a, b = tmp_path_factory.mktemp("per-chunk"), tmp_path_factory.mktemp("batch")
    monkeypatch.setenv("MREC_THREADS", "1")
    monkeypatch.setattr(ShardedAppender, "BATCH_MIN", 10**9)          # never: the per-chunk encoder
    _land_all(a, batches, lands, inner, per_shard, VARIANTS[codecs], True, reopen)
    monkeypatch.setenv("MREC_THREADS", threads)
    monkeypatch.setattr(ShardedAppender, "BATCH_MIN", 1)              # every landing of a shard
    # small chunks encoded ahead in batches (threads >= 2) of this many bytes, the queue bounded so
    monkeypatch.setattr(ShardedAppender, "AHEAD_BATCH_BYTES", data.draw(st.sampled_from([0, 64, 1 << 20])))
    monkeypatch.setattr(ShardedAppender, "AHEAD_GAP", 0.0)        # whatever the time between appends
    monkeypatch.setattr(ShardedAppender, "AHEAD_BYTES", data.draw(st.sampled_from([0, 64, 1 << 20])))
    monkeypatch.setattr("mrec.zarr.parallel.MIN_PARALLEL_BYTES", 0)  # on several threads when asked
    used = []
    real = ShardedAppender._batch_encoder
    monkeypatch.setattr(ShardedAppender, "_batch_encoder", lambda self, where: used.append(1) or real(self, where))
    arr = _land_all(b, batches, lands, inner, per_shard, VARIANTS[codecs], True, reopen)
    assert _tree(a) == _tree(b)
    assert used or not sum(sizes)
    want = np.concatenate(batches) if sum(sizes) else np.zeros((0, *width))
    assert arr.read().tobytes() == want.tobytes()


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=8), k=st.integers(1, 5), data=st.data())
def test_row_pieces_read_as_their_concatenation(sizes, k, data):
    from mrec.zarr.append import _Rows
    parts = [np.arange(sum(sizes[:i]), sum(sizes[:i + 1]), dtype=float).reshape(-1, 1) * [1, 2] for i in range(len(sizes))]
    whole = np.concatenate(parts)
    rows = _Rows(parts)
    assert len(rows) == len(whole)
    lo = data.draw(st.integers(0, len(whole)))
    hi = data.draw(st.integers(lo, len(whole)))
    assert rows.get(lo, hi).tobytes() == whole[lo:hi].tobytes()
    hi = lo + (hi - lo) // k * k
    runs = rows.runs(lo, hi, k)
    assert all(len(r) % k == 0 and len(r) for r in runs)
    got = np.concatenate(runs) if runs else whole[:0]
    assert got.tobytes() == whole[lo:hi].tobytes()


WRITER = r"""
import sys, time, numpy as np, mrec
from mrec.zarr.append import ShardedAppender
path, pipeline, step = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3])
N = 3000
calls = [0]
real = ShardedAppender._batch_encoder
def counted(self, where):
    enc = real(self, where)
    def run(runs, threads):
        calls[0] += 1
        return enc(runs, threads)
    return run if enc is not None else None
ShardedAppender._batch_encoder = counted
def frame(i):
    rng = np.random.default_rng(i)
    x, y = rng.normal(size=N), rng.normal(size=N)
    x[0] = y[0] = i
    return {"blocks": {"atoms": {"x": x, "y": y}}}
s = mrec.SequenceSchema()
s.declare_block("atoms", rows=N)
s.declare_column("atoms", "x", "f64", precision=1e-3)
s.declare_column("atoms", "y", "f64", precision=1e-2)
w = mrec.TrajectoryWriter.create(path, s, flush_every=16, durable=False, pipeline=pipeline)
print("ready", flush=True)
i = 0
while True:
    if step:
        time.sleep(step)            # an MD step: small chunks then go ahead to the pool in batches
    w.append(frame(i))
    i += 1
    if i % 40 == 0:
        w.flush()
        print("flushed", i, calls[0], flush=True)
"""


def _expected(i):
    from mrec.record.model.precision import round_to_precision
    rng = np.random.default_rng(i)
    x, y = rng.normal(size=3000), rng.normal(size=3000)
    x[0] = y[0] = i
    return round_to_precision(x, 1e-3), round_to_precision(y, 1e-2)


@pytest.mark.parametrize("pipeline,step", [(False, 0.0), (False, 0.0005), (True, 0.0)])
def test_sigkill_while_batch_encodes_are_in_flight(tmp_path, pipeline, step):
    """Writers whose every landing goes through the batch encoder on two threads (16 inner chunks of
    24 KB a commit, MREC_THREADS=2; with pipeline=True on the committer thread; with a 0.5 ms step
    between appends, batches of small chunks encoded ahead on the pool), killed at random moments
    (most of a writer's time is spent encoding): each store holds a bit-identical prefix of at least
    the frames reported flushed, and reopens and continues."""
    import signal
    import subprocess
    import sys
    import time

    import mrec
    rng = np.random.default_rng(23)
    env = dict(__import__("os").environ, MREC_THREADS="2")
    most = batches = 0
    for trial in range(8):
        path = str(tmp_path / f"b{trial}.mrec")
        proc = subprocess.Popen([sys.executable, "-c", WRITER, path, "1" if pipeline else "0", str(step)],
                                stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout.readline().startswith("ready")
        flushed = 0
        if trial % 2:
            line = proc.stdout.readline()
            assert line.startswith("flushed"), line
            flushed, batches = int(line.split()[1]), max(batches, int(line.split()[2]))
        time.sleep(float(rng.uniform(0.0, 0.2)))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        for ln in out.split("\n"):
            if ln.startswith("flushed "):
                flushed, batches = max(flushed, int(ln.split()[1])), max(batches, int(ln.split()[2]))
        n = _check_ahead(path, flushed, _expected)
        most = max(most, n)
        with mrec.TrajectoryWriter.open(path, durable=False, pipeline=pipeline) as w:
            for i in range(n, n + 20):
                x, y = _expected(i)
                w.append({"blocks": {"atoms": {"x": x, "y": y}}})
        r = mrec.TrajectoryReader(path)
        assert len(r) == n + 20
        assert r.column("atoms", "x")[n + 19].tobytes() == _expected(n + 19)[0].tobytes()
    assert batches >= 4, batches             # the landings went through the batch encoder
    assert most >= 32, most


def _xy(i):
    rng = np.random.default_rng(i)
    return {"blocks": {"atoms": {"x": rng.normal(size=3000), "y": rng.normal(size=3000)}}}


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_batch_encode_failing_on_a_worker_leaves_the_store_at_its_last_commit(tmp_path, monkeypatch, pipeline):
    """A batch encode fails off the calling thread (MemoryError): one encoded ahead on a pool worker
    (default writer: four 24 KB chunks a batch) or the third commit's on the committer thread
    (pipelined, which encodes there alone while it keeps up): the default writer raises it at its
    next call or from the append whose automatic commit lands it, a pipelined writer raises a WriteError
    naming it at its next call (flush at the latest); every later call refuses; the store holds the
    frames of the last completed commit, bit-identical; reopening continues."""
    import threading

    import mrec
    from mrec.record.model.precision import round_to_precision
    from mrec.zarr import parallel
    from mrec.zarr.codecs.zstd_ import ZstdCodec
    monkeypatch.setenv("MREC_THREADS", "2")
    calls = {"n": 0}
    lock = threading.Lock()
    real = ZstdCodec._compressor

    class Failing:
        def __init__(self, c):
            self.c = c

        def multi_compress_to_buffer(self, data, threads=1):
            # off the calling thread: a pool worker's part (default writer), the committer's (pipelined)
            if parallel.in_worker() if not pipeline else threading.current_thread().name.startswith("mrec-commit"):
                with lock:
                    calls["n"] += 1
                    n = calls["n"]
                if n == (3 if pipeline else 6):
                    raise MemoryError("no memory for this batch")
            return self.c.multi_compress_to_buffer(data, threads=threads)

        def __getattr__(self, name):
            return getattr(self.c, name)
    monkeypatch.setattr(ZstdCodec, "_compressor", lambda self: Failing(real(self)))
    monkeypatch.setattr(ShardedAppender, "AHEAD_BATCH_BYTES", 96 * 1024)      # four 24 KB chunks a batch
    monkeypatch.setattr(ShardedAppender, "AHEAD_GAP", 0.0)        # whatever the time between appends
    path = tmp_path / "f.mrec"
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3000)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "y", "f64")
    w = mrec.TrajectoryWriter.create(path, s, durable=False, flush_every=16, pipeline=pipeline)
    from test_pipeline_commit import append_until_raised  # spec_tests is on sys.path
    raised, appended = append_until_raised(w, (_xy(i) for i in range(80)), (MemoryError, mrec.WriteError))
    if pipeline:
        assert isinstance(raised, mrec.WriteError) and "MemoryError" in str(raised) and "reopen" in str(raised)
    else:
        # the default writer encodes the 24 KB chunks ahead, four frames a batch on the pool: the sixth
        # batch (frames 20-23) fails; the next call raises it (WriteError naming it) or, if it is still
        # running then, the second commit's landing does (the MemoryError itself)
        assert 24 <= appended <= 31
        assert isinstance(raised, MemoryError) or "MemoryError" in str(raised)
    assert calls["n"] >= (3 if pipeline else 6)
    for call in (lambda: w.append(_xy(99)), w.flush, w.close):
        with pytest.raises(mrec.WriteError):
            call()
    r = mrec.TrajectoryReader(path)
    n = len(r)
    # pipelined: one batch a commit on the committer (x; y, without precision, is crc32c alone), the
    # third failed; default: the second commit's batches, the first commit is there
    assert n == (32 if pipeline else 16)
    for i in range(n):
        want = _xy(i)["blocks"]["atoms"]
        assert r[i].blocks["atoms"]["x"].tobytes() == round_to_precision(want["x"], 1e-3).tobytes()
        assert r[i].blocks["atoms"]["y"].tobytes() == want["y"].tobytes()
    monkeypatch.setattr(ZstdCodec, "_compressor", real)
    with mrec.TrajectoryWriter.open(path, durable=False) as w2:
        assert w2.committed == n
        w2.extend([_xy(i) for i in range(n, n + 20)])
    r = mrec.TrajectoryReader(path)
    assert len(r) == n + 20
    assert r[n + 19].blocks["atoms"]["y"].tobytes() == _xy(n + 19)["blocks"]["atoms"]["y"].tobytes()


def _watch_committer(monkeypatch, hook):
    """The thread count of every batch encode (a list, in order), with ``hook(n)`` run on the
    committer thread before its n-th landing (from 1); MREC_THREADS=2."""
    import threading
    monkeypatch.setenv("MREC_THREADS", "2")
    seen = []
    real_enc = ShardedAppender._batch_encoder
    real_land = ShardedAppender.land
    lands = {"n": 0}

    def enc(self, where):
        e = real_enc(self, where)
        return None if e is None else (lambda runs, threads: (seen.append(threads), e(runs, threads))[1])

    def land(self):
        if threading.current_thread().name.startswith("mrec-commit"):
            lands["n"] += 1
            return hook(lands["n"], lambda: real_land(self))
        return real_land(self)
    monkeypatch.setattr(ShardedAppender, "_batch_encoder", enc)
    monkeypatch.setattr(ShardedAppender, "land", land)
    return seen, real_land


def _x_frames(n: int):
    """A schema of one 3000-row f64 column at p = 1e-3, and ``n`` frames of it."""
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3000)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    return s, [{"blocks": {"atoms": {"x": np.random.default_rng(i).normal(size=3000)}}} for i in range(n)]


def _until(cond, what: str) -> None:
    import time as _time
    end = _time.monotonic() + 30
    while not cond():
        assert _time.monotonic() < end, what
        _time.sleep(0.001)


def test_the_committer_encodes_alone_while_the_producer_runs_and_on_the_pool_when_commits_queue_or_it_waits(
        tmp_path, monkeypatch):
    """A pipelined writer's committer leaves the other core to the producer: its batch encodes use one
    thread while the producer is running and no other commit waits behind the one it lands; the pool
    as well when a commit is queued behind it, or when the producer waits for the committer (flush,
    close, a full queue), asked again at every landing.  The store is the serial writer's either way."""
    import threading

    import mrec
    gates = {1: threading.Event(), 2: threading.Event()}   # commits held at their landing
    landed = {k: threading.Event() for k in range(1, 6)}
    holder = {}

    def hook(n, land):
        if n in gates:
            assert gates[n].wait(30)
        if n == 4:                            # lands once the producer has started to wait (in _drain)
            _until(lambda: holder["w"].committer._producer_waits, "the producer never waited")
        try:
            return land()
        finally:
            landed[n].set()
    seen, real_land = _watch_committer(monkeypatch, hook)
    s, frames = _x_frames(80)
    w = holder["w"] = mrec.TrajectoryWriter.create(tmp_path / "p.mrec", s, durable=False, flush_every=16,
                                                   pipeline=True)
    for f in frames[:16]:                     # one commit, landed while the producer goes on: alone
        w.append(f)
    gates[1].set()
    assert landed[1].wait(30)
    assert seen == [1]
    for f in frames[16:48]:                   # two commits: the first held until the second is queued
        w.append(f)
    gates[2].set()
    assert landed[3].wait(30)
    assert seen == [1, 2, 1]                  # on the pool (the third waited behind it), then alone
    for f in frames[48:64]:                   # one commit, landed while the producer waits for it
        w.append(f)
    w.committer.drain()
    assert seen == [1, 2, 1, 2]
    assert not w.committer._producer_waits
    for f in frames[64:]:                     # and alone again once the producer runs
        w.append(f)
    assert landed[5].wait(30)
    assert seen == [1, 2, 1, 2, 1]
    w.close()
    monkeypatch.setattr(ShardedAppender, "land", real_land)
    with mrec.TrajectoryWriter.create(tmp_path / "s.mrec", s, durable=False, flush_every=16) as w2:
        w2.extend(frames)
    assert _tree(tmp_path / "p.mrec") == _tree(tmp_path / "s.mrec")


def test_a_full_queue_lets_the_committer_use_the_pool_while_the_producer_waits(tmp_path, monkeypatch):
    """``_queue_commit`` waiting for the oldest commit (the queue holds QUEUE_BYTES) is the producer
    waiting: the committer's landing uses the pool meanwhile, and the flag is down once it returns."""
    import mrec
    holder = {}

    def hook(n, land):
        if n == 1:   # lands once the producer waits: the second commit overflowed the queue
            _until(lambda: holder["w"].committer._producer_waits, "the producer never waited")
        return land()
    seen, real_land = _watch_committer(monkeypatch, hook)
    s, frames = _x_frames(32)
    w = holder["w"] = mrec.TrajectoryWriter.create(tmp_path / "q.mrec", s, durable=False, flush_every=16,
                                                   pipeline=True)
    monkeypatch.setattr(w.committer, "QUEUE_BYTES", 16 * 3000 * 8 + 1)     # room for one commit's rows
    for f in frames:
        w.append(f)
    assert seen[0] == 2
    assert not w.committer._producer_waits
    w.close()
    monkeypatch.setattr(ShardedAppender, "land", real_land)
    with mrec.TrajectoryWriter.create(tmp_path / "s.mrec", s, durable=False, flush_every=16) as w2:
        w2.extend(frames)
    assert _tree(tmp_path / "q.mrec") == _tree(tmp_path / "s.mrec")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=10), convert=st.booleans(), inner=st.integers(1, 4))
def test_append_many_lands_what_appending_each_piece_lands(tmp_path_factory, sizes, convert, inner):
    rng = np.random.default_rng(sum(sizes))
    pieces = [np.round(rng.normal(size=(n, 3)), 3) for n in sizes]
    if convert:                       # pieces append must convert or refuse: append_many hands them to append
        pieces = [p.astype(">f8") if k % 2 else p for k, p in enumerate(pieces)]
    trees = []
    for many in (False, True):
        path = tmp_path_factory.mktemp("many")
        store = DirectoryStore(str(path))
        arr = Array.create(store, "x", ArrayMetadata.create((0, 3), DATA_TYPES["float64"], (inner * 3, 3),
                                                            _sharded(inner, (3,), VARIANTS["shuffle"])))
        ap = ShardedAppender(arr)
        if many:
            ap.append_many(pieces)
        else:
            for p in pieces:
                ap.append(p)
        assert ap.pending_rows == sum(sizes)
        ap.land()
        arr.write_metadata()
        trees.append(_tree(path))
    assert trees[0] == trees[1]


def test_small_chunks_go_ahead_only_when_the_producer_leaves_time_or_not_in_a_run(tmp_path, monkeypatch):
    """Small inner chunks are batched to the pool only when the appender's previous append was at least
    AHEAD_GAP ago (a producer calling append between MD steps), and not after a run of frames appended
    at once (extend: its landing follows); the landing encodes whatever was not sent ahead, the same bytes."""
    monkeypatch.setenv("MREC_THREADS", "2")
    monkeypatch.setattr(ShardedAppender, "AHEAD_BATCH_BYTES", 128)
    store = DirectoryStore(str(tmp_path))
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (64,), _sharded(8)))
    got = []
    for gap, pieces in ((3600.0, [16, 16, 16]), (0.0, [16, 16, 16]), (0.0, [64, 16, 16])):
        monkeypatch.setattr(ShardedAppender, "AHEAD_GAP", gap)
        ap = ShardedAppender(arr, ahead=True)
        start = ap.total_rows
        for n in pieces:
            ap.append(np.arange(float(start), float(start + n)))
            start += n
        got.append(sorted(ap._futures))
        ap.land()
        arr.write_metadata()
    assert got == [[], [0 + 6, 1 + 6, 2 + 6, 3 + 6, 4 + 6, 5 + 6], []]
    assert Array.open(store, "x").read().tobytes() == np.arange(float(48 + 48 + 96)).tobytes()
