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
import mrec.md.mdanalysis  # noqa: E402,F401 - registers the MREC format
from mrec.md.convert import convert  # noqa: E402
from mdtools import cli, universe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KiB = 1024




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
    minimal_documents_are_read_by_everyone(out, "trajectory/atoms/y", np.concatenate(
        [ts.positions[:, 1] for ts in u.trajectory]))


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
    for ts in u.trajectory:          # the dump's text, parsed to binary64 (MDAnalysis keeps float32 of it)
        assert r.positions(ts.frame).astype(np.float32).tobytes() == ts.positions.tobytes()
        assert lanes(r, "atoms", "v", ts.frame).astype(np.float32).tobytes() == ts.velocities.tobytes()


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
        from mrec.md.ase_io import mrec_format
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
    minimal_documents_are_read_by_everyone(out, "trajectory/atoms/x", np.concatenate([a.positions[:, 0] for a in images]))


def minimal_documents_are_read_by_everyone(path, array: str, want: np.ndarray):
    """The compact documents (no empty attributes, the default chunk key encoding's configuration and
    a schema column's empty trailing left out) validate and read the same in zarr-python."""
    import zarr
    from mrec.check.validate import validate
    report = validate(path, deep=True)
    assert report.ok, report.violations
    with zarr.storage.ZipStore(str(path), mode="r") as store:
        got = zarr.open_array(store, path=array, mode="r")[:]
    assert got.tobytes() == np.asarray(want, dtype=np.float64).tobytes()


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


def test_compression_knob_takes_a_shuffle_prefix():
    from mrec.record.extents import Compression, bytes_to_bytes
    c = Compression.parse("shuffle+zstd:7")
    assert (c.name, c.level, c.shuffle, str(c)) == ("zstd", 7, True, "shuffle+zstd:7")
    assert [x.name for x in bytes_to_bytes("f64", precision=False, dense=False, compression=c)] == \
        ["numcodecs.shuffle", "zstd"]
    assert [x.name for x in bytes_to_bytes("f64", precision=False, dense=False,
                                           compression=Compression.parse("zstd"))] == ["zstd"]
    for bad in ("shuffle+none", "shuffle+", "shuffle+lz4", "shuffle"):
        with pytest.raises(mrec.RefusalError) as exc:
            Compression.parse(bad)
        assert exc.value.kind == "bad_compression"


# -- part 5: papercuts ----------------------------------------------------------------------------

def test_convert_progress_true_and_false(tmp_path, capfd):
    res = convert(D.DCD, tmp_path / "a.mrec", top=D.PSF, frames="0:3", progress=False)
    assert res.frames == 3 and capfd.readouterr().err == ""
    res = convert(D.DCD, tmp_path / "b.mrec", top=D.PSF, frames="0:4", progress=True)
    err = capfd.readouterr().err
    assert res.frames == 4 and "4/4 frames" in err and "frames/s" in err


def test_mda_writer_is_found_by_the_archive_name(tmp_path):
    from mrec.md.mdanalysis import MRECWriter
    from MDAnalysis.coordinates.core import get_writer_for
    assert get_writer_for(str(tmp_path / "x.mrec.zip")) is MRECWriter
    assert get_writer_for(str(tmp_path / "x.mrec")) is MRECWriter
    u = universe(D.PSF, D.DCD)
    out = tmp_path / "x.mrec.zip"
    with mda.Writer(str(out), u.atoms.n_atoms) as w:
        for _ts in u.trajectory[:2]:
            w.write(u.atoms)
    assert len(mrec.TrajectoryReader(out)) == 2


def test_refusals_name_the_python_and_the_cli_ways_to_overwrite(tmp_path):
    out = tmp_path / "x.mrec.zip"
    convert(D.DCD, out, top=D.PSF, frames="0:1")
    for make in (lambda: mda.Writer(str(out), 3341), lambda: convert(D.DCD, out, top=D.PSF, frames="0:1")):
        with pytest.raises(mrec.RefusalError) as exc:
            make()
        assert exc.value.kind == "exists"
        assert "overwrite=True" in str(exc.value) and "--overwrite" not in str(exc.value)
    p = cli("convert", D.DCD, out, "--top", D.PSF, check=False)
    assert p.returncode == 2 and "--overwrite" in p.stderr and "overwrite=True" not in p.stderr


