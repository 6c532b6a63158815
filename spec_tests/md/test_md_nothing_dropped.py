"""Issue 28 section 2: nothing dropped silently on the way into or out of a record.

ASE ``info`` and custom per-atom arrays round-trip typed (per-step meta and per-atom columns) or
are refused naming them; MDAnalysis topology attributes (segids, resids, chain ids ...) survive
into a Universe read back; a LAMMPS dump whose atom count changes converts into a ragged
trajectory; LAMMPS types map to elements and image flags are carried; mass and charge units are
stated.  Tested against the real ASE, MDAnalysis and MDAnalysisTests files."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ase.io
from ase import Atoms
from ase.calculators.singlepoint import SinglePointCalculator
from ase.constraints import FixAtoms
from ase.io.formats import ioformats

import mrec
from mrec.errors import RefusalError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True, scope="module")
def registered():
    """ASE's view of mrec's entry point (as in test_md_ase)."""
    if "mrec" not in ioformats:
        from ase.io.formats import define_io_format
        from mrec.md.ase_io import mrec_format
        define_io_format("mrec", **mrec_format._asdict(), external=True)
    yield



def same_value(a, b) -> bool:
    """Equal with the same Python / numpy type (a float stays a float, an array keeps its dtype)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# -- ASE: atoms.info and custom per-atom arrays ---------------------------------------------------

def rich_images(counts=(3, 5, 4)):
    rng = np.random.default_rng(7)
    out = []
    for k, n in enumerate(counts):
        a = Atoms(numbers=rng.integers(1, 20, n), positions=rng.uniform(0, 5, (n, 3)),
                  cell=np.eye(3) * 6.0, pbc=True)
        a.info.update({"step": 100 + 25 * k, "config_type": "bulk" if k % 2 else "surface",
                       "temperature": 300.0 + k, "n_scf": 11 + k, "converged": bool(k % 2 == 0),
                       "dipole": rng.normal(size=3), "labels": {"source": "dft", "ids": [1, 2, k]}})
        a.set_tags(rng.integers(0, 4, n))
        a.set_initial_charges(rng.normal(size=n))
        a.set_initial_magnetic_moments(rng.normal(size=n))
        a.arrays["user_weight"] = rng.normal(size=n)
        a.arrays["user_vec"] = rng.normal(size=(n, 3))
        a.arrays["user_count"] = rng.integers(-5, 5, n).astype(np.int32)
        a.arrays["user_flag"] = rng.integers(0, 2, n).astype(bool)
        a.arrays["user_label"] = np.array([f"s{i}" for i in range(n)])
        a.set_constraint(FixAtoms(indices=[0, n - 1]))
        a.calc = SinglePointCalculator(a, energy=-1.5 * k, forces=rng.normal(size=(n, 3)),
                                       charges=rng.normal(size=n), magmom=0.25 * k)
        out.append(a)
    return out


def check_same_atoms(got: Atoms, want: Atoms) -> None:
    assert set(got.info) == set(want.info), (sorted(got.info), sorted(want.info))
    for k in want.info:
        assert same_value(got.info[k], want.info[k]), (k, got.info[k], want.info[k])
    assert set(got.arrays) == set(want.arrays), (sorted(got.arrays), sorted(want.arrays))
    for k in want.arrays:
        a, b = got.arrays[k], want.arrays[k]
        if b.dtype.kind == "U":
            assert a.tolist() == b.tolist(), k
        else:
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), k
    assert [type(c).__name__ for c in got.constraints] == [type(c).__name__ for c in want.constraints]
    for c, d in zip(got.constraints, want.constraints):
        assert c.get_indices().tolist() == d.get_indices().tolist()
    assert set(got.calc.results) == set(want.calc.results)
    for k, v in want.calc.results.items():
        assert np.asarray(got.calc.results[k]).tobytes() == np.asarray(v).tobytes(), k


