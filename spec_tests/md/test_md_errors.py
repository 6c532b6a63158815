"""Issue 27, section 5 (MD surfaces): only mrec's own errors.

``mrec convert``, the MDAnalysis Reader / parser and the ASE plugin meet damaged input (a
truncated or malformed extxyz, an extxyz claiming a billion atoms, a truncated ``.mrec.zip``,
bad arguments): every failure is an :class:`mrec.MrecError` naming the file (the CLI prints one
line, no traceback), the reader library's exception is chained as the cause, and a failed
conversion leaves no half record and keeps the OUT it would have replaced."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import mrec
from mrec.errors import RefusalError, StoreError
from mrec.md.convert import convert

ase = pytest.importorskip("ase")
import ase.io  # noqa: E402
mda = pytest.importorskip("MDAnalysis")
import mrec.mdanalysis  # noqa: E402,F401 - the public path: registers the MREC format

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "mrec", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def one_line_error(p, path) -> str:
    """The CLI's stderr, checked to be one line naming ``path`` with no traceback."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mrec convert: "), p.stderr
    assert os.fspath(path) in lines[0], p.stderr
    return lines[0]


def images(n_frames=3, n_atoms=3):
    rng = np.random.default_rng(7)
    out = []
    for k in range(n_frames):
        a = ase.Atoms("OH2"[: n_atoms] if n_atoms == 3 else "H" * n_atoms,
                      positions=rng.normal(size=(n_atoms, 3)), cell=np.eye(3) * (10 + k), pbc=True)
        out.append(a)
    return out


@pytest.fixture
def good_xyz(tmp_path):
    p = tmp_path / "good.extxyz"
    ase.io.write(p, images(), format="extxyz")
    return p


def lines_of(path) -> list[bytes]:
    return open(path, "rb").read().splitlines(keepends=True)


def damaged(tmp_path, good, name: str, how) -> str:
    lines = lines_of(good)
    p = tmp_path / name
    p.write_bytes(b"".join(how(lines)))
    return p


#: damages of a 3-frame, 3-atom extxyz (5 lines a frame); frame 0 stays good in all but one
DAMAGES = {
    "cut_inside_an_atom_line_of_frame_2": lambda ls: ls[:7] + [ls[7][:12]],
    "cut_after_the_comment_of_frame_2": lambda ls: ls[:7],
    "cut_one_atom_short": lambda ls: ls[:-1],
    "not_a_number_in_frame_2": lambda ls: ls[:8] + [ls[8].replace(b" ", b" x", 2)] + ls[9:],
    "header_not_a_count": lambda ls: ls[:5] + [b"three\n"] + ls[6:],
    "garbage_bytes_in_frame_3": lambda ls: ls[:12] + [b"\xff\xfe\x00 \x8f\n"] + ls[13:],
    "bad_first_frame": lambda ls: [ls[0], ls[1], b"O 1 2\n"] + ls[3:],
}


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_cli_convert_of_a_damaged_extxyz_is_one_line_naming_the_file(tmp_path, good_xyz, case):
    src = damaged(tmp_path, good_xyz, f"{case}.extxyz", DAMAGES[case])
    out = tmp_path / "out.mrec.zip"
    one_line_error(cli("convert", src, out), src)
    assert sorted(os.listdir(tmp_path)) == sorted(["good.extxyz", src.name])      # no OUT, no leftovers


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_api_convert_of_a_damaged_extxyz_is_a_bad_input_refusal(tmp_path, good_xyz, case):
    src = damaged(tmp_path, good_xyz, f"{case}.extxyz", DAMAGES[case])
    with pytest.raises(RefusalError) as ei:
        convert(src, tmp_path / "out.mrec")
    assert ei.value.kind == "bad_input" and ei.value.path == os.fspath(src)
    assert sorted(os.listdir(tmp_path)) == sorted(["good.extxyz", src.name])


def test_the_reader_librarys_exception_is_chained_as_the_cause(tmp_path, good_xyz):
    src = damaged(tmp_path, good_xyz, "bad.extxyz", DAMAGES["not_a_number_in_frame_2"])
    with pytest.raises(RefusalError) as ei:
        convert(src, tmp_path / "out.mrec")
    assert isinstance(ei.value.__cause__, ValueError) and not isinstance(ei.value.__cause__, mrec.MrecError)
    assert "could not convert" in str(ei.value)


