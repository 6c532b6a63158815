"""The batch path takes frames as a simulation hands them — explicit steps and times, a cell, per-step
meta values (energies) — and writes exactly the store the general path writes frame by frame.

Three writers run the same operations: ``loop`` (the general path, ``_append_checked``), ``append``
(``append(frame, step=, time=)``, a run of one frame on the batch path) and ``batch``
(``extend(frames, steps=, times=)``).  Same bytes, same automatic flush points, same refusals
(kind), same writer state; steps and times as progressions, with breaks, NaN, numpy scalars, and
values the general path refuses.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mrec
from mrec.errors import RefusalError
from mrec.record.trajectory.batch_plan import RunPlanner
from mrec.record.trajectory.writer import TrajectoryWriter

from test_extend import Pair, atoms, ions, run_session, schema as base_schema  # noqa: E402  (spec_tests is on sys.path under pytest)
from test_traj_engine import tree_hash  # noqa: E402


def schema():
    """test_extend's blocks, with per-step meta keys of three scalar tags (two with fills)."""
    s = base_schema()
    s.declare_meta("pe", "f64")
    s.declare_meta("n", "i64", fill=-1)
    s.declare_meta("ok", "bool", fill=True)
    return s


META = st.fixed_dictionaries(
    {"pe": st.one_of(st.floats(width=64), st.sampled_from([np.float64(2.5), np.nan, -0.0, 3]))},
    optional={"n": st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from([np.int32(4), 2.0, 2**63])),
              "ok": st.sampled_from([True, False, np.bool_(True), 1]),
              "zz": st.just(1.0)})                                 # an undeclared key: refused


@st.composite
def md_frame(draw, prev):
    """A frame as an engine hands it (blocks, a cell, meta) or, now and then, one the general path
    takes (a Frame, masks) or refuses (a missing meta key without fill, bad values)."""
    kind = draw(st.sampled_from(["md"] * 12 + ["repeat", "frame", "no_meta", "masked", "bad_box"]))
    if kind == "repeat" and prev is not None:
        return prev
    blocks = {"atoms": draw(atoms()), "ions": draw(ions())}
    meta = draw(META)
    box = draw(st.sampled_from(["same", "same", "diag", "none"]))
    box = {"same": mrec.Box(np.eye(3) * 4.0), "diag": mrec.Box(np.diag([4.0, 5.0, 6.0])), "none": None}[box]
    if kind == "frame":
        try:
            return mrec.Frame(blocks=blocks, box=box, meta=meta)
        except RefusalError:
            return {"blocks": blocks, "meta": meta}
    if kind == "no_meta":
        return {"blocks": blocks}                                   # pe has no fill: refused
    if kind == "masked":
        k = len(blocks["ions"]["q"])
        return {"blocks": blocks, "meta": meta, "masks": {"ions": {"q": np.array([False] + [True] * (k - 1))}}}
    if kind == "bad_box":
        return {"blocks": blocks, "meta": meta, "box": np.zeros((2, 2))}
    return {"blocks": blocks, "meta": meta, "box": box}


def steps_of(draw, n, last):
    """n steps: mostly a progression from after ``last`` (stride 1, 10 or a break), some default
    (None), numpy integers, and values the general path refuses (a repeat, a bool, a float)."""
    out = []
    stride = draw(st.sampled_from([1, 10, 10, 7]))
    s = (last if last is not None else draw(st.sampled_from([-1, 99, 2**62 - 3]))) + stride
    for _ in range(n):
        kind = draw(st.sampled_from(["next"] * 10 + ["none", "np", "jump", "repeat", "bool", "float"]))
        if kind == "none":
            out.append(None)
            s += 1
            continue
        if kind == "jump":
            s += draw(st.integers(1, 2**40))
        if kind == "repeat":
            out.append(s - stride)
            continue
        out.append({"np": np.int64(s), "bool": True, "float": float(s)}.get(kind, s))
        s += stride
    return out


def times_of(draw, n):
    """n times: None (no times), a progression, with a break, NaN or an int now and then."""
    mode = draw(st.sampled_from(["none", "none", "prog", "prog", "prog", "mixed"]))
    if mode == "none":
        return None
    dt = draw(st.sampled_from([0.002, 0.1, 1.0, 0.0]))
    out = [0.5 + i * dt for i in range(n)]
    for i in range(n):
        kind = draw(st.sampled_from(["keep"] * 8 + ["break", "nan", "int", "none", "np"]))
        if kind == "break":
            out[i] += 1e-3
        elif kind == "nan":
            out[i] = float("nan")
        elif kind == "int":
            out[i] = 7
        elif kind == "np":
            out[i] = np.float32(1.5)
        elif kind == "none" and mode == "mixed":
            out[i] = None                                           # all-or-nothing: refused
    return out


