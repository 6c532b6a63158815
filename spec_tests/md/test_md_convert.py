"""Issue 14, part 3: ``mrec convert`` on MDAnalysisTests' real files (run as the CLI, checked
against MDAnalysis and ASE reading the sources themselves)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mrec

import MDAnalysis as mda                                   # noqa: E402
import MDAnalysisTests.datafiles as D                      # noqa: E402
from mdtools import cli, universe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))




def positions(r, i):
    return r.positions(i)


def test_dcd_psf_protein_exact(tmp_path):
    out = tmp_path / "adk.mrec.zip"
    p = cli("convert", D.DCD, out, "--top", D.PSF, "--json")
    doc = json.loads(p.stdout)
    assert p.stderr == ""                       # no MDAnalysis warnings, no bar in a pipe
    u = universe(D.PSF, D.DCD)
    assert doc["frames"] == u.trajectory.n_frames == 98 and doc["atoms"] == len(u.atoms)
    rec = mrec.read_record(out)
    r = rec.trajectory
    assert len(r) == u.trajectory.n_frames
    for ts in u.trajectory:
        got = r.positions(ts.frame)
        assert got.shape == (len(u.atoms), 3)
        assert got.tobytes() == ts.positions.astype(np.float64).tobytes()     # float32 widened exactly
        assert abs(r.times[ts.frame] - ts.time) < 1e-9
    atoms = rec.system.blocks["atoms"]
    assert list(atoms["name"]) == list(u.atoms.names) and list(atoms["type"]) == list(u.atoms.types)
    assert list(atoms["res_name"]) == list(u.atoms.resnames)
    assert atoms["res_id"].dtype == np.uint64 and atoms["res_id"].tolist() == u.atoms.resids.tolist()
    assert atoms["mass"].tobytes() == u.atoms.masses.astype(np.float64).tobytes()
    assert atoms["charge"].tobytes() == u.atoms.charges.astype(np.float64).tobytes()
    for block, group, ends in (("bonds", u.atoms.bonds, "ij"), ("angles", u.atoms.angles, "ijk"),
                               ("dihedrals", u.atoms.dihedrals, "ijkl")):
        got = np.stack([rec.system.blocks[block][f"atom{e}"] for e in ends], axis=1)
        assert got.dtype == np.uint64 and got.tolist() == group.indices.tolist()
    assert rec.system.meta["units"]["length"] == "angstrom" and rec.system.meta["units"]["time"] == "ps"


def test_xtc_tpr_solvated_within_half_the_precision(tmp_path):
    out = tmp_path / "adk.mrec"
    cli("convert", D.XTC, out, "--top", D.TPR, "--frames", "1:9:2")
    u = universe(D.TPR, D.XTC)
    rec = mrec.read_record(out)
    r = rec.trajectory
    p = r.schema.blocks["atoms"].columns["x"].precision
    assert p == pytest.approx(0.01)                       # the XTC's own grid (precision 1000 in nm)
    frames = list(range(1, 9, 2))
    assert len(r) == len(frames)
    for k, i in enumerate(frames):
        ts = u.trajectory[i]
        assert np.max(np.abs(r.positions(k) - ts.positions)) <= p / 2
        assert r.steps[k] == ts.data["step"] and abs(r.times[k] - ts.time) < 1e-6
        np.testing.assert_allclose(r[k].box.dimensions, ts.dimensions, rtol=1e-6)
    atoms = rec.system.blocks["atoms"]
    assert list(atoms["element"]) == list(u.atoms.elements) and list(atoms["chain"]) == list(u.atoms.chainIDs)
    assert len(atoms["name"]) == len(u.atoms) == 47681
    from mrec.check.validate import validate
    report = validate(out, deep=True)                   # what convert writes is a conforming record
    assert report.ok and not report.warnings, report.violations + report.warnings


def test_explicit_precision_and_compact_profile(tmp_path):
    out = tmp_path / "c.mrec"
    cli("convert", D.XTC, out, "--top", D.TPR, "--precision", "0.05", "--profile", "compact",
        "--compression", "zstd:5", "--frames", "0:3")
    r = mrec.TrajectoryReader(out)
    u = universe(D.TPR, D.XTC)
    assert r.schema.blocks["atoms"].columns["x"].precision == 0.05
    for i in range(3):
        assert np.max(np.abs(r.positions(i) - u.trajectory[i].positions)) <= 0.025 + 1e-5
    p = cli("convert", D.XTC, tmp_path / "bad.mrec", "--precision", "-1", check=False)
    assert p.returncode == 2 and "precision" in p.stderr and not (tmp_path / "bad.mrec").exists()


def test_trr_velocities_and_forces(tmp_path):
    out = tmp_path / "cobro.mrec.zip"
    cli("convert", D.TRR_xvf, out, "--top", D.TPR_xvf)
    u = universe(D.TPR_xvf, D.TRR_xvf)
    r = mrec.TrajectoryReader(out)
    assert len(r) == u.trajectory.n_frames
    for ts in u.trajectory:
        f = r[ts.frame]
        assert f.positions.tobytes() == ts.positions.astype(np.float64).tobytes()
        assert f.velocities.tobytes() == ts.velocities.astype(np.float64).tobytes()
        assert f.forces.tobytes() == ts.forces.astype(np.float64).tobytes()


def test_lammps_dump(tmp_path):
    out = tmp_path / "wat.mrec"
    cli("convert", D.LAMMPSDUMP, out, "--format", "LAMMPSDUMP")
    u = universe(D.LAMMPSDUMP, format="LAMMPSDUMP")
    r = mrec.TrajectoryReader(out)
    assert len(r) == u.trajectory.n_frames
    for ts in u.trajectory:
        # mrec reads the dump itself (issue 28): the text's binary64 Cartesian positions, the box's lower
        # corner as the cell's origin; MDAnalysis keeps float32 and subtracts the corner from these
        # scaled positions (which never had it): test_md_nothing_dropped checks every dump of the suite
        got = r.positions(ts.frame) - 2 * r[ts.frame].box.origin
        np.testing.assert_allclose(got, ts.positions, rtol=2e-7, atol=2e-6)
        np.testing.assert_allclose(r[ts.frame].box.dimensions, ts.dimensions, rtol=1e-6)
    assert r.steps.tolist() == [ts.data["step"] for ts in u.trajectory] if "step" in u.trajectory.ts.data else True


def test_trz_per_frame_energies(tmp_path):
    out = tmp_path / "trz.mrec"
    cli("convert", D.TRZ, out, "--top", D.TRZ_psf)
    u = universe(D.TRZ_psf, D.TRZ)
    r = mrec.TrajectoryReader(out)
    assert set(r.schema.meta) == {"total_energy", "potential_energy", "kinetic_energy"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ts in u.trajectory:
            f = r[ts.frame]
            for k in r.schema.meta:
                assert f.meta[k] == float(ts.data[k][0])
            assert r.positions(ts.frame).tobytes() == ts.positions.astype(np.float64).tobytes()


def _varying_extxyz(path):
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.io import write
    rng = np.random.default_rng(2)
    images = []
    for k, n in enumerate([3, 5, 5, 2, 7]):
        a = Atoms(symbols=list("OHCNS"[: min(n, 5)]) + ["H"] * max(0, n - 5), positions=rng.uniform(0, 8, (n, 3)),
                  cell=np.diag([9.0, 9.5, 10.0]) + 0.3 * np.triu(np.ones((3, 3)), 1), pbc=True)
        a.calc = SinglePointCalculator(a, energy=-1.5 * k, forces=rng.normal(size=(n, 3)))
        images.append(a)
    write(str(path), images, format="extxyz")
    return images


def test_extxyz_with_changing_atom_counts_round_trip(tmp_path):
    src = tmp_path / "vary.extxyz"
    images = _varying_extxyz(src)
    out = tmp_path / "vary.mrec.zip"
    doc = json.loads(cli("convert", src, out, "--json").stdout)
    assert doc["frames"] == 5 and doc["atoms"] == [2, 3, 5, 7]
    r = mrec.TrajectoryReader(out)
    from mrec.check.validate import validate
    assert validate(out, deep=True).ok
    from ase.io import read
    back = read(str(src), index=":")
    for i, a in enumerate(back):
        f = r[i]
        assert f.counts["atoms"] == len(a)
        assert f.positions.tobytes() == a.positions.tobytes()
        assert list(f.blocks["atoms"]["element"]) == a.get_chemical_symbols()
        assert f.forces.tobytes() == a.get_forces().tobytes() and f.meta["energy"] == a.get_potential_energy()
        assert np.array_equal(f.box.rows, a.cell[:]) and f.box.boundary.all()
    # and back out: extxyz keeps every count, ASE reads it
    cli("convert", out, tmp_path / "again.extxyz")
    again = read(str(tmp_path / "again.extxyz"), index=":")
    assert [len(a) for a in again] == [len(a) for a in images]
    for a, b in zip(again, images):
        np.testing.assert_allclose(a.positions, b.positions, atol=1e-9)
        np.testing.assert_allclose(a.get_forces(), b.get_forces(), atol=1e-9)
        assert a.get_potential_energy() == b.get_potential_energy()
    # an XTC holds one atom count: refused, naming the first frame where it changes
    p = cli("convert", out, tmp_path / "x.xtc", check=False)
    assert p.returncode == 2 and "atom count changes at frame 1 (3 -> 5 atoms)" in p.stderr and "extxyz" in p.stderr
    assert not (tmp_path / "x.xtc").exists() and not [e for e in os.listdir(tmp_path) if "mrec-partial" in e]


def test_back_out_to_xtc_dcd_pdb(tmp_path):
    rec = tmp_path / "adk.mrec.zip"
    cli("convert", D.XTC, rec, "--top", D.TPR, "--frames", "0:4")
    r = mrec.TrajectoryReader(rec)
    cli("convert", rec, tmp_path / "out.xtc")
    u = universe(D.TPR, tmp_path / "out.xtc")
    assert u.trajectory.n_frames == 4
    for ts in u.trajectory:
        assert np.max(np.abs(ts.positions - r.positions(ts.frame))) <= 0.01
        np.testing.assert_allclose(ts.dimensions, r[ts.frame].box.dimensions, rtol=1e-5)
        assert abs(ts.time - r.times[ts.frame]) < 1e-3
    dcd = tmp_path / "adk.mrec"
    cli("convert", D.DCD, dcd, "--top", D.PSF, "--frames", "0:5")
    cli("convert", dcd, tmp_path / "out.dcd")
    u = universe(D.PSF, tmp_path / "out.dcd")
    r = mrec.TrajectoryReader(dcd)
    assert u.trajectory.n_frames == 5
    for ts in u.trajectory:
        assert ts.positions.astype(np.float64).tobytes() == r.positions(ts.frame).tobytes()
    cli("convert", dcd, tmp_path / "rev.dcd", "--frames", "::-2")            # any slice, reversed too
    rev = universe(D.PSF, tmp_path / "rev.dcd")
    assert rev.trajectory.n_frames == 3
    assert np.array_equal(rev.trajectory[0].positions, r.positions(4).astype(np.float32))
    cli("convert", dcd, tmp_path / "out.gro", "--frames", "0:1")              # topology reaches the writer
    g = universe(tmp_path / "out.gro")
    src = universe(D.PSF, D.DCD)
    assert list(g.atoms.names) == list(src.atoms.names) and list(g.atoms.resnames) == list(src.atoms.resnames)
    cli("convert", dcd, tmp_path / "out.pdb", "--frames", "0:2")
    u = universe(tmp_path / "out.pdb")
    src = universe(D.PSF, D.DCD)
    assert u.trajectory.n_frames == 2 and list(u.atoms.names) == list(src.atoms.names)
    assert list(u.atoms.resnames) == list(src.atoms.resnames)
    np.testing.assert_allclose(u.trajectory[1].positions, r.positions(1), atol=6e-4)


def test_progress_bar_json_and_refusals(tmp_path):
    out = tmp_path / "p.mrec"
    p = cli("convert", D.DCD, out, "--top", D.PSF, "--frames", "0:20", "--progress")
    assert "frames/s" in p.stderr and "ETA" in p.stderr and "20/20 frames" in p.stderr
    assert "20 frames, 3341 atoms" in p.stdout
    p = cli("convert", D.DCD, out, "--top", D.PSF, check=False)
    assert p.returncode == 2 and "--overwrite" in p.stderr and p.stderr.count("\n") == 1
    cli("convert", D.DCD, out, "--top", D.PSF, "--frames", "0:3", "--overwrite", "--no-progress")
    assert len(mrec.TrajectoryReader(out)) == 3
    p = cli("convert", tmp_path / "missing.xtc", tmp_path / "m.mrec", check=False)
    assert p.returncode == 2 and "no such file" in p.stderr
    p = cli("convert", D.DCD, tmp_path / "plain.dcd", check=False)
    assert p.returncode == 2 and "*.mrec" in p.stderr


def test_missing_extra_names_it(tmp_path):
    code = ("import sys; sys.modules['MDAnalysis'] = None; sys.modules['ase'] = None\n"
            "from mrec.cli import main\n"
            f"sys.exit(main(['convert', {str(D.DCD)!r}, {str(tmp_path / 'x.mrec')!r}, '--top', {str(D.PSF)!r}]))")
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "pip install 'mrec[mdanalysis]'" in p.stderr and "Traceback" not in p.stderr
    from mrec.md import MissingExtraError
    assert issubclass(MissingExtraError, mrec.MrecError)


def test_conversion_streams_in_bounded_memory(tmp_path):
    """100 frames of 20000 atoms (48 MB as f64) convert with a peak far below the trajectory: frames
    stream one at a time and the writer's buffer is bounded (about 4 MiB of rows)."""
    import tracemalloc
    from mrec.md.convert import convert
    n, frames = 20000, 100
    src = tmp_path / "big.dcd"
    u = mda.Universe.empty(n, trajectory=True)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mda.Writer(str(src), n) as w:
            for _ in range(frames):
                u.atoms.positions = rng.uniform(0, 50, (n, 3)).astype(np.float32)
                u.dimensions = [50, 50, 50, 90, 90, 90]
                w.write(u.atoms)
    tracemalloc.start()
    try:
        res = convert(src, tmp_path / "big.mrec")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    total = frames * n * 3 * 8
    assert res.frames == frames and peak < 0.4 * total, (peak, total)
    r = mrec.TrajectoryReader(tmp_path / "big.mrec")
    assert r.positions(frames - 1).astype(np.float32).tobytes() == u.atoms.positions.tobytes()