@pytest.mark.parametrize("name", ["rich.mrec.zip", "rich.mrec"])
def test_ase_info_arrays_constraints_and_results_round_trip_typed(tmp_path, name):
    imgs = rich_images()
    path = str(tmp_path / name)
    ase.io.write(path, imgs)
    kw = {"format": "mrec"} if name.endswith(".mrec") else {}
    back = ase.io.read(path, index=":", **kw)
    for got, want in zip(back, imgs):
        check_same_atoms(got, want)
    r = mrec.TrajectoryReader(path)
    assert r.steps.tolist() == [100, 125, 150]                   # info["step"] is the record's step
    assert r.schema.meta["config_type"].tag == "string" and r.schema.meta["n_scf"].tag == "i64"
    assert r.schema.meta["dipole"].tag == "f64x3" and r.schema.meta["labels"].tag == "json"
    cols = r.schema.blocks["atoms"].columns
    assert cols["user_count"].dtype == "i32" and cols["user_flag"].dtype == "bool"
    assert cols["user_vec"].trailing == (3,) and cols["free"].dtype == "bool"


@pytest.mark.parametrize("what, value, named", [
    ("info", {"bad": {"nested": np.arange(3)}}, "bad"),
    ("info", {"obj": object()}, "obj"),
    ("array", np.array([{"a": 1}, None, 3], dtype=object), "user_obj"),
    ("array", np.array([1.0, 2.0, 3.0], dtype=np.float16), None),      # widens exactly: not refused
])
def test_ase_what_cannot_be_stored_is_refused_by_name(tmp_path, what, value, named):
    a = Atoms("H3", positions=np.eye(3))
    if what == "info":
        a.info.update(value)
    else:
        a.arrays["user_obj"] = value
    path = tmp_path / "x.mrec.zip"
    if named is None:
        ase.io.write(str(path), [a])
        assert ase.io.read(str(path)).arrays["user_obj"].tolist() == [1.0, 2.0, 3.0]
        return
    with pytest.raises(RefusalError) as e:
        ase.io.write(str(path), [a])
    assert named in str(e.value) and not path.exists()


def test_ase_a_step_that_does_not_increase_and_a_key_that_disappears_are_refused(tmp_path):
    a, b = Atoms("H", positions=[[0, 0, 0]]), Atoms("H", positions=[[0, 0, 1]])
    a.info["step"], b.info["step"] = 10, 10
    with pytest.raises(mrec.MrecError) as e:
        ase.io.write(str(tmp_path / "s.mrec.zip"), [a, b])
    assert "step" in str(e.value)
    b.info = {"step": 20}
    a.info["temperature"] = 3.0
    with pytest.raises(mrec.MrecError) as e:
        ase.io.write(str(tmp_path / "s.mrec.zip"), [a, b])
    assert "temperature" in str(e.value) and "frame 1" in str(e.value)


def test_extxyz_info_step_and_arrays_through_convert_and_back(tmp_path):
    imgs = rich_images()
    for k, a in enumerate(imgs):
        a.info.pop("labels")                  # extxyz holds flat values only
        a.info["time"] = 0.25 * k             # an ASE image's time: per-step meta, not the record's time
        a.set_constraint()
        a.calc = SinglePointCalculator(a, energy=a.info["temperature"] / 100.0)
    src = tmp_path / "in.extxyz"
    ase.io.write(str(src), imgs, format="extxyz")
    read_in = ase.io.read(str(src), index=":")
    out = tmp_path / "x.mrec.zip"
    cli("convert", src, out)
    r = mrec.TrajectoryReader(out)
    assert r.steps.tolist() == [100, 125, 150]                   # extxyz step= is the record's step
    back = tmp_path / "back.extxyz"
    cli("convert", out, back)
    for got, want in zip(ase.io.read(str(back), index=":"), read_in):
        assert set(got.info) == set(want.info)
        for k in want.info:
            assert same_value(got.info[k], want.info[k]), k
        for k in want.arrays:
            assert np.asarray(got.arrays[k]).tolist() == np.asarray(want.arrays[k]).tolist(), k
        assert got.get_potential_energy() == want.get_potential_energy()


# -- MDAnalysis: every topology attribute, segments and residues as they were ---------------------

import MDAnalysis as mda                                   # noqa: E402
import MDAnalysisTests.datafiles as D                      # noqa: E402

import mrec.md.mdanalysis  # noqa: E402,F401 - registers the MREC format
from mdtools import cli, universe  # noqa: E402