def test_info_shows_units_and_its_table_lines_up(tmp_path):
    out = tmp_path / "x.mrec.zip"
    convert(D.DCD, out, top=D.PSF, frames="0:2")
    text = cli("info", out).stdout
    assert "units: length angstrom, time ps" in text and "energy kJ/mol" in text
    lines = text.splitlines()
    head = next(k for k, line in enumerate(lines) if line.lstrip().startswith("array "))
    rows = [line for line in lines[head:] if line.strip()]
    assert len(rows) > 10
    for name in ("dtype", "shape", "codecs", "bytes"):            # every column starts where its header does
        at = rows[0].index(name) if name != "bytes" else rows[0].index("bytes") + len("bytes")
        for row in rows[1:]:
            if name == "bytes":
                assert row[at - 1] != " " and row[at] == " ", (name, row)
            else:
                assert row[at - 1] == " " and row[at] != " ", (name, row)


def test_help_describes_every_command():
    top = cli("--help").stdout
    assert "repack" in top.split("positional arguments")[0] and "repair" in top.split("positional arguments")[0]
    for cmd in ("repair", "repack", "info", "validate", "pack", "unpack", "cat", "convert", "demo", "fixtures"):
        text = cli(cmd, "--help").stdout
        body = text.split("\n\n")[1]                  # argparse prints the description after the usage
        assert not body.lstrip().startswith(("positional arguments", "options")), (cmd, text)


def guide() -> str:
    return open(os.path.join(ROOT, "docs", "user-guide.md"), encoding="utf-8").read()


def test_user_guide_lists_each_command_once():
    table = guide().split("## Command line\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `mrec ")]
    named = [re.match(r"\| `mrec (\w+)", r).group(1) for r in rows]
    assert sorted(named) == sorted(set(named)), named
    for cmd in ("info", "validate", "repair", "repack", "fixtures", "pack", "cat", "convert", "demo"):
        assert cmd in named


