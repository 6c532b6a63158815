"""Issue 16: the pipelined writer (``pipeline=True``) queues its automatic commits to a committer thread.

``append`` then validates, copies, buffers and returns (the rounding of a regular frame is the
committer's too: test_pipeline_rounding.py); the landing (encoding, shard appends) and
the commit protocol run on the committer thread, one commit after the other in the order they were
queued.  What must hold: the store is byte-identical to the serial writer's (every durable mode,
reopen, extend, cells, meta, masks); the queue is bounded; ``flush`` / ``close`` drain it first; a
commit that fails on the committer poisons the writer and its ``WriteError`` surfaces at the next
call, with the store at its last completed commit; a SIGKILL with commits queued leaves a
bit-identical prefix of at least the frames reported flushed.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mrec
from mrec.fs.faulty import FaultyFileSystem
from mrec.record.trajectory.commit import Committer
from mrec.record.model.precision import round_to_precision

from test_encode_ahead import _tree  # noqa: E402  (spec_tests is on sys.path)



def append_until_raised(w, frames, errors) -> tuple:
    """Append ``frames`` until one call raises one of ``errors``; if none does, the flush after them
    must raise a WriteError (a failure on a worker surfaces at the next call).  (the exception, the
    frames appended without raising)."""
    appended = 0
    for f in frames:
        try:
            w.append(f)
            appended += 1
        except errors as exc:
            return exc, appended
    with pytest.raises(mrec.WriteError) as e:
        w.flush()
    return e.value, appended

def _schema(rich: bool) -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=5)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "y", "f64")
    if rich:
        s.declare_column("atoms", "q", "f64", nullable=True)
        s.declare_block("bonds")
        s.declare_column("bonds", "a", "u64")
        s.declare_meta("energy", "f64")
    return s


def _frame(i: int, rich: bool) -> dict:
    rng = np.random.default_rng(i)
    blocks = {"atoms": {"x": rng.normal(size=5), "y": rng.normal(size=5) if i % 4 else np.zeros(5)}}
    f = {"blocks": blocks}
    if i % 5 == 2:
        f["box"] = np.eye(3) * (10.0 + i)
    if rich:
        blocks["atoms"]["q"] = rng.normal(size=5)
        f["masks"] = {"atoms": {"q": np.arange(5) % (2 + i % 3) != 0}}
        if i % 3 == 0:
            blocks["bonds"] = {"a": np.arange(i % 4, dtype=np.uint64)}
        f["meta"] = {"energy": float(i) * 0.5}
    return f


def _session(path, pipeline: bool, rich: bool, flush_every, durable) -> None:
    w = mrec.TrajectoryWriter.create(path, _schema(rich), durable=durable, flush_every=flush_every, pipeline=pipeline)
    for i in range(23):
        w.append(_frame(i, rich), **({"time": 0.5 * i} if rich else {}))
        if i == 11:
            w.flush()
    w.close()
    w = mrec.TrajectoryWriter.open(path, durable=durable, flush_every=flush_every, pipeline=pipeline)
    if rich:
        for i in range(23, 40):
            w.append(_frame(i, rich), time=0.5 * i)
    else:
        w.extend([_frame(i, rich) for i in range(23, 40)])
    w.close()


@pytest.mark.parametrize("flush_every", [1, 3, 7, None])
@pytest.mark.parametrize("durable", [False, True, "always"])
@pytest.mark.parametrize("rich", [False, True])
def test_pipelined_writer_writes_the_serial_store(tmp_path, flush_every, durable, rich):
    _session(tmp_path / "serial.mrec", False, rich, flush_every, durable)
    _session(tmp_path / "pipelined.mrec", True, rich, flush_every, durable)
    assert _tree(tmp_path / "serial.mrec") == _tree(tmp_path / "pipelined.mrec")
    r = mrec.TrajectoryReader(tmp_path / "pipelined.mrec")
    assert len(r) == 40
    assert r[17].blocks["atoms"]["x"].tobytes() == round_to_precision(_frame(17, rich)["blocks"]["atoms"]["x"], 1e-3).tobytes()


def test_flush_drains_the_queue_and_commits_every_frame(tmp_path):
    path = tmp_path / "t.mrec"
    w = mrec.TrajectoryWriter.create(path, _schema(False), durable=False, flush_every=2, pipeline=True)
    for i in range(9):
        w.append(_frame(i, False))
    w.flush()
    assert w.committed == w.nframes == 9 and not w.committer._queue
    assert len(mrec.TrajectoryReader(path)) == 9
    w.close()


def test_the_queue_is_bounded(tmp_path, monkeypatch):
    """Queued commits hold at most QUEUE_BYTES of rows (or one commit's, if larger): an automatic
    flush beyond it waits for the oldest."""
    monkeypatch.setattr(Committer, "QUEUE_BYTES", 3 * 3000 * 8 * 2)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3000)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    one = 3000 * 8
    most = 0
    with mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s, durable=False, flush_every=1, pipeline=True) as w:
        for i in range(40):
            w.append({"blocks": {"atoms": {"x": np.random.default_rng(i).normal(size=3000)}}})
            most = max(most, w.committer._queued_bytes)
            assert w.committer._queued_bytes <= max(w.committer.QUEUE_BYTES, one + 64)
    assert most > 0                      # commits were queued
    assert len(mrec.TrajectoryReader(tmp_path / "t.mrec")) == 40


def test_pipeline_must_be_a_bool(tmp_path):
    with pytest.raises(mrec.RefusalError) as e:
        mrec.TrajectoryWriter.create(tmp_path / "t.mrec", _schema(False), pipeline="yes")
    assert e.value.kind == "bad_pipeline"


@pytest.mark.parametrize("fail_at", [0, 1, 2, 3, 5, 8, 13, 21, 34])
def test_a_commit_failing_on_the_committer_surfaces_at_the_next_call(tmp_path, fail_at):
    """ENOSPC at one of the committer's writes: a later call (append, or flush at the latest) raises
    the WriteError naming the file; every call after refuses; the store holds the frames of its
    last completed commit, bit-identical; reopening continues."""
    fs = FaultyFileSystem()
    path = tmp_path / "t.mrec"
    w = mrec.TrajectoryWriter.create(path, _schema(False), durable=False, flush_every=3, fs=fs, pipeline=True)
    fs.arm(fail_at, errno.ENOSPC)
    raised, appended = append_until_raised(w, (_frame(i, False) for i in range(30)), mrec.WriteError)
    assert raised.errno == errno.ENOSPC and "No space left on device" in str(raised)
    assert "reopen" in str(raised)
    with pytest.raises(mrec.WriteError):
        w.append(_frame(99, False))
    with pytest.raises(mrec.WriteError):
        w.flush()
    with pytest.raises(mrec.WriteError):
        w.close()
    r = mrec.TrajectoryReader(path)
    n = len(r)
    assert n % 3 == 0 and n <= appended
    for i in range(n):
        want = _frame(i, False)["blocks"]["atoms"]
        assert r[i].blocks["atoms"]["y"].tobytes() == want["y"].tobytes()
        assert r[i].blocks["atoms"]["x"].tobytes() == round_to_precision(want["x"], 1e-3).tobytes()
    with mrec.TrajectoryWriter.open(path, durable=False) as w2:       # the lock was released
        assert w2.committed == n
        w2.append(_frame(n, False))
    assert len(mrec.TrajectoryReader(path)) == n + 1


WRITER = r"""
import sys, numpy as np, mrec
path = sys.argv[1]
N = 3000
def frame(i):
    rng = np.random.default_rng(i)
    x = rng.normal(size=N)
    x[0] = i
    return {"blocks": {"atoms": {"x": x}}}
s = mrec.SequenceSchema()
s.declare_block("atoms", rows=N)
s.declare_column("atoms", "x", "f64", precision=1e-3)
w = mrec.TrajectoryWriter.create(path, s, flush_every=2, durable=False, pipeline=True)
print("ready", flush=True)
i = 0
while True:
    w.append(frame(i))
    i += 1
    if i % 25 == 0:
        w.flush()
        print("flushed", i, flush=True)
"""


def _expected(i):
    rng = np.random.default_rng(i)
    x = rng.normal(size=3000)
    x[0] = i
    return round_to_precision(x, 1e-3)


def test_sigkill_with_commits_queued_leaves_a_committed_prefix(tmp_path):
    rng = np.random.default_rng(7)
    most = 0
    for trial in range(8):
        path = str(tmp_path / f"k{trial}.mrec")
        proc = subprocess.Popen([sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, MREC_THREADS="2"))
        assert proc.stdout.readline().startswith("ready")
        flushed = 0
        if trial % 2:
            line = proc.stdout.readline()
            assert line.startswith("flushed"), line
            flushed = int(line.split()[1])
        time.sleep(float(rng.uniform(0.0, 0.2)))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        for ln in out.split("\n"):
            if ln.startswith("flushed "):
                flushed = max(flushed, int(ln.split()[1]))
        r = mrec.TrajectoryReader(path)
        n = len(r)
        assert n >= flushed, (n, flushed)
        if n:
            xs = r.column("atoms", "x")
            for i in range(n):
                assert xs[i].tobytes() == _expected(i).tobytes(), i
        most = max(most, n)
        with mrec.TrajectoryWriter.open(path, durable=False, pipeline=True) as w:    # reopens, continues
            w.append({"blocks": {"atoms": {"x": _expected(n)}}})
        assert len(mrec.TrajectoryReader(path)) == n + 1
    assert most >= 10, most
