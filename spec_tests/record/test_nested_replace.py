"""Replacing a group inside a record (``write_section(..., overwrite=True)``, ``write_frame(path, f,
group="a/b", overwrite=True)``) is recoverable like a whole-record overwrite (docs/reliability.md,
"Nested overwrites"; rows ``NREP-*`` of docs/conformance.md).

Each session is recorded operation by operation (``mrec.fs.faulty.recording_fs``) and cut at every
operation (``CrashSimulator``, process crash: what the OS received); each state is then given to
one entry point, which must recover it: the group holds the complete old version until the commit
rename (``.mrec-tmp-new-<name>``) was issued and the complete new one after it, and nothing of the
replace is left in the record.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.errors import MrecError
from mrec.fs.faulty import CrashSimulator, recording_fs
from mrec.archive.pack import pack
from mrec.check.repair import repair
from mrec.check.validate import validate
from test_store_safety import killed_before_rename  # noqa: E402  (spec_tests is on sys.path under pytest)

REPO = Path(__file__).resolve().parents[2]
TMP = ".mrec-tmp-"

OLD = {"blocks": {"atoms": {"x": np.arange(5.0), "q": np.array([1, 2, 3, 4, 5], np.int32)}}}
NEW = {"blocks": {"atoms": {"x": -np.arange(3.0)}, "ions": {"q": np.array([0.5, -0.5])}}}
GROUPS = {"section": "frame", "group": "a/b"}       # the scenario -> the group it replaces


@pytest.fixture
def scratch():
    """A scratch directory, in memory when the machine has one (thousands of small trees)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="mrec-nrep-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _version(f) -> str:
    """'old' / 'new' for a frame bit-identical to one of the two, else what it holds."""
    for tag, want in (("old", OLD), ("new", NEW)):
        if set(f.blocks) == set(want["blocks"]) and all(
                set(f.blocks[b]) == set(cols) and all(
                    np.asarray(f.blocks[b][c]).tobytes() == np.asarray(v).tobytes() for c, v in cols.items())
                for b, cols in want["blocks"].items()):
            return tag
    return f"neither: {sorted(f.blocks)}"


def _overwrite(path, scenario: str, value, fs=None) -> None:
    if scenario == "section":
        mrec.write_section(path, "frame", value, overwrite=True, fs=fs)
    else:
        mrec.write_frame(path, value, group="a/b", overwrite=True, fs=fs)


def _session(parent: Path, scenario: str):
    """(ops, index of the commit rename): the record made, then its group overwritten."""
    fs = recording_fs()
    path = parent / "r.mrec"
    mrec.write_record(path, meta={"title": "t"}, status={"state": "s"}, frame=OLD, fs=fs)
    mrec.write_frame(path, OLD, group="a/b", fs=fs)
    start = len(fs.ops)
    _overwrite(path, scenario, NEW, fs=fs)
    ops = fs.ops
    # the new group is complete under some name once its build (.mrec-tmp-<name>.<hex>) is renamed
    commit = next(i for i in range(start, len(ops)) if ops[i].kind == "rename"
                  and os.path.basename(ops[i].data.decode()).startswith(TMP))
    return ops, start, commit


def _temps(root: Path) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in dirs + files if n.startswith(TMP)]
    return sorted(out)


def _states(tmp_path: Path, scenario: str):
    """(cut, state directory's record, the version allowed) for every cut of the overwrite."""
    src = tmp_path / "session"
    src.mkdir()
    ops, start, commit = _session(src, scenario)
    sim = CrashSimulator(ops, str(src))
    for cut in range(start, len(ops) + 1):
        dest = tmp_path / f"cut{cut}"
        sim.materialise_process(cut, str(dest))
        yield cut, dest / "r.mrec", "new" if cut > commit else "old"


def _schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=5)
    s.declare_column("atoms", "x", "f64")
    return s


def _siblings(root: Path) -> list[str]:
    return [t for t in _temps(root) if os.path.basename(t).startswith((f"{TMP}new-", f"{TMP}old-"))]


def _group_version(g) -> str:
    return _version(mrec.Frame(blocks={b: dict(sub.arrays) for b, sub in g.groups.items()}))