ATTRS = ("ids", "names", "types", "elements", "masses", "charges", "resids", "resnums", "resnames", "segids",
         "chainIDs", "icodes", "altLocs", "occupancies", "tempfactors", "record_types", "moltypes", "molnums",
         "formalcharges", "radii")



def check_topology(got, want) -> None:
    """Every topology attribute of ``want`` is in ``got`` with the same values, residues and segments."""
    assert len(got.atoms) == len(want.atoms)
    assert len(got.residues) == len(want.residues) and len(got.segments) == len(want.segments)
    assert got.atoms.resindices.tolist() == want.atoms.resindices.tolist()
    assert got.atoms.segindices.tolist() == want.atoms.segindices.tolist()
    for attr in ATTRS:
        if hasattr(want.atoms, attr):
            w, g = np.asarray(getattr(want.atoms, attr)), np.asarray(getattr(got.atoms, attr))
            assert g.tolist() == w.tolist(), attr
    for rel in ("bonds", "angles", "dihedrals", "impropers"):
        if hasattr(want, rel) and len(getattr(want, rel)):
            assert getattr(got, rel).indices.tolist() == getattr(want, rel).indices.tolist(), rel


def test_psf_segids_select_and_every_attribute(tmp_path):
    out = tmp_path / "adk.mrec.zip"
    cli("convert", D.DCD, out, "--top", D.PSF, "--frames", "0:2")
    u = universe(out)
    assert len(u.select_atoms("segid 4AKE")) == 3341
    check_topology(u, universe(D.PSF, D.DCD))
    cols = mrec.read_record(out).system.blocks["atoms"]
    assert list(cols["seg_id"][:2]) == ["4AKE", "4AKE"] and cols["res_num"].dtype == np.int64


def test_tpr_segments_chains_molecules(tmp_path):
    out = tmp_path / "tpr.mrec"
    cli("convert", D.XTC, out, "--top", D.TPR, "--frames", "0:1")
    want = universe(D.TPR, D.XTC)
    got = universe(str(out), format="MREC", topology_format="MREC")
    check_topology(got, want)
    assert [s.segid for s in got.segments] == [s.segid for s in want.segments] and len(got.segments) == 3
    name = want.segments[0].segid
    assert len(got.select_atoms(f"segid {name}")) == len(want.select_atoms(f"segid {name}"))


def test_pdb_icodes_altlocs_occupancies_record_types(tmp_path):
    out = tmp_path / "icodes.mrec"
    cli("convert", D.PDB_icodes, out)
    want = universe(D.PDB_icodes)
    got = universe(str(out), format="MREC", topology_format="MREC")
    check_topology(got, want)
    assert len(got.residues) == len(want.residues) and set(got.residues.icodes) > {""}


def test_writer_keeps_residues_that_runs_would_merge_or_split(tmp_path):
    u = mda.Universe.empty(6, n_residues=3, n_segments=2, atom_resindex=[0, 0, 1, 1, 2, 0],
                           residue_segindex=[0, 0, 1], trajectory=True)
    u.add_TopologyAttr("resids", [7, 7, 8])
    u.add_TopologyAttr("resnames", ["ALA", "ALA", "GLY"])
    u.add_TopologyAttr("segids", ["A", "A"])
    u.add_TopologyAttr("names", list("abcdef"))
    u.atoms.positions = np.arange(18, dtype=np.float32).reshape(6, 3)
    path = str(tmp_path / "w.mrec")
    with mda.Writer(path, n_atoms=6, format="MREC") as w:
        w.write(u.atoms)
    check_topology(universe(path, format="MREC", topology_format="MREC"), u)
    assert "res_index" in mrec.read_record(path).system.blocks["atoms"]


# -- LAMMPS: a dump whose atom count changes, image flags, types named as elements ----------------