@st.composite
def session(draw):
    ops, prev = [], None
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["extend", "extend", "extend", "append", "flush", "reopen"]))
        if op in ("extend", "append"):
            n = 1 if op == "append" else draw(st.integers(0, 12))
            frames = []
            for _ in range(n):
                prev = draw(md_frame(prev))
                frames.append(prev)
            ops.append((op, frames, draw(st.data())))
        else:
            ops.append((op,))
    return ops, draw(st.integers(1, 9)), draw(st.sampled_from([4096, 4096, 1, 3]))


class Trio(Pair):
    """The same operations through the general path, append and extend (see the module docstring)."""

    def __init__(self, root, flush_every):
        super().__init__(root, flush_every, schema)

    def run(self, op):
        if op[0] in ("extend", "append"):
            frames, data = op[1], op[2]
            steps = steps_of(data.draw, len(frames), self.w["loop"].buffer.step.last)
            if data.draw(st.booleans()):
                steps = None
            op = (op[0], frames, steps, times_of(data.draw, len(frames)))
        super().run(op)

    def add(self, m, w, op):
        _, frames, steps, times = op
        if m == "batch":
            w.extend(frames, steps=steps, times=times)
            return
        for k, f in enumerate(frames):
            (w._append_checked if m == "loop" else w.append)(
                f, step=None if steps is None else steps[k], time=None if times is None else times[k])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(session())
def test_md_frames_on_the_batch_path_write_the_bytes_of_the_general_path(tmp_path_factory, monkeypatch, s):
    run_session(Trio, tmp_path_factory.mktemp("md"), monkeypatch, s)


def _md_frames(n, atoms=4):
    rng = np.random.default_rng(1)
    box = mrec.Box(np.eye(3) * 4.0)
    return [{"blocks": {"atoms": {"x": rng.normal(size=atoms), "y": rng.normal(size=atoms),
                                  "id": np.arange(atoms, dtype=np.uint64)},
                        "ions": {"q": rng.normal(size=2), "v": rng.normal(size=(2, 3))}},
             "box": box, "meta": {"pe": float(i), "n": i}} for i in range(n)]


def test_md_frames_take_the_batch_path(tmp_path, monkeypatch):
    """append(frame, step=, time=) of an engine's frame and extend(..., steps=, times=) plan runs (one
    frame each for append, one run per flush for extend): none goes to the general path."""
    calls = []
    monkeypatch.setattr(TrajectoryWriter, "_append_checked", lambda *a, **k: calls.append(a))
    frames = _md_frames(20, atoms=4)
    w = TrajectoryWriter.create(tmp_path / "a.mrec", schema(), flush_every=7, durable=False)
    for i, f in enumerate(frames):
        w.append(f, step=100 + 10 * i, time=0.2 * i)
    w.close()
    runs = []
    real = RunPlanner.plan_run
    monkeypatch.setattr(RunPlanner, "plan_run", lambda self, *a, **k: runs.append(real(self, *a, **k)) or runs[-1])
    w = TrajectoryWriter.create(tmp_path / "b.mrec", schema(), flush_every=7, durable=False)
    w.extend(frames, steps=range(100, 300, 10), times=[0.2 * i for i in range(20)])
    w.close()
    assert calls == [] and [r.count for r in runs] == [7, 7, 6]
    assert tree_hash(tmp_path / "a.mrec") == tree_hash(tmp_path / "b.mrec")
    r = mrec.TrajectoryReader(tmp_path / "b.mrec")
    assert r.steps.tolist() == list(range(100, 300, 10)) and r.times.tolist() == [0.2 * i for i in range(20)]
    assert [r[i].meta["pe"] for i in range(20)] == [float(i) for i in range(20)]
    assert r.box_at(19) == mrec.Box(np.eye(3) * 4.0)


def test_extend_steps_or_times_running_out_is_refused_after_the_frames_before(tmp_path):
    frames = _md_frames(5)
    w = TrajectoryWriter.create(tmp_path / "a.mrec", schema(), durable=False)
    with pytest.raises(RefusalError) as e:
        w.extend(frames, steps=[1, 2, 3])
    assert e.value.kind == "bad_argument" and "steps ran out" in str(e.value) and w.nframes == 3
    with pytest.raises(RefusalError) as e:
        w.extend(frames, times=5)
    assert e.value.kind == "bad_argument" and "iterable of times" in str(e.value) and w.nframes == 3
    w.close()
