"""Shard-index rebuilds of shards whose inner chunks hold one frame each (docs/reliability.md,
"Open defects found in issue 16"), built deterministically from the bytes a crash leaves.

A 1-d f64 column of 4000 rows a frame is one inner chunk a frame (16 KiB chunk target, 8-byte
rows), so every landing writes whole chunks at the shard's tail and rewrites the 64 KiB index
at its start.  The crash states below are process crashes (the kernel lives; every write
issued before the kill reached the OS), which the chapter's reopen rule must read exactly:
the frames of the last commit marker, bit for bit.

* ``test_unindexed_landing_does_not_move_a_full_chunk`` (defect 1): the chunk write of a
  landing reached the file, its index rewrite and commit did not.  The old index (crc intact)
  ends before the file does, so the reader rebuilds; an unindexed new chunk whose first value
  repeats an older chunk's must not take that chunk's coordinate.
* ``test_unindexed_landing_repeating_the_last_committed_first_value`` (defect 1, next to it):
  the new chunk repeats the first value of the *last* committed chunk.
* ``test_reopen_after_uncommitted_landing_then_torn_index`` (defect 2): a landing and its
  index rewrite reached the file, the commit did not; the writer is reopened and appends
  (after those leftover copies, on main), then a kill ends the next 64 KiB index rewrite
  after its first page.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import mrec
from mrec.fs.faulty import recording_fs

ROWS = 4000
KEY = os.path.join("trajectory", "atoms", "x", "c", "0")


def _schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64")
    return s


def _frame(x):
    return {"blocks": {"atoms": {"x": x}}}


def _shard(root) -> bytes:
    with open(os.path.join(root, KEY), "rb") as f:
        return f.read()


def _same(a, b) -> bool:
    """Bit for bit (a plain bool: pytest's diff of 32 KB byte strings helps nobody)."""
    a, b = np.asarray(a), np.asarray(b)
    return bool(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())


def _read_committed_or_refused(root, want: list, forbidden: dict):
    """Every frame of the store reads as ``want`` bit for bit, or the store is refused with a
    CorruptionError; a frame that reads as one of ``forbidden`` (uncommitted rows) fails loudly."""
    try:
        r = mrec.TrajectoryReader(root)
        assert len(r) == len(want), f"nstep {len(r)}, the commit marker says {len(want)}"
        got = [np.asarray(r[i].blocks["atoms"]["x"]) for i in range(len(r))]
        col = np.asarray(r.column("atoms", "x")) if hasattr(r, "column") else None
    except mrec.CorruptionError:
        return "refused"
    for i, g in enumerate(got):
        for name, bad in forbidden.items():
            assert not _same(g, bad), f"frame {i} reads the rows of {name}, which was never committed"
        assert _same(g, want[i]), f"frame {i} differs from what was appended"
    if col is not None:
        assert _same(col, np.stack(want)), "column() differs from what was appended"
    return "read"


def _uncommitted_chunk_write(tmp_path, frames: list, committed: int):
    """State A: frames[:committed] committed; then the chunk write of the landing of the rest
    reached the shard file, its index rewrite and its commit did not (a kill in between)."""
    A, B = tmp_path / "A.mrec", tmp_path / "B.mrec"
    w = mrec.TrajectoryWriter.create(B, _schema())
    for i in range(committed):
        w.append(_frame(frames[i]), step=i)
    w.flush()
    shutil.copytree(B, A)
    for i in range(committed, len(frames)):
        w.append(_frame(frames[i]), step=i)
    w.flush()
    w.close()
    a, b = _shard(A), _shard(B)
    assert b[:len(a)][65540:] == a[65540:], "the landing appended after the committed chunks"
    with open(A / KEY, "ab") as f:
        f.write(b[len(a):])
    return A


def test_unindexed_landing_does_not_move_a_full_chunk(tmp_path):
    """docs/reliability.md, "A deterministic construction of defect 1": frames 7 and 12 share
    x[0] = 1.0; frame 12's chunk lies unindexed after frame 11's.  Frame 7 must read as frame 7
    (or the store be refused) -- never as frame 12."""
    rng = np.random.default_rng(5)
    frames = [rng.normal(size=ROWS) for _ in range(13)]
    frames[7][0] = frames[12][0] = 1.0
    A = _uncommitted_chunk_write(tmp_path, frames, 12)
    outcome = _read_committed_or_refused(A, frames[:12], {"frame 12": frames[12]})
    if outcome == "read":
        assert _same(mrec.TrajectoryReader(A)[7].blocks["atoms"]["x"], frames[7])


def test_unindexed_landing_repeating_the_last_committed_first_value(tmp_path):
    """Frames 11 and 12 share their first value: the unindexed chunk of frame 12 follows frame
    11's, so a first-row match makes it look like a re-encoded copy of chunk 11.  But chunk 11 is
    full (one frame, one inner chunk) and a full chunk is never re-encoded: frame 11 reads as
    frame 11 (or the store is refused)."""
    rng = np.random.default_rng(9)
    frames = [rng.normal(size=ROWS) for _ in range(13)]
    frames[12][0] = frames[11][0]
    A = _uncommitted_chunk_write(tmp_path, frames, 12)
    _read_committed_or_refused(A, frames[:12], {"frame 12": frames[12]})


@pytest.mark.parametrize("prefix_pages", [1, 8])
def test_reopen_after_uncommitted_landing_then_torn_index(tmp_path, prefix_pages):
    """Defect 2 without a kill.  Session 1 commits frames 0-5, then lands frames 6-8 -- chunk
    write *and* index rewrite -- and dies before the commit marker.  Session 2 reopens (the
    index is consistent with the file, so nothing is repaired), appends frames 6'-8' with other
    values and commits them, then lands 9'-11' and dies inside the 64 KiB index rewrite after
    ``prefix_pages`` pages (a fatal signal can end a large pwrite between pages).  The store
    must read frames 0-5 and 6'-8' exactly: the process-crash guarantee."""
    rng = np.random.default_rng(6)
    first = [rng.normal(size=ROWS) for _ in range(9)]
    second = [rng.normal(size=ROWS) for _ in range(6)]
    A, B = tmp_path / "A.mrec", tmp_path / "B.mrec"
    w = mrec.TrajectoryWriter.create(B, _schema())
    for i in range(6):
        w.append(_frame(first[i]), step=i)
    w.flush()
    shutil.copytree(B, A)
    for i in range(6, 9):
        w.append(_frame(first[i]), step=i)
    w.flush()
    w.close()
    shutil.copyfile(B / KEY, A / KEY)        # the landing and its index rewrite; A's marker still says 6
    assert len(mrec.TrajectoryReader(A)) == 6

    fs = recording_fs()
    w = mrec.TrajectoryWriter.open(A, fs=fs)
    for k in range(3):
        w.append(_frame(second[k]), step=6 + k)
    w.flush()                                 # frames 6'-8' committed
    C = tmp_path / "C.mrec"
    shutil.copytree(A, C)                     # (the writer's lock file is copied too: as a kill leaves it)
    start = len(fs.ops)
    for k in range(3, 6):
        w.append(_frame(second[k]), step=6 + k)
    w.flush()
    w.close()
    writes = [op for op in fs.ops[start:] if op.kind == "write_at" and op.path == str(A / KEY)]
    chunk, index = writes
    assert index.offset == 0 and len(index.data) > prefix_pages * 4096 and chunk.offset > 0
    with open(C / KEY, "r+b") as f:           # the chunk write landed, the index rewrite was cut
        f.seek(chunk.offset)
        f.write(chunk.data)
        f.seek(0)
        f.write(index.data[:prefix_pages * 4096])
    want = first[:6] + second[:3]
    r = mrec.TrajectoryReader(C)
    assert len(r) == 9
    for i in range(9):
        assert _same(r[i].blocks["atoms"]["x"], want[i]), f"frame {i} differs"
    # and a writer reopens it, appends and reads back
    w = mrec.TrajectoryWriter.open(C)
    w.append(_frame(second[5]), step=20)
    w.close()
    r = mrec.TrajectoryReader(C)
    assert len(r) == 10 and _same(r[9].blocks["atoms"]["x"], second[5])
    assert all(_same(r[i].blocks["atoms"]["x"], want[i]) for i in range(9))
