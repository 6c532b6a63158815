"""Issue 28, parts 1 and 5: right-sized records by default from the MD surfaces (``mrec convert``, the
MDAnalysis writer, the ASE writer) on MDAnalysisTests' real files, exact to what the sources hold;
and the papercuts (progress, the writer found by extension, refusals, ``mrec info``, ``--help``, the
user guide, ``--select``, several inputs)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mrec

import MDAnalysis as mda                                   # noqa: E402
import MDAnalysisTests.datafiles as D                      # noqa: E402
import mrec.mdanalysis  # noqa: E402,F401 - registers the MREC format
from mrec.md.convert import convert  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KiB = 1024


def cli(*args, check=True):
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "mrec", *map(str, args)], capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"mrec {args}: exit {p.returncode}: {p.stderr}")
    return p


def universe(*files, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(*files, **kw)


def lanes(r, block: str, prefix: str, i: int) -> np.ndarray:
    cols = r.read_columns(i, [(block, prefix + c) for c in "xyz"])
    return np.stack([cols[(block, prefix + c)] for c in "xyz"], axis=1)


def codecs_of(path, array: str) -> list[str]:
    p = cli("info", path, "--json")
    import json
    for a in json.loads(p.stdout)["arrays"]:
        if a["path"] == array:
            return a["codecs"]
    raise AssertionError(f"{array} not in {path}")


# -- part 1: right-sized by default ---------------------------------------------------------------

def test_dcd_converts_to_at_most_the_dcd_bit_exact(tmp_path):
    out = tmp_path / "adk.mrec.zip"
    cli("convert", D.DCD, "--top", D.PSF, out)
    assert os.path.getsize(out) <= 1.0 * os.path.getsize(D.DCD), (os.path.getsize(out), os.path.getsize(D.DCD))
    assert "numcodecs.shuffle" in codecs_of(out, "trajectory/atoms/x") and "zstd" in codecs_of(out, "trajectory/atoms/x")
    u = universe(D.PSF, D.DCD)
    r = mrec.TrajectoryReader(out)
    assert len(r) == u.trajectory.n_frames == 98
    for ts in u.trajectory:
        assert r.positions(ts.frame).tobytes() == ts.positions.astype(np.float64).tobytes()


def test_trr_converts_to_at_most_the_trr_bit_exact(tmp_path):
    out = tmp_path / "cobro.mrec.zip"
    cli("convert", D.TRR_xvf, "--top", D.TPR_xvf, out)
    assert os.path.getsize(out) <= 1.0 * os.path.getsize(D.TRR_xvf), (os.path.getsize(out), os.path.getsize(D.TRR_xvf))
    u = universe(D.TPR_xvf, D.TRR_xvf)
    r = mrec.TrajectoryReader(out)
    assert len(r) == u.trajectory.n_frames
    for ts in u.trajectory:
        for prefix, want in (("", ts.positions), ("v", ts.velocities), ("f", ts.forces)):
            assert lanes(r, "atoms", prefix, ts.frame).tobytes() == want.astype(np.float64).tobytes(), prefix
    charges = mrec.read_record(out).system.blocks["atoms"]["charge"]
    assert charges.tobytes() == u.atoms.charges.astype(np.float64).tobytes()
    assert "zstd" in codecs_of(out, "system/atoms/charge")               # the topology's floats too


def xtc_bits_from_grid(stored: np.ndarray, prec: float) -> np.ndarray:
    """What MDAnalysis reads from an XTC of precision ``prec`` (nm^-1) whose integer is the grid point
    nearest ``stored`` (Å): libxdrfile's float(i) * (1/prec) in float32, then nm -> Å in float32."""
    i = np.rint(stored * prec / 10.0).astype(np.float32)
    nm = (i * np.float32(1.0 / prec)).astype(np.float32)
    return (nm * np.float32(10.0)).astype(np.float32)


