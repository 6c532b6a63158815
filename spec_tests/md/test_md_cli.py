"""Issue 14, part 2: the command line's first contact (run as a subprocess, as a user would)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, cwd=None, input=None, check=True, env_extra=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, *args], cwd=cwd, input=input, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr}")
    return p


def test_import_prints_nothing_and_loads_no_numcodecs_package():
    """numcodecs' package __init__ warns about crc32c when google_crc32c is missing: mrec loads
    only the C shuffle extension, so importing mrec runs none of numcodecs' own imports."""
    p = run("-W", "error", "-c",
            "import sys, mrec; print(sorted(k for k in sys.modules if k.split('.')[0] == 'numcodecs'))")
    assert p.stderr == ""
    assert p.stdout.strip() == "['numcodecs._shuffle']"


import json
import re
import shutil

import numpy as np
import pytest

import mrec


def mrec_cli(*args, **kw):
    return run("-m", "mrec", *args, **kw)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    p = mrec_cli("demo", str(d / "out"))
    assert p.stderr == ""
    return d / "out" / "demo.mrec.zip"


def test_bare_mrec_prints_help_and_version():
    p = mrec_cli()
    assert p.returncode == 0 and p.stdout.startswith("usage: mrec") and "convert" in p.stdout and p.stderr == ""
    p = mrec_cli("--version")
    assert p.stdout.strip() == f"mrec {mrec.__version__}"


def test_every_command_and_argument_has_help():
    import argparse
    from mrec.cli import build_parser
    ap = build_parser()
    subs = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) >= {"demo", "info", "validate", "repair", "fixtures", "pack", "unpack", "cat", "convert"}
    helps = {c.dest: c.help for c in subs._choices_actions}
    for name, parser in subs.choices.items():
        assert helps.get(name), f"command {name} has no help"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"mrec {name} {action.dest} has no help"
        p = mrec_cli(name, "--help")
        assert p.returncode == 0 and p.stdout.startswith(f"usage: mrec {name}") and p.stderr == ""


def test_commands_print_nothing_but_their_output(demo):
    for args in (("info", str(demo)), ("validate", str(demo)), ("cat", str(demo), "--frame", "-1")):
        p = run("-W", "error::DeprecationWarning", "-m", "mrec", *args)
        assert p.returncode == 0 and p.stderr == "" and p.stdout


def test_pack_overwrite_and_unpack_then_pack(demo, tmp_path):
    z = tmp_path / "demo.mrec.zip"
    shutil.copy(demo, z)
    p = mrec_cli("unpack", str(z))
    assert p.stdout.strip() == str(tmp_path / "demo.mrec") and not z.exists()     # as pack removes the dir
    p = mrec_cli("pack", str(tmp_path / "demo.mrec"), "--keep")
    assert z.exists() and (tmp_path / "demo.mrec").is_dir()
    p = mrec_cli("pack", str(tmp_path / "demo.mrec"), check=False)
    assert p.returncode == 2 and "--overwrite" in p.stderr and p.stderr.count("\n") == 1
    p = mrec_cli("pack", str(tmp_path / "demo.mrec"), "--overwrite")
    assert not (tmp_path / "demo.mrec").exists()
    assert len(mrec.TrajectoryReader(z)) == len(mrec.TrajectoryReader(demo))
    mrec_cli("unpack", str(z), "--keep")
    assert z.exists() and (tmp_path / "demo.mrec").is_dir()


def test_piping_into_head_exits_quietly(demo):
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "mrec", "cat", str(demo), "--frame", ":", "--format", "xyz"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = proc.stdout.readline()
    proc.stdout.close()                 # what `| head -1` does
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert first.strip() == b"300" and err == b"" and proc.returncode == 0


def test_readme_example_runs_twice(tmp_path):
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    for _ in range(2):
        p = run("-c", code, cwd=tmp_path)
        assert p.stderr == "" and p.stdout.startswith("10 ")


def test_info_summarises_meta_and_cell(demo):
    out = mrec_cli("info", str(demo)).stdout
    assert re.search(r"meta pe \(f64\): min -?[0-9.]+ +mean -?[0-9.]+ +max -?[0-9.]+", out)
    assert re.search(r"cell: \d+ updates; first \(a b c alpha beta gamma\) 40 40 40 90 90 90", out)
    doc = json.loads(mrec_cli("info", str(demo), "--json").stdout)
    r = mrec.TrajectoryReader(demo)
    pe = np.array([f.meta["pe"] for f in r])
    s = doc["trajectory"]["meta_summary"]["pe"]
    assert s["min"] == pe.min() and s["max"] == pe.max() and abs(s["mean"] - pe.mean()) < 1e-9
    assert doc["trajectory"]["cell"]["updates"] == r.layout.box.n_updates


