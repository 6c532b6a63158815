"""Issue 16: a pipelined writer's ``append`` leaves the declared-precision rounding to its committer.

With ``pipeline=True`` an ``append`` of one regular frame copies its ``f64`` columns unrounded
(``trajectory_land.Unrounded``) and decides whether the block changed from the rounded first values
of each column (``precision.rounded_head``), comparing in full only where those repeat; the
committer thread rounds the rows as it hands them to the appender.  What must hold: the store is
byte-identical to the serial writer's for any sequence of frames -- moving, repeated, moving by
less than the precision, moving only past the first values, NaN / inf / -0.0 / huge values,
frames that take the general path (an explicit step), ``extend`` runs, flushes and reopens -- and
the rounded head's key decides "changed" only where the stored values differ.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings, strategies as st

import mrec
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore
from mrec.record.model.precision import HEAD, HEAD_Q_MAX, quantum, round_to_precision, rounded_head

from test_encode_ahead import _tree  # noqa: E402  (spec_tests is on sys.path)

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e300, -1e300, 2.0**60, 5e-4, -5e-4, 1.5e-3, 2.5e-3]


def _schema(rows: int) -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=rows)
    s.declare_column("atoms", "x", "f64", precision=1e-3)     # x, y: one group (one precision)
    s.declare_column("atoms", "y", "f64", precision=1e-3)
    s.declare_column("atoms", "z", "f64", precision=1e-2)     # a group of its own
    s.declare_column("atoms", "v", "f64", trailing=(3,), precision=1e-3)
    s.declare_column("atoms", "w", "f64")                     # no precision: never deferred
    return s


def _next(prev: dict | None, kind: str, rng: np.random.Generator, rows: int) -> dict:
    fresh = {"x": rng.normal(size=rows), "y": rng.normal(size=rows), "z": rng.normal(size=rows),
             "v": rng.normal(size=(rows, 3)), "w": rng.normal(size=rows)}
    if prev is None or kind == "move":
        return fresh
    cols = {c: a.copy() for c, a in prev.items()}
    if kind == "tail":                  # only a value past the rounded head moves
        c = str(rng.choice(["x", "y", "z", "v"]))
        cols[c].reshape(-1)[-1] += 1.0
    elif kind == "sub":                 # moves by less than a quarter of the quantum
        for c in ("x", "y", "z", "v"):
            cols[c] += rng.uniform(-1, 1, size=cols[c].shape) * quantum(1e-3) / 4
    elif kind == "special":
        for c in ("x", "y", "z", "v", "w"):
            flat = cols[c].reshape(-1)
            k = int(rng.integers(0, len(flat)))
            flat[k] = SPECIAL[int(rng.integers(0, len(SPECIAL)))]
    return cols                         # "same": the previous values again


def _write(path: Path, rows: int, plan: list, pipeline: bool, flush_every: int) -> None:
    w = mrec.TrajectoryWriter.create(path, _schema(rows), durable=False, flush_every=flush_every, pipeline=pipeline)
    step = 0
    pending: list = []
    for cols, how in plan:
        frame = {"blocks": {"atoms": {c: a.copy() for c, a in cols.items()}}}
        if how == "extend":
            pending.append(frame)
            continue
        if pending:
            w.extend(pending)
            step += len(pending)
            pending = []
        if how == "step":               # the general path
            w.append(frame, step=step)
        elif how == "reopen":
            w.close()
            w = mrec.TrajectoryWriter.open(path, durable=False, flush_every=flush_every, pipeline=pipeline)
            w.append(frame)
        else:
            w.append(frame)
            if how == "flush":
                w.flush()
        step += 1
    if pending:
        w.extend(pending)
    w.close()


KINDS = st.sampled_from(["move", "move", "same", "sub", "tail", "special"])
HOWS = st.sampled_from(["append", "append", "append", "step", "extend", "flush", "reopen"])


@settings(max_examples=40, deadline=None)
@given(rows=st.sampled_from([1, 3, 12]), seed=st.integers(0, 2**32 - 1),
       steps=st.lists(st.tuples(KINDS, HOWS), min_size=1, max_size=14), flush_every=st.sampled_from([1, 2, 5, 64]))
def test_pipelined_append_stores_what_the_serial_writer_stores(rows, seed, steps, flush_every):
    rng = np.random.default_rng(seed)
    plan, prev = [], None
    for kind, how in steps:
        prev = _next(prev, kind, rng, rows)
        plan.append((prev, how))
    with tempfile.TemporaryDirectory() as d:
        _write(Path(d) / "serial.mrec", rows, plan, False, flush_every)
        _write(Path(d) / "pipelined.mrec", rows, plan, True, flush_every)
        assert _tree(Path(d) / "serial.mrec") == _tree(Path(d) / "pipelined.mrec")


def test_a_column_moving_past_its_head_only_is_an_update(tmp_path):
    """Every rounded head repeats: the full comparison finds the change."""
    rows = HEAD * 3
    base = {c: np.zeros(rows) for c in ("x", "y", "z", "w")} | {"v": np.zeros((rows, 3))}
    moved = {c: a.copy() for c, a in base.items()}
    moved["y"][-1] = 0.25
    unmoved = {c: a.copy() for c, a in moved.items()}
    unmoved["x"][-1] = quantum(1e-3) / 4             # below the precision: stored as frame 1
    w = mrec.TrajectoryWriter.create(tmp_path / "t.mrec", _schema(rows), pipeline=True)
    for cols in (base, moved, unmoved):
        w.append({"blocks": {"atoms": cols}})
    w.close()
    r = mrec.TrajectoryReader(tmp_path / "t.mrec")
    assert len(r) == 3
    assert r[1].blocks["atoms"]["y"][-1] == 0.25
    assert r[2].blocks["atoms"]["y"][-1] == 0.25 and r[2].blocks["atoms"]["x"][-1] == 0.0
    stored = Array.open(DirectoryStore(str(tmp_path / "t.mrec")), "trajectory/atoms/y")
    assert stored.shape[0] == 2 * rows                       # frame 2 repeats frame 1: no new rows


def test_the_caller_may_refill_its_arrays_at_once(tmp_path):
    """The unrounded rows are the writer's own copy: refilling the caller's arrays right after
    append (as an integrator does) changes nothing stored, though the rounding happens later."""
    rows = 7
    rng = np.random.default_rng(3)
    sim = {"x": np.empty(rows), "y": np.empty(rows), "z": np.empty(rows), "v": np.empty((rows, 3)), "w": np.empty(rows)}
    want = []
    w = mrec.TrajectoryWriter.create(tmp_path / "t.mrec", _schema(rows), pipeline=True, flush_every=4)
    for _ in range(11):
        for a in sim.values():
            a[...] = rng.normal(size=a.shape)
        want.append({c: a.copy() for c, a in sim.items()})
        w.append({"blocks": {"atoms": sim}})
    for a in sim.values():
        a[...] = np.nan
    w.close()
    r = mrec.TrajectoryReader(tmp_path / "t.mrec")
    for i, cols in enumerate(want):
        got = r[i].blocks["atoms"]
        assert got["x"].tobytes() == round_to_precision(cols["x"], 1e-3).tobytes()
        assert got["v"].tobytes() == round_to_precision(cols["v"], 1e-3).tobytes()
        assert got["w"].tobytes() == cols["w"].tobytes()


@settings(max_examples=300, deadline=None)
@given(a=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=12),
       b=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=12),
       p=st.sampled_from([1e-3, 1e-2, 0.5, 3.0, 2.0**-1000, 2.0**900, 2.0**1000]))
def test_different_head_keys_mean_different_stored_values(a, b, p):
    """The key of a value is the key of its rounding, and different keys mean different stored
    values (the precondition of deciding "changed" from the heads alone)."""
    n = min(len(a), len(b))
    x, y = np.array(a[:n]), np.array(b[:n])
    kx, ky = rounded_head(x[None], p), rounded_head(y[None], p)
    if quantum(p) > HEAD_Q_MAX:
        assert kx is None and ky is None
        return
    rx, ry = round_to_precision(x, p), round_to_precision(y, p)
    assert rounded_head(rx[None], p) == kx
    if kx != ky:
        assert rx[:HEAD].tobytes() != ry[:HEAD].tobytes()


def test_unrounded_rows_never_reach_an_appender_unrounded(tmp_path, monkeypatch):
    """Every row list the committer hands to an appender is settled (no Unrounded left)."""
    from mrec.record.trajectory import land as trajectory_land
    from mrec.zarr.append import ShardedAppender
    seen = []
    real = ShardedAppender.append_many

    def spy(self, rows):
        seen.extend(type(r) for r in rows)
        return real(self, rows)
    monkeypatch.setattr(ShardedAppender, "append_many", spy)
    w = mrec.TrajectoryWriter.create(tmp_path / "t.mrec", _schema(4), pipeline=True, flush_every=3)
    rng = np.random.default_rng(0)
    for _ in range(10):
        w.append({"blocks": {"atoms": _next(None, "move", rng, 4)}})
    w.close()
    assert seen and trajectory_land.Unrounded not in seen