def _entry(way: str, path: Path, node: str):
    """Run one entry point on the crash state; the version it read (None for a writer)."""
    if way == "read_record":
        with mrec.read_record(path) as rec:
            assert not [s for s in rec.sections() if s.startswith(TMP)], rec.sections()
            assert not [k for k in rec.unknown if TMP in k], sorted(rec.unknown)
            return _version(rec.frame) if node == "frame" else None
    if way == "read_frame":
        return _version(mrec.read_frame(path, group=node))
    if way == "read_group":
        return _group_version(mrec.read_group(path, node))
    if way == "repack":                             # a new record from this one: the group, no temporaries
        from mrec.archive.repack import repack
        out = path.parent / "out.mrec"
        repack(path, out)
        assert _temps(out) == [], _temps(out)
        return _version(mrec.read_frame(out, group=node))
    if way == "sections":
        got = mrec.sections(path)
        assert not [s for s in got if s.startswith(TMP)] and node.split("/")[0] in got, got
        return None
    if way == "write_section":
        mrec.write_section(path, "notes", {"attributes": {"k": 1}})
    elif way == "write_frame":
        mrec.write_frame(path, OLD, group="c/d")
    elif way == "writer_create":
        w = mrec.TrajectoryWriter.create(path, _schema())
        w.append({"blocks": {"atoms": {"x": np.zeros(5)}}}, step=0, time=0.0)
        w.close()
    elif way == "writer_open":
        with pytest.raises(MrecError):              # no trajectory to append to; recovered first
            mrec.TrajectoryWriter.open(path)
    elif way == "repair":
        try:
            repair(path)
        except MrecError:                           # no trajectory: nothing more to check
            pass
    elif way == "pack":
        z = pack(path, keep=True)
        with zipfile.ZipFile(z) as zf:
            assert not [n for n in zf.namelist() if TMP in n], zf.namelist()
        return _version(mrec.read_frame(z, group=node))
    return None


READS = ("read_record", "read_frame", "read_group", "sections", "repack")
WRITES = ("write_section", "write_frame", "writer_create", "writer_open", "repair", "pack")


@pytest.mark.parametrize("scenario", sorted(GROUPS))
def test_nested_overwrite_cut_at_every_op_recovered_by_every_entry_point(scratch, scenario):
    """A process crash at any operation of a nested overwrite, then any entry point of the record:
    the group is the complete old one before the commit rename and the complete new one after it
    (never absent, never a mixture); no ``new`` / ``old`` sibling is left; a writer (or repair,
    pack) leaves nothing of the replace at all, and a read never shows a temporary node."""
    node = GROUPS[scenario]
    seen = []
    for cut, state, want in _states(scratch, scenario):
        for way in READS + WRITES:
            case = scratch / f"c{cut}-{way}"
            shutil.copytree(state.parent, case)
            path = case / "r.mrec"
            got = _entry(way, path, node)
            assert got in (None, want), (cut, way, got, want)
            assert _siblings(path) == [], (cut, way, _siblings(path))
            if way in WRITES:
                assert _temps(path) == [], (cut, way, _temps(path))
            if way != "pack":
                assert _version(mrec.read_frame(path, group=node)) == want, (cut, way)
        seen.append(want)
    assert "old" in seen and "new" in seen


@pytest.mark.parametrize("scenario", sorted(GROUPS))
def test_crash_between_the_renames_leaves_the_group(tmp_path, scenario):
    """The window issue 17.7 closed for whole records, inside a record: a process crash after the old
    group was renamed aside and before the new one is renamed in.  The group must read (old or new
    by the recovery rule), not be absent, and pack must not archive the half-replaced record."""
    src = tmp_path / "session"
    src.mkdir()
    ops, start, _ = _session(src, scenario)
    node = GROUPS[scenario]
    parent, _, name = node.rpartition("/")
    aside = next(i for i in range(start, len(ops)) if ops[i].kind == "rename"
                 and os.path.basename(ops[i].data.decode()) == name)      # the old group renamed away
    sim = CrashSimulator(ops, str(src))
    dest = tmp_path / "state"
    sim.materialise_process(aside + 1, str(dest))
    path = dest / "r.mrec"
    assert not (path / node).exists()                                      # the window itself
    for way in ("read_frame", "pack"):
        case = tmp_path / way
        shutil.copytree(dest, case)
        p = case / "r.mrec"
        if way == "read_frame":
            assert _version(mrec.read_frame(p, group=node)) in ("old", "new")
        else:
            z = pack(p, keep=True)
            assert _version(mrec.read_frame(z, group=node)) in ("old", "new")
            with zipfile.ZipFile(z) as zf:
                assert not [n for n in zf.namelist() if TMP in n], zf.namelist()