def test_user_guide_first_snippets_run_as_written(tmp_path):
    """The python blocks of the guide's start ("Writing a trajectory", "Reading", "Whole records"), one
    after the other in an empty directory."""
    text = guide()
    start = text.split("\n## Force field", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", start, flags=re.S)
    assert len(blocks) == 3
    done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run.mrec.zip").exists() and (tmp_path / "copy.mrec").exists()


def test_convert_select_keeps_the_atoms_and_their_topology(tmp_path):
    out = tmp_path / "ca.mrec.zip"
    p = cli("convert", D.PSF if False else D.DCD, "--top", D.PSF, "--select", "protein and name CA",
            "--frames", "0:5", out, "--json")
    u = universe(D.PSF, D.DCD)
    ca = u.select_atoms("protein and name CA")
    import json
    assert json.loads(p.stdout)["atoms"] == len(ca) == 214
    rec = mrec.read_record(out)
    atoms = rec.system.blocks["atoms"]
    assert list(atoms["name"]) == ["CA"] * len(ca) and list(atoms["res_name"]) == list(ca.resnames)
    assert rec.system.counts["atoms"] == len(ca) and "bonds" not in rec.system.blocks   # no CA-CA bond
    for ts in u.trajectory[:5]:
        assert rec.trajectory.positions(ts.frame).tobytes() == ca.positions.astype(np.float64).tobytes()
    back = universe(out)
    assert len(back.atoms) == len(ca) and list(back.atoms.resids) == list(ca.resids)

    res = convert(D.DCD, tmp_path / "res1.mrec", top=D.PSF, select="resid 1", frames="0:1")
    sub = u.select_atoms("resid 1")
    bonds = mrec.read_record(tmp_path / "res1.mrec").system.blocks["bonds"]
    want = sorted(tuple(sorted((int(np.flatnonzero(sub.indices == i)[0]), int(np.flatnonzero(sub.indices == j)[0]))))
                  for i, j in sub.bonds.indices if i in sub.indices and j in sub.indices)
    got = sorted(tuple(sorted(map(int, b))) for b in zip(bonds["atomi"], bonds["atomj"]))
    assert res.atoms == len(sub) and got == want and len(got) > 0

    for bad, words in (("resname NOPE", "selects no atom"), ("protein and (", "cannot select")):
        with pytest.raises(mrec.RefusalError) as exc:
            convert(D.DCD, tmp_path / "bad.mrec", top=D.PSF, select=bad)
        assert exc.value.kind == "bad_argument" and words in str(exc.value)
        assert not (tmp_path / "bad.mrec").exists()


def test_convert_concatenates_inputs_with_steps_continuing(tmp_path):
    """Two parts read one after the other: a part numbering its steps again is shifted to follow the
    previous one (here the same DCD twice); a part continuing the run keeps its steps, and the frame a
    restart repeats at the previous part's last step is dropped (two XTC pieces cut from one run)."""
    out = tmp_path / "two.mrec.zip"
    cli("convert", D.DCD, D.DCD, "--top", D.PSF, out)
    u = universe(D.PSF, D.DCD)
    r = mrec.TrajectoryReader(out)
    n = u.trajectory.n_frames
    assert len(r) == 2 * n
    steps, times = r.steps, r.times
    assert np.all(np.diff(steps) == 1) and np.allclose(np.diff(times), u.trajectory.dt)
    for i in (0, n - 1, n, 2 * n - 1):
        assert r.positions(i).tobytes() == u.trajectory[i % n].positions.astype(np.float64).tobytes()

    src = universe(D.TPR, D.XTC)
    a, b = tmp_path / "a.xtc", tmp_path / "b.xtc"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path, frames in ((a, range(0, 6)), (b, range(5, 10))):          # b repeats a's last frame
            with mda.Writer(str(path), src.atoms.n_atoms) as w:
                for ts in src.trajectory[list(frames)]:
                    w.write(src.atoms)
    whole = tmp_path / "whole.mrec"
    res = convert([a, b], whole, top=D.TPR)
    r = mrec.TrajectoryReader(whole)
    assert res.frames == len(r) == 10
    assert r.steps.tolist() == [int(ts.data["step"]) for ts in src.trajectory]
    for ts in src.trajectory[[0, 5, 6, 9]]:
        assert xtc_bits_from_grid(r.positions(ts.frame), 1000.0).tobytes() == ts.positions.tobytes()
    part = convert([a, b], tmp_path / "part.mrec", top=D.TPR, frames="4:8")      # --frames over the whole
    assert part.frames == 3 and mrec.TrajectoryReader(tmp_path / "part.mrec").steps.tolist() == \
        [int(ts.data["step"]) for ts in src.trajectory[4:7]]


def test_several_inputs_need_an_mdanalysis_source(tmp_path):
    x = tmp_path / "a.extxyz"
    x.write_text("1\nProperties=species:S:1:pos:R:3\nH 0 0 0\n")
    p = cli("convert", x, x, tmp_path / "o.mrec", check=False)
    assert p.returncode == 2 and "MDAnalysis sources" in p.stderr and p.stderr.count("\n") == 1


def test_readme_says_how_long_make_test_takes_and_how_to_run_a_subset():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert re.search(r"`make test` is\s+long: about \d+ minutes", text)
    examples = re.findall(r'make test PYTEST_ARGS="([^"]+)"', text)
    assert len(examples) >= 2 and any("-k" in e for e in examples)
    for e in examples:                               # the files they name exist
        for word in e.split():
            if word.startswith("spec_tests/"):
                assert os.path.exists(os.path.join(ROOT, word)), word
