"""Index rebuilds never give a copy the wrong coordinate, and a reopened writer leaves no
leftover copy before what it appends (issue 17, defects 1 and 2 of docs/reliability.md
"Rebuilding an index": ``shardscan.reencodes`` and ``ShardedAppender._settle``).

The states are built byte by byte, the way a crash leaves them: a landing's chunk bytes at
the end of a shard whose index rewrite (and commit) did not land, or an index rewrite that
a power loss dropped (the older index, its crc32c intact, in place).
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import mrec
from mrec.zarr.shardscan import Contradiction

ROWS = 4000                        # one frame an inner chunk (4000 f64 rows = 32 KiB)
SHARD = "trajectory/atoms/x/c/0"


def schema(cols=("x",)):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    for c in cols:
        s.declare_column("atoms", c, "f64")
    return s


def frames(n, seed=0, same_first=()):
    rng = np.random.default_rng(seed)
    out = [rng.normal(size=ROWS) for _ in range(n)]
    for i in same_first:
        out[i][0] = 1.0
    return out


def write(path, xs, *, start=0, create=True, **kw):
    w = (mrec.TrajectoryWriter.create(path, schema(), **kw) if create
         else mrec.TrajectoryWriter.open(path, **kw))
    for i, x in enumerate(xs, start):
        w.append({"blocks": {"atoms": {"x": x}}}, step=i)
    return w


def shard(path):
    with open(os.path.join(path, SHARD), "rb") as f:
        return f.read()


def put(path, data):
    with open(os.path.join(path, SHARD), "wb") as f:
        f.write(data)


def column(path):
    r = mrec.TrajectoryReader(path)
    return [np.asarray(r[i].blocks["atoms"]["x"]) for i in range(len(r))]


def same(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.tobytes() == w.tobytes(), f"frame {i}"


def test_uncommitted_chunk_repeating_an_older_first_value_is_not_that_chunk(tmp_path):
    """docs/reliability.md's construction of defect 1: frames 7 and 12 share x[0]; frame 12's
    chunk landed after the commit of 0-11 but its index rewrite did not.  r[7] is frame 7."""
    xs = frames(13, same_first=(7, 12))
    a, b = str(tmp_path / "a.mrec"), str(tmp_path / "b.mrec")
    w = write(a, xs[:12])
    w.flush()
    w.close()
    shutil.copytree(a, b)
    w = write(b, [xs[12]], start=12, create=False)
    w.close()
    old, new = shard(a), shard(b)
    put(a, old + new[len(old):])
    same(column(a), xs[:12])


def test_next_chunk_repeating_the_last_first_value_is_the_next_chunk(tmp_path):
    """As above with frames 11 and 12 sharing x[0]: the uncommitted chunk right after the
    last committed one is the next chunk, not a re-encoding of it (a full chunk is never
    re-encoded by the landing after it)."""
    xs = frames(13, seed=1, same_first=(11, 12))
    a, b = str(tmp_path / "a.mrec"), str(tmp_path / "b.mrec")
    write(a, xs[:12]).close()
    shutil.copytree(a, b)
    write(b, [xs[12]], start=12, create=False).close()
    old, new = shard(a), shard(b)
    put(a, old + new[len(old):])
    same(column(a), xs[:12])
    w = mrec.TrajectoryWriter.open(a)              # and the reopen cuts that copy, then appends
    assert len(shard(a)) == len(old)
    w.append({"blocks": {"atoms": {"x": xs[12]}}}, step=12)
    w.close()
    same(column(a), xs)


def test_constant_column_rebuilt_from_a_dropped_index(tmp_path):
    """A column repeating the same full chunk every frame beside one that changes (ordered-
    metadata power loss: the chunks and the commit reached the disk, the in-place index
    rewrites did not): each repeated chunk keeps its own coordinate."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=ROWS)
    ys = [rng.normal(size=ROWS) for _ in range(9)]
    p = str(tmp_path / "c.mrec")
    w = mrec.TrajectoryWriter.create(p, schema(("x", "y")))
    for i in range(9):
        w.append({"blocks": {"atoms": {"x": x, "y": ys[i]}}}, step=i)
        if i == 2:
            w.flush()
            index_then = shard(p)
    w.close()
    _drop_index_to(p, index_then)
    r = mrec.TrajectoryReader(p)
    same([np.asarray(r[i].blocks["atoms"]["x"]) for i in range(len(r))], [x] * 9)
    same([np.asarray(r[i].blocks["atoms"]["y"]) for i in range(len(r))], ys)