def _digest(root: Path) -> list:
    out = []
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        out.append((os.path.relpath(d, root), sorted((f, (Path(d) / f).read_bytes()) for f in files)))
    return out


def _record_with_group(parent: Path) -> Path:
    path = parent / "r.mrec"
    mrec.write_record(path, meta={"title": "t"}, status={"state": "s"}, frame=OLD)
    mrec.write_frame(path, OLD, group="a/b")
    return path


def test_recovery_rules_for_a_group(tmp_path):
    """The states an interrupted replace of the group ``a/b`` can leave, built by hand, and what the
    next read makes of each: a committed new group always wins; an old one without a new one is
    removed when the group exists and put back when it does not.  A name both a sibling and a build
    could have made, with no partner (``.mrec-tmp-old-b.<8 hex>``: how the former protocol named
    the group it moved aside), is left alone, reported by validate and refused by pack."""
    cases = {   # present names -> what a/b holds after recovery
        ("b", "new"): "new",          # committed, old not yet moved: roll forward
        ("new", "old"): "new",        # between the two renames: roll forward
        ("b", "old"): "b",            # swapped, old not yet removed: remove it
        ("old",): "old",              # impossible by the protocol; roll back
        ("new",): "new",
    }
    names = {"b": "b", "new": f"{TMP}new-b", "old": f"{TMP}old-b"}
    for k, (present, want) in enumerate(cases.items()):
        path = _record_with_group(tmp_path / f"c{k}")
        shutil.rmtree(path / "a" / "b")
        for which in present:
            src = _record_with_group(tmp_path / f"src{k}-{which}")
            if which != "b":
                mrec.write_frame(src, NEW if which == "new" else OLD, group="a/b", overwrite=True)
            os.rename(src / "a" / "b", path / "a" / names[which])
        if want == "b":
            want = "old"
        assert _version(mrec.read_frame(path, group="a/b")) == want, (present, want)
        assert sorted(os.listdir(path / "a")) == ["b", "zarr.json"], (present, os.listdir(path / "a"))

    path = _record_with_group(tmp_path / "legacy")
    legacy = path / "a" / f"{TMP}old-b.5ed68d80"
    os.rename(path / "a" / "b", legacy)
    before = _digest(path)
    with pytest.raises(MrecError) as e:
        mrec.read_frame(path, group="a/b")
    assert e.value.kind == "missing_section"
    assert legacy.is_dir()
    report = validate(path)
    assert [(v.rule, v.kind, v.path) for v in report.violations] == [("NREP-4", "interrupted_replace", str(legacy))]
    with pytest.raises(MrecError) as e:
        pack(path)
    assert e.value.kind == "stray_temp_files" and f"{TMP}old-b.5ed68d80" in str(e.value)
    assert _digest(path) == before


