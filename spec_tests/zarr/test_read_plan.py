"""The read planner alone (``mrec.zarr.read.plan``: pure, no store), and every public read going
through it (plan -> fetch -> decode, docs/architecture.md "Arrays").

* a whole chunk, part of a chunk, rows across shards (each shard a run of the result's rows), a
  chunking that splits the trailing axes (cell by cell, with the cell's part of the result);
* inner chunks: the frame case (one inner chunk holds the rows), the inner rows touched and those
  read whole, the byte ranges (entries back to back, cut at COALESCE_BYTES), the read-ahead;
* ``Array.read`` / ``read_into`` / ``read_together`` / ``TrajectoryReader`` reads ask the planner.
"""
from __future__ import annotations

import numpy as np
import pytest

import mrec
from mrec.errors import RefusalError
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array, read_together
from mrec.zarr.codecs.sharding import EMPTY, ShardIndex
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.pipeline import CodecPipeline
from mrec.zarr.read import plan
from mrec.zarr.stores.directory import DirectoryStore

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
INNER = [BYTES, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}},
         {"name": "zstd", "configuration": {"level": 3, "checksum": False}}, {"name": "crc32c"}]


def _sharded(inner_shape) -> CodecPipeline:
    return CodecPipeline.from_json([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(inner_shape), "codecs": INNER,
        "index_codecs": [BYTES, {"name": "crc32c"}], "index_location": "start"}}], "x")


def _meta(shape, chunks, codecs=None) -> ArrayMetadata:
    return ArrayMetadata.create(shape, DATA_TYPES["float64"], chunks,
                                codecs or CodecPipeline.from_json([BYTES], "x"))


def _index(offsets, sizes) -> ShardIndex:
    return ShardIndex(np.array(offsets, dtype=np.uint64), np.array(sizes, dtype=np.uint64))


# -- chunks of a range ---------------------------------------------------------------------------

def test_a_whole_chunk_is_one_chunk_read_whole():
    p = plan.plan_rows(_meta((100,), (10,)), 10, 20, "x")
    assert p.want == (10,) and p.whole and not p.fill_only and not p.by_shards and not p.sparse
    (c,) = p.chunks()
    assert (c.coords, c.lo, c.hi, c.dst, c.src) == ((1,), 0, 10, (slice(0, 10),), (slice(None),))


def test_part_of_a_chunk_names_its_rows_of_the_chunk():
    p = plan.plan_rows(_meta((100,), (10,)), 12, 15, "x")
    (c,) = p.chunks()
    assert p.whole and (c.coords, c.lo, c.hi, c.dst) == ((1,), 2, 5, (slice(0, 3),))


def test_rows_across_shards_are_runs_of_the_result():
    m = _meta((100, 3), (20, 3), _sharded((5, 3)))
    p = plan.plan_rows(m, 15, 47, "x")
    assert p.spans and p.by_shards and not p.whole and p.want == (32, 3)
    got = [(c.coords, c.lo, c.hi, c.dst) for c in p.chunks()]
    assert got == [((0, 0), 15, 20, (slice(0, 5),)), ((1, 0), 0, 20, (slice(5, 25),)),
                   ((2, 0), 0, 7, (slice(25, 32),))]
    # only the shards the store holds (a sparse read): the others stay fill
    assert [c.coords for c in p.chunks([(2, 0)])] == [(2, 0)]


def test_a_chunking_that_splits_the_trailing_axes_is_placed_cell_by_cell():
    p = plan.plan_rows(_meta((10, 5), (4, 2)), 3, 6, "x")
    assert not p.spans and not p.whole and p.trailing_grid == (3,)
    got = [(c.coords, c.lo, c.hi, c.dst, c.src) for c in p.chunks()]
    assert got[0] == ((0, 0), 3, 4, (slice(0, 1), slice(0, 2)), (slice(None), slice(0, 2)))
    assert got[2] == ((0, 2), 3, 4, (slice(0, 1), slice(4, 5)), (slice(None), slice(0, 1)))
    assert got[-1] == ((1, 2), 0, 2, (slice(1, 3), slice(4, 5)), (slice(None), slice(0, 1)))
    assert len(got) == 6


def test_nothing_to_read_is_fill_and_too_much_is_refused():
    assert plan.plan_rows(_meta((100,), (10,)), 5, 5, "x").fill_only
    assert plan.plan_rows(_meta((100, 0), (10, 1)), 0, 5, "x").fill_only
    with pytest.raises(RefusalError) as exc:
        plan.plan_rows(_meta((2**33,), (10,)), 0, 2**32, "arr")
    assert exc.value.kind == "too_large"
    big = plan.plan_rows(_meta((2**30,), (10,)), 0, 2**30, "x")
    assert big.sparse                                     # the stored chunks are listed, not the grid walked


# -- inner chunks --------------------------------------------------------------------------------

def test_the_frame_case_is_one_inner_chunk():
    geo = plan.frame_geometry(_meta((100, 3), (20, 3), _sharded((5, 3))))
    assert geo == (20, 5, (0,), 5 * 3 * 8)
    assert plan.locate(geo, 25, 30) == (1, 1, 0, True)      # shard 1, inner row 1, whole
    assert plan.locate(geo, 26, 28) == (1, 1, 1, False)     # part of it
    assert plan.locate(geo, 28, 31) is None                 # two inner chunks
    assert plan.frame_geometry(_meta((100, 3), (20, 3), _sharded((5, 1)))) is None
    assert plan.frame_geometry(_meta((100,), (10,))) is None