def _index_size(p):
    from mrec.zarr.array import Array
    from mrec.zarr.stores.directory import DirectoryStore
    arr = Array.open(DirectoryStore(p), "trajectory/atoms/x")
    sh = arr.sharding
    return sh.index_size(sh.grid(arr.meta.chunk_shape, arr.name))


def _drop_index_to(p, older: bytes):
    data = bytearray(shard(p))
    n = _index_size(p)
    data[:n] = older[:n]
    put(p, bytes(data))


def _settle_then_append(p, kept: list, new: list, **open_kw):
    """Reopen (settling the shard), append ``new`` after the ``kept`` frames and close; the store
    reads ``kept + new``, and still does after a power loss that dropped every index rewrite since
    the settle.  Returns the shard as settled and the frames."""
    w = mrec.TrajectoryWriter.open(p, **open_kw)
    settled = shard(p)
    for k, x in enumerate(new):
        w.append({"blocks": {"atoms": {"x": x}}}, step=len(kept) + k)
    w.close()
    want = kept + new
    same(column(p), want)
    _drop_index_to(p, settled)
    same(column(p), want)
    return settled, want


def test_reopen_after_an_uncommitted_landing_leaves_no_leftover(tmp_path):
    """A crash after a landing's index rewrite, before its commit: the index names uncommitted
    copies (the partial tail re-encoded with more rows, and the next chunk).  The reopen cuts
    them and re-encodes the tail with exactly its committed rows; a later index rebuild (the
    reopen's index rewrites dropped) reads every committed frame."""
    rng = np.random.default_rng(5)
    half = 2000                           # frames of 2000 rows: two frames an inner chunk
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=half)
    s.declare_column("atoms", "x", "f64")
    xs = [rng.normal(size=half) for _ in range(12)]
    p, q = str(tmp_path / "p.mrec"), str(tmp_path / "q.mrec")
    w = mrec.TrajectoryWriter.create(p, s)
    for i in range(5):                    # 5 frames: the third inner chunk holds one frame (partial)
        w.append({"blocks": {"atoms": {"x": xs[i]}}}, step=i)
    w.close()
    committed = shard(p)
    shutil.copytree(p, q)
    w = mrec.TrajectoryWriter.open(q)
    for i in range(5, 8):                 # re-encodes the tail (full now) and starts the next chunk
        w.append({"blocks": {"atoms": {"x": xs[i]}}}, step=i)
    w.close()
    landed = shard(q)
    # the crash: q's landing (its chunks and index rewrite) without its commit
    put(p, landed)
    same(column(p), xs[:5])
    # the reopen settles the shard: nothing of the uncommitted landing is left, the tail copy
    # holding exactly the committed frame follows
    settled, want = _settle_then_append(p, xs[:5], [rng.normal(size=half) for _ in range(3)])
    assert len(settled) > len(committed)
    # ... or every one after the first commit
    _drop_index_to(p, committed)
    same(column(p), want)


def test_restart_then_dropped_index(tmp_path):
    """A restart (truncate_after_step) drops frames of a full chunk: the reopen re-encodes the
    chunk with the kept rows, so a later rebuild takes the new frames for the kept ones' chunk."""
    rng = np.random.default_rng(6)
    half = 2000
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=half)
    s.declare_column("atoms", "x", "f64")
    xs = [rng.normal(size=half) for _ in range(8)]
    p = str(tmp_path / "r.mrec")
    w = mrec.TrajectoryWriter.create(p, s)
    for i in range(8):
        w.append({"blocks": {"atoms": {"x": xs[i]}}}, step=i)
    w.close()
    # keeps 0..4: chunk 2 now partial
    _settle_then_append(p, xs[:5], [rng.normal(size=half) for _ in range(4)], truncate_after_step=4)