def write_dump(path, frames, *, triclinic=False, scaled=False, units="real", flags="pp pp ff") -> list[dict]:
    """A LAMMPS custom dump of ``frames`` (atom counts); rows written in a shuffled (processor) order.
    Returns per frame the values as written, sorted by id."""
    rng = np.random.default_rng(11)
    lo, hi, tilt = np.array([-1.5, 0.25, -3.0]), np.array([20.0, 18.5, 9.0]), np.array([1.25, -0.5, 0.75])
    lines, want = [f"ITEM: UNITS\n{units}\n"] if units else [], []
    masses = {1: 12.011, 2: 15.9994, 3: 1.008}
    for k, n in enumerate(frames):
        ids = rng.permutation(np.arange(1, 40))[:n] if k else np.arange(1, n + 1)
        types = (ids % 3) + 1
        xyz = rng.uniform(0, 1, (n, 3)) if scaled else rng.uniform(-1, 9, (n, 3))
        img = rng.integers(-3, 4, (n, 3))
        q = np.round(rng.normal(size=n), 6)
        pe = rng.normal(size=n) * 1e-3
        lines.append(f"ITEM: TIME\n{0.5 * k!r}\nITEM: TIMESTEP\n{1000 * k + 10}\nITEM: NUMBER OF ATOMS\n{n}\n")
        if triclinic:
            lines.append(f"ITEM: BOX BOUNDS xy xz yz {flags}\n" + "".join(
                f"{float(lo[a])!r} {float(hi[a])!r} {float(tilt[a])!r}\n" for a in range(3)))
        else:
            lines.append(f"ITEM: BOX BOUNDS {flags}\n" + "".join(f"{float(lo[a])!r} {float(hi[a])!r}\n"
                                                               for a in range(3)))
        pos = "xs ys zs" if scaled else "x y z"
        lines.append(f"ITEM: ATOMS id type mol q mass {pos} ix iy iz c_pe\n")
        order = rng.permutation(n)
        for i in order:
            x, y, z = xyz[i].tolist()
            lines.append(f"{ids[i]} {types[i]} {ids[i] // 4} {float(q[i])!r} {masses[types[i]]} "
                         f"{x!r} {y!r} {z!r} {img[i, 0]} {img[i, 1]} {img[i, 2]} {float(pe[i])!r}\n")
        s = np.argsort(ids)
        want.append({"id": ids[s], "type": types[s], "q": q[s], "xyz": xyz[s], "img": img[s], "pe": pe[s],
                     "mass": np.array([masses[t] for t in types[s]]), "step": 1000 * k + 10, "time": 0.5 * k})
    path.write_text("".join(lines))
    return want


@pytest.mark.parametrize("triclinic, scaled", [(False, False), (True, True)])
def test_dump_whose_atom_count_changes_converts_ragged_and_exact(tmp_path, triclinic, scaled):
    src = tmp_path / "grow.lammpstrj"
    want = write_dump(src, [5, 9, 3, 12], triclinic=triclinic, scaled=scaled)
    out = tmp_path / "grow.mrec.zip"
    res = json.loads(cli("convert", src, out, "--json").stdout)
    assert res["frames"] == 4 and res["atoms"] == [3, 5, 9, 12]
    rec = mrec.read_record(out)
    r = rec.trajectory
    assert [r[i].counts["atoms"] for i in range(4)] == [5, 9, 3, 12]
    assert r.steps.tolist() == [10, 1010, 2010, 3010] and r.times.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert rec.meta["units"]["time"] == "fs" and rec.meta["units"]["mass"] == "amu"      # ITEM: UNITS real
    cols = r.schema.blocks["atoms"].columns
    assert cols["ix"].dtype == "i32" and cols["id"].dtype == "u64" and cols["mol_id"].dtype == "u64"
    assert cols["type"].dtype == "string" and cols["c_pe"].dtype == "f64"
    for i, w in enumerate(want):
        f = r[i]
        a = f.blocks["atoms"]
        assert a["id"].tolist() == w["id"].tolist() and a["type"].tolist() == [str(t) for t in w["type"]]
        assert a["charge"].tobytes() == w["q"].tobytes() and a["c_pe"].tobytes() == w["pe"].tobytes()
        assert np.stack([a["ix"], a["iy"], a["iz"]], 1).tolist() == w["img"].tolist()
        assert a["element"].tolist() == [{1: "C", 2: "O", 3: "H"}[t] for t in w["type"]]    # from the masses
        assert f.box.boundary.tolist() == [True, True, False]
        if not scaled:
            assert f.positions.tobytes() == w["xyz"].tobytes()            # the text's values, exactly
        else:
            np.testing.assert_allclose(f.positions, f.box.origin + w["xyz"] @ f.box.rows, rtol=1e-15, atol=1e-13)
    if triclinic:                                     # tilts xy, xz, yz; the bounding box's corner moved
        assert r[0].box.rows[1, 0] == 1.25 and r[0].box.rows[2].tolist()[:2] == [-0.5, 0.75]
        assert r[0].box.origin.tolist() == [-1.5 + 0.5, 0.25, -3.0] and r[0].box.rows[0, 0] == 21.5 - 1.75
    # ASE reads the ragged record; MDAnalysis, which holds one atom count, refuses it naming the frame
    images = ase.io.read(str(out), index=":")
    assert [len(a) for a in images] == [5, 9, 3, 12] and images[1].get_chemical_symbols()[0] in "CHO"
    assert images[2].arrays["ix"].tolist() == want[2]["img"][:, 0].tolist()
    with pytest.raises(mrec.MrecError) as e:
        universe(str(out))
    assert e.value.kind == "row_count_mismatch" and "frame 1" in str(e.value)