def test_unreadable_inputs_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.xyz"
    bad.write_text("garbage\n")
    cases = [(D.XTC, ["--top", D.PSF], "don't have the same number of atoms"),    # 3341-atom PSF, 47681-atom XTC
             (D.PSF, [], "no coordinates"), (bad, [], "ASE cannot read it")]
    for k, (src, extra, words) in enumerate(cases):
        out = tmp_path / f"o{k}.mrec"
        p = cli("convert", src, out, *extra, check=False)
        assert p.returncode == 2 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr
        assert not out.exists()


def test_a_failed_overwrite_keeps_the_old_output(tmp_path):
    out = tmp_path / "keep.mrec.zip"
    cli("convert", D.DCD, out, "--top", D.PSF, "--frames", "0:2")
    bad = tmp_path / "bad.extxyz"
    bad.write_text("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\n")          # one atom line short
    p = cli("convert", bad, out, "--overwrite", check=False)
    assert p.returncode == 2
    assert len(mrec.TrajectoryReader(out)) == 2                                # the old record is intact
    assert sorted(os.listdir(tmp_path)) == ["bad.extxyz", "keep.mrec.zip"]     # no temporary left behind
    cli("convert", D.DCD, out, "--top", D.PSF, "--frames", "0:3", "--overwrite")
    assert len(mrec.TrajectoryReader(out)) == 3 and sorted(os.listdir(tmp_path)) == ["bad.extxyz", "keep.mrec.zip"]
    cli("convert", out, tmp_path / "o.xtc")
    p = cli("convert", out, tmp_path / "o.xtc", "--frames", "0:99:50", "--overwrite")
    assert universe(D.PSF, tmp_path / "o.xtc").trajectory.n_frames == 1