def test_xtc_declares_its_precision_and_keeps_its_integers(tmp_path):
    """An XTC holds integers on its grid (precision 1000 nm^-1 = 0.01 Å): the record declares that
    precision, every stored coordinate is within half its quantum of MDAnalysis' read, and rounding to
    the declared grid gives back MDAnalysis' float32 bits exactly.  Size: the issue's <= 1.1 x the XTC
    is not reachable with the chapter's codecs (docs/performance.md, issue 28); what is held is
    <= 1.6 x, topology included."""
    out = tmp_path / "adk.mrec.zip"
    cli("convert", D.XTC, "--top", D.TPR, out)
    r = mrec.TrajectoryReader(out)
    assert r.schema.blocks["atoms"].columns["x"].precision == pytest.approx(0.01)
    assert os.path.getsize(out) <= 1.6 * os.path.getsize(D.XTC), (os.path.getsize(out), os.path.getsize(D.XTC))
    u = universe(D.TPR, D.XTC)
    q = 2.0 ** -7                                        # the quantum of 0.01 Å
    for ts in u.trajectory:
        got = r.positions(ts.frame)
        assert np.abs(got - ts.positions).max() <= q / 2 + 1e-5
        assert xtc_bits_from_grid(got, 1000.0).tobytes() == ts.positions.tobytes()


def test_tiny_lammps_dump_is_at_most_16_kib(tmp_path):
    out = tmp_path / "vf.mrec.zip"
    cli("convert", D.LAMMPSDUMP_image_vf, out, "--format", "LAMMPSDUMP")
    assert os.path.getsize(out) <= 16 * KiB, os.path.getsize(out)
    u = universe(D.LAMMPSDUMP_image_vf, format="LAMMPSDUMP")
    r = mrec.TrajectoryReader(out)
    assert len(r) == u.trajectory.n_frames == 3
    for ts in u.trajectory:
        assert r.positions(ts.frame).tobytes() == ts.positions.astype(np.float64).tobytes()
        assert lanes(r, "atoms", "v", ts.frame).tobytes() == ts.velocities.astype(np.float64).tobytes()


def four_atom_images(n=3):
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    rng = np.random.default_rng(28)
    out = []
    for _ in range(n):
        a = Atoms("H2O2", positions=rng.uniform(0, 5, (4, 3)), cell=np.eye(3) * 6.0, pbc=True)
        a.calc = SinglePointCalculator(a, energy=float(rng.normal()), forces=rng.normal(size=(4, 3)))
        out.append(a)
    return out


@pytest.fixture
def ase_registered():
    from ase.io.formats import define_io_format, ioformats
    if "mrec" not in ioformats:
        from mrec.ase_io import mrec_format
        define_io_format("mrec", **mrec_format._asdict(), external=True)


def test_ase_write_of_three_tiny_images_is_at_most_16_kib(tmp_path, ase_registered):
    import ase.io
    images = four_atom_images()
    out = tmp_path / "tiny.mrec.zip"
    ase.io.write(out, images)
    assert os.path.getsize(out) <= 16 * KiB, os.path.getsize(out)
    back = ase.io.read(out, index=":")
    assert len(back) == 3
    for a, b in zip(images, back):
        assert a.positions.tobytes() == b.positions.tobytes()
        assert a.get_forces().tobytes() == b.get_forces().tobytes()
        assert a.get_potential_energy() == b.get_potential_energy()


def test_mdanalysis_writer_is_right_sized_and_exact(tmp_path):
    u = universe(D.PSF, D.DCD)
    out = tmp_path / "w.mrec.zip"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mda.Writer(str(out), u.atoms.n_atoms, format="MREC") as w:
            for _ts in u.trajectory:
                w.write(u.atoms)
    assert os.path.getsize(out) <= 1.0 * os.path.getsize(D.DCD), os.path.getsize(out)
    r = mrec.TrajectoryReader(out)
    for ts in u.trajectory[::17]:
        assert r.positions(ts.frame).tobytes() == ts.positions.astype(np.float64).tobytes()
    small = tmp_path / "three.mrec.zip"                  # three frames of 3341 atoms: no 64 KiB indexes
    with mda.Writer(str(small), u.atoms.n_atoms, format="MREC") as w:
        for _ts in u.trajectory[:3]:
            w.write(u.atoms)
    assert os.path.getsize(small) <= 3 * 3341 * 12 + 200 * KiB, os.path.getsize(small)


def test_compression_none_still_means_none(tmp_path):
    out = tmp_path / "plain.mrec"
    cli("convert", D.DCD, "--top", D.PSF, "--frames", "0:2", "--compression", "none", out)
    assert codecs_of(out, "trajectory/atoms/x")[1:] == ["bytes", "crc32c"]
    assert mrec.TrajectoryReader(out).positions(1).tobytes() == \
        universe(D.PSF, D.DCD).trajectory[1].positions.astype(np.float64).tobytes()
