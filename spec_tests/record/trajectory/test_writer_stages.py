"""The trajectory writer's stages, each tested alone (issue 30), and the coordinator that wires them.

FramePlanner (a frame -> its frozen plan, refusals, no store at all) -> RowBuffer (apply, take: a
CommitBatch, no I/O) -> Lander (chunk bytes and shard indexes, nothing else) -> Committer (chunks,
then each zarr.json, then trajectory/zarr.json with nstep, recorded).  opening.create / reopen build
their initial state; TrajectoryWriter holds them, the counts and the sticky failure.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.fs import RecordingFileSystem
from mrec.record.model.precision import round_to_precision
from mrec.record.trajectory import opening
from mrec.record.trajectory.buffer import CommitBatch, RowBuffer, _BlockState, _BoxState, _Series
from mrec.record.trajectory.commit import Committer, Guard
from mrec.record.trajectory.land import Lander
from mrec.record.trajectory.batch_plan import RunPlanner
from mrec.record.trajectory.plan import FramePlan, FramePlanner, RunPlan
from mrec.record.trajectory.writer import TrajectoryWriter

ROWS = 4


def _schema(meta: bool = False) -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    if meta:
        s.declare_meta("energy", "f64")
    return s


def _frame(i: int) -> dict:
    return {"blocks": {"atoms": {"x": np.random.default_rng(i).normal(size=ROWS)}}}


class _Latest:
    """The read-only view the planner reads, with no arrays and no store behind it."""

    def __init__(self, schema):
        self.blocks = {n: _BlockState(n, d) for n, d in schema.blocks.items()}
        self.box = _BoxState()
        self.step = _Series(True)
        self.has_time = None


def _planner(schema, latest=None) -> RunPlanner:
    return RunPlanner(schema, {}, "/nowhere.mrec", latest or _Latest(schema))


def _started(tmp_path, *, durable=False, pipeline=False):
    """The stages of a new trajectory, as opening.create leaves them, over a recording file system."""
    fs = RecordingFileSystem()
    start = opening.create(tmp_path / "t.mrec", _schema(), durable=durable, fs=fs, flush_every=100,
                           pipeline=pipeline)
    return start, fs


# -- the planner: a frame -> its plan, without any I/O ----------------------------------------------
def test_the_planner_plans_a_frame_rounded_and_frozen():
    s = _schema()
    f = _frame(0)
    given = f["blocks"]["atoms"]["x"].copy()
    plan = _planner(s).plan_frame(f, 7)
    assert isinstance(plan, FramePlan)
    assert (plan.index, plan.step, plan.time, plan.meta, plan.box) == (7, 0, None, {}, None)
    rows, values, masks = plan.blocks["atoms"]
    assert rows == ROWS and masks == {}
    assert values["x"].tobytes() == round_to_precision(given, 1e-3).tobytes()
    assert f["blocks"]["atoms"]["x"].tobytes() == given.tobytes()      # the caller's array untouched
    with pytest.raises(AttributeError):
        plan.step = 3                                                  # frozen


def test_the_planner_drops_a_block_equal_to_its_latest_update():
    s = _schema()
    latest = _Latest(s)
    x = round_to_precision(_frame(0)["blocks"]["atoms"]["x"], 1e-3)
    latest.blocks["atoms"].last = (ROWS, {"x": x}, {})
    assert _planner(s, latest).plan_frame(_frame(0), 1).blocks == {}
    assert list(_planner(s, latest).plan_frame(_frame(1), 1).blocks) == ["atoms"]


def test_the_planner_refuses_from_the_latest_state_and_changes_nothing():
    s = _schema(meta=True)
    latest = _Latest(s)
    latest.step.last = 5
    latest.has_time = True
    p = _planner(s, latest)
    frame = {**_frame(0), "meta": {"energy": 1.0}}
    with pytest.raises(mrec.RefusalError) as e:
        p.plan_frame(frame, 3, step=5, time=1.0)
    assert e.value.kind == "step_not_increasing"
    with pytest.raises(mrec.RefusalError) as e:
        p.plan_frame(frame, 3, step=6)
    assert e.value.kind == "partial_time" and "frame 3 drops the time" in str(e.value)
    with pytest.raises(mrec.RefusalError) as e:
        p.plan_frame(_frame(0), 3, step=6, time=1.0)
    assert e.value.kind == "missing_meta_value"
    assert (latest.step.last, latest.has_time, latest.blocks["atoms"].last) == (5, True, None)
    assert p.plan_frame(frame, 3, step=6, time=1.0).meta == {"energy": 1.0}


def test_the_planner_plans_a_run_up_to_the_room_left():
    s = _schema()
    p = _planner(s)
    batch = [_frame(i) for i in range(5)]
    run = p.plan_run(batch, 1, 10, 3, False)
    assert isinstance(run, RunPlan)
    assert (run.count, run.first, run.first_step, run.box_updates) == (3, 10, 0, [])
    (name, rows, values, _masks, upd, lazy), = run.blocks
    assert (name, rows, list(upd), lazy) == ("atoms", ROWS, [True] * 3, None)
    assert values["x"][2].tobytes() == round_to_precision(batch[3]["blocks"]["atoms"]["x"], 1e-3).tobytes()
    latest = _Latest(s)
    latest.has_time = True                   # a writer with times takes the general path
    assert _planner(s, latest).plan_run(batch, 0, 0, 3, False) is None


# -- the buffer: apply, take ---------------------------------------------------------------------
def test_the_buffer_applies_plans_and_takes_a_commit_batch_without_io(tmp_path):
    start, fs = _started(tmp_path)
    buf, planner = start.buffer, start.planner
    assert isinstance(buf, RowBuffer) and planner.latest is buf
    fs.clear()
    buf.apply(planner.plan_frame(_frame(0), 0))
    buf.apply_run(planner.plan_run([_frame(1)], 0, 1, 99, False))
    assert buf.step.last == 1 and buf.blocks["atoms"].n_updates == 2
    batch = buf.take(2)
    assert fs.ops == []
    assert isinstance(batch, CommitBatch)
    assert [w.path for w in batch.order] == ["trajectory/atoms/x"]
    assert batch.groups == [("trajectory/atoms", {"uniform_rows": ROWS, "dense_updates": True})]
    assert batch.progressions == (("step_progression", {"start": 0, "stride": 1}), ("time_progression", None))
    assert (batch.nframes, batch.moves) == (2, [])
    assert buf.take(2).groups == []           # published groups are taken once
    start.guard.release_lock()


def test_a_pipelined_buffer_holds_rows_until_they_are_taken(tmp_path):
    start, _fs = _started(tmp_path, pipeline=True)
    buf, planner = start.buffer, start.planner
    buf.apply(planner.plan_frame(_frame(0), 0))
    (x,) = [w for w in buf.writers() if w.path.endswith("/x")]
    assert len(x.held) == 1 and x.appender.pending_rows == 0
    batch = buf.take(1)
    assert [(w, len(rows)) for w, rows in batch.moves] == [(x, 1)] and x.held == []
    start.lander.hand_over(batch.moves)
    assert x.appender.pending_rows == ROWS
    start.guard.release_lock()


# -- the lander: chunk bytes, then each shard's index; nothing published ------------------------------
def test_the_lander_lands_chunks_and_indexes_only(tmp_path):
    start, fs = _started(tmp_path)
    start.buffer.apply(start.planner.plan_frame(_frame(0), 0))
    batch = start.buffer.take(1)
    notes = []
    fs.clear()
    keys = start.lander.land(batch.order, lambda what, key: notes.append((what, key)))
    assert keys == ["trajectory/atoms/x/c/0"]
    assert notes == [("landing rows of array trajectory/atoms/x into", "trajectory/atoms/x/c/0")]
    assert {op.kind for op in fs.ops} == {"mkdir", "write_at"}          # the shard's directory, its bytes
    assert all(op.path.endswith("trajectory/atoms/x/c/0") for op in fs.ops if op.kind == "write_at")
    assert start.lander.failed_encode() is None
    start.guard.release_lock()


# -- the committer: the order of the commit protocol --------------------------------------------------
def test_the_committer_publishes_in_the_protocols_order(tmp_path):
    start, fs = _started(tmp_path, durable=True)
    start.buffer.apply(start.planner.plan_frame(_frame(0), 0))
    batch = start.buffer.take(1)
    fs.clear()
    com = start.committer
    assert isinstance(com, Committer) and com.lander is start.lander
    com.commit(batch, durable=True)
    ops = [(op.kind, op.path.split("t.mrec/")[-1], op.fsync) for op in fs.ops]
    writes = [i for i, op in enumerate(ops) if op[0] == "write_at"]
    replaces = [op[1] for op in ops if op[0] == "replace"]
    assert replaces == ["trajectory/atoms/x/zarr.json", "trajectory/atoms/zarr.json", "trajectory/zarr.json"]
    first_publish = next(i for i, op in enumerate(ops) if op[0] == "replace")
    assert max(writes) < first_publish                         # chunk bytes before any zarr.json
    assert ("fsync", "trajectory/atoms/x/c/0", False) in ops[max(writes):first_publish]
    assert all(op[2] for op in ops if op[0] == "replace")      # durable: each zarr.json fsynced
    assert ops[-2][:2] == ("replace", "trajectory/zarr.json") and ops[-1][:2] == ("fsync_dir", "trajectory")
    assert (com.committed, com.marker["nstep"]) == (1, 1)
    assert mrec.TrajectoryReader(tmp_path / "t.mrec")[0].blocks["atoms"]["x"].tobytes() == \
        round_to_precision(_frame(0)["blocks"]["atoms"]["x"], 1e-3).tobytes()
    start.guard.release_lock()


def test_a_queued_commit_lands_what_a_commit_now_lands(tmp_path):
    trees = []
    for queued in (False, True):
        start, _fs = _started(tmp_path / str(queued), pipeline=queued)
        start.buffer.apply(start.planner.plan_frame(_frame(0), 0))
        if queued:
            start.committer.queue(start.buffer.take(1), False)
            start.committer.drain()
            start.committer.surface()
            start.committer.stop()
        else:
            start.committer.commit(start.buffer.take(1), False)
        start.guard.release_lock()
        root = tmp_path / str(queued) / "t.mrec"
        trees.append({p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()})
    assert trees[0] == trees[1]


def test_a_failed_commit_names_what_it_was_doing(tmp_path):
    start, _fs = _started(tmp_path)
    com = start.committer
    com._note("landing rows of array trajectory/atoms/x into", "trajectory/atoms/x/c/0")
    err = com.failure(OSError(28, "No space left on device"))
    assert "landing rows of array trajectory/atoms/x into" in str(err) and "No space left" in str(err)
    assert err.errno == 28 and isinstance(err.__cause__, OSError)
    guard = start.guard
    guard.poison(err)                       # the committer thread's poisoning: failed, lock released
    assert guard.failed is err and guard.lock is None


# -- the coordinator -----------------------------------------------------------------------------
def test_the_writer_holds_the_stages_and_wires_them(tmp_path):
    w = TrajectoryWriter.create(tmp_path / "t.mrec", _schema(), flush_every=2)
    assert TrajectoryWriter.__mro__ == (TrajectoryWriter, object)      # no stage mixed in
    assert isinstance(w.planner, FramePlanner) and w.planner.latest is w.buffer
    assert isinstance(w.lander, Lander) and w.lander.arrays.__self__ is w.buffer
    assert w.committer.lander is w.lander and w.committer.guard is w.guard and isinstance(w.guard, Guard)
    with pytest.raises(mrec.RefusalError):
        w.append(_frame(0), step=-1.5)
    assert (w.nframes, w.buffer.step.last, w.committed) == (0, None, 0)     # a refusal changes nothing
    for i in range(3):
        w.append(_frame(i))
    assert (w.nframes, w.committed, w.committer.marker["nstep"]) == (3, 2, 2)
    w.close()
    assert w.committed == 3 and w.guard.lock is None


def test_opening_never_imports_the_writer():
    src = Path(opening.__file__).read_text()
    names = {a.name if isinstance(n, ast.Import) else n.module or "" for n in ast.walk(ast.parse(src))
             if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert not any(name == "writer" or name.endswith(".writer") for name in names)