DUMPS = ["LAMMPSDUMP", "LAMMPSDUMP_additional_columns", "LAMMPSDUMP_allcoords", "LAMMPSDUMP_allinfo",
         "LAMMPSDUMP_chain1", "LAMMPSDUMP_image_vf", "LAMMPSDUMP_nomass_elemx", "LAMMPSDUMP_non_linear",
         "LAMMPSDUMP_triclinic"]


@pytest.mark.filterwarnings("ignore::UserWarning")     # MDAnalysis: "Reader has no dt information"
@pytest.mark.parametrize("name", DUMPS)
def test_mdanalysistests_dumps_match_mdanalysis(tmp_path, name):
    src = getattr(D, name)
    out = tmp_path / "d.mrec"
    cli("convert", src, out, "--format", "LAMMPSDUMP")
    u = universe(src, format="LAMMPSDUMP")
    r = mrec.TrajectoryReader(out)
    assert len(r) == u.trajectory.n_frames
    scaled = mrec.read_record(out).meta["converted_from"]["coordinates"].startswith("scaled")
    for ts in u.trajectory:
        f = r[ts.frame]
        assert r.steps[ts.frame] == ts.data["step"]
        # MDAnalysis parses into float32 and subtracts the box's lower corner (from scaled positions
        # too, which it never added to them); mrec keeps the text's binary64 Cartesian positions, the
        # corner being the cell's origin
        shift = f.box.origin * (2 if scaled else 1)
        np.testing.assert_allclose(f.positions - shift, ts.positions, rtol=2e-7, atol=2e-6)
        np.testing.assert_allclose(f.box.dimensions, ts.dimensions, rtol=1e-6)
        if ts.has_velocities:
            np.testing.assert_allclose(f.velocities, ts.velocities, rtol=2e-7, atol=1e-6)
    atoms = r[0].blocks["atoms"]
    assert atoms["id"].tolist() == sorted(atoms["id"].tolist())


def test_dump_without_coordinates_and_a_cut_dump_are_refused_naming_the_line(tmp_path):
    p = cli("convert", D.LAMMPSDUMP_nocoords, tmp_path / "n.mrec", "--format", "LAMMPSDUMP", check=False)
    assert p.returncode == 2 and "line 42: 3 values" in p.stderr and "Traceback" not in p.stderr
    bare = tmp_path / "bare.lammpstrj"
    bare.write_text("ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n1\nITEM: BOX BOUNDS pp pp pp\n0 1\n0 1\n0 1\n"
                    "ITEM: ATOMS id type\n1 1\n")
    p = cli("convert", bare, tmp_path / "b.mrec", check=False)
    assert p.returncode == 2 and "line 10: no coordinates" in p.stderr and not (tmp_path / "b.mrec").exists()
    src = tmp_path / "cut.lammpstrj"
    write_dump(src, [4, 6])
    text = src.read_text()
    src.write_text(text[: len(text) - 40])
    from mrec.md.convert import convert
    with pytest.raises(RefusalError) as e:
        convert(src, tmp_path / "c.mrec")
    assert e.value.kind == "bad_input" and "line" in str(e.value) and not (tmp_path / "c.mrec").exists()