def tree_bytes(path) -> dict:
    if os.path.isfile(path):
        return {"": open(path, "rb").read()}
    return {os.path.relpath(os.path.join(d, f), path): open(os.path.join(d, f), "rb").read()
            for d, _, fs in os.walk(path) for f in fs}


@pytest.mark.parametrize("name", ["out.mrec", "out.mrec.zip"])
def test_a_failed_overwrite_keeps_the_previous_out(tmp_path, good_xyz, name):
    out = tmp_path / name
    convert(good_xyz, out)
    before = tree_bytes(out)
    src = damaged(tmp_path, good_xyz, "bad.extxyz", DAMAGES["cut_inside_an_atom_line_of_frame_2"])
    with pytest.raises(RefusalError):
        convert(src, out, overwrite=True)
    assert tree_bytes(out) == before
    assert sorted(os.listdir(tmp_path)) == sorted(["good.extxyz", "bad.extxyz", name])
    assert len(mrec.read_record(out).trajectory) == 3


@pytest.mark.parametrize("where", ["first", "second"])
def test_an_extxyz_claiming_a_billion_atoms_is_refused_fast_naming_the_line(tmp_path, good_xyz, where):
    claim = b"999999999\nProperties=species:S:1:pos:R:3\nH 0 0 0\n"
    body = claim if where == "first" else b"".join(lines_of(good_xyz)[:5]) + claim
    src = tmp_path / "huge.extxyz"
    src.write_bytes(body)
    line = 1 if where == "first" else 6
    t0 = time.monotonic()
    p = cli("convert", src, tmp_path / "out.mrec", timeout=30)
    msg = one_line_error(p, src)
    assert f"line {line}" in msg and "999999999" in msg
    t0 = time.monotonic()
    with pytest.raises(RefusalError) as ei:
        convert(src, tmp_path / "out.mrec")
    assert time.monotonic() - t0 < 2.0 and ei.value.kind == "bad_input"


def test_the_header_walk_follows_what_ase_accepts(tmp_path, good_xyz):
    """Trailing blank lines, compressed sources and a frame selection before a damage still convert."""
    src = tmp_path / "blank.extxyz"
    src.write_bytes(good_xyz.read_bytes() + b"\n\n")
    assert convert(src, tmp_path / "a.mrec").frames == 3
    import gzip
    gz = tmp_path / "good.extxyz.gz"
    gz.write_bytes(gzip.compress(good_xyz.read_bytes()))
    assert convert(gz, tmp_path / "b.mrec").frames == 3
    cut = damaged(tmp_path, good_xyz, "cut.extxyz", DAMAGES["cut_one_atom_short"])
    assert convert(cut, tmp_path / "c.mrec", frames="0:1").frames == 1      # ASE reads no further


def packed(tmp_path) -> str:
    out = tmp_path / "good.mrec.zip"
    ase.io.write(out, images())
    return out


