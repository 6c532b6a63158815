"""Issue 14, part 4: the MDAnalysis Reader, topology parser and Writer for mrec records."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import MDAnalysis as mda
import MDAnalysisTests.datafiles as D
from MDAnalysis.analysis import rms

import mrec
import mrec.md.mdanalysis  # noqa: F401 - registers the MREC format
from mrec.md.convert import convert
from mdtools import universe  # noqa: E402



@pytest.fixture(scope="module")
def xtc_copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("xtc") / "adk.mrec.zip"
    convert(D.XTC, out, top=D.TPR)
    return out


@pytest.fixture(scope="module")
def trr_copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("trr") / "cobro.mrec"
    convert(D.TRR_xvf, out, top=D.TPR_xvf)
    return out


def test_universe_from_the_record_alone_and_with_a_topology(xtc_copy):
    src = universe(D.TPR, D.XTC)
    for u in (universe(xtc_copy), universe(D.TPR, xtc_copy)):
        assert type(u.trajectory).__name__ == "MRECReader" and u.trajectory.format == "MREC"
        assert len(u.atoms) == len(src.atoms) and u.trajectory.n_frames == src.trajectory.n_frames
        assert u.trajectory.dt == pytest.approx(src.trajectory.dt)
        for i in (7, 2, 9, 0):                                   # random access
            ts, sts = u.trajectory[i], src.trajectory[i]
            assert ts.frame == i and ts.time == pytest.approx(sts.time) and ts.data["step"] == sts.data["step"]
            assert np.max(np.abs(ts.positions - sts.positions)) <= 0.005 + 1e-5
            np.testing.assert_allclose(ts.dimensions, sts.dimensions, rtol=1e-6)
    u = universe(xtc_copy)                                         # topology from system/
    assert list(u.atoms.names) == list(src.atoms.names) and list(u.atoms.resnames) == list(src.atoms.resnames)
    assert u.atoms.resids.tolist() == src.atoms.resids.tolist() and len(u.residues) == len(src.residues)
    assert np.array_equal(u.atoms.masses, src.atoms.masses) and len(u.bonds) == len(src.bonds)
    assert np.array_equal(np.sort(u.bonds.indices, axis=0), np.sort(src.bonds.indices, axis=0))
    assert list(u.atoms.elements) == list(src.atoms.elements)


def test_rmsd_and_rgyr_equal_mdanalysis_on_the_source(xtc_copy):
    src = universe(D.TPR, D.XTC)
    u = universe(xtc_copy)
    p = 0.01
    rg_src = [src.select_atoms("protein").radius_of_gyration() for _ in src.trajectory]
    rg = [u.select_atoms("protein").radius_of_gyration() for _ in u.trajectory]
    np.testing.assert_allclose(rg, rg_src, atol=p / 2)
    a = rms.RMSD(src, select="protein and name CA").run().results.rmsd[:, 2]
    b = rms.RMSD(u, select="protein and name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(b, a, atol=p)          # each coordinate within p/2 of the source's


def test_velocities_forces_and_units(trr_copy):
    src = universe(D.TPR_xvf, D.TRR_xvf)
    u = universe(D.TPR_xvf, trr_copy)
    assert u.trajectory.ts.has_velocities and u.trajectory.ts.has_forces
    for ts, sts in zip(u.trajectory, src.trajectory):
        assert np.array_equal(ts.positions, sts.positions)
        assert np.array_equal(ts.velocities, sts.velocities) and np.array_equal(ts.forces, sts.forces)


def test_readers_pickle(xtc_copy):
    u = universe(xtc_copy)
    u.trajectory[4]
    u2 = pickle.loads(pickle.dumps(u))
    assert u2.trajectory.ts.frame == 4 and np.array_equal(u2.atoms.positions, u.atoms.positions)
    u2.trajectory[8]
    u.trajectory[8]
    assert np.array_equal(u2.atoms.positions, u.atoms.positions)
    r = pickle.loads(pickle.dumps(u.trajectory))
    assert r.n_frames == 10 and np.array_equal(r[3].positions, u.trajectory[3].positions)


def test_chainreader_over_two_records(tmp_path):
    a, b = tmp_path / "a.mrec", tmp_path / "b.mrec.zip"
    convert(D.DCD, a, top=D.PSF, frames="0:40")
    convert(D.DCD, b, top=D.PSF, frames="40:98")
    u = universe(D.PSF, [a, b])
    src = universe(D.PSF, D.DCD)
    assert type(u.trajectory).__name__ == "ChainReader" and u.trajectory.n_frames == 98
    for i in (0, 39, 40, 97, 55):
        assert np.array_equal(u.trajectory[i].positions, src.trajectory[i].positions)


def test_changing_atom_count_is_refused_naming_the_frame(tmp_path):
    s = mrec.SequenceSchema()
    s.declare_block("atoms")
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    p = tmp_path / "vary.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        for n in (3, 3, 3, 4, 3):
            w.append({"atoms": {c: np.zeros(n) for c in "xyz"}})
    with pytest.raises(mrec.MrecError) as e:       # a RecordRefusal: MDAnalysis rewraps a ValueError (issue 27)
        universe(p)
    assert e.value.kind == "row_count_mismatch" and "frame 3 (3 -> 4 atoms)" in str(e.value)
    assert isinstance(e.value.__cause__, mrec.RefusalError)


def test_writer_round_trip(tmp_path):
    src = universe(D.PSF, D.DCD)
    for name in ("w.mrec", "w2.mrec.zip"):
        out = tmp_path / name
        # a .mrec name is the format; MDAnalysis picks writers by the last extension: zip needs format=
        kw = {"format": "MREC"} if name.endswith(".zip") else {}
        with mda.Writer(str(out), src.atoms.n_atoms, **kw) as w:
            for ts in src.trajectory[:6]:
                w.write(src.atoms)
        u = universe(out)
        assert u.trajectory.n_frames == 6 and list(u.atoms.names) == list(src.atoms.names)
        assert len(u.bonds) == len(src.bonds)
        for ts in u.trajectory:
            assert np.array_equal(ts.positions, src.trajectory[ts.frame].positions)
            assert ts.time == pytest.approx(src.trajectory[ts.frame].time)
    with pytest.raises(mrec.MrecError):
        mda.Writer(str(tmp_path / "w.mrec"), 3, format="MREC")          # exists
    ca = src.select_atoms("name CA")                                    # a subset: no relations
    with mda.Writer(str(tmp_path / "ca.mrec"), len(ca)) as w:
        for ts in src.trajectory[:2]:
            w.write(ca)
    u = universe(tmp_path / "ca.mrec")
    assert len(u.atoms) == len(ca) and u.trajectory.n_frames == 2
    assert np.array_equal(u.trajectory[1].positions, src.trajectory[1].positions[ca.ix])


def test_stated_units_convert_to_angstrom_and_ps(tmp_path):
    """A record stating nm and fs reads in MDAnalysis' Å and ps (positions, cell, time, velocities)."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    for c in ("x", "y", "z", "vx", "vy", "vz"):
        s.declare_column("atoms", c, "f64")
    p = tmp_path / "nm.mrec"
    mrec.write_record(p, meta={"creator": {"name": "t"}},
                      system={"blocks": {"atoms": {"element": ["O", "H"]}},
                              "meta": {"units": {"length": "nm", "time": "fs"}}})
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(3):
            w.append({"blocks": {"atoms": {"x": [0.1, 0.2], "y": [0.0, 0.5], "z": [1.0, 0.0],
                                           "vx": [0.01, 0.0], "vy": [0.0, 0.0], "vz": [0.0, 0.0]}},
                      "box": mrec.Box.from_dimensions(3.0, 3.0, 3.0)}, step=i, time=500.0 * i)
    u = universe(p)
    np.testing.assert_allclose(u.atoms.positions, [[1.0, 0.0, 10.0], [2.0, 5.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(u.dimensions, [30, 30, 30, 90, 90, 90])
    assert u.trajectory[2].time == pytest.approx(1.0) and u.trajectory.dt == pytest.approx(0.5)
    np.testing.assert_allclose(u.trajectory[0].velocities[0], [100.0, 0.0, 0.0], rtol=1e-6)  # 0.01 nm/fs
