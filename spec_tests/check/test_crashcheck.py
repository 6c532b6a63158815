"""tools/crashcheck/ in its short form: every sampled cut of a recorded session, both failure models."""
from __future__ import annotations

import importlib
import os
import shutil
import sys

import numpy as np
import pytest

from mrec.fs.faulty import CrashSimulator, recording_fs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _tool(name: str = "crashcheck"):
    """The package tools.<name> (``python -m tools.<name>`` from the repository root)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module(f"tools.{name}")


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
    from mrec.record.integrity import replace
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
    from mrec.record.integrity import replace
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
    `python -m tools.crashcheck --faults`, figures in docs/reliability.md)."""
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


# -- --reopen: a second writer session on the states a crash of the first left (issue 17) -----------

def _reopen_counts(out: str) -> dict:
    import re
    m = re.search(r"session-1 states (\d+), second sessions (\d+) appending \+ (\d+) truncating; their "
                  r"process-crash states (\d+), torn-write states (\d+), power-loss states (\d+) .*violations (\d+)",
                  out)
    assert m, out[:2000]
    return dict(zip(("s1", "append", "truncate", "process", "torn", "power", "violations"), map(int, m.groups())))


@pytest.mark.parametrize("model", [[], ["--strict-metadata", "--durable-always"]], ids=["ordered", "strict-always"])
def test_crashcheck_reopen_large_frames(capsys, model):
    """Large frames (one frame an inner chunk: a 1-d f64 column of 2048 rows, positions of 1400
    atoms) whose leading values repeat: crash states of a first session (an unindexed landing, an
    indexed uncommitted one, a torn 64 KiB index rewrite, a power loss), each reopened -- plainly and
    with truncate_after_step -- and appended to; every cut of that second session, whole, torn between
    pages or after a power loss, reads exactly the committed frames (docs/reliability.md, "Reopen
    mode").  Fails on main before the issue-17 rebuild fix: wrong rows and Contradiction refusals."""
    code = _tool().main(["--reopen", "--quick", "--seeds", "0", "--plan", "large-quick", "-v"] + model)
    out = capsys.readouterr().out
    c = _reopen_counts(out)
    assert c["s1"] == 4 and c["append"] == 4 and c["truncate"] >= 3, c
    assert c["process"] > 500 and c["torn"] > 150 and c["power"] > 1000, c
    for kind in ("indexed uncommitted landing", "unindexed landing", "torn after", "power loss after a landing"):
        assert kind in out, kind
    assert code == 0 and c["violations"] == 0, out[:6000]


def test_crashcheck_reopen_small_frames(capsys):
    """The small-frame session (many frames an inner chunk) through the same second sessions."""
    assert _tool().main(["--reopen", "--quick", "--seeds", "0", "--plan", "quick", "--cuts", "20"]) == 0
    c = _reopen_counts(capsys.readouterr().out)
    assert c["s1"] == 1 and c["append"] == 1 and c["truncate"] == 1 and c["process"] > 40 and c["violations"] == 0, c


def test_torn_prefixes_end_on_page_boundaries(tmp_path):
    """A write of more than a page cut by a fatal signal: a prefix ending on a page boundary of the
    file landed, the old bytes after it stay."""
    from mrec.fs.base import Op
    tool = _tool()
    assert tool.torn_prefixes(Op("write_at", "f", offset=0, length=4096, data=b"x" * 4096)) == []
    assert tool.torn_prefixes(Op("write_at", "f", offset=0, length=65540, data=b"x" * 65540)) == [4096, 36864, 65536]
    for off in (1, 100, 4095, 5000):
        got = tool.torn_prefixes(Op("write_at", "f", offset=off, length=20000, data=b"x" * 20000))
        assert got and all(0 < k < 20000 and (off + k) % 4096 == 0 for k in got), (off, got)
    fs = recording_fs()
    root = tmp_path / "r"
    root.mkdir()
    f = str(root / "f")
    fs.write_at(f, 0, b"A" * 20000)
    fs.write_at(f, 100, b"B" * 10000)
    sim = CrashSimulator(fs.ops, str(root))
    tool.materialise_torn(sim, 1, str(tmp_path / "s"), 3996)
    assert (tmp_path / "s" / "f").read_bytes() == b"A" * 100 + b"B" * 3996 + b"A" * 15904


