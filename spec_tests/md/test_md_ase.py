"""Issue 14, part 5: the ASE io plugin (ase.io.read / ase.io.write of .mrec and .mrec.zip)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ase.io
from ase import Atoms
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io.formats import ioformats

import mrec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True, scope="module")
def registered():
    """What ASE does with mrec's entry point once mrec is installed (test_entry_point checks that
    path itself): define the external format from ``mrec.ase_io.mrec_format``."""
    if "mrec" not in ioformats:
        from ase.io.formats import define_io_format
        from mrec.md.ase_io import mrec_format
        define_io_format("mrec", **mrec_format._asdict(), external=True)
    yield


def images(seed=4, counts=(4, 6, 6, 3, 8), pbc=(True, True, False)):
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(counts):
        a = Atoms(numbers=rng.integers(1, 30, n), positions=rng.uniform(-2, 9, (n, 3)),
                  cell=[[9.0, 0.0, 0.0], [1.5, 9.5, 0.0], [0.5, -0.7, 10.0 + k]], pbc=pbc)
        a.set_velocities(rng.normal(size=(n, 3)) * 0.05)
        a.set_tags(rng.integers(0, 5, n))
        a.set_initial_charges(rng.normal(size=n))
        a.calc = SinglePointCalculator(a, energy=-3.25 * k - 0.1, forces=rng.normal(size=(n, 3)),
                                       stress=rng.normal(size=6))
        out.append(a)
    return out


def same(a: Atoms, b: Atoms, *, vel_tol=1e-12):
    assert len(a) == len(b)
    assert a.positions.tobytes() == b.positions.tobytes()
    assert a.numbers.tolist() == b.numbers.tolist()
    assert np.array_equal(a.cell[:], b.cell[:]) and a.pbc.tolist() == b.pbc.tolist()
    np.testing.assert_allclose(a.get_velocities(), b.get_velocities(), rtol=vel_tol, atol=1e-15)
    assert a.get_tags().tolist() == b.get_tags().tolist()
    assert a.get_initial_charges().tobytes() == b.get_initial_charges().tobytes()
    assert a.get_potential_energy() == b.get_potential_energy()
    assert a.get_forces().tobytes() == b.get_forces().tobytes()
    assert a.get_stress().tobytes() == b.get_stress().tobytes()


@pytest.mark.parametrize("name", ["run.mrec.zip", "run.mrec"])
def test_round_trip_with_changing_atom_counts(tmp_path, name):
    imgs = images()
    path = str(tmp_path / name)
    ase.io.write(path, imgs)
    kw = {"format": "mrec"} if name.endswith(".mrec") else {}    # ASE takes a directory for its bundle format
    back = ase.io.read(path, index=":", **kw)
    assert [len(a) for a in back] == [4, 6, 6, 3, 8]
    for a, b in zip(back, imgs):
        same(a, b)
    last = ase.io.read(path, **kw)                       # default: the last image
    same(last, imgs[-1])
    sel = ase.io.read(path, index="1::2", **kw)
    assert [len(a) for a in sel] == [6, 3]
    r = mrec.TrajectoryReader(path)
    assert len(r) == 5 and r[3].counts["atoms"] == 3 and r[0].box.boundary.tolist() == [True, True, False]
    # the record states its units, and the cell convention is the Box's: rows are ASE's cell
    assert mrec.read_record(path).meta["units"]["energy"] == "eV"
    assert np.array_equal(r[2].box.rows, imgs[2].cell[:])


def test_write_replaces_a_record_but_nothing_else(tmp_path):
    path = str(tmp_path / "x.mrec.zip")
    ase.io.write(path, images(counts=(2, 3)))
    ase.io.write(path, images(seed=9, counts=(5,)))
    assert [len(a) for a in ase.io.read(path, index=":")] == [5]
    other = tmp_path / "y.mrec"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(mrec.MrecError):        # an existing directory is ASE's bundle unless format= says
        ase.io.write(str(other), images(counts=(2,)), format="mrec")
    assert (other / "keep.txt").read_text() == "mine"


def test_plain_images_and_refusals(tmp_path):
    plain = [Atoms("H2O", positions=[[0, 0, 0], [0, 0, 1], [0, 1, 0]]), Atoms("CO2", positions=np.eye(3))]
    path = str(tmp_path / "plain.mrec.zip")
    ase.io.write(path, plain)
    back = ase.io.read(path, index=":")
    assert [a.get_chemical_formula() for a in back] == ["H2O", "CO2"] and back[0].calc is None
    assert not back[0].pbc.any() and not back[0].cell.any()
    mixed = images(counts=(2,)) + [Atoms("H", positions=[[0, 0, 0]])]
    mixed[1].calc = SinglePointCalculator(mixed[1], energy=1.0)
    with pytest.raises(mrec.MrecError):
        ase.io.write(str(tmp_path / "m.mrec"), mixed)
    assert not os.path.exists(tmp_path / "m.mrec")


def test_reads_a_converted_md_record_in_ase_units(tmp_path):
    """A record written from an MD engine (kJ/mol, Å/ps) reads in ASE's eV and Å/fs units."""
    import ase.units as u
    import MDAnalysisTests.datafiles as D
    from mrec.md.convert import convert
    out = tmp_path / "cobro.mrec.zip"
    convert(D.TRR_xvf, out, top=D.TPR_xvf, frames="0:1")
    a = ase.io.read(str(out))
    f = mrec.TrajectoryReader(out)[0]
    np.testing.assert_allclose(a.get_forces(), f.forces * u.kJ / u.mol, rtol=1e-12)
    heavy = a.get_masses() > 0                 # ASE keeps momenta: a massless virtual site has no velocity
    with np.errstate(invalid="ignore"):
        v = a.get_velocities()
    assert heavy.sum() > 0.5 * len(a)
    np.testing.assert_allclose((v * 1000 * u.fs)[heavy], f.velocities[heavy], rtol=1e-12)
    assert a.get_chemical_symbols()[:3] == [str(s) for s in mrec.read_record(out).system.blocks["atoms"]["element"][:3]]