def test_inner_rows_touched_and_read_whole():
    assert plan.inner_rows(5, 3, 17) == (0, 4, 1, 3)
    assert plan.inner_rows(5, 0, 20) == (0, 4, 0, 4)
    assert plan.together((20, 5, (0,), 120), 25, 35) == (1, 1, 2)
    assert plan.together((20, 5, (0,), 120), 15, 25) is None     # two shards
    assert plan.together((20, 5, (0,), 120), 26, 31) is None     # not whole inner chunks


def test_byte_ranges_of_inner_chunks():
    index = _index([100, 110, 125, EMPTY, 200, 204], [10, 15, 20, EMPTY, 4, 30])
    assert plan.plain_entries(index, 0, 3)[0].tolist() == [100, 110, 125]
    assert plan.plain_entries(index, 0, 4) is None                  # an empty entry
    assert plan.plain_entries(index, 4, 6) is None                  # shorter than a checksum
    offs, sizes = plan.plain_entries(index, 0, 3)
    assert plan.back_to_back(offs, sizes) and plan.run_cuts(offs, sizes) == [0, 3]
    offs = np.array([0, 10, 50, 60], dtype=np.int64)
    sizes = np.array([10, 10, 10, 10], dtype=np.int64)
    assert not plan.back_to_back(offs, sizes) and plan.run_cuts(offs, sizes) == [0, 2, 4]
    ents = plan.prefetch_entries(index, [(i,) for i in range(6)], skip=((1,), 110, 15))
    assert [e[2] for e in ents] == [(0,), (2,), (4,), (5,)]          # empty and cached left out
    runs = plan.coalesce(plan.prefetch_entries(index, [(i,) for i in range(6)], None))
    assert [(s, e, [x[2] for x in r]) for s, e, r in runs] == [(100, 145, [(0,), (1,), (2,)]),
                                                                  (200, 234, [(4,), (5,)])]
    assert plan.ahead_end(index, 0, 100, 10, 6) == 145               # up to the empty entry
    assert plan.ahead_end(index, 0, 100, 10, 1) == 110               # never past the shape


def test_coalescing_stops_at_the_limit(monkeypatch):
    monkeypatch.setattr(plan, "COALESCE_BYTES", 25)
    index = _index([0, 10, 20, 30], [10, 10, 10, 10])
    runs = plan.coalesce(plan.prefetch_entries(index, [(i,) for i in range(4)], None))
    assert [(s, e) for s, e, _ in runs] == [(0, 20), (20, 40)]
    offs, sizes = plan.plain_entries(index, 0, 4)
    assert plan.run_cuts(offs, sizes) == [0, 2, 4]


# -- every public read asks the planner ---------------------------------------------------------

@pytest.fixture
def asked(monkeypatch):
    calls = []
    for name in ("locate", "plan_rows", "together", "inner_rows"):
        real = getattr(plan, name)
        monkeypatch.setattr(plan, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    return calls


def _column(tmp_path, n=40, rows=4) -> Array:
    store = DirectoryStore(str(tmp_path))
    arrays = []
    for name in ("a", "b"):
        arr = Array.create(store, name, _meta((0, 3), (4 * rows, 3), _sharded((rows, 3))))
        ap = ShardedAppender(arr)
        ap.append(np.arange(n * 3, dtype=np.float64).reshape(n, 3) + (name == "b"))
        ap.land()
        arr.write_metadata()
        arrays.append(Array.open(store, name, appended=True))
    return arrays


def test_each_public_read_goes_through_the_planner(tmp_path, asked):
    a, b = _column(tmp_path)
    want = np.arange(120, dtype=np.float64).reshape(40, 3)
    assert a.read(slice(4, 8)).tobytes() == want[4:8].tobytes() and asked == ["locate"]
    del asked[:]
    assert a.read(slice(2, 30)).tobytes() == want[2:30].tobytes()
    assert "plan_rows" in asked and "inner_rows" in asked
    del asked[:]
    out = np.empty((20, 3))
    a.read_into(slice(10, 30), out)
    assert out.tobytes() == want[10:30].tobytes() and "plan_rows" in asked
    del asked[:]
    got = read_together([a, b], 16, 32)
    assert got is not None and got[1].tobytes() == (want[16:32] + 1).tobytes() and asked == ["together"]
    del asked[:]
    assert a[5].tobytes() == want[5].tobytes() and asked == ["locate"]


def test_trajectory_reads_go_through_the_planner(tmp_path, asked):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=5)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s, durable=False) as w:
        for i in range(6):
            w.append({"blocks": {"atoms": {"x": np.full(5, float(i))}}})
    r = mrec.TrajectoryReader(tmp_path / "t.mrec")
    del asked[:]
    assert float(r[3].blocks["atoms"]["x"][0]) == 3.0 and "locate" in asked
    del asked[:]
    assert r.column("atoms", "x").shape == (6, 5) and set(asked) & {"locate", "plan_rows"}
    del asked[:]
    assert [float(f.blocks["atoms"]["x"][0]) for f in r] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert set(asked) & {"locate", "plan_rows", "together"}
