"""tools/crashcheck.py in its short form: every sampled cut of a recorded session, both failure models."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from mrec.fs.faulty import CrashSimulator, recording_fs

TOOL = os.path.join(os.path.dirname(__file__), "..", "tools", "crashcheck.py")


def _tool():
    spec = importlib.util.spec_from_file_location("crashcheck", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_crashcheck_quick(capsys):
    assert _tool().main(["--quick", "--seeds", "1", "--cuts", "50"]) == 0
    out = capsys.readouterr().out
    assert "violations 0" in out


def _counts(out: str) -> dict:
    import re
    m = re.search(r"temp-leftover states repaired then packed (\d+), overwrite states (\d+) process / (\d+) power, "
                  r"violations (\d+)", out)
    return dict(zip(("temp", "ow_process", "ow_power", "violations"), map(int, m.groups())))


def test_crashcheck_temp_leftovers_repaired_then_packed(capsys):
    """Every cut inside an atomic replace, with its temp file left (process crash): reopening the
    writer, or `mrec repair` alone, removes it and pack accepts the store."""
    assert _tool().main(["--quick", "--seeds", "0", "--plan", "quick"]) == 0
    c = _counts(capsys.readouterr().out)
    assert c["temp"] > 20 and c["violations"] == 0, c


@pytest.mark.parametrize("strict", [False, True])
def test_crashcheck_overwrite_holds_old_or_new(capsys, strict):
    """write_record(overwrite=True) cut at every op, both failure models: after recovery the path
    holds the complete old or the complete new record (the new one once committed)."""
    args = ["--quick", "--seeds", "2", "--plan", "overwrite"] + (["--strict-metadata"] if strict else [])
    assert _tool().main(args) == 0
    c = _counts(capsys.readouterr().out)
    assert c["ow_process"] > 100 and c["ow_power"] > 300 and c["violations"] == 0, c


def rename_aside_commit(self, *, overwrite, refuse_exists):
    """``replace.Build.commit`` as it was before issue 17.7: rename the old tree aside, then the new
    one in, nothing committed under a well-known name."""
    import secrets
    from mrec.fs import remove_tree
    fs, final, parent = self.fs, self.final, self.parent
    if fs.exists(final):
        old = os.path.join(parent, f".mrec-tmp-old-{os.path.basename(final)}.{secrets.token_hex(4)}")
        fs.rename(final, old)
        fs.rename(self.path, final)
        fs.fsync_dir(parent)
        remove_tree(fs, old)
    else:
        fs.rename(self.path, final)
        fs.fsync_dir(parent)
    self.release()


def test_crashcheck_overwrite_catches_the_unrecoverable_window(capsys, monkeypatch):
    """The checker's power: the former protocol (rename the old record aside, then the new one in,
    nothing committed under a well-known name) leaves states where the path holds no record."""
    from mrec.record import replace
    monkeypatch.setattr(replace.Build, "commit", rename_aside_commit)
    assert _tool().main(["--quick", "--seeds", "1", "--plan", "overwrite", "-v"]) == 1
    out = capsys.readouterr().out
    assert _counts(out)["violations"] > 0 and "the path is absent (allowed: ['old'])" in out


def _nested_counts(out: str) -> dict:
    import re
    m = re.search(r"crashcheck nested overwrite: (\d+) ops .*process-crash states (\d+), power-loss states (\d+) "
                  r".*violations (\d+)", out)
    return dict(zip(("ops", "process", "power", "violations"), map(int, m.groups())))


@pytest.mark.parametrize("strict", [False, True])
def test_crashcheck_nested_overwrite_holds_old_or_new(capsys, strict):
    """write_section(frame, overwrite=True) and write_frame(group="a/b", overwrite=True) cut at every op,
    both failure models, each state given to one entry point of the record (read_record, read_frame,
    read_group, write_section, TrajectoryWriter.create, repair, pack): the group holds the complete
    old or new version (the new one once committed), the rest of the record is intact, nothing of the
    replace is left and pack archives none of it."""
    args = ["--seeds", "1", "--plan", "nested-overwrite"] + (["--strict-metadata"] if strict else [])
    assert _tool().main(args) == 0
    c = _nested_counts(capsys.readouterr().out)
    assert c["process"] > 90 and c["power"] > 250 and c["violations"] == 0, c


def test_crashcheck_nested_overwrite_catches_the_rename_aside_protocol(capsys, monkeypatch):
    """The checker's power on nested groups: the former protocol (rename the old group aside, then the
    new one in) leaves states where the group is absent after recovery."""
    from mrec.record import replace
    monkeypatch.setattr(replace.Build, "commit", rename_aside_commit)
    assert _tool().main(["--seeds", "0", "--plan", "nested-overwrite", "-v"]) == 1
    out = capsys.readouterr().out
    assert _nested_counts(out)["violations"] > 0 and "the group does not exist" in out


def test_power_loss_model_moves_a_renamed_directory_with_its_contents(tmp_path):
    """Directories are inodes in the simulator: a renamed directory takes its files along, and a
    dropped rename leaves them under the old name (never split, never lost)."""
    fs = recording_fs()
    root = tmp_path / "r"
    root.mkdir()
    a = root / "a"
    fs.makedirs(str(a / "sub"))
    fs.write_at(str(a / "sub" / "f"), 0, b"F" * 10)
    fs.fsync(str(a / "sub" / "f"))
    for d in (a / "sub", a, root):
        fs.fsync_dir(str(d))
    fs.rename(str(a), str(root / "b"))              # not yet durable
    sim = CrashSimulator(fs.ops, str(root))
    seen = set()
    for seed in [None, "all"] + list(range(20)):
        d = tmp_path / f"s{seed}"
        sim.materialise_power(len(fs.ops), str(d), seed=seed)
        names = sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))
        assert names in (["a", "a/sub", "a/sub/f"], ["b", "b/sub", "b/sub/f"]), names
        assert (d / names[2]).read_bytes() == b"F" * 10
        seen.add(names[0])
    assert seen == {"a", "b"}
    proc = tmp_path / "proc"
    sim.materialise_process(len(fs.ops), str(proc))
    assert (proc / "b" / "sub" / "f").read_bytes() == b"F" * 10 and not (proc / "a").exists()


def test_crashcheck_quick_strict_model_with_durable_always(capsys):
    """Where only fsync orders anything (no journal), a writer with durable='always' keeps every
    commit: chunks fsynced before any zarr.json, each zarr.json fsynced as written and its directory
    before the next, a group rewrite after its arrays, the commit marker last."""
    assert _tool().main(["--quick", "--seeds", "1", "--cuts", "50", "--strict-metadata", "--durable-always"]) == 0
    out = capsys.readouterr().out
    assert "violations 0" in out and "strict" in out and "durable='always'" in out


def test_durable_always_fsyncs_automatic_flushes(tmp_path):
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    kinds = {}
    for durable in (True, "always"):
        fs = recording_fs()
        w = mrec.TrajectoryWriter.create(tmp_path / f"{durable}.mrec", s, fs=fs, flush_every=2, durable=durable)
        fs.clear()
        for i in range(2):                                   # the second append flushes automatically
            w.append({"blocks": {"atoms": {"x": np.arange(2.0) + i}}})
        kinds[durable] = [op.kind for op in fs.ops]
        w.close()
    assert "fsync" not in kinds[True] and "fsync_dir" not in kinds[True]
    assert "fsync" in kinds["always"] and kinds["always"][-1] == "fsync_dir"
    for bad in ("yes", 2, None):
        try:
            mrec.TrajectoryWriter.create(tmp_path / "bad.mrec", s, durable=bad)
        except mrec.RefusalError as e:
            assert e.kind == "bad_durable" and "durable" in str(e)
        else:
            raise AssertionError(f"durable={bad!r} accepted")
        assert not (tmp_path / "bad.mrec").exists()


def test_durable_create_in_an_existing_record_syncs_its_root(tmp_path):
    """TrajectoryWriter.create inside a record that already exists: the root directory, which now
    holds trajectory/'s entry, is fsynced before trajectory/zarr.json is published."""
    import mrec
    mrec.write_record(tmp_path / "r.mrec", meta={"creator": {"name": "t"}}, status={"state": "running"})
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=1)
    s.declare_column("atoms", "x", "f64")
    fs = recording_fs()
    mrec.TrajectoryWriter.create(tmp_path / "r.mrec", s, fs=fs).close()
    rel = [(op.kind, os.path.relpath(op.path, tmp_path / "r.mrec")) for op in fs.ops]
    publish = rel.index(("replace", os.path.join("trajectory", "zarr.json")))
    assert ("fsync_dir", ".") in rel[:publish]