def test_a_live_build_is_never_removed(tmp_path):
    """A build whose writer still holds its lock (a write_section running in another process) is left
    by every recovery -- reads, repair, pack -- and pack refuses the record meanwhile; once the lock
    is gone, pack removes the abandoned build and packs."""
    from mrec.fs import DEFAULT_FS
    path = _record_with_group(tmp_path)
    build = path / "a" / f"{TMP}b.0badf00d"
    build.mkdir()
    (build / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    held = DEFAULT_FS.lock(str(build), directory=True)
    try:
        assert _version(mrec.read_frame(path, group="a/b")) == "old"
        with mrec.read_record(path) as rec:
            assert not [k for k in rec.unknown if TMP in k]
        report = repair(path)
        assert build.is_dir() and not [r for r in report.recovered if "removed" in r]
        with pytest.raises(MrecError) as e:
            pack(path, keep=True)
        assert e.value.kind == "stray_temp_files"
        assert build.is_dir()
        v = validate(path)
        assert v.ok and [w.rule for w in v.warnings] == ["NREP-4"]
    finally:
        held.release()
    z = pack(path)
    assert not build.exists() and _version(mrec.read_frame(z, group="a/b")) == "old"


def test_validate_reports_and_repair_recovers(tmp_path):
    """On every crash state of a nested overwrite: validate reports each ``new`` / ``old`` sibling
    (rule NREP-4, kind interrupted_replace; a build: a warning) and changes nothing; ``mrec repair
    --dry-run`` lists them and changes nothing; ``mrec repair`` recovers them, after which validate
    finds nothing."""
    kinds = set()
    for cut, path, want in _states(tmp_path, "group"):
        before = _digest(path.parent)
        report = validate(path)
        leftovers = [t for t in _temps(path)]
        flagged = sorted(os.path.relpath(v.path, path) for v in report.violations + report.warnings
                         if v.rule == "NREP-4")
        assert flagged == leftovers, (cut, flagged, leftovers)
        assert all(v.kind == "interrupted_replace" for v in report.violations + report.warnings if v.rule == "NREP-4")
        kinds |= {v.severity for v in report.violations + report.warnings if v.rule == "NREP-4"}
        dry = repair(path, dry_run=True)
        assert bool(dry.recovered) == bool(leftovers), (cut, dry.recovered)
        assert _digest(path.parent) == before
        done = repair(path)
        assert bool(done.recovered) == bool(leftovers), (cut, done.recovered)
        assert _temps(path) == [] and validate(path).ok and not validate(path).warnings
        assert _version(mrec.read_frame(path, group="a/b")) == want
    assert kinds == {"error", "warning"}


def _kill_nested_overwrite_at(parent: Path, step: int) -> Path:
    """A real process overwriting the section ``frame`` of ``r.mrec`` SIGKILLed just before its
    ``step``-th rename (its file replaces included)."""
    path = parent / "r.mrec"
    mrec.write_record(path, meta={}, status={"state": "s"}, frame=OLD)
    killed_before_rename(step, f"mrec.write_section({str(path)!r}, 'frame', {{'blocks': {{'atoms': {{'x': -np.arange(3.0)}}, "
                               "'ions': {'q': np.array([0.5, -0.5])}}}, overwrite=True)")
    return path


def test_section_overwrite_killed_at_each_rename_recovers(tmp_path):
    """A real process killed before each of the directory renames that end a section overwrite
    (and the last file replace before them): the next read finds the complete old section before
    the commit rename and the complete new one after it -- never none."""
    from mrec.fs import RecordingFileSystem
    probe = _record_with_group(tmp_path / "probe")
    fs = RecordingFileSystem()
    mrec.write_section(probe, "frame", NEW, overwrite=True, fs=fs)
    total = sum(op.kind in ("rename", "replace") for op in fs.ops)
    seen = []
    for step in range(total - 3, total + 1):
        case = tmp_path / f"k{step}"
        case.mkdir()
        path = _kill_nested_overwrite_at(case, step)
        with mrec.read_record(path) as rec:
            seen.append(_version(rec.frame))
        assert _siblings(path) == []
    assert seen == ["old", "old", "new", "new"], seen


def test_a_group_added_to_a_record_a_crashed_overwrite_committed(tmp_path):
    """The record itself sits committed under ``.mrec-tmp-new-<name>`` (a whole-record overwrite
    killed between its renames): write_frame(group=...) adds the group to that record, rolled
    forward first -- it neither makes a new store nor refuses the name as taken."""
    path = _record_with_group(tmp_path)
    os.rename(path, tmp_path / f"{TMP}new-r.mrec")
    mrec.write_frame(path, NEW, group="c/d")
    assert sorted(os.listdir(tmp_path)) == ["r.mrec"]
    assert _version(mrec.read_frame(path, group="c/d")) == "new"
    assert _version(mrec.read_frame(path, group="a/b")) == "old"


def test_a_name_taken_by_a_directory_is_refused_not_replaced(tmp_path):
    """Without overwrite, a group name held by a directory that is no node (no zarr.json) is refused
    (kind ``exists``) by the commit, under the directory lock, and the directory is left as it was
    (the rename-aside code replaced it silently)."""
    path = _record_with_group(tmp_path)
    (path / "x").mkdir()
    (path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(MrecError) as e:
        mrec.write_section(path, "x", mrec.Group({"k": 1}))
    assert e.value.kind == "exists"
    assert sorted(os.listdir(path / "x")) == ["keep.txt"] and _temps(path) == []