@pytest.mark.parametrize("ordered", [True, False])
def test_second_session_starts_from_the_whole_first_state(tmp_path, ordered):
    """The operations that rebuild a crash state before a second session survive every crash of it:
    the simulator starts session 2 from exactly that tree (files, empty files, empty directories)."""
    tool = _tool()
    root = tmp_path / "base"
    (root / "a" / "b").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "a" / "f").write_bytes(b"F" * 5000)
    (root / "a" / "b" / "g").write_bytes(b"")
    (root / "zarr.json").write_bytes(b"{}")
    ops = tool.durable_tree_ops(str(root))
    sim = CrashSimulator(ops, str(root))
    want = tool.tree_digest(str(root))
    for seed in (None, "all", 1, 2):
        d = tmp_path / f"p{seed}"
        sim.materialise_power(len(ops), str(d), seed=seed, ordered_metadata=ordered)
        assert tool.tree_digest(str(d)) == want
    sim.materialise_process(len(ops), str(tmp_path / "proc"))
    assert tool.tree_digest(str(tmp_path / "proc")) == want


def test_session1_states_take_every_kind_by_turns(tmp_path):
    """The first session's crash states a reopen starts from: with 4, one of each kind around the
    landings of the large chunks (indexed uncommitted, torn index rewrite, unindexed, power loss)."""
    tool = _tool()
    plan = tool.reopen_plans(True)[0]
    ops, root, frames = tool.record(plan, str(tmp_path), True)
    published, durable = tool.commit_points(ops, root)
    states = tool.session1_states(ops, published, durable, 4)
    labels = " | ".join(s[0] for s in states)
    for kind in ("indexed uncommitted landing", "torn after", "unindexed landing", "power loss after"):
        assert kind in labels, labels
    for label, cut, how, (lo, hi, allowed) in states:
        if how == "process" or how[0] == "torn":
            assert lo == hi and hi in allowed
        else:
            assert lo <= hi and how[0] == "power"
        if how != "process":
            op = ops[cut] if how[0] == "torn" else ops[cut - 1]
            assert op.kind == "write_at" and op.offset == 0 and len(op.data) > 4096     # a 64 KiB index
    everything = tool.session1_states(ops, published, durable, None)
    assert len(everything) > len(states) and everything[-1][0].startswith("clean close")


