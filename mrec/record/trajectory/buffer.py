"""Buffering: an accepted frame's plan becomes rows in the arrays' appenders.

The second stage of :class:`~mrec.record.trajectory.writer.TrajectoryWriter`.  A
:class:`RowBuffer` owns the in-memory state of the trajectory — per block (:class:`_BlockState`:
regular or indexed, the latest update for change detection), the cell (:class:`_BoxState`:
attributes or arrays), the step / time progressions (:class:`_Series`) and the per-step meta
arrays — and :meth:`RowBuffer.apply` / :meth:`RowBuffer.apply_run` apply a plan of
:mod:`~mrec.record.trajectory.plan` to it: nothing here refuses.  Rows go to one
:class:`~mrec.record.trajectory.land._Writer` per array (landed at the next commit); index arrays
(``step_index``, ``offset``), box arrays and a broken progression's array are made here, with their
history, the first time they are needed.  :meth:`RowBuffer.take` hands what the next commit
publishes to the committer as a :class:`CommitBatch`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...zarr.array import Array
from ..model.dtypes import numpy_dtype
from ..model.box import Box
from ..model.precision import HEAD, round_to_precision, rounded_head
from ..sections.frame_group import VALIDITY
from .plan import FramePlan, RunPlan, _bits_equal, _same, target_max
from .layout import TRAJ, tag_layout
from .land import Unrounded, _Writer, _dense_meta

_K0, _K_NONE = np.zeros(1, np.int64), np.zeros(0, np.int64)
for _a in (_K0, _K_NONE):
    _a.flags.writeable = False


class _Series:
    """step or time: an arithmetic progression attribute until the first break, then an array."""

    def __init__(self, integer: bool):
        self.integer = integer
        self.n = 0
        self.start = None
        self.stride = None
        self.last = None
        self.array: _Writer | None = None

    def value_at(self, i: int):
        if self.integer:
            return self.start + i * (self.stride or 0)
        return self.start + float(i) * (self.stride if self.stride is not None else 0.0)

    def fits(self, v) -> bool:
        """Would v keep the progression (exact comparison as specified)?"""
        if self.array is not None:
            return False
        if self.n == 0:
            return self.integer or math.isfinite(v)
        if self.n == 1:
            stride = v - self.start
            if not self.integer and not math.isfinite(stride):
                return False
            if self.integer:
                return True
            return _bits_equal(self.start + 1.0 * stride, v)
        expected = self.value_at(self.n)
        return expected == v if self.integer else _bits_equal(expected, v)

    def history(self) -> np.ndarray:
        dtype = np.int64 if self.integer else np.float64
        if self.integer:
            return self.start + (self.stride or 0) * np.arange(self.n, dtype=np.int64)
        out = np.empty(self.n, dtype=np.float64)
        for i in range(self.n):
            out[i] = self.value_at(i)
        return out.astype(dtype)

    def attribute(self):
        if self.array is not None or self.n == 0:
            return None
        if self.n == 1:
            return {"start": self.start}
        return {"start": self.start, "stride": self.stride}


class _BlockState:
    def __init__(self, name: str, decl):
        self.name = name
        self.decl = decl
        self.path = f"{TRAJ}/{name}"
        self.cols: dict[str, _Writer] = {}
        self.masks: dict[str, _Writer] = {}
        self.si: _Writer | None = None
        self.off: _Writer | None = None
        self.regular = False
        self.uniform: int | None = None
        self.n_updates = 0
        self.total_rows = 0
        self.last: tuple[int, dict, dict] | None = None     # rows, values, masks of the latest update
        # a pipelined append buffers f64 columns unrounded (trajectory_land.Unrounded): then the
        # latest update's values of those columns are raw, ``last_p`` names them with their
        # precision, and ``last_head`` holds the head keys of their groups (rounded_head)
        self.last_p: dict | None = None
        self.last_head: dict | None = None
        self.attrs: dict = {}
        self.group_dirty = False
        self.validity_missing = False                       # _validity/zarr.json to write at the next commit
        self.target_max: dict[str, int] = {}                # max non-null value of referencing columns

    @property
    def resolved_rows(self) -> int | None:
        return None if self.last is None else self.last[0]

    def differs(self, rows: int, values: dict, masks: dict) -> bool:
        if self.last is None:
            return True
        lrows, lvalues, lmasks = self.last
        if rows != lrows:
            return True
        lp = self.last_p
        for c, v in values.items():
            lv = lvalues[c]
            if lp and c in lp:
                lv = round_to_precision(lv, lp[c])
            if not _same(v, lv):
                return True
        for c, m in masks.items():
            if not _same(m, lmasks[c]):
                return True
        return False

    def differs_unrounded(self, rows: int, values: dict, masks: dict, groups: list) -> tuple[bool, dict]:
        """:meth:`differs` for one frame whose columns in ``groups`` — ``[(precision, columns,
        their stack)]`` — are not rounded yet (``values`` holds them raw): (differs, the groups'
        rounded heads).  A group whose rounded head (:func:`rounded_head`, a few values a column)
        differs from the latest update's differs after rounding; only where every head repeats (a
        column at rest) are the columns rounded in full and compared."""
        heads = {cols: rounded_head(stack, p) for p, cols, stack in groups}
        if self.last is None or rows != self.last[0]:
            return True, heads
        for p, cols, _stack in groups:
            h = heads[cols]
            if h is not None and h != self._head(cols, p):
                return True, heads
        full = dict(values)
        for p, cols, _stack in groups:
            for c in cols:
                full[c] = round_to_precision(values[c], p)
        return self.differs(rows, full, masks), heads

    def _head(self, cols: tuple, p) -> tuple | None:
        """The latest update's key for the group ``cols`` of precision ``p``, as :func:`rounded_head`
        makes it for the frame being appended.  Raw or stored values give the same key (the key of
        a value is the key of its rounding), so any latest update serves."""
        known = self.last_head
        if known is not None and cols in known:
            return known[cols]
        lvalues = self.last[1]
        return rounded_head(np.stack([np.ascontiguousarray(lvalues[c]).reshape(-1)[:HEAD] for c in cols]), p)

    def writers(self):
        # the index lands first, offset before step_index: a step_index on disk implies its
        # offset, and a regular block's columns never grow (read by uniform_rows) before the
        # index that replaces its markers exists
        if self.si is not None:
            yield self.off
            yield self.si
        yield from self.cols.values()
        yield from self.masks.values()


class _BoxState:
    def __init__(self):
        self.mode: str | None = None      # None | "attrs" | "arrays"
        self.defined: bool | None = None
        self.last: Box | None = None
        self.n_updates = 0
        self.si: _Writer | None = None
        self.vectors: _Writer | None = None
        self.origin: _Writer | None = None
        self.boundary: _Writer | None = None
        self.attrs: dict = {}
        self.group_exists = False
        self.group_dirty = False
        self.history: list[Box] = []      # updates, kept only while needed for backfill of origin/boundary

    def writers(self):
        # vectors last: box arrays are read only when vectors exist, so a crash between two
        # of these publishes never shows vectors without the origin / boundary they need
        for w in (self.si, self.origin, self.boundary, self.vectors):
            if w is not None:
                yield w



def _box_attrs(b: Box) -> dict | None:
    v = np.asarray(b.vectors, np.float64)
    o = np.asarray(b.origin, np.float64)
    if not (np.isfinite(v).all() and np.isfinite(o).all()):
        return None
    attrs = {"vectors": v.tolist()}
    if np.any(o != 0) or np.any(np.signbit(o)):
        attrs["origin"] = o.tolist()
    bd = np.asarray(b.boundary, bool)
    if not bd.all():
        attrs["boundary"] = [bool(x) for x in bd]
    return attrs


class CommitBatch(NamedTuple):
    """What the next commit lands and publishes, taken from the buffer (:meth:`RowBuffer.take`)."""
    order: list                # the arrays (_Writer) to land, in the landing order
    groups: list               # [(group path, its attributes as they are now)] to publish
    progressions: tuple        # (("step_progression", attribute or None), ("time_progression", ...))
    nframes: int               # the frame count the commit publishes (nstep)
    moves: list                # [(array, rows)]: a pipelined writer's rows since its last commit


class RowBuffer:
    """The second stage: applies plans (:meth:`apply`, :meth:`apply_run`) to the state it owns — the
    blocks, the cell, the steps and times, the meta arrays and whether frames carry times — and
    hands the arrays a commit lands to the committer (:meth:`take`).  Never refuses.

    ``store``, ``schema`` and ``dense_extent`` are what new index / box / progression arrays are
    made with; ``pipeline``: every array's rows wait in its ``_Writer.held`` until :meth:`take`."""

    def __init__(self, store, schema, dense_extent):
        self.store = store
        self.schema = schema
        self.dense_extent = dense_extent
        self.pipeline = False
        self.blocks: dict[str, _BlockState] = {}
        self.box = _BoxState()
        self.meta: dict[str, _Writer] = {}
        self.step = _Series(True)
        self.time = _Series(False)
        self.has_time: bool | None = None

    def writers(self):
        """Every array the buffer holds rows for (the landing order within a block and the cell)."""
        for bs in self.blocks.values():
            yield from bs.writers()
        yield from self.box.writers()
        yield from self.meta.values()
        for s in (self.step, self.time):
            if s.array is not None:
                yield s.array

    def use_pipeline(self, pipeline: bool) -> None:
        """From now on (``pipeline``) every array's rows wait in its ``_Writer.held`` until their
        commit is taken; the appenders are the committer thread's."""
        self.pipeline = pipeline
        if pipeline:
            for w in self.writers():
                w.held = []

    def _new_dense(self, path: str, dtype: str, trailing=()) -> _Writer:
        w = _Writer(Array(self.store, path, _dense_meta(dtype, trailing, extent=self.dense_extent)), 0, new=True)
        if self.pipeline:
            w.held = []
        return w

    def take(self, nframes: int) -> CommitBatch:
        """What the next commit lands and publishes, decided now (no I/O): the dirty arrays in the
        landing order (the index arrays before what they index), the groups to publish (their
        attributes as they are now; marked clean), the progressions and the frame count it commits
        (``nframes``), with the rows a pipelined writer's arrays held since the last commit."""
        order: list[_Writer] = []        # the landing order (the index arrays before what they index)
        groups = []
        for bs in self.blocks.values():
            order += [w for w in bs.writers() if w.dirty]
            if bs.group_dirty:
                groups.append((bs.path, dict(bs.attrs)))
                bs.group_dirty = False
            if bs.validity_missing:
                groups.append((f"{bs.path}/{VALIDITY}", {}))
                bs.validity_missing = False
        box = [w for w in self.box.writers() if w.dirty]
        order += box
        if self.box.group_dirty or (box and not self.box.group_exists):
            groups.append((f"{TRAJ}/box", dict(self.box.attrs)))
            self.box.group_dirty = False
            self.box.group_exists = True
        rest = list(self.meta.values()) + [s.array for s in (self.step, self.time) if s.array is not None]
        order += [w for w in rest if w.dirty]
        progressions = (("step_progression", self.step.attribute()), ("time_progression", self.time.attribute()))
        moves = []
        for w in order:
            if w.held:
                moves.append((w, w.held))
                w.held = []
        return CommitBatch(order, groups, progressions, nframes, moves)

    def apply(self, plan: FramePlan) -> None:
        """Apply a plan of :meth:`~mrec.record.trajectory.plan.FramePlanner.plan_frame` (the
        writer's frame count is the caller's to advance)."""
        i, step, time, meta_values, plans, box = plan
        for name, (rows, values, masks) in plans.items():
            self._add_update(self.blocks[name], i, rows, values, masks)
        if box is not None:
            self._add_box(box, i)
        self._add_series(self.step, step, "step", "i64")
        if self.has_time is None:
            self.has_time = time is not None
        if time is not None:
            self._add_series(self.time, time, "time", "f64")
        for key, v in meta_values.items():
            dtype, trailing = tag_layout(self.schema.meta[key].tag)
            row = np.empty((1, *trailing), dtype=numpy_dtype(dtype))
            if dtype == "string":
                row[0] = v
            else:
                row[0] = v
            self.meta[key].append(row)

    def apply_run(self, run: RunPlan) -> None:
        """Apply a plan of :meth:`~mrec.record.trajectory.plan.FramePlanner.plan_run` (the writer's
        frame count is the caller's to advance)."""
        F, i0, plans, box_updates, first_step, steps, times, meta = run
        blocks = self.blocks
        for name, rows, values, masks, upd, lazy in plans:
            bs = blocks[name]
            if F == 1:
                ks = _K0 if upd[0] else _K_NONE
            else:
                ks = np.flatnonzero(upd[:F])
            self._add_updates(bs, i0, rows, values, masks, ks, lazy)
        for k, box in box_updates:
            if k >= F:
                break
            self._add_box(box, i0 + k)
        if steps is None:
            self._add_steps(first_step, F)
        else:
            self._add_values(self.step, steps[:F], "step", "i64")
        if self.has_time is None:
            self.has_time = times is not None
        if times is not None:
            self._add_values(self.time, times[:F], "time", "f64")
        for key, v in (meta or {}).items():
            self.meta[key].append(v[:F])

    def _add_updates(self, bs: _BlockState, i0: int, rows: int, values: dict, masks: dict, ks, lazy=None) -> None:
        """_add_update for the run's updates at frames i0 + ks, the contiguous regular / indexed tail at once.
        ``lazy``: None, or (a pipelined append of one frame) ``({column: precision}, rounded heads)``
        for the columns of ``values`` given unrounded (buffered as :class:`Unrounded`)."""
        u = 0
        kl = ks.tolist()           # the frames as Python ints (numpy scalars cost ~0.1 us each here)
        n = len(kl)
        while u < n:
            k0 = kl[u]
            contiguous = kl[-1] - k0 == n - 1 - u
            if bs.n_updates and bs.regular and rows == bs.uniform and contiguous and i0 + k0 == bs.n_updates:
                sel = slice(k0, kl[-1] + 1)
                frames = None
            elif bs.si is not None and not bs.regular:
                sel = ks[u:]
                frames = i0 + sel
            else:
                k = k0
                self._add_update(bs, i0 + k, rows, {c: v[k] for c, v in values.items()},
                                 {c: m[k] for c, m in masks.items()}, lazy)
                u += 1
                continue
            cnt = n - u
            if frames is not None:
                bs.si.append(frames.astype(np.uint64))
                bs.off.append(np.uint64(bs.total_rows) + np.arange(1, cnt + 1, dtype=np.uint64) * np.uint64(rows))
            deferred = lazy[0] if lazy is not None else ()
            for c, v in values.items():
                v = v[sel].reshape(cnt * rows, *v.shape[2:])
                bs.cols[c].append(Unrounded(v, deferred[c]) if c in deferred else v)
            for c, m in masks.items():
                bs.masks[c].append(m[sel].reshape(cnt * rows))
            last = kl[-1]
            if n > 1:              # the latest rows, not a view holding the run's stack alive
                lv = {c: v[last].copy() for c, v in values.items()}
                lm = {c: m[last].copy() for c, m in masks.items()}
            else:
                lv = {c: v[last] for c, v in values.items()}
                lm = {c: m[last] for c, m in masks.items()}
            bs.n_updates += cnt
            bs.total_rows += cnt * rows
            bs.last = (rows, lv, lm)
            bs.last_p, bs.last_head = lazy if lazy is not None else (None, None)
            if bs.decl.targets:
                bs.target_max = target_max(bs.decl, lv, lm)
            return

    def _add_steps(self, first: int, count: int) -> None:
        """_add_series of the default steps first .. first + count - 1."""
        s = self.step
        k = 0
        while k < count and s.array is None and not (s.n >= 2 and s.stride == 1):
            self._add_series(s, first + k, "step", "i64")
            k += 1
        if k == count:
            return
        if s.array is not None:
            s.array.append(np.arange(first + k, first + count, dtype=np.int64))
        s.n += count - k
        s.last = first + count - 1


    def _add_values(self, s: _Series, values: np.ndarray, name: str, dtype: str) -> None:
        """_add_series of each of ``values`` in turn, the progression checked at once (exactly: an
        integer series continues while each value is the last plus the stride, a float one while
        each value's bits are ``start + float(i) * stride``'s)."""
        k, n = 0, len(values)
        if n < 8:                  # a few values (append: one): the scalar checks cost less than numpy's
            for v in values.tolist():
                self._add_series(s, v, name, dtype)
            return
        while k < n and s.array is None and s.n < 2:
            self._add_series(s, values[k].item(), name, dtype)
            k += 1
        if k == n:
            return
        rest = values[k:]
        if s.array is None:
            if s.integer:
                if abs(s.last) >= 2**62 or abs(s.stride) >= 2**62 or np.abs(rest).max() >= 2**62:
                    for v in rest.tolist():       # differences that could overflow int64: one by one
                        self._add_series(s, v, name, dtype)
                    return
                ok = np.diff(rest, prepend=np.int64(s.last)) == s.stride
            else:
                expect = s.start + np.arange(s.n, s.n + len(rest), dtype=np.int64).astype(np.float64) * s.stride
                ok = expect.view(np.uint64) == rest.view(np.uint64)
            m = len(rest) if ok.all() else int(np.argmin(ok))
            s.n += m
            if m:
                s.last = rest[m - 1].item()
            if m == len(rest):
                return
            self._add_series(s, rest[m].item(), name, dtype)      # the break: the array, with its history
            rest = rest[m + 1:]
            if not len(rest):
                return
        s.array.append(rest)
        s.n += len(rest)
        s.last = rest[-1].item()

    def _add_series(self, s: _Series, v, name: str, dtype: str) -> None:
        if s.array is None and not s.fits(v):
            w = self._new_dense(f"{TRAJ}/{name}", dtype)
            if s.n:
                w.append(s.history())
            s.array = w
        if s.array is not None:
            s.array.append(np.array([v], dtype=np.int64 if s.integer else np.float64))
        elif s.n == 0:
            s.start = v
        elif s.n == 1:
            s.stride = v - s.start
        s.n += 1
        s.last = v

    def _add_update(self, bs: _BlockState, i: int, rows: int, values: dict, masks: dict, lazy=None) -> None:
        j = bs.n_updates
        if j == 0 and bs.si is None:
            if i == 0 and rows > 0 and bs.decl.columns:
                bs.regular, bs.uniform = True, rows
                bs.attrs["uniform_rows"] = rows
                bs.attrs["dense_updates"] = True
                bs.group_dirty = True
            else:
                self._make_index(bs)
                bs.off.append(np.zeros(1, np.uint64))
                bs.si.append(np.array([i], np.uint64))
                bs.off.append(np.array([rows], np.uint64))
        elif bs.regular:
            if rows != bs.uniform or i != j:
                # the first irregular update: materialise both arrays with the regular history
                self._make_index(bs)
                bs.si.append(np.append(np.arange(j, dtype=np.uint64), np.uint64(i)))
                bs.off.append(np.append(np.arange(j + 1, dtype=np.uint64) * np.uint64(bs.uniform),
                                        np.uint64(j * bs.uniform + rows)))
                bs.regular, bs.uniform = False, None
                bs.attrs.pop("uniform_rows", None)
                bs.attrs.pop("dense_updates", None)
                bs.group_dirty = True
        else:
            bs.si.append(np.array([i], np.uint64))
            bs.off.append(np.array([bs.total_rows + rows], np.uint64))
        deferred = lazy[0] if lazy is not None else ()
        for col, v in values.items():
            bs.cols[col].append(Unrounded(v, deferred[col]) if col in deferred else v)
        for col, m in masks.items():
            bs.masks[col].append(m)
        bs.n_updates += 1
        bs.total_rows += rows
        bs.last = (rows, values, masks)
        bs.last_p, bs.last_head = lazy if lazy is not None else (None, None)
        bs.target_max = target_max(bs.decl, values, masks)

    def _make_index(self, bs: _BlockState) -> None:
        bs.si = self._new_dense(f"{bs.path}/step_index", "u64")
        bs.off = self._new_dense(f"{bs.path}/offset", "u64")

    def _add_box(self, box: Box, i: int) -> None:
        b = self.box
        if b.defined is None:
            b.defined = box.defined
            if not box.defined:
                b.attrs["cell_defined"] = False
            b.group_dirty = True
        if b.mode is None and i == 0 and _box_attrs(box) is not None:
            b.mode = "attrs"
            for k in ("vectors", "origin", "boundary"):     # leftovers of an uncommitted first cell
                b.attrs.pop(k, None)
            b.attrs.update(_box_attrs(box))
            b.group_dirty = True
            b.history = [box]
        else:
            if b.mode != "arrays":
                prior = b.history if b.mode == "attrs" else []
                b.si = self._new_dense(f"{TRAJ}/box/step_index", "u64")
                b.vectors = self._new_dense(f"{TRAJ}/box/vectors", "f64", (3, 3))
                if prior:
                    b.si.append(np.zeros(1, np.uint64))
                    b.vectors.append(np.asarray(prior[0].vectors, np.float64).reshape(1, 3, 3))
                    if "origin" in b.attrs:
                        b.origin = self._new_dense(f"{TRAJ}/box/origin", "f64", (3,))
                        b.origin.append(np.asarray(prior[0].origin, np.float64).reshape(1, 3))
                    if "boundary" in b.attrs:
                        b.boundary = self._new_dense(f"{TRAJ}/box/boundary", "bool", (3,))
                        b.boundary.append(np.asarray(prior[0].boundary, bool).reshape(1, 3))
                for k in ("vectors", "origin", "boundary"):
                    b.attrs.pop(k, None)
                b.mode = "arrays"
                b.group_dirty = True
            n = b.n_updates
            origin = np.asarray(box.origin, np.float64).reshape(1, 3)
            boundary = np.asarray(box.boundary, bool).reshape(1, 3)
            default_boundary = bool(b.defined)
            if b.origin is None and (np.any(origin != 0) or np.any(np.signbit(origin))):
                b.origin = self._new_dense(f"{TRAJ}/box/origin", "f64", (3,))
                if n:
                    b.origin.append(np.zeros((n, 3)))
            if b.boundary is None and np.any(boundary != default_boundary):
                b.boundary = self._new_dense(f"{TRAJ}/box/boundary", "bool", (3,))
                if n:
                    b.boundary.append(np.full((n, 3), default_boundary))
            b.si.append(np.array([i], np.uint64))
            b.vectors.append(np.asarray(box.vectors, np.float64).reshape(1, 3, 3))
            if b.origin is not None:
                b.origin.append(origin)
            if b.boundary is not None:
                b.boundary.append(boundary)
            b.history = []
        b.n_updates += 1
        b.last = box