@pytest.mark.parametrize("cut", ["minus_one", "half", "first_100"])
def test_mdanalysis_universe_on_a_truncated_zip_raises_an_mrec_error(tmp_path, cut):
    good = packed(tmp_path)
    data = good.read_bytes()
    n = {"minus_one": len(data) - 1, "half": len(data) // 2, "first_100": 100}[cut]
    bad = tmp_path / "cut.mrec.zip"
    bad.write_bytes(data[:n])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(mrec.MrecError) as ei:
            mda.Universe(os.fspath(bad))
    assert str(ei.value).startswith(os.fspath(bad)) and "Failed to construct" not in str(ei.value)
    assert isinstance(ei.value.__cause__, mrec.MrecError)
    assert ei.value.kind == ei.value.__cause__.kind != "error"
    with warnings.catch_warnings():                       # the trajectory of a good topology
        warnings.simplefilter("ignore")
        with pytest.raises(mrec.MrecError) as ei:
            mda.Universe(os.fspath(good), os.fspath(bad))
    assert str(ei.value).startswith(os.fspath(bad))


def test_ase_read_of_a_damaged_record_raises_an_mrec_error(tmp_path):
    good = packed(tmp_path)
    data = good.read_bytes()
    bad = tmp_path / "cut.mrec.zip"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(mrec.MrecError):
        ase.io.read(bad, index=":")
    flipped = bytearray(data)
    for i in range(200, len(data), 997):
        flipped[i] ^= 0x5A
    bad.write_bytes(bytes(flipped))
    with pytest.raises(mrec.MrecError):
        ase.io.read(bad, index=":")


@pytest.mark.parametrize("frames", ["a:b", "x", "::0", slice(0, None, 0), slice("a", None)])
def test_a_bad_frame_selection_is_refused_both_ways(tmp_path, good_xyz, frames):
    rec = tmp_path / "rec.mrec.zip"
    convert(good_xyz, rec)
    for src, out in ((good_xyz, tmp_path / "o.mrec"), (rec, tmp_path / "o.extxyz"), (rec, tmp_path / "o.xtc")):
        with pytest.raises(RefusalError) as ei:
            convert(src, out, frames=frames)
        assert ei.value.kind == "bad_frames"
        assert not os.path.lexists(out)


@pytest.mark.parametrize("ext", ["extxyz", "pdb", "xtc", "dcd"])
def test_an_output_in_a_missing_folder_is_a_store_error_naming_it(tmp_path, good_xyz, ext):
    rec = tmp_path / "rec.mrec.zip"
    convert(good_xyz, rec)
    out = tmp_path / "nowhere" / f"o.{ext}"
    with pytest.raises(StoreError) as ei:
        convert(rec, out)
    assert ei.value.path == os.fspath(out)
    assert not os.path.exists(tmp_path / "nowhere")
    one_line_error(cli("convert", rec, out), out)


def test_a_truncated_netcdf_is_one_line_without_the_readers_teardown_noise(tmp_path):
    D = pytest.importorskip("MDAnalysisTests.datafiles")
    src = tmp_path / "cut.ncdf"
    src.write_bytes(open(D.NCDF, "rb").read()[:20000])
    one_line_error(cli("convert", src, tmp_path / "o.mrec", "--top", D.PRMncdf), src)
    with pytest.raises(RefusalError) as ei:
        convert(src, tmp_path / "o.mrec", top=D.PRMncdf)
    assert ei.value.kind == "bad_input" and ei.value.__cause__ is not None


@pytest.mark.parametrize("index", ["a", "1:x", "::0", slice(0, None, 0), 1.5])
def test_ase_read_with_a_malformed_index_is_refused(tmp_path, index):
    good = packed(tmp_path)
    with pytest.raises(RefusalError) as ei:
        ase.io.read(good, index=index)
    assert ei.value.kind == "bad_frames"


@pytest.mark.parametrize("bad", [None, "x", [1, 2]])
def test_ase_write_of_something_not_atoms_is_refused_leaving_nothing(tmp_path, bad):
    out = tmp_path / "w.mrec.zip"
    with pytest.raises(RefusalError) as ei:
        ase.io.write(out, [images(1)[0], bad], format="mrec")
    assert ei.value.kind == "bad_frame" and "image 1" in str(ei.value)
    assert os.listdir(tmp_path) == []


def test_a_truncated_part_of_a_chain_reader_is_an_mrec_error_with_its_message(tmp_path, monkeypatch):
    """MDAnalysis' ChainReader turns a part's ValueError into a TypeError without its message."""
    import gc
    import traceback
    good = packed(tmp_path)
    bad = tmp_path / "cut.mrec.zip"
    bad.write_bytes(good.read_bytes()[:-1])
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)     # the half-built ChainReader's __del__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mda.Universe(os.fspath(good), [os.fspath(good), os.fspath(bad)])
        except mrec.MrecError as exc:
            got = (type(exc), str(exc), exc.kind)
            traceback.clear_frames(exc.__traceback__)
        else:
            pytest.fail("no error")
    gc.collect()
    assert got[0] is mrec.mdanalysis.RecordRefusal
    assert got[1].startswith(os.fspath(bad)) and got[2] == "bad_zip"