def test_entry_point_makes_ase_find_mrec(tmp_path):
    """ASE discovers the format through the ``ase.ioformats`` entry point pyproject.toml declares
    (here installed as a bare dist-info when the test venv's mrec metadata does not carry it)."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    target = re.search(r'\[project\.entry-points\."ase\.ioformats"\]\s*\nmrec = "([^"]+)"', text).group(1)
    from importlib.metadata import entry_points
    site = tmp_path / "site"
    if not [e for e in entry_points(group="ase.ioformats") if e.name == "mrec"]:
        info = site / "mrec_entry_point-0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mrec-entry-point\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[ase.ioformats]\nmrec = {target}\n")
    code = textwrap.dedent(f"""
        import numpy as np, ase.io
        from ase import Atoms
        imgs = [Atoms("H" * n, positions=np.arange(3 * n, dtype=float).reshape(n, 3)) for n in (1, 3, 2)]
        ase.io.write({str(tmp_path / "e.mrec.zip")!r}, imgs)
        back = ase.io.read({str(tmp_path / "e.mrec.zip")!r}, index=":")
        print([len(a) for a in back], ase.io.formats.filetype({str(tmp_path / "e.mrec.zip")!r}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(site)]))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[1, 3, 2] mrec"


from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(0, 7), min_size=1, max_size=5), seed=st.integers(0, 2**16),
       pbc=st.tuples(st.booleans(), st.booleans(), st.booleans()))
@example(counts=[0, 3, 0, 1], seed=1, pbc=(False, True, False))
def test_round_trip_any_atom_counts(tmp_path_factory, counts, seed, pbc):
    imgs = images(seed=seed, counts=tuple(counts), pbc=pbc)
    path = str(tmp_path_factory.mktemp("h") / "h.mrec.zip")
    ase.io.write(path, imgs)
    back = ase.io.read(path, index=":")
    assert [len(a) for a in back] == list(counts)
    for a, b in zip(back, imgs):
        same(a, b)
