"""The trajectory writer owns the rows it buffers: a caller that reuses its arrays in place between
calls (an MD engine's positions buffer, MDAnalysis' ``ts.positions``) gets every frame stored as it
was when ``append`` returned.

Before this was tested the writer kept views of the caller's arrays until the next landing (up to
``flush_every`` frames later) wherever no conversion made a copy — a column without precision, a
column already on its precision grid, a mask of bools — so every buffered frame was stored with
the buffer's *last* contents, silently; and ``extend`` took an iterator's frames a window at a time
before reading them, so a generator reusing its buffer lost every frame but the window's last.
"""
from __future__ import annotations

import numpy as np
import pytest

import mrec
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore


def _schema(kind: str) -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=4)
    if kind == "precision":
        s.declare_column("atoms", "x", "f64", precision=0.5)
        s.declare_column("atoms", "y", "f64", precision=0.5)
    elif kind == "nullable":
        s.declare_column("atoms", "x", "f64", nullable=True)
    else:
        s.declare_column("atoms", "x", "f64")
        if kind == "two":
            s.declare_column("atoms", "y", "f64")
    return s


def _cols(kind: str) -> list[str]:
    return ["x", "y"] if kind in ("precision", "two") else ["x"]


PATHS = [
    ("plain", "append"),          # the batch path of one frame, no precision: a view of the caller's array
    ("two", "append"),
    ("precision", "append"),      # values already on the grid: rounding returns its input
    ("plain", "append-time"),     # the general path (a time rules the batch path out)
    ("precision", "append-time"),
    ("nullable", "append-time"),  # the mask too
    ("plain", "extend-generator"),
    ("precision", "extend-generator"),
]


@pytest.mark.parametrize("kind,how", PATHS)
def test_a_buffer_reused_in_place_is_stored_as_it_was_at_each_append(tmp_path, kind, how):
    cols = _cols(kind)
    buf = {c: np.zeros(4) for c in cols}
    mask = np.ones(4, bool)
    want = []
    n = 6

    def frame(i):
        for k, c in enumerate(cols):
            buf[c][:] = i + k                     # integers: on every precision grid
        f = {"blocks": {"atoms": dict(buf)}}
        if kind == "nullable":
            mask[:] = [i % 2 == 0, True, i % 3 == 0, True]
            f["masks"] = {"atoms": {"x": mask}}
        want.append(({c: buf[c].copy() for c in cols}, mask.copy()))
        return f

    path = tmp_path / "t.mrec"
    with mrec.TrajectoryWriter.create(path, _schema(kind), durable=False, flush_every=100) as w:
        if how == "extend-generator":
            w.extend(frame(i) for i in range(n))
        else:
            for i in range(n):
                if how == "append-time":
                    w.append(frame(i), time=float(i))
                else:
                    w.append(frame(i))
    r = mrec.TrajectoryReader(path)
    assert len(r) == n
    for i, (values, m) in enumerate(want):
        got = r[i]
        for c in cols:
            assert got.blocks["atoms"][c].tobytes() == values[c].tobytes(), (i, c)
        if kind == "nullable":
            stored = (got.masks.get("atoms") or {}).get("x")            # absent: every row valid
            assert (np.ones(4, bool) if stored is None else np.asarray(stored)).tolist() == m.tolist(), i


def test_unchanged_frames_are_still_not_stored_twice(tmp_path):
    """Owning the rows does not change change detection: a frame equal to the last update (here the
    same buffer, unchanged) is no new update, one that differs is."""
    buf = np.arange(4.0)
    path = tmp_path / "t.mrec"
    with mrec.TrajectoryWriter.create(path, _schema("plain"), durable=False, flush_every=100) as w:
        for i in range(5):
            if i == 3:
                buf[0] = 99.0
            w.append({"blocks": {"atoms": {"x": buf}}})
    r = mrec.TrajectoryReader(path)
    assert [r[i].blocks["atoms"]["x"][0] for i in range(5)] == [0.0, 0.0, 0.0, 99.0, 99.0]
    # two updates stored (frames 0 and 3), 4 rows each
    assert Array.open(DirectoryStore(str(path)), "trajectory/atoms/x").shape[0] == 8
