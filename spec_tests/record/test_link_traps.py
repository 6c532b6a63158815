"""Issue 27, section 1: nothing outside the target is ever touched (docs/reliability.md, "Issue 27:
links and leftovers").

Every path that removes, replaces or truncates -- overwrite, pack, unpack, repack, repair, convert,
the MDAnalysis and ASE writers, the removal of leftovers -- is given a symbolic link where it
writes (to a directory, to a record, to a file, dangling) and must refuse it (``RefusalError``, kind
``bad_target``, naming the link) with every byte outside unchanged; a target holding links is
replaced without entering them; and the ``.mrec-tmp-*`` leftovers of a run killed by SIGKILL are
removed by the next run into the same target, and nothing else is.
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.errors import RefusalError
from mrec.fs import DEFAULT_FS
from mrec.md.convert import convert
from mrec.archive.pack import pack, unpack
from mrec.archive.repack import repack
from mrec.check.repair import repair

REPO = Path(__file__).resolve().parents[2]
FRAME = {"blocks": {"atoms": {"x": np.arange(3.0)}}}


def schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    return s


def closed_record(path: Path, n: int = 4) -> Path:
    """A small closed trajectory record with a system (elements), so every converter takes it."""
    mrec.write_record(path, meta={}, system={"blocks": {"atoms": {"element": np.array(["O", "H", "H"], dtype=object)}}})
    with mrec.TrajectoryWriter.create(path, schema()) as w:
        for i in range(n):
            w.append({"blocks": {"atoms": {c: np.arange(3.0) + i + k for k, c in enumerate("xyz")}}}, step=i)
    return path


def snapshot(root: Path) -> dict:
    """Every entry under ``root`` (links as links, never followed): path -> content digest / link text."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture
