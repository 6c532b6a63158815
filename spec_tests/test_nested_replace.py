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
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.errors import MrecError
from mrec.fs.faulty import CrashSimulator, recording_fs
from mrec.pack import pack
from mrec.repair import repair
from mrec.validate import validate

REPO = Path(__file__).resolve().parents[1]
TMP = ".mrec-tmp-"

OLD = {"blocks": {"atoms": {"x": np.arange(5.0), "q": np.array([1, 2, 3, 4, 5], np.int32)}}}
NEW = {"blocks": {"atoms": {"x": -np.arange(3.0)}, "ions": {"q": np.array([0.5, -0.5])}}}
GROUPS = {"section": "frame", "group": "a/b"}       # the scenario -> the group it replaces


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


def _read_back(path: Path, scenario: str) -> str:
    node = GROUPS[scenario]
    return _version(mrec.read_frame(path, group=node))


@pytest.mark.parametrize("scenario", sorted(GROUPS))
def test_nested_overwrite_cut_at_every_op_reads_old_or_new(tmp_path, scenario):
    """A process crash at any operation of a nested overwrite, then read_record: the group is the
    complete old one before the commit rename, the complete new one after — never absent — and
    the record holds no section named after a temporary."""
    seen = []
    for cut, path, want in _states(tmp_path, scenario):
        with mrec.read_record(path) as rec:
            got = _version(rec.frame) if scenario == "section" and rec.frame is not None else None
            assert not [s for s in rec.sections() if s.startswith(TMP)], (cut, rec.sections())
            assert not [k for k in rec.unknown if TMP in k], (cut, sorted(rec.unknown))
        if scenario == "group":
            got = _read_back(path, scenario)
        assert got == want, (cut, got, want)
        assert _temps(path) == [], (cut, _temps(path))
        seen.append(got)
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
            import zipfile
            with zipfile.ZipFile(z) as zf:
                assert not [n for n in zf.namelist() if TMP in n], zf.namelist()
