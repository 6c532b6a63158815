"""Planning a frame: validation, change detection and the declared-precision rounding.

The first stage of :class:`~mrec.record.trajectory.writer.TrajectoryWriter`: a
:class:`FramePlanner` turns a frame into a :class:`FramePlan` (or a run of regular frames into a
:class:`RunPlan`), frozen values the buffer (:mod:`~mrec.record.trajectory.buffer`) applies.  The
planner does no I/O and changes nothing: it holds the schema, the ``system/`` blocks the trajectory
is aligned with and the batch path's spec, and reads the writer's latest state (each block's latest
update, the cell, the steps, whether frames have times) through a read-only view,
:class:`LatestState`.  A frame is checked
completely here (schema, steps, times, meta values, strings, the ``system/`` alignment,
``aligned_with`` and ``targets`` on the frame as it will resolve, the cell) and its columns are
converted to the declared dtypes and rounded to their declared precision; a block whose rows
equal its latest update is dropped from the plan (change detection).  Nothing here changes the
writer: a refusal raises before :mod:`~mrec.record.trajectory.buffer` applies the plan.

:mod:`~mrec.record.trajectory.batch_plan` holds the batch form (:meth:`TrajectoryWriter.extend`,
and ``append`` of a regular frame): a run of frames of one structure stacked, rounded and change-detected as
``(frames, rows)`` arrays, cut before the first frame the general plan would refuse.  A pipelined
writer's ``append`` of one regular frame copies its ``f64`` columns unrounded instead and decides
"changed" from a few rounded values a column (:func:`~mrec.record.model.precision.rounded_head`); its
committer thread rounds the rows (:class:`~mrec.record.trajectory.land.Unrounded`).
"""
from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import numpy as np