def test_lammps_types_to_elements_and_image_flags_into_extxyz(tmp_path):
    src = D.LAMMPSDUMP_image_vf
    rec = tmp_path / "vf.mrec.zip"
    cli("convert", src, rec, "--format", "LAMMPSDUMP")
    back = tmp_path / "vf.extxyz"
    p = cli("convert", rec, back, check=False)                  # types 1, 2 with no mass naming an element
    assert p.returncode == 2 and "--type-map" in p.stderr and not back.exists()
    cli("convert", rec, back, "--type-map", "1=C,2=O")
    images = ase.io.read(str(back), index=":")
    r = mrec.TrajectoryReader(rec)
    assert len(images) == len(r) == 3
    for k, a in enumerate(images):
        cols = r[k].blocks["atoms"]
        assert a.get_chemical_symbols() == [{"1": "C", "2": "O"}[t] for t in cols["type"]]
        assert a.arrays["ix"].tolist() == cols["ix"].tolist() and a.arrays["iz"].tolist() == cols["iz"].tolist()
        assert a.positions.tobytes() == r[k].positions.tobytes()
        assert a.info["step"] == r.steps[k]
    assert r[1].blocks["atoms"]["ix"].tolist()[:4] == [1, 1, -1, 0]    # the image flags of the dump (ids 1-4)
    # into mrec with the map: the element column; with a data topology: the system section and its bonds
    named = tmp_path / "named.mrec"
    cli("convert", src, named, "--format", "LAMMPSDUMP", "--type-map", "1=C,2=O")
    assert mrec.TrajectoryReader(named)[0].blocks["atoms"]["element"].tolist()[:2] == ["C", "C"]
    topo = tmp_path / "topo.mrec"
    cli("convert", src, topo, "--format", "LAMMPSDUMP", "--top", D.LAMMPS_image_vf, "--type-map", "1=C,2=O")
    got = mrec.read_record(topo)
    assert got.system.blocks["atoms"]["element"].tolist() == ["C", "C", "O", "O", "O", "O", "O"]
    assert "bonds" in got.system.blocks and "ix" in got.trajectory.schema.blocks["atoms"].columns
    u = universe(str(topo), format="MREC", topology_format="MREC")
    assert len(u.bonds) == 1 and list(u.atoms.elements[:2]) == ["C", "C"]
    p = cli("convert", src, tmp_path / "bad.mrec", "--format", "LAMMPSDUMP", "--type-map", "1=C", check=False)
    assert p.returncode == 2 and "type(s) 2" in p.stderr


# -- units of mass and charge: stated by every MD surface, shown by mrec info ---------------------

def test_mass_and_charge_units_are_stated_by_every_surface_and_shown(tmp_path):
    made = {}
    made["convert"] = tmp_path / "adk.mrec"
    cli("convert", D.DCD, made["convert"], "--top", D.PSF, "--frames", "0:1")
    made["writer"] = tmp_path / "w.mrec"
    u = universe(D.PSF, D.DCD)
    with mda.Writer(str(made["writer"]), n_atoms=len(u.atoms), format="MREC") as w:
        w.write(u.atoms)
    made["ase"] = tmp_path / "a.mrec"
    ase.io.write(str(made["ase"]), rich_images(), format="mrec")
    made["dump"] = tmp_path / "d.mrec"
    write_dump(tmp_path / "d.lammpstrj", [2, 3], units=None)
    cli("convert", tmp_path / "d.lammpstrj", made["dump"])
    for how, path in made.items():
        rec = mrec.read_record(path)
        units = (rec.system.meta if rec.system is not None else rec.meta)["units"]
        assert units["mass"] == "amu" and units["charge"] == "e", how
        text = cli("info", path).stdout
        assert "mass amu" in text and "charge e" in text, (how, text)
        assert json.loads(cli("info", path, "--json").stdout)["units"]["mass"] == "amu"
    assert mrec.read_record(made["dump"]).meta["units"] == {"length": "angstrom", "mass": "amu", "charge": "e"}