def test_power_loss_model_drops_unsynced_and_keeps_synced(tmp_path):
    fs = recording_fs()
    root = tmp_path / "r"
    root.mkdir()
    a, b = str(root / "a"), str(root / "b")
    fs.write_at(a, 0, b"A" * 1024)
    fs.fsync(a)
    fs.fsync_dir(str(root))
    fs.write_at(a, 0, b"B" * 1024)          # an in-place overwrite, never synced
    fs.write_at(b, 0, b"C" * 10)            # a new file, its directory entry never synced
    sim = CrashSimulator(fs.ops, str(root))
    lost = tmp_path / "lost"
    sim.materialise_power(len(fs.ops), str(lost), seed=None)
    assert (lost / "a").read_bytes() == b"A" * 1024 and not (lost / "b").exists()
    kept = tmp_path / "kept"
    sim.materialise_power(len(fs.ops), str(kept), seed="all")
    assert (kept / "a").read_bytes() == b"B" * 1024 and (kept / "b").read_bytes() == b"C" * 10
    torn = set()
    for seed in range(40):                  # sector-granular tears: each 512-byte half old or new
        d = tmp_path / f"s{seed}"
        sim.materialise_power(len(fs.ops), str(d), seed=seed)
        data = (d / "a").read_bytes()
        assert data[:512] in (b"A" * 512, b"B" * 512) and data[512:] in (b"A" * 512, b"B" * 512)
        torn.add(data[:1] + data[512:513])
    assert torn == {b"AA", b"AB", b"BA", b"BB"}
    proc = tmp_path / "proc"
    sim.materialise_process(len(fs.ops), str(proc))
    assert (proc / "a").read_bytes() == b"B" * 1024 and (proc / "b").read_bytes() == b"C" * 10
    assert np.all(np.frombuffer((proc / "a").read_bytes(), np.uint8) == ord("B"))


def test_crashcheck_faults_quick(capsys):
    """ENOSPC / EIO at sampled writes and fsyncs of a session (flushes, automatic flushes, a close
    and reopen): WriteError with the errno, every retry refused, the reported-committed frames
    bit-identical with no block vanished, reopen continues (issue 17.4-17.5; the full sweep is
    `python tools/crashcheck.py --faults`, figures in docs/reliability.md)."""
    assert _tool().main(["--faults", "--quick", "--cuts", "12"]) == 0
    out = capsys.readouterr().out
    assert "violations 0" in out and "No space left on device" in out and "Input/output error" in out


def test_crashcheck_faults_flags_a_writer_that_forgets_a_failure(capsys, monkeypatch):
    """The checker itself: a writer that swallows the failure and lets a retry through is reported."""
    import mrec
    tool = _tool()
    real = mrec.TrajectoryWriter._commit

    def forgetful(self, durable):                # the writer before the fix: fail, then retry freely
        try:
            real(self, durable)
        finally:
            self.failed = None
    monkeypatch.setattr(mrec.TrajectoryWriter, "_commit", forgetful)
    assert tool.main(["--faults", "--quick", "--cuts", "4"]) == 1
    assert "after the failure the writer accepted" in capsys.readouterr().out