from ...errors import RefusalError
from ..model import typed_json
from ..model.dtypes import numpy_dtype
from ..model.box import Box
from ..model.frame import Frame
from ..model.precision import round_to_precision
from ..model.declarations import ABSENT
from ..model.names import check_text

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _bits_equal(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN equals NaN, -0.0 differs from +0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == object:
        return list(a.ravel()) == list(b.ravel())
    if a.size > 64 and a.flags.c_contiguous and b.flags.c_contiguous:
        # a moving column differs in its first value: two 8-byte copies instead of two whole ones
        fa, fb = a.reshape(-1), b.reshape(-1)
        if fa[:1].tobytes() != fb[:1].tobytes():
            return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _frame_like(frame, i: int):
    """``frame`` when it can be made a Frame (a mapping), else the refusal every bad frame gets: a
    ``None``, a list or a number is no frame (``bad_layout``, as ``write_record`` says of one)."""
    if isinstance(frame, Mapping):
        return frame
    raise RefusalError(f"frame {i}: cannot make a Frame from {type(frame).__name__} (a frame is a mrec.Frame "
                       "or a mapping {'blocks': ..., 'meta': ..., 'box': ...})", kind="bad_layout")


def _owned(v: np.ndarray, given) -> np.ndarray:
    """``v``, or a copy of it when it shares memory with ``given`` (an array of the caller's): the
    rows a writer buffers until its next landing are its own, never a view the caller may refill
    in place before then (tests: spec_tests/record/trajectory/test_writer_owns_rows.py)."""
    if isinstance(given, np.ndarray) and np.may_share_memory(v, given):
        return v.copy()
    return v


def _box_equal(a: Box, b: Box) -> bool:
    return (_same(np.asarray(a.vectors, np.float64), np.asarray(b.vectors, np.float64))
            and _same(np.asarray(a.origin, np.float64), np.asarray(b.origin, np.float64))
            and _same(np.asarray(a.boundary, bool), np.asarray(b.boundary, bool)))


def target_max(decl, values: dict, masks: dict) -> dict[str, int]:
    """The largest non-null value of each column of ``decl`` that references rows of another block."""
    out = {}
    for col in (decl.targets or {}):
        v = values.get(col)
        if v is None or not len(v):
            continue
        m = masks.get(col)
        vv = v[m] if m is not None else v
        if len(vv):
            out[col] = int(np.max(vv))
    return out


class FramePlan(NamedTuple):
    """One frame, validated and planned: what :meth:`RowBuffer.apply
    <mrec.record.trajectory.buffer.RowBuffer.apply>` turns into rows."""
    index: int                 # the frame's number (the writer's frame count before it)
    step: int
    time: float | None
    meta: dict                 # meta key -> value, coerced (json as its text)
    blocks: dict               # block -> (rows, {column: values}, {column: mask}): the blocks that changed
    box: Any                   # the new cell (a Box), or None when it is absent or unchanged


class RunPlan(NamedTuple):
    """A run of regular frames, planned at once: what :meth:`RowBuffer.apply_run
    <mrec.record.trajectory.buffer.RowBuffer.apply_run>` turns into rows."""
    count: int                 # F, the frames of the run
    first: int                 # the first frame's number
    blocks: list               # [(block, rows, {column: (F, rows, ...)}, {column: mask}, updated (F,) bool, lazy)]
    box_updates: list          # [(k, Box)]: the frames of the run whose cell changed
    first_step: int            # the first frame's step
    steps: Any = None          # None: the default steps first_step .. first_step + count - 1; else int64 (count,)
    times: Any = None          # None: no times; else float64 (count,)
    meta: Any = None           # None, or meta key -> its values, (count, ...) of the key's stored dtype


class LatestState(Protocol):
    """What the planner reads of the writer's state, never changing it (the
    :class:`~mrec.record.trajectory.buffer.RowBuffer` is one): per block its latest update
    (``differs``, ``differs_unrounded``, ``resolved_rows``, ``target_max``), the cell (``defined``,
    ``last``), the steps (``last``) and whether frames carry times (``has_time``)."""
    blocks: Mapping[str, Any]
    box: Any
    step: Any
    has_time: bool | None


class FramePlanner:
    """The first stage: a frame (:meth:`plan_frame`) or a run of regular frames (:meth:`plan_run`)
    validated and planned, every refusal raised, nothing changed.

    Holds the schema, the ``system/`` alignment (block -> (rows, id column or None)), the store's
    root (named by refusals) and the batch path's spec (cached); reads ``latest``."""

    def __init__(self, schema, system: dict, root: str, latest: LatestState):
        self.schema = schema
        self.system = system
        self.root = root
        self.latest = latest

    def _check_system(self, plans: dict, i: int) -> None:
        for name, (rows, values, _masks) in plans.items():
            if name not in self.system:
                continue
            n, ids = self.system[name]
            if rows != n:
                raise RefusalError(f"frame {i}: block {name!r} has {rows} rows but the system block of that name "
                                   f"has {n}; it is aligned 1:1 by row order (a ragged block may not share a "
                                   "name with a system block)", kind="row_count_mismatch")
            if ids is not None and "id" in values and not _same(np.asarray(values["id"]), np.asarray(ids)):
                raise RefusalError(f"frame {i}: block {name!r} id column differs from the system block's id "
                                   "column (aligned blocks hold the same entities in the same order)",
                                   kind="row_count_mismatch")


    def _next_step(self, step) -> int:
        last = self.latest.step.last
        if step is None:
            step = 0 if last is None else last + 1
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
            raise RefusalError(f"step {step!r} is not an integer", kind="step_not_increasing")
        step = int(step)
        if not I64_MIN <= step <= I64_MAX:
            raise RefusalError(f"step {step} is outside the i64 range", kind="step_not_increasing")
        if last is not None and step <= last:
            what = "repeats" if step == last else "decreases from"
            raise RefusalError(f"step {step} {what} the previous step {last}: steps must strictly increase",
                               kind="step_not_increasing")
        return step

    def _check_time(self, time, i: int):
        if time is not None:
            if isinstance(time, (bool, np.bool_)) or not isinstance(time, (int, float, np.integer, np.floating)):
                raise RefusalError(f"time {time!r} is not a number", kind="partial_time")
            time = float(time)
        has_time = self.latest.has_time
        if has_time is None:
            return time
        if has_time and time is None:
            raise RefusalError(f"frame {i} drops the time every earlier frame had (time is all-or-nothing)",
                               kind="partial_time")
        if not has_time and time is not None:
            raise RefusalError(f"frame {i} gains a time no earlier frame had (time is all-or-nothing)",
                               kind="partial_time")
        return time

    def _check_strings(self, f: Frame, i: int) -> None:
        """Refuse (``bad_string``) a string value UTF-8 cannot encode (a lone surrogate): accepted, it
        would make every later flush fail with the frames after the last commit lost."""
        for name, cols in f.blocks.items():
            for c, cd in self.schema.blocks[name].columns.items():
                if cd.dtype == "string" and c in cols:
                    check_text(cols[c], f"frame {i}: block {name!r} column {c!r}, row", self.root)

    def _meta_values(self, f: Frame, i: int) -> dict:
        out = {}
        for key, md in self.schema.meta.items():
            if key in f.meta:
                v = f.meta[key]
            elif md.fill is not ABSENT:
                v = md.fill
            else:
                raise RefusalError(f"frame {i} omits meta key {key!r}, which has no fill",
                                   kind="missing_meta_value")
            v = typed_json.coerce_meta_value(md.tag, v, key)
            if md.tag in ("string", "json"):       # JSON would escape a lone surrogate: refused alike
                check_text(v, f"frame {i}: meta key {key!r}", self.root)
            if md.tag == "json":
                v = typed_json.json_dumps(v)
            out[key] = v
        return out

    def _plan_blocks(self, f: Frame) -> dict:
        plans = {}
        for name, decl in self.schema.blocks.items():
            if name not in f.blocks:
                continue
            given = f.blocks[name]
            values = {}
            rows = None
            for col, cd in decl.columns.items():
                v = np.asarray(given[col]) if cd.dtype != "string" else np.asarray(given[col], dtype=object)
                want = numpy_dtype(cd.dtype)
                if v.dtype != want:
                    v = v.astype(want)
                if cd.precision is not None:
                    v = round_to_precision(v, cd.precision)
                v = np.ascontiguousarray(v)
                values[col] = _owned(v, given[col])
                rows = len(v)
            if rows is None:
                rows = 0
            masks = {}
            for col, cd in decl.columns.items():
                if cd.nullable:
                    m = (f.masks.get(name) or {}).get(col)
                    masks[col] = np.ones(rows, bool) if m is None else _owned(np.asarray(m, dtype=bool), m)
            if self.latest.blocks[name].differs(rows, values, masks):
                plans[name] = (rows, values, masks)
        return plans

    def _check_resolved(self, plans: dict, i: int) -> None:
        """aligned_with and targets on the frame as it will resolve."""
        def rows_of(name):
            if name in plans:
                return plans[name][0]
            return self.latest.blocks[name].resolved_rows

        for name, decl in self.schema.blocks.items():
            r = rows_of(name)
            if decl.aligned_with and r is not None:
                t = rows_of(decl.aligned_with)
                if t is None:
                    raise RefusalError(f"frame {i}: aligned block {name!r} is present while its target "
                                       f"{decl.aligned_with!r} is absent", kind="aligned_count_mismatch")
                if t != r:
                    raise RefusalError(f"frame {i}: aligned block {name!r} has {r} rows, its target "
                                       f"{decl.aligned_with!r} {t}: restate it when the target's count changes",
                                       kind="aligned_count_mismatch")
            if decl.targets and r:
                maxes = target_max(decl, plans[name][1], plans[name][2]) if name in plans else \
                    self.latest.blocks[name].target_max
                for col, target in decl.targets.items():
                    if target.startswith("/") or col not in maxes:
                        continue
                    t = rows_of(target) if target in self.schema.blocks else None
                    if t is None:
                        raise RefusalError(f"frame {i}: {name}/{col} references block {target!r}, absent in this frame",
                                           kind="bad_reference")
                    if maxes[col] >= t:
                        raise RefusalError(f"frame {i}: {name}/{col} holds row {maxes[col]}, but {target!r} has {t} rows",
                                           kind="bad_reference")

    def _plan_box(self, f: Frame, i: int):
        if f.box is None:
            return None
        box = f.box if isinstance(f.box, Box) else Box.from_any(f.box)
        b = self.latest.box
        if b.defined is not None and b.defined != box.defined:
            raise RefusalError(f"frame {i}: cell_defined changes from {b.defined} to {box.defined}; a trajectory "
                               "holds one cell_defined flag for every update", kind="bad_box")
        if b.last is not None and _box_equal(b.last, box):
            return None
        return box

    def plan_frame(self, frame, i: int, step=None, time=None) -> FramePlan:
        """The general plan of frame number ``i``: the frame built and validated as a :class:`Frame`,
        every refusal raised, nothing changed."""
        f = frame if isinstance(frame, Frame) else self.schema.frame(_frame_like(frame, i))   # int lists take declared dtypes
        self.schema.check_frame(f)
        step = self._next_step(step)
        time = self._check_time(time, i)
        meta_values = self._meta_values(f, i)
        self._check_strings(f, i)
        plans = self._plan_blocks(f)
        self._check_system(plans, i)
        self._check_resolved(plans, i)
        box = self._plan_box(f, i)
        return FramePlan(i, step, time, meta_values, plans, box)