def _system_record(tmp_path, species_col, vel=False):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    if vel:
        for c in ("vx", "vy", "vz", "fx", "fy", "fz"):
            s.declare_column("atoms", c, "f64")
    s.declare_meta("pe", "f64")
    path = tmp_path / f"{species_col}.mrec"
    atoms = {species_col: ["O", "H", "H"], "res_name": ["HOH"] * 3, "res_id": [1, 1, 1]}
    if species_col == "element":
        atoms["name"] = ["OW", "HW1", "HW2"]          # species come from element first
    mrec.write_record(path, meta={"creator": {"name": "t"}}, system={"blocks": {"atoms": atoms}})
    rng = np.random.default_rng(0)
    want = []
    with mrec.TrajectoryWriter.create(path, s) as w:
        for i in range(6):
            cols = {c: rng.uniform(0, 9, 3) for c in "xyz"}
            if vel:
                cols.update({c: rng.normal(size=3) for c in ("vx", "vy", "vz", "fx", "fy", "fz")})
            w.append({"blocks": {"atoms": cols}, "box": mrec.Box.from_dimensions(10, 11, 12, 90, 90, 90),
                      "meta": {"pe": -float(i)}}, step=i * 5, time=i * 0.5)
            want.append(cols)
    return path, want


@pytest.mark.parametrize("species_col", ["element", "name", "type"])
def test_cat_extxyz_reads_in_ase_and_mdanalysis(tmp_path, species_col):
    path, want = _system_record(tmp_path, species_col, vel=species_col == "element")
    text = mrec_cli("cat", str(path), "--frame", "1:5", "--format", "extxyz").stdout
    f = tmp_path / "out.extxyz"
    f.write_text(text)
    from ase.io import read
    images = read(str(f), index=":")
    assert len(images) == 4
    for k, atoms in enumerate(images):
        cols = want[k + 1]
        np.testing.assert_allclose(atoms.positions, np.stack([cols[c] for c in "xyz"], 1), atol=1e-9)
        assert atoms.get_chemical_symbols() == ["O", "H", "H"]
        assert atoms.pbc.all() and np.allclose(atoms.cell.cellpar(), [10, 11, 12, 90, 90, 90])
        assert atoms.info["step"] == (k + 1) * 5
        if species_col == "element":
            np.testing.assert_allclose(atoms.arrays["velo"], np.stack([cols[c] for c in ("vx", "vy", "vz")], 1))
            np.testing.assert_allclose(atoms.get_forces(), np.stack([cols[c] for c in ("fx", "fy", "fz")], 1))
            assert atoms.get_potential_energy() == -(k + 1.0)
    import MDAnalysis as mda
    u = mda.Universe(str(f), format="XYZ")
    assert u.trajectory.n_frames == 4 and len(u.atoms) == 3
    np.testing.assert_allclose(u.trajectory[2].positions, np.stack([want[3][c] for c in "xyz"], 1), atol=1e-5)


def test_cat_xyz_and_pdb_read_in_mdanalysis_and_ase(tmp_path):
    path, want = _system_record(tmp_path, "element")
    import MDAnalysis as mda
    from ase.io import read
    xyz = tmp_path / "o.xyz"
    xyz.write_text(mrec_cli("cat", str(path), "--frame", "::2", "--format", "xyz").stdout)
    u = mda.Universe(str(xyz))
    assert u.trajectory.n_frames == 3
    np.testing.assert_allclose(u.trajectory[1].positions, np.stack([want[2][c] for c in "xyz"], 1), atol=1e-5)
    pdb = tmp_path / "o.pdb"
    pdb.write_text(mrec_cli("cat", str(path), "--frame", "0:3", "--format", "pdb").stdout)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(str(pdb))
    assert u.trajectory.n_frames == 3 and list(u.atoms.names) == ["OW", "HW1", "HW2"]
    assert list(u.atoms.resnames) == ["HOH"] * 3 and list(u.atoms.resids) == [1, 1, 1]
    assert list(u.atoms.elements) == ["O", "H", "H"]
    np.testing.assert_allclose(u.trajectory[2].positions, np.stack([want[2][c] for c in "xyz"], 1), atol=1e-3)
    np.testing.assert_allclose(u.dimensions, [10, 11, 12, 90, 90, 90], atol=1e-3)
    images = read(str(pdb), index=":")
    assert len(images) == 3 and images[0].get_chemical_symbols() == ["O", "H", "H"]


def test_cat_refuses_bad_ranges_in_one_line(demo):
    for spec in ("x", "1:2:3:4", "400"):
        p = mrec_cli("cat", str(demo), "--frame", spec, check=False)
        assert p.returncode == 2 and p.stderr.startswith("mrec cat: ") and p.stderr.count("\n") == 1


def test_py_typed_is_package_data():
    assert os.path.isfile(os.path.join(ROOT, "mrec", "py.typed"))
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert re.search(r'\[tool\.setuptools\.package-data\]\s*\nmrec = \[[^\]]*"py\.typed"', text)


def test_make_demo_installs_only_the_package():
    text = open(os.path.join(ROOT, "Makefile")).read()
    demo_rule = re.search(r"^demo: (\S+)", text, re.M).group(1)
    recipe = re.search(rf"^{re.escape(demo_rule)}:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "pip install" in recipe and "-e ." in recipe and "[" not in recipe     # no extras: no test oracles
    test_rule = re.search(r"^test: (\S+)", text, re.M).group(1)
    recipe = re.search(rf"^{re.escape(test_rule)}:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "test" in recipe and "md" in recipe