def test_full_chunk_followed_by_a_reencoding_is_that_coordinate():
    """shardscan.reencodes: the relations a writer makes, and the next chunk."""
    from mrec.zarr.shardscan import Blob, reencodes
    from mrec.zarr.codecs.base import ChunkSpec
    from mrec.zarr.dtypes import parse_data_type
    from mrec.zarr.pipeline import CodecPipeline

    class Sh:
        codecs = CodecPipeline.from_json([{"name": "bytes", "configuration": {"endian": "little"}}], "x")

    spec = ChunkSpec((4,), parse_data_type("float64", "x"), 0.0, "x")

    def blob(vals, at):
        raw = np.asarray(vals, "<f8").tobytes()
        return Blob(at, len(raw), raw[:8]), raw

    def rel(a, b):
        ba, ra = blob(a, 0)
        bb, rb = blob(b, len(ra))
        return reencodes(Sh, spec, ra + rb, ba, bb)

    assert rel([1, 2, 0, 0], [1, 2, 3, 0])         # a partial chunk grown
    assert rel([1, 2, 3, 4], [1, 2, 0, 0])         # a full (uncommitted) copy cut back to the committed rows
    assert rel([1, 2, 0, 0], [1, 2, 0, 0])         # identical, and possibly partial
    assert not rel([1, 2, 3, 4], [1, 2, 3, 4])     # a full chunk repeated: the next chunk
    assert not rel([1, 2, 3, 4], [1, 5, 6, 7])     # same first row only
    assert not rel([1, 2, 3, 4], [2, 2, 3, 4])


def test_step_index_tail_past_nstep_is_not_judged(tmp_path):
    """The reopen rule: n_updates is the prefix of step_index entries below nstep; from the first
    entry at or past nstep on it is an uncommitted tail (a landing whose commit was lost, its
    re-encoded chunk padded with the fill value), which the reader never judges.  A committed
    prefix that is not ascending is still refused."""
    from mrec.zarr.array import Array
    from mrec.zarr.stores.directory import DirectoryStore
    s = mrec.SequenceSchema()
    s.declare_block("b", rows=2)
    s.declare_column("b", "y", "f64")
    s.declare_meta("e", "f64")
    p = tmp_path / "s.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(6):
            f = mrec.Frame(meta={"e": float(i)})
            if i in (0, 2):
                f = mrec.Frame(blocks={"b": {"y": np.full(2, float(i))}}, meta={"e": float(i)})
            w.append(f, step=i)
    st = DirectoryStore(str(p))
    si = Array.open(st, "trajectory/b/step_index", appended=True)
    assert si.read().tolist() == [0, 2]
    # what a lost commit leaves: an entry 6 (the next frame) then padding, inside a longer shape
    si.set_shape((5,))
    from mrec.zarr.append import ShardedAppender
    ap = ShardedAppender(si, 2)
    ap.append(np.array([6, 0, 0], dtype=si.dtype))
    ap.land()
    si.write_metadata()
    assert Array.open(st, "trajectory/b/step_index", appended=True).read().tolist() == [0, 2, 6, 0, 0]
    r = mrec.TrajectoryReader(p)
    assert len(r) == 6 and r[3].blocks["b"]["y"].tolist() == [2.0, 2.0]
    from mrec.check.validate import validate
    rep = validate(p, deep=True)
    assert not [v for v in rep.violations if "ascending" in v.message], [str(v) for v in rep.violations]
    ap = ShardedAppender(si, 1)            # a committed prefix out of order: refused
    ap.append(np.array([0, 1, 0, 0], dtype=si.dtype))
    ap.land()
    si.write_metadata()
    with pytest.raises(mrec.RefusalError, match="not strictly ascending"):
        mrec.TrajectoryReader(p)