def world(tmp_path):
    """``outside/``: what must never change -- files, a record (holding a temp file of the shape a
    writer would clean), bait named like mrec's leftovers -- and, beside it, the sources."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "notes.txt").write_bytes(b"years of work")
    (outside / "sub" / "data.bin").write_bytes(os.urandom(4096))
    (outside / ".mrec-tmp-notes.txt.0badf00d").write_bytes(b"not a leftover of mrec's")
    (outside / ".out.mrec.mrec-tmp-0badf00d").mkdir()
    rec = closed_record(outside / "rec.mrec")
    (rec / "trajectory" / ".mrec-tmp-zarr.json.0badf00d").write_bytes(b"bait")
    work = tmp_path / "work"
    work.mkdir()
    src = closed_record(work / "src.mrec")
    z = pack(src, out=work / "src.mrec.zip", keep=True)
    convert(src, work / "src.xyz")
    return {"outside": outside, "work": work, "src": src, "zip": z, "xyz": work / "src.xyz", "rec": rec}


TRAPS = {"dir": "outside", "record": "outside/rec.mrec", "file": "outside/notes.txt",
         "dangling": "outside/missing"}


def _mda_writer(w, t):
    import MDAnalysis as mda
    import mrec.md.mdanalysis  # noqa: F401  (registers the format)
    with mda.Writer(str(t), n_atoms=3, format="MREC", overwrite=True):
        pass


def _ase_write(w, t):
    from ase import Atoms
    from mrec.md.ase_io import write_mrec
    write_mrec(str(t), Atoms("OH2", positions=np.zeros((3, 3))))


def _write_demo(w, t):
    from mrec.demo import write_demo
    write_demo(t.parent, n_atoms=3, n_frames=1)


# name -> (the name the link takes in work/, what is done with it)
OPS = {
    "write_record": ("out.mrec", lambda w, t: mrec.write_record(t, meta={}, frame=FRAME)),
    "write_record_overwrite": ("out.mrec", lambda w, t: mrec.write_record(t, meta={}, frame=FRAME, overwrite=True)),
    "write_frame_overwrite": ("out.mrec", lambda w, t: mrec.write_frame(t, FRAME, overwrite=True)),
    "write_section": ("out.mrec", lambda w, t: mrec.write_section(t, "extra", {"attributes": {"k": 1}}, overwrite=True)),
    "trajectory_create": ("out.mrec", lambda w, t: mrec.TrajectoryWriter.create(t, schema()).close()),
    "trajectory_open": ("out.mrec", lambda w, t: mrec.TrajectoryWriter.open(t).close()),
    "repair": ("out.mrec", lambda w, t: repair(t)),
    "repair_dry_run": ("out.mrec", lambda w, t: repair(t, dry_run=True)),
    "pack_into": ("out.mrec.zip", lambda w, t: pack(w["src"], out=t, keep=True)),
    "pack_into_overwrite": ("out.mrec.zip", lambda w, t: pack(w["src"], out=t, keep=True, overwrite=True)),
    "pack_source": ("out.mrec", lambda w, t: pack(t)),
    "unpack_into": ("out.mrec", lambda w, t: unpack(w["zip"], out=t)),
    "repack_dir": ("out.mrec", lambda w, t: repack(w["src"], t, overwrite=True)),
    "repack_zip": ("out.mrec.zip", lambda w, t: repack(w["src"], t, overwrite=True)),
    "convert_into_mrec": ("out.mrec", lambda w, t: convert(w["xyz"], t, overwrite=True)),
    "convert_into_zip": ("out.mrec.zip", lambda w, t: convert(w["xyz"], t, overwrite=True)),
    "convert_export": ("out.xyz", lambda w, t: convert(w["src"], t, overwrite=True)),
    "mdanalysis_writer": ("out.mrec", _mda_writer),
    "ase_write": ("out.mrec", _ase_write),
    "demo": ("demo.mrec", _write_demo),
}


@pytest.mark.parametrize("trap", sorted(TRAPS))
@pytest.mark.parametrize("op", sorted(OPS))
def test_a_link_where_mrec_writes_is_refused_and_nothing_it_leads_to_changes(world, op, trap):
    """Before: ``repack(src, out, overwrite=True)`` with ``out`` a link to a directory deleted every
    file of that directory, then raised a bare NotADirectoryError; other paths replaced the link,
    wrote through it or cleaned temp-named files of whatever it led to."""
    name, run = OPS[op]
    link = world["work"] / name
    os.symlink(world["work"].parent / TRAPS[trap], link)
    before, listing = snapshot(world["outside"]), sorted(os.listdir(world["work"]))
    with pytest.raises(RefusalError) as e:
        run(world, link)
    assert e.value.kind == "bad_target" and str(link) in str(e.value) and "symbolic link" in str(e.value)
    assert snapshot(world["outside"]) == before
    assert os.readlink(link) == str(world["work"].parent / TRAPS[trap])
    assert sorted(os.listdir(world["work"])) == listing            # nothing made beside it either


def test_cli_repack_overwrite_into_a_link_is_refused(world):
    link = world["work"] / "out.mrec"
    os.symlink(world["outside"], link)
    before = snapshot(world["outside"])
    p = subprocess.run([sys.executable, "-m", "mrec", "repack", str(world["src"]), str(link), "--overwrite"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert str(link) in p.stderr and "symbolic link" in p.stderr
    assert snapshot(world["outside"]) == before


@pytest.mark.parametrize("group", ["extra", "extra/deeper"])
def test_a_group_reached_through_a_link_inside_a_record_is_refused(world, group):
    """write_section / write_frame(group=...) build and replace in the group's parent directory: a link
    on the way (the group itself, or a parent) would put that outside the record."""
    rec = world["work"] / "r.mrec"
    mrec.write_record(rec, meta={}, frame=FRAME)
    os.symlink(world["outside"], rec / "extra")
    before = snapshot(world["outside"])
    for run in (lambda: mrec.write_frame(rec, FRAME, group=group, overwrite=True),
                lambda: mrec.write_section(rec, "extra", {"attributes": {"k": 1}}, overwrite=True)):
        with pytest.raises(RefusalError) as e:
            run()
        assert e.value.kind == "bad_target" and str(rec / "extra") in str(e.value)
    assert snapshot(world["outside"]) == before


def test_unpack_keep_false_of_an_archive_that_is_a_link_is_refused(world):
    link = world["work"] / "l.mrec.zip"
    os.symlink(world["zip"], link)
    raw = world["zip"].read_bytes()
    with pytest.raises(RefusalError) as e:
        unpack(link, out=world["work"] / "u.mrec", keep=False)
    assert e.value.kind == "bad_target" and str(link) in str(e.value)
    assert link.is_symlink() and world["zip"].read_bytes() == raw and not (world["work"] / "u.mrec").exists()
    assert unpack(link, out=world["work"] / "u.mrec").is_dir()      # keep=True only reads through it


def test_pack_keep_of_a_record_that_is_a_link_reads_through_it(world):
    link = world["work"] / "l.mrec"
    os.symlink(world["rec"], link)
    (world["rec"] / "trajectory" / ".mrec-tmp-zarr.json.0badf00d").unlink()   # else: stray temp, refused
    before = snapshot(world["outside"])
    z = pack(link, keep=True)
    assert z.is_file() and snapshot(world["outside"]) == before and link.is_symlink()


def test_remove_tree_refuses_a_root_that_is_a_link(world):
    from mrec.fs import remove_tree
    link = world["work"] / "l"
    os.symlink(world["outside"], link)
    before = snapshot(world["outside"])
    with pytest.raises(RefusalError) as e:
        remove_tree(DEFAULT_FS, str(link))
    assert e.value.kind == "bad_target" and str(link) in str(e.value)
    assert snapshot(world["outside"]) == before and link.is_symlink()


# -- a target holding links is replaced without entering them ---------------------------------------

def _old_with_links(world, path: Path) -> Path:
    closed_record(path)
    os.symlink(world["outside"], path / "linked_dir")
    os.symlink(world["outside"] / "notes.txt", path / "trajectory" / "linked_file")
    return path


REPLACING = {
    "write_record": lambda w, t: mrec.write_record(t, meta={}, frame=FRAME, overwrite=True),
    "write_frame": lambda w, t: mrec.write_frame(t, FRAME, overwrite=True),
    "repack_dir": lambda w, t: repack(w["src"], t, overwrite=True),
    "convert_into_mrec": lambda w, t: convert(w["xyz"], t, overwrite=True),
    "mdanalysis_writer": lambda w, t: _mda_write_frames(t),
    "ase_write": _ase_write,
}


def _mda_write_frames(t):
    import MDAnalysis as mda
    import mrec.md.mdanalysis  # noqa: F401
    src = mda.Universe(str(t.parent / "src.xyz"))
    with mda.Writer(str(t), n_atoms=src.atoms.n_atoms, format="MREC", overwrite=True) as W:
        for _ in src.trajectory:
            W.write(src.atoms)


@pytest.mark.parametrize("op", sorted(REPLACING))
def test_overwriting_a_record_that_holds_links_unlinks_them_never_enters(world, op):
    target = _old_with_links(world, world["work"] / "out.mrec")
    before = snapshot(world["outside"])
    REPLACING[op](world, target)
    assert snapshot(world["outside"]) == before
    assert not (target / "linked_dir").exists() and not (target / "trajectory" / "linked_file").is_symlink()
    assert mrec.read_record(target).meta is not None
    assert [e for e in os.listdir(world["work"]) if ".mrec-tmp-" in e] == []


def test_overwriting_a_group_that_holds_links_unlinks_them(world):
    rec = world["work"] / "r.mrec"
    mrec.write_record(rec, meta={}, frame=FRAME)
    mrec.write_section(rec, "extra", {"attributes": {"k": 1}})
    os.symlink(world["outside"], rec / "extra" / "linked_dir")
    before = snapshot(world["outside"])
    mrec.write_section(rec, "extra", {"attributes": {"k": 2}}, overwrite=True)
    assert snapshot(world["outside"]) == before and not os.path.lexists(rec / "extra" / "linked_dir")


# -- leftovers: what a killed run left is removed by the next one, nothing else ---------------------

KILLER = textwrap.dedent("""
    import importlib, os, signal, sys
    sys.path.insert(0, {repo!r})
    P, R = importlib.import_module("mrec.archive.pack"), importlib.import_module("mrec.archive.repack")
    T = importlib.import_module("mrec.md.text")

    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    op, src, zip_, out = sys.argv[1:5]
    calls = [0]

    def second_kills(real):
        def second(*a, **k):
            calls[0] += 1
            if calls[0] == 2:
                die()
            return real(*a, **k)
        return second

    if op == "pack":
        P._verify_archive = die
        P.pack(src, out=out, keep=True)
    elif op == "pack_remove":
        P.remove_tree = die
        P.pack(src, out=out)
    elif op == "unpack":
        P._extract_entry = second_kills(P._extract_entry)
        P.unpack(zip_, out=out)
    elif op == "export":
        T.write_xyz = second_kills(T.write_xyz)
        importlib.import_module("mrec.md.convert").convert(src, out)
    else:
        R._write_shards = die
        R.repack(src, out, overwrite=True)