def test_truncating_reopen_then_power_loss_keeps_the_new_frames_box(tmp_path):
    """Found by ``crashcheck --reopen --strict-metadata --durable-always`` (plan ragged-explicit):
    frames 0-9 with the cell set at frame 0 and changed at frame 5; ``open(truncate_after_step=6,
    durable="always")`` keeps frames 0-3 and shrinks the box arrays, then frames 4-7 keep frame 0's
    cell (no box update) and are flushed durably.  Every power loss of that second session (the
    strict model, everything not forced lost) must read frames 4-7 with frame 0's cell -- on main the
    shrink of the box arrays is not durable before the later commit, and frames 5-7 read the
    truncated frame 5's cell."""
    import mrec
    tool = _tool()
    s = mrec.SequenceSchema()
    s.declare_block("a", rows=2)
    s.declare_column("a", "x", "f64")
    box0 = mrec.Box(np.eye(3) * 10.0, np.array([0.5, 0.0, 1.0]), np.ones(3, bool), True)
    box5 = mrec.Box(np.eye(3) * 15.0, np.zeros(3), np.ones(3, bool), True)
    base = tmp_path / "base" / "rec.mrec"
    w = mrec.TrajectoryWriter.create(base, s, durable="always")
    for i in range(10):
        f = {"blocks": {"a": {"x": np.full(2, float(i))}}}
        if i in (0, 5):
            f["box"] = box0 if i == 0 else box5
        w.append(f, step=2 * i)
    w.close()
    start = tool.durable_tree_ops(str(base))
    fs = recording_fs()
    w = mrec.TrajectoryWriter.open(base, fs=fs, durable="always", truncate_after_step=6)
    for i in range(4, 8):
        w.append({"blocks": {"a": {"x": np.full(2, -float(i))}}, "box": box0}, step=2 * i)
    w.flush()
    w.close()
    ops = start + fs.ops
    sim = CrashSimulator(ops, str(base))
    wrong = []
    for cut in range(len(start), len(ops) + 1):
        d = tmp_path / f"s{cut}"
        sim.materialise_power(cut, str(d), seed=None, ordered_metadata=False)
        try:
            r = mrec.TrajectoryReader(d)
            assert len(r) in (4, 8, 10), (cut, len(r))
            for i in range(len(r)):
                x = float(i) if i < 4 or len(r) == 10 else -float(i)
                want = box0 if i < 5 or len(r) == 8 else box5
                if r[i].blocks["a"]["x"].tobytes() != np.full(2, x).tobytes() or r[i].box is None \
                        or r[i].box.vectors.tobytes() != want.vectors.tobytes() \
                        or r[i].box.origin.tobytes() != np.asarray(want.origin, float).tobytes():
                    wrong.append((cut, i, repr(r[i].box)))
                    break
        except mrec.MrecError as exc:
            wrong.append((cut, f"refused: {exc}"))
        shutil.rmtree(d)
    assert not wrong, wrong


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "strict"])
def test_power_loss_after_a_truncating_reopen_reads_the_lowered_commit(tmp_path, ordered):
    """Found by ``crashcheck --reopen`` (plan reopen-irregular, power loss in a second session
    opened with truncate_after_step): a block omitted in some frames has a ``step_index``
    [0 2 7 8 9] (frame ordinals).  ``open(truncate_after_step=10)`` lowers the commit marker to 6
    frames (fsynced), shrinks ``step_index`` to [0 2] (its ``zarr.json``), and the next landing
    re-encodes the partial chunk [0 2 6 fill fill] at the shard's tail, then rewrites the index.
    On main at 0520409 a power loss could keep the lowered marker and the extending chunk write but
    lose the shrink's ``zarr.json`` and the in-place index rewrite: the rebuild took the newer copy,
    the old shape [5] read [0 2 6 0 0], and the reader refused the store ("step_index is not
    strictly ascending").  Every power-loss state of the second session (the simulator, both
    models, both extremes and sampled seeds) must read the old 12 frames, the lowered 6, or the
    lowered 6 and the new frame -- each bit for bit."""
    import mrec
    s = mrec.SequenceSchema()
    s.declare_block("a", rows=2)
    s.declare_column("a", "x", "f64")
    s.declare_block("b", rows=2)
    s.declare_column("b", "y", "f64")
    base = tmp_path / "base" / "rec.mrec"
    w = mrec.TrajectoryWriter.create(base, s)
    with_b = {0, 2, 7, 8, 9}
    for i in range(12):
        f = {"blocks": {"a": {"x": np.full(2, float(i))}}}
        if i in with_b:
            f["blocks"]["b"] = {"y": np.full(2, 100.0 + i)}
        w.append(f, step=2 * i)
    w.close()
    start = _tool().durable_tree_ops(str(base))
    fs = recording_fs()
    w = mrec.TrajectoryWriter.open(base, fs=fs, truncate_after_step=10)
    w.append({"blocks": {"a": {"x": np.full(2, -1.0)}, "b": {"y": np.full(2, -2.0)}}}, step=12)
    w.flush()
    w.close()
    ops = start + fs.ops
    sim = CrashSimulator(ops, str(base))

    def expected(i, n):
        if n == 12:
            b = max(k for k in with_b if k <= i)
            return float(i), 100.0 + b
        if i == 6:
            return -1.0, -2.0
        return float(i), 100.0 + (2 if i >= 2 else 0)

    wrong = []
    for cut in range(len(start), len(ops) + 1):
        for seed in (None, "all", 1, 2, 3):
            d = tmp_path / "state"
            shutil.rmtree(d, ignore_errors=True)
            sim.materialise_power(cut, str(d), seed=seed, ordered_metadata=ordered)
            try:
                r = mrec.TrajectoryReader(d)
                if len(r) not in (6, 7, 12):
                    wrong.append((cut, seed, f"nstep {len(r)}"))
                    continue
                for i in range(len(r)):
                    x, y = expected(i, len(r))
                    if not (r[i].blocks["a"]["x"].tobytes() == np.full(2, x).tobytes()
                            and r[i].blocks["b"]["y"].tobytes() == np.full(2, y).tobytes()):
                        wrong.append((cut, seed, f"frame {i} of {len(r)}"))
                        break
            except mrec.MrecError as exc:
                wrong.append((cut, seed, f"refused: {exc}"))
    assert not wrong, wrong[:10]


def test_crashcheck_pipelined_writer(capsys):
    """Issue 16: the sessions recorded with TrajectoryWriter(pipeline=True) (automatic commits run on
    the committer thread while appends go on): every cut reads a committed prefix, as with the
    serial writer; and so does every cut of a second, pipelined session on crashed large-frame
    states."""
    tool = _tool()
    assert tool.main(["--quick", "--seeds", "1", "--cuts", "40", "--pipeline"]) == 0
    assert tool.PIPELINE is True
    assert "violations 0" in capsys.readouterr().out
    code = _tool().main(["--reopen", "--quick", "--seeds", "0", "--plan", "large-quick", "--cuts", "30", "--pipeline"])
    c = _reopen_counts(capsys.readouterr().out)
    assert code == 0 and c["violations"] == 0 and c["process"] > 100, c
