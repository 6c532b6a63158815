"""Issue 14, part 1: the Box conventions, exact input conversions, reader conveniences, restarts."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import mrec
from mrec import Box, Frame, RefusalError, SequenceSchema, TrajectoryReader, TrajectoryWriter

# -- (a) the Box ------------------------------------------------------------------------------

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
lengths = st.floats(0.5, 1e4, allow_nan=False)
angles = st.floats(30.0, 150.0, allow_nan=False)


@given(hnp.arrays(np.float64, (3, 3), elements=finite))
def test_rows_round_trip_bit_for_bit(m):
    b = Box.from_rows(m)
    assert b.rows.tobytes() == m.tobytes()
    assert b.vectors.tobytes() == np.ascontiguousarray(m.T).tobytes()     # stored as columns
    assert Box(b.vectors).rows.tobytes() == m.tobytes()


def _flatness(al, be, ga) -> float:
    """(c_z / c)**2 of the standard orientation: the volume factor over sin(gamma)**2."""
    ca, cb, cg = (math.cos(math.radians(x)) for x in (al, be, ga))
    return (1 - ca * ca - cb * cb - cg * cg + 2 * ca * cb * cg) / math.sin(math.radians(ga)) ** 2


@settings(max_examples=200)
@given(lengths, lengths, lengths, angles, angles, angles)
@example(1.0, 1.0, 141.0, 30.0, 30.0, 60.0)          # exactly flat, a few ulps above zero in floats
def test_dimensions_round_trip_and_agree_with_mdanalysis_and_ase(a, b, c, al, be, ga):
    from mrec.record.model.box import FLAT_CELL
    flat = _flatness(al, be, ga)
    if flat < 0.5 * FLAT_CELL:
        with pytest.raises(RefusalError) as e:
            Box.from_dimensions(a, b, c, al, be, ga)
        assert e.value.kind == "bad_box"
        return
    if flat < 1e-6:                                   # near the threshold either answer is right
        return
    from ase.geometry import cellpar_to_cell
    from MDAnalysis.lib.mdamath import triclinic_vectors
    box = Box.from_dimensions(a, b, c, al, be, ga)
    np.testing.assert_allclose(box.dimensions, [a, b, c, al, be, ga], rtol=1e-9, atol=1e-7)
    # the row matrix is the tools' own: ASE in f64, MDAnalysis in its f32
    np.testing.assert_allclose(box.rows, cellpar_to_cell([a, b, c, al, be, ga]), rtol=1e-12, atol=1e-9 * max(a, b, c))
    np.testing.assert_allclose(box.rows, triclinic_vectors(np.array([a, b, c, al, be, ga], np.float32)),
                               rtol=2e-6, atol=2e-6 * max(a, b, c))
    # the lattice vector a is the first COLUMN of vectors
    assert box.vectors[0, 0] == a and box.vectors[1, 0] == 0 and box.vectors[2, 0] == 0


def test_orthorhombic_is_exact_and_refusals():
    box = Box.from_dimensions(10.0, 20.0, 30.0, 90, 90, 90)
    assert box.vectors.tobytes() == np.diag([10.0, 20.0, 30.0]).tobytes()
    assert box.dimensions.tolist() == [10.0, 20.0, 30.0, 90.0, 90.0, 90.0]
    assert Box.from_dimensions(10, 20, 30) == box
    assert Box(np.eye(3), defined=False).dimensions is None
    for bad in [(0, 1, 1, 90, 90, 90), (1, 1, 1, 0, 90, 90), (1, 1, 1, 180, 90, 90),
                (1, 1, 1, 90, 90, math.nan), (1, 1, 1, 10, 10, 170)]:
        with pytest.raises(RefusalError) as e:
            Box.from_dimensions(*bad)
        assert e.value.kind == "bad_box"
    with pytest.raises(RefusalError) as e:
        Box.from_rows(np.zeros((2, 3)))
    assert e.value.kind == "bad_box"
    assert Box.from_rows(np.eye(3, dtype=np.float32) * 2).vectors.dtype == np.float64


# -- (b) exact input conversions ---------------------------------------------------------------

def test_int64_res_id_array_is_accepted_like_the_list():
    listed = Frame({"atoms": {"res_id": [1, 2, 3]}})
    arr = Frame({"atoms": {"res_id": np.array([1, 2, 3], dtype=np.int64)}})
    assert arr == listed and arr.blocks["atoms"]["res_id"].dtype == np.uint64


@given(st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32]),
       st.lists(st.integers(-2**40, 2**40), min_size=1, max_size=20))
def test_integer_ids_convert_exactly_or_are_refused(dt, values):
    info = np.iinfo(dt)
    values = [min(max(v, int(info.min)), int(info.max)) for v in values]
    a = np.array(values, dtype=dt)
    if min(values) >= 0:
        f = Frame({"atoms": {"id": a}})
        assert f.blocks["atoms"]["id"].dtype == np.uint64
        assert f.blocks["atoms"]["id"].tolist() == values
    else:
        with pytest.raises(RefusalError) as e:
            Frame({"atoms": {"id": a}})
        assert e.value.kind == "canonical_dtype" and str(min(values)) in str(e.value)


@given(hnp.arrays(np.float32, st.integers(0, 20), elements=st.floats(width=32)))
def test_float32_positions_widen_exactly(x):
    f = Frame({"atoms": {"x": x}})
    got = f.blocks["atoms"]["x"]
    assert got.dtype == np.float64 and got.astype(np.float32).tobytes() == x.tobytes()


def test_declared_dtype_takes_exact_arrays_and_refuses_lossy(tmp_path):
    s = SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "q", "f64")
    s.declare_column("atoms", "k", "u32")
    with TrajectoryWriter.create(tmp_path / "t.mrec", s) as w:
        w.append({"atoms": {"q": np.array([0.5, 1.5], np.float32), "k": np.array([3, 4], np.int64)}})
        for bad, what in [({"q": np.zeros(2), "k": np.array([-1, 4])}, "'k'"),
                          ({"q": np.zeros(2), "k": np.array([2**32, 4])}, "'k'"),
                          ({"q": np.array([1, 0], np.int64), "k": np.zeros(2, np.uint32)}, "'q'"),   # a column keeps its kind
                          ({"q": np.zeros(2), "k": np.array([1.0, 4.0])}, "'k'")]:
            with pytest.raises(RefusalError) as e:
                w.append({"atoms": bad})
            assert e.value.kind == "declaration_mismatch" and what in str(e.value)
    f = TrajectoryReader(tmp_path / "t.mrec")[0]
    assert f.blocks["atoms"]["q"].tolist() == [0.5, 1.5] and f.blocks["atoms"]["k"].dtype == np.uint32


# -- (c) reader conveniences ---------------------------------------------------------------------

def _write(path, n=6, rows=4, fixed=False, box=True):
    s = SequenceSchema()
    s.declare_block("atoms", rows=rows, fixed=fixed)
    for c in ("x", "y", "z", "vx", "vy", "vz"):
        s.declare_column("atoms", c, "f64")
    s.declare_meta("pe", "f64")
    rng = np.random.default_rng(5)
    frames = []
    with TrajectoryWriter.create(path, s, flush_every=2) as w:
        for i in range(n):
            f = {"blocks": {"atoms": {c: rng.normal(size=rows) for c in ("x", "y", "z", "vx", "vy", "vz")}},
                 "meta": {"pe": float(i)}}
            if box:
                f["box"] = Box.from_dimensions(10 + i, 11, 12, 90, 90, 90)
            w.append(f, step=i * 10, time=i * 0.5)
            frames.append(f)
    return frames


def test_positions_and_fancy_indexing(tmp_path):
    p = tmp_path / "t.mrec"
    frames = _write(p)
    r = TrajectoryReader(p)
    want = np.stack([np.stack([f["blocks"]["atoms"][c] for c in "xyz"], axis=1) for f in frames])
    assert r.positions(2).tobytes() == want[2].tobytes() and r.positions(-1).shape == (4, 3)
    assert r[2].positions.tobytes() == want[2].tobytes()
    assert r[2].velocities.shape == (4, 3) and r[2].forces is None
    assert r.positions().tobytes() == want.tobytes()
    assert r.positions([4, 1, -1]).tobytes() == want[[4, 1, 5]].tobytes()
    mask = np.array([True, False, True, False, False, True])
    assert r.positions(mask).tobytes() == want[mask].tobytes()
    assert r.positions(slice(1, 5, 2)).tobytes() == want[1:5:2].tobytes()
    got = r[[1, 5]]
    assert [f.meta["pe"] for f in got] == [1.0, 5.0]
    assert [f.meta["pe"] for f in r[np.array([0, -1])]] == [0.0, 5.0]
    assert [f.meta["pe"] for f in r[mask]] == [0.0, 2.0, 5.0]
    assert r.column("atoms", "x", frames=[3, 0]).tobytes() == want[[3, 0], :, 0].tobytes()
    assert r.column("atoms", "x", frames=[]).shape[0] == 0
    with pytest.raises(IndexError):
        r[[0, 6]]
    with pytest.raises(IndexError):
        r[np.ones(3, bool)]
    with pytest.raises(TypeError):
        r[[0.5]]
    with pytest.raises(KeyError):
        r.positions(0, block="ions")


def test_contains_decodes_nothing(tmp_path, monkeypatch):
    p = tmp_path / "t.mrec"
    _write(p)
    r = TrajectoryReader(p)
    from mrec.zarr.array import Array
    monkeypatch.setattr(Array, "read", lambda *a, **k: (_ for _ in ()).throw(AssertionError("decoded")))
    assert 0 in r and 5 in r and -6 in r
    assert 6 not in r and -7 not in r and "0" not in r and True not in r and 1.0 not in r


def test_reprs_are_informative_and_never_dump_arrays(tmp_path):
    p = tmp_path / "t.mrec"
    _write(p, n=6, rows=4000)
    r = TrajectoryReader(p)
    text = repr(r)
    for part in ("6 frames", "steps 0..50", "time 0..2.5", "atoms (regular 4000 rows)", "x y z vx vy vz",
                 "cell changes 6 times", "meta [pe]"):
        assert part in text, (part, text)
    f = r[0]
    assert repr(f).startswith("Frame(atoms: 4000 rows [x y z vx vy vz], box=Box(a=10,") and len(repr(f)) < 300
    rec = mrec.read_record(p)
    assert "trajectory 6 frames" in repr(rec) and "sections [meta trajectory]" in repr(rec)
    w = TrajectoryWriter.open(p)
    assert repr(w).endswith("open, 6 frames (6 committed), blocks atoms [x y z vx vy vz])")
    w.close()
    assert "closed" in repr(w)
    assert repr(Box.from_dimensions(3, 4, 5, 90, 90, 120)) == "Box(a=3, b=4, c=5, alpha=90, beta=90, gamma=120)"
    for t in (text, repr(f), repr(rec), repr(w)):
        assert "array(" not in t and "[[" not in t


def test_fixed_rows_refused_at_append(tmp_path):
    p = tmp_path / "t.mrec"
    _write(p, n=2, rows=3, fixed=True)
    w = TrajectoryWriter.open(p)           # the pin survives a reopen (it is the structural_shape)
    with pytest.raises(RefusalError) as e:
        w.append({"atoms": {c: np.zeros(4) for c in ("x", "y", "z", "vx", "vy", "vz")}}, step=100)
    assert e.value.kind == "structural_shape_mismatch" and "'atoms'" in str(e.value) and "4 rows" in str(e.value)
    w.close()
    assert len(TrajectoryReader(p)) == 2
    with pytest.raises(RefusalError) as e:
        SequenceSchema().declare_block("atoms", fixed=True)
    assert e.value.kind == "declaration_mismatch"


# -- (d) restarts ---------------------------------------------------------------------------------

def _ragged_session(path, n, seed=3):
    s = SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_block("ions")
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_meta("pe", "f64")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        f = {"blocks": {"atoms": {"x": rng.normal(size=3)}}, "meta": {"pe": float(i)}}
        if i % 2 == 0:
            k = int(rng.integers(0, 4))
            f["blocks"]["ions"] = {"q": rng.normal(size=k)}
        if i % 3 == 0:
            f["box"] = Box.from_dimensions(10 + i, 10, 10)
        out.append((f, 5 + i * 7 if i < 4 else 5 + i * 7 + i, 0.25 * i))
    return s, out


def _frames_equal(a: TrajectoryReader, b: TrajectoryReader):
    assert len(a) == len(b) and a.steps.tolist() == b.steps.tolist()
    assert (a.times is None and b.times is None) or a.times.tobytes() == b.times.tobytes()
    for i in range(len(a)):
        assert a[i] == b[i], i


@pytest.mark.parametrize("cut", [0, 1, 3, 5, 8])
def test_truncate_after_step_then_append_reads_like_a_direct_run(tmp_path, cut):
    s, frames = _ragged_session(None, 10)
    p = tmp_path / "t.mrec"
    with TrajectoryWriter.create(p, s, flush_every=3) as w:
        for f, step, t in frames:
            w.append(f, step=step, time=t)
    last_kept = frames[cut - 1][1] if cut else frames[0][1] - 1
    s2, extra = _ragged_session(None, 4, seed=9)
    extra = [(f, last_kept + 1 + k, (frames[cut - 1][2] if cut else 0.0) + 1.0 + k) for k, (f, _s, _t) in enumerate(extra)]
    with TrajectoryWriter.open(p, truncate_after_step=last_kept + (3 if cut else 0)) as w:   # between two steps
        assert w.committed == cut and len(TrajectoryReader(p)) == cut
        for f, step, t in extra:
            w.append(f, step=step, time=t)
    direct = tmp_path / "d.mrec"
    with TrajectoryWriter.create(direct, s, flush_every=3) as w:
        for f, step, t in frames[:cut] + extra:
            w.append(f, step=step, time=t)
    _frames_equal(TrajectoryReader(p), TrajectoryReader(direct))
    from mrec.check.validate import validate
    assert validate(p, deep=True).ok, validate(p, deep=True).violations


def test_truncate_shrinks_arrays_and_is_a_noop_past_the_end(tmp_path):
    from mrec.zarr.array import read_node
    from mrec.zarr.stores.directory import DirectoryStore
    s, frames = _ragged_session(None, 10)
    p = tmp_path / "t.mrec"
    with TrajectoryWriter.create(p, s) as w:
        for f, step, t in frames:
            w.append(f, step=step, time=t)
    before = read_node(DirectoryStore(p), "trajectory/atoms/x").shape[0]
    with TrajectoryWriter.open(p, truncate_after_step=10**9) as w:     # nothing after it
        assert w.committed == 10
    assert read_node(DirectoryStore(p), "trajectory/atoms/x").shape[0] == before == 30
    with TrajectoryWriter.open(p, truncate_after_step=frames[3][1]) as w:
        assert w.committed == 4
    st = DirectoryStore(p)
    assert read_node(st, "trajectory/atoms/x").shape[0] == 12
    assert read_node(st, "trajectory/time").shape[0] == 4 if read_node(st, "trajectory/time") else True
    r = TrajectoryReader(p)
    assert len(r) == 4 and r.steps.tolist() == [f[1] for f in frames[:4]]
    for bad in ("3", 2.0, True):
        with pytest.raises(RefusalError) as e:
            TrajectoryWriter.open(p, truncate_after_step=bad)
        assert e.value.kind == "bad_step"
    TrajectoryWriter.open(p).close()          # the lock was not left behind


def test_crashcheck_truncation_every_cut(capsys):
    from test_crashcheck import _tool      # tools.crashcheck (spec_tests is on sys.path under pytest)
    mod = _tool()
    assert mod.main(["--truncate", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "truncation" in out and "violations 0" in out


def test_float32_meta_and_cell_from_md_tools_are_exact(tmp_path):
    """MD tools hand float32 energies and cells: both widen exactly (the tags and the cell are f64;
    the plain constructor keeps refusing a float32 matrix, as it builds the cells a reader reads)."""
    s = SequenceSchema()
    s.declare_block("atoms", rows=2)
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    s.declare_meta("pe", "f64")
    s.declare_meta("virial", "f64x6")
    e = np.float32(-123.456)
    rows = np.array([[10, 0, 0], [1, 11, 0], [0.5, 0.25, 12]], dtype=np.float32) * np.float32(1.1)
    with TrajectoryWriter.create(tmp_path / "t.mrec", s) as w:
        w.append({"blocks": {"atoms": {c: np.zeros(2, np.float32) for c in "xyz"}},
                  "box": Box.from_rows(rows), "meta": {"pe": e, "virial": np.arange(6, dtype=np.float32) / 3}})
    f = TrajectoryReader(tmp_path / "t.mrec")[0]
    assert f.meta["pe"] == np.float64(e) and f.meta["virial"].tobytes() == (np.arange(6, dtype=np.float32) / 3).astype(np.float64).tobytes()
    assert f.box.rows.tobytes() == rows.astype(np.float64).tobytes()
    with pytest.raises(RefusalError) as exc:
        Box(rows.T)
    assert exc.value.kind == "narrow_float" and "from_rows" in str(exc.value)


def test_a_stored_identifier_at_another_width_is_still_refused(tmp_path):
    """Exact conversion is for a producer's input only: a reader still refuses a stored int64
    ``res_id`` (the canonical identifiers are exactly u64 on disk)."""
    import json
    p = tmp_path / "r.mrec"
    mrec.write_record(p, meta={"creator": {"name": "t"}},
                      system={"blocks": {"atoms": {"res_id": np.array([1, 2], np.int64), "x": [0.0, 1.0]}}})
    assert mrec.read_record(p).system.blocks["atoms"]["res_id"].dtype == np.uint64
    zj = p / "system" / "atoms" / "res_id" / "zarr.json"
    doc = json.loads(zj.read_text())
    doc["data_type"] = "int64"
    doc["fill_value"] = 0
    zj.write_text(json.dumps(doc))
    with pytest.raises(RefusalError) as e:
        mrec.read_record(p)
    assert e.value.kind == "canonical_dtype" and "res_id" in str(e.value)