""")


def _leftovers(d: Path) -> set[str]:
    return {e for e in os.listdir(d) if ".mrec-tmp-" in e or e.endswith(".mrec-partial")}


def _kill_mid(op: str, src: Path, zip_: Path, out: Path) -> set[str]:
    before = _leftovers(out.parent)
    p = subprocess.run([sys.executable, "-c", KILLER.format(repo=str(REPO)), op, str(src), str(zip_), str(out)],
                       capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    left = _leftovers(out.parent) - before
    assert left, "the killed run left nothing to clean"
    return left


KILLED = {       # op -> (OUT's name, kind of leftover, the next run into OUT, the leftover's name suffix)
    "pack": ("out.mrec.zip", "file", lambda w, out: pack(w["src"], out=out, keep=True, overwrite=True), ""),
    "unpack": ("out.mrec", "dir", lambda w, out: unpack(w["zip"], out=out), ""),
    "repack_dir": ("out.mrec", "dir", lambda w, out: repack(w["src"], out, overwrite=True), ""),
    "repack_zip": ("out.mrec.zip", "dir", lambda w, out: repack(w["src"], out, overwrite=True), ""),
    "export": ("out.xyz", "file", lambda w, out: convert(w["src"], out), ".mrec-partial"),
}


def _bait(world, d: Path, name: str, kind: str, other_kind: bool, suffix: str = ""):
    """Things beside OUT the next run must leave: a link, the other kind (unless the run makes both:
    repack into a zip packs too) and another OUT's name, all in the leftover's name pattern, and one
    a live run holds (its flock taken here)."""
    from mrec.fs.posix import PosixFileSystem
    stem = f".{name}.mrec-tmp-"
    baits = {}
    os.symlink(world["outside"], d / f"{stem}11111111{suffix}")
    baits[f"{stem}11111111{suffix}"] = "link"
    if other_kind:
        other = d / f"{stem}22222222{suffix}"
        (other.write_bytes(b"x") if kind == "dir" else other.mkdir())
        baits[other.name] = "other kind"
    foreign = d / f".another{name}.mrec-tmp-33333333{suffix}"
    (foreign.mkdir() if kind == "dir" else foreign.write_bytes(b"x"))
    baits[foreign.name] = "another name"
    live = d / f"{stem}44444444{suffix}"
    (live.mkdir() if kind == "dir" else live.write_bytes(b"x"))
    held = PosixFileSystem().lock(str(live), directory=kind == "dir")
    baits[live.name] = "live"
    return baits, held


@pytest.mark.parametrize("op", sorted(KILLED))
def test_the_next_run_removes_what_a_killed_one_left_and_nothing_else(world, op):
    name, kind, again, suffix = KILLED[op]
    out = world["work"] / name
    left = _kill_mid(op, world["src"], world["zip"], out)
    assert all((out.parent / e).is_dir() == (kind == "dir") for e in left), left
    baits, held = _bait(world, out.parent, name, kind, op != "repack_zip", suffix)
    before = snapshot(world["outside"])
    try:
        again(world, out)
    finally:
        held.release(remove=False)
    assert _leftovers(out.parent) == set(baits), (_leftovers(out.parent), baits)
    assert snapshot(world["outside"]) == before
    if op == "export":                      # the same 4 frames as the export that was never killed
        assert out.read_bytes() == world["xyz"].read_bytes()
    else:
        assert len(mrec.read_record(out).trajectory) == 4


def test_a_pack_killed_while_removing_its_source_is_cleaned_by_the_next_pack_of_that_name(world):
    """pack(keep=False) renames the packed source aside (``.<name>.mrec-tmp-<8 hex>/``, its archive
    durable) before removing it; killed there, the aside is removed by the next pack (or unpack) of
    a record of that name."""
    src, out = world["src"], world["work"] / "p.mrec.zip"
    left = _kill_mid("pack_remove", src, world["zip"], out)
    assert not src.exists() and all(e.startswith(".src.mrec.mrec-tmp-") for e in left)
    assert len(mrec.read_record(out).trajectory) == 4              # the archive is whole
    closed_record(src)
    pack(src, out=world["work"] / "q.mrec.zip")
    assert _leftovers(world["work"]) == set() and not src.exists()


@pytest.mark.parametrize("sibling", ["new", "old", "old-alone"])
def test_links_under_the_names_of_an_interrupted_overwrite_are_left_alone(world, sibling):
    """``.mrec-tmp-new-<name>`` / ``.mrec-tmp-old-<name>`` are the names an interrupted overwrite
    leaves (directories mrec renamed); a link under one is never mrec's: recovery (on a read, a
    write, repair) neither removes nor promotes it -- before, it was unlinked, or renamed to
    ``<name>`` -- and an overwrite that needs the name is refused, naming it."""
    rec = world["work"] / "r.mrec"
    if sibling != "old-alone":
        mrec.write_record(rec, meta={}, frame=FRAME)
    link = world["work"] / f".mrec-tmp-{sibling.split('-')[0]}-r.mrec"
    os.symlink(world["rec"], link)
    before = snapshot(world["outside"])
    if sibling == "old-alone":
        with pytest.raises(mrec.MrecError):
            mrec.read_record(rec)
        assert not os.path.lexists(rec)
    else:
        assert mrec.read_record(rec).frame is not None
        repair(rec)
        with pytest.raises(RefusalError) as e:
            mrec.write_record(rec, meta={}, frame=FRAME, overwrite=True)
        assert e.value.kind == "bad_target" and str(link) in str(e.value)
        assert mrec.read_record(rec).frame is not None
    assert os.readlink(link) == str(world["rec"]) and snapshot(world["outside"]) == before
