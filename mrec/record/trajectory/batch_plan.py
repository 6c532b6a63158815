"""The batch path of planning: a run of regular frames planned at once.

:class:`RunPlanner` is the writer's planner: :class:`~mrec.record.trajectory.plan.FramePlanner`
(one frame, the general path) with :meth:`RunPlanner.plan_run`, which plans the longest run of
*regular* frames from a position of a batch exactly as ``plan_frame`` one by one would: the
frames' columns stacked, rounded and change-detected as ``(frames, rows)`` arrays, their steps,
times, per-step meta values and cells checked in one pass, the run cut before the first frame the
general plan would refuse (that frame then goes through the general path, which raises the
refusal).  Both :meth:`~mrec.record.trajectory.writer.TrajectoryWriter.extend` and ``append`` use
it, so frames as a simulation hands them — explicit steps and times, a cell, energies as per-step
meta, velocities — take it.

A frame is regular when it holds nothing but blocks (numpy columns of exactly the declared dtype
and trailing shape, the same blocks and row counts as the run's first frame), a cell and per-step
meta values of a scalar numeric or bool tag given as the tag's own Python / numpy type (a ``float``
for ``f64``, an ``int`` for an integer tag, a ``bool`` for ``bool``).  A schema with
``aligned_with``, ``targets``, string or empty-trailing columns, or a meta key of another tag
takes the general path.
"""
from __future__ import annotations

import math

import numpy as np

from ..model.box import Box
from ..model.declarations import ABSENT
from ..model.dtypes import numpy_dtype
from ..model.frame import Frame
from ..model.precision import round_to_precision, stack_rounded, stack_rows
from .plan import I64_MAX, I64_MIN, FramePlanner, RunPlan, _box_equal, _owned

_ONE_TRUE, _ONE_FALSE = np.ones(1, bool), np.zeros(1, bool)
for _a in (_ONE_TRUE, _ONE_FALSE):
    _a.flags.writeable = False

#: meta tags the batch path takes -> numpy dtype (a scalar each)
_SCALAR_TAGS = {"f64": np.float64, "i64": np.int64, "i32": np.int32, "u32": np.uint32, "u64": np.uint64,
                "bool": np.bool_}
_FRAME_KEYS = frozenset(("blocks", "box", "meta"))


def _plain_parts(fr):
    """(blocks, the cell as given or None, the meta values or None) of a frame holding nothing but
    blocks, a cell and meta values (a ``Frame``, a ``{"blocks": ..., "box": ..., "meta": ...}`` dict
    or a bare blocks dict), else None."""
    box = meta = None
    if type(fr) is dict:
        if "blocks" in fr:
            if len(fr) != 1:
                if not _FRAME_KEYS.issuperset(fr):
                    return None
                box, meta = fr.get("box"), fr.get("meta")
            blocks = fr["blocks"]
        else:
            blocks = fr
    elif isinstance(fr, Frame):
        if fr.masks or fr.precision or fr.block_attrs:
            return None
        blocks, box, meta = fr.blocks, fr.box, (fr.meta or None)
    else:
        return None
    if meta is not None and type(meta) is not dict:
        return None
    return (blocks, box, meta) if type(blocks) is dict else None


def _scalar(dt, v):
    """``v`` when it is a value of meta dtype ``dt`` given as that tag's own type (coercion needs
    no judgement), else None (the frame goes to the general path, which coerces or refuses)."""
    t = type(v)
    if dt is np.float64:
        return float(v) if t is float or t is np.float64 else None
    if dt is np.bool_:
        return bool(v) if t is bool or t is np.bool_ else None
    if t is int or (isinstance(v, np.integer) and t is not np.bool_):
        info = np.iinfo(dt)
        v = int(v)
        return v if info.min <= v <= info.max else None
    return None


class RunPlanner(FramePlanner):
    """The writer's planner: :class:`FramePlanner` with the batch path (:meth:`plan_run`)."""

    def __init__(self, schema, system: dict, root: str, latest):
        super().__init__(schema, system, root, latest)
        self._fast_spec_cache: dict | None | bool = False
        self._meta_spec_cache: list | None | bool = False

    # -- what the batch path can take ---------------------------------------------------------------
    def _fast_spec(self):
        """block -> (rows fixed by structural_shape or None, [(column, numpy dtype, trailing, precision,
        nullable)], the columns grouped by precision, the nullable columns) for blocks the batch path
        can take; None when the schema rules the batch path out."""
        spec = self._fast_spec_cache
        if spec is not False:
            return spec
        spec = {} if self._meta_spec() is not None else None
        for name, decl in (self.schema.blocks.items() if spec is not None else ()):
            if decl.aligned_with is not None or decl.targets:
                spec = None
                break
            cols = []
            for c, cd in decl.columns.items():
                if cd.dtype == "string" or 0 in cd.trailing:
                    cols = None
                    break
                cols.append((c, numpy_dtype(cd.dtype), tuple(cd.trailing), cd.precision, cd.nullable))
            if cols:
                fixed = math.prod(decl.structural_shape) if decl.structural_shape is not None else None
                groups: dict = {}
                for c, dt, tr, p, _n in cols:
                    groups.setdefault((p, tr) if p is not None else (None, c), []).append(c)
                nullable = [c for c, *_rest, n in cols if n]
                spec[name] = (fixed, cols, [(k[0], g) for k, g in groups.items()], nullable)
        self._fast_spec_cache = spec
        return spec

    def _meta_spec(self):
        """[(key, numpy dtype, fill or ABSENT)] of the schema's meta keys, or None when one has a tag
        the batch path does not take."""
        spec = self._meta_spec_cache
        if spec is False:
            spec = []
            for key, md in self.schema.meta.items():
                dt = _SCALAR_TAGS.get(md.tag)
                if dt is None:
                    spec = None
                    break
                spec.append((key, dt, md.fill))
            self._meta_spec_cache = spec
        return spec

    @staticmethod
    def _fast_blocks(fr, spec):
        """(blocks, their (name, rows) signature, the cell as given or None, meta or None) of ``fr``
        when the batch path can take it, else None."""
        parts = _plain_parts(fr)
        if parts is None:
            return None
        blocks, box, meta = parts
        sig = []
        for name, given in blocks.items():
            s = spec.get(name) if type(name) is str else None
            if s is None or type(given) is not dict:
                return None
            fixed, cols = s[0], s[1]
            if len(given) != len(cols):
                return None
            rows = -1
            for c, dt, trailing, _p, _n in cols:
                a = given.get(c)
                if type(a) is not np.ndarray or a.dtype != dt or a.shape[1:] != trailing or a.ndim != 1 + len(trailing):
                    return None
                if rows < 0:
                    rows = a.shape[0]
                elif a.shape[0] != rows:
                    return None
            if rows <= 0 or (fixed is not None and rows != fixed):
                return None
            sig.append((name, rows))
        if not sig:
            return None
        return blocks, tuple(sig), box, meta

    @staticmethod
    def _same_structure(fr, tmpl):
        """(blocks, cell or None, meta or None) of ``fr`` when it has exactly the blocks, columns,
        dtypes and shapes of ``tmpl`` (what :meth:`_fast_blocks` accepted for the run's first
        frame), else None."""
        parts = _plain_parts(fr)
        if parts is None:
            return None
        blocks = parts[0]
        if len(blocks) != len(tmpl):
            return None
        for name, ncols, cols in tmpl:
            given = blocks.get(name)
            if type(given) is not dict or len(given) != ncols:
                return None
            for c, dt, shape in cols:
                a = given.get(c)
                if type(a) is not np.ndarray or a.shape != shape or (a.dtype is not dt and a.dtype != dt):
                    return None
        return parts

    # -- the run's per-frame scalars: steps, times, meta, cells ----------------------------------------
    def _run_steps(self, steps, pos: int, F: int) -> tuple[int, np.ndarray | None]:
        """(frames whose steps ``_next_step`` accepts, their steps or None for default ones)."""
        last = self.latest.step.last
        if steps is None:
            first = 0 if last is None else last + 1
            return min(F, max(0, I64_MAX - first + 1)), None
        out = []
        for k in range(F):
            s = steps[pos + k]
            if s is None:
                s = 0 if last is None else last + 1
            elif type(s) is not int:
                if not isinstance(s, np.integer):
                    break                  # a bool, a float, ...: _next_step refuses it
                s = int(s)
            if not I64_MIN <= s <= I64_MAX or (last is not None and s <= last):
                break
            out.append(s)
            last = s
        return len(out), np.array(out, np.int64)

    def _run_times(self, times, pos: int, F: int) -> tuple[int, np.ndarray | None]:
        """(frames whose times ``_check_time`` accepts, their times or None for no times)."""
        has = self.latest.has_time
        if times is None or times[pos] is None:
            if has:
                return 0, None             # _check_time refuses the missing time
            n = F if times is None else next((k for k in range(F) if times[pos + k] is not None), F)
            return n, None
        if has is False:
            return 0, None                 # _check_time refuses the new time
        out = []
        for k in range(F):
            t = times[pos + k]
            tt = type(t)
            if tt is not float:
                if t is None or tt is bool or tt is np.bool_ or not isinstance(t, (int, np.integer, np.floating)):
                    break
                t = float(t)
            out.append(t)
        return len(out), np.array(out, np.float64)

    def _run_meta(self, metas: list) -> tuple[int, dict | None]:
        """(frames whose meta values need no judgement, key -> their values), for the run's meta
        dicts (None: no meta given)."""
        mspec = self._meta_spec()
        if not mspec:                      # no meta declared: a frame giving some goes to the general path
            return next((k for k, m in enumerate(metas) if m), len(metas)), None
        cols: dict = {key: [] for key, _dt, _f in mspec}
        n = 0
        for m in metas:
            m = m or {}
            if len(m) > len(mspec) or any(key not in cols for key in m):
                break
            row = []
            for key, dt, fill in mspec:
                v = m.get(key, fill)
                v = None if v is ABSENT else _scalar(dt, v)
                if v is None:
                    break
                row.append(v)
            if len(row) != len(mspec):
                break
            for (key, _dt, _f), v in zip(mspec, row):
                cols[key].append(v)
            n += 1
        if len({dt for _k, dt, _f in mspec}) == 1:       # one dtype (energies): one array, a row a key
            a = np.array(list(cols.values()), mspec[0][1])
            return n, dict(zip(cols, a))
        return n, {key: np.array(cols[key], dt) for key, dt, _f in mspec}

    def _run_boxes(self, boxes: list) -> tuple[int, list]:
        """(frames whose cells ``_plan_box`` accepts, [(k, Box)] the changed ones), frame after frame."""
        updates = []
        bx = self.latest.box
        defined, last_box = bx.defined, bx.last
        for k, raw in enumerate(boxes):
            if raw is None or raw is last_box:     # the cell last stored, as an NVT engine hands it again
                continue
            try:
                box = raw if isinstance(raw, Box) else Box.from_any(raw)
            except Exception:          # a malformed cell: append builds and refuses it
                return k, updates
            if defined is not None and defined != box.defined:
                return k, updates      # append refuses the cell_defined change
            if last_box is not None and _box_equal(last_box, box):
                continue
            updates.append((k, box))
            if defined is None:
                defined = box.defined
            last_box = box
        return len(boxes), updates

    # -- the run ---------------------------------------------------------------------------------------
    def plan_run(self, batch: list, pos: int, index: int, room: int, pipeline: bool,
                 steps=None, times=None) -> RunPlan | None:
        """Plan the longest run of regular frames from batch[pos] (frame number ``index``), at most
        ``room`` frames (up to the next automatic flush; at least one), exactly as :meth:`plan_frame`
        one by one would; None when batch[pos] goes to the general plan.  ``steps`` / ``times``:
        None (default steps / no times) or sequences aligned with ``batch`` (an entry None: the
        default).  ``pipeline``: a run of one frame leaves its rounding to the committer thread.
        Changes nothing."""
        spec = self._fast_spec()
        if spec is None:
            return None
        end = min(len(batch), pos + max(1, room))
        head = self._fast_blocks(batch[pos], spec)
        if head is None:
            return None
        blocks0, sig, box0, meta0 = head
        run, boxes, metas = [blocks0], [box0], [meta0]
        # the next frames must have the head's exact structure: one shape comparison per column
        if end > pos + 1:
            tmpl = [(name, len(spec[name][1]), [(c, dt, (rows, *tr)) for c, dt, tr, _p, _n in spec[name][1]])
                    for name, rows in sig]
        for k in range(pos + 1, end):
            b = self._same_structure(batch[k], tmpl)
            if b is None:
                break
            run.append(b[0])
            boxes.append(b[1])
            metas.append(b[2])
        F = len(run)
        F, step_values = self._run_steps(steps, pos, F)
        if F:
            F, time_values = self._run_times(times, pos, F)
        if F:
            F, meta_values = self._run_meta(metas[:F])
        if F:
            F, box_updates = self._run_boxes(boxes[:F])
        if F == 0:
            return None
        run = run[:F]
        plans, cut = self._plan_stacks(run, sig, spec, F == 1 and pipeline)
        if cut == 0:
            return None                # the first frame is refused: append raises it
        last = self.latest.step.last
        first_step = int(step_values[0]) if step_values is not None else (0 if last is None else last + 1)
        return RunPlan(min(cut, F), index, plans, box_updates, first_step,
                       None if step_values is None else step_values[:F],
                       None if time_values is None else time_values[:F], meta_values)

    def _plan_stacks(self, run: list, sig: tuple, spec: dict, defer: bool) -> tuple[list, int]:
        """The blocks of the run stacked, rounded and change-detected, and how many frames the
        ``system/`` alignment accepts.  ``defer``: a pipelined append of one frame buffers its f64
        columns unrounded (its own copy) and leaves the rounding to the committer thread; change
        detection rounds a few values."""
        F = len(run)
        cut = F
        plans = []
        latest = self.latest
        for name, rows in sig:
            bs = latest.blocks[name]
            values, masks = {}, {}
            unrounded = []
            for p, group in spec[name][2]:
                if defer and p is not None and not (name in self.system and "id" in group):   # ids: as given
                    v = stack_rows([run[0][name][c] for c in group])      # a fresh array: the writer's own copy
                    unrounded.append((p, tuple(group), v))
                    v = v.reshape(len(group), 1, *v.shape[1:])
                    for g, c in enumerate(group):
                        values[c] = v[g]
                    continue
                # the columns of one precision (and trailing shape) are stacked and rounded in one call
                if len(group) == 1 and F == 1:
                    src = run[0][name][group[0]]
                    v = src[None]
                    if p is not None:
                        v = round_to_precision(v, p)
                    v = _owned(v, src)      # the writer owns what it buffers: the caller may refill src
                else:
                    srcs = [blk[name][c] for c in group for blk in run]
                    # stacked and rounded in one go unless a value is NaN / inf / huge
                    v = stack_rounded(srcs, p) if p is not None else stack_rows(srcs)
                    if v is None:
                        v = round_to_precision(np.stack(srcs), p)
                v = v.reshape(len(group), F, *v.shape[1:])
                for g, c in enumerate(group):
                    values[c] = np.ascontiguousarray(v[g])
            for c in spec[name][3]:
                masks[c] = np.ones((F, rows), bool)
            lazy = None
            if unrounded:
                first, heads = bs.differs_unrounded(rows, {c: v[0] for c, v in values.items()},
                                                    {c: m[0] for c, m in masks.items()}, unrounded)
                lazy = ({c: p for p, cols, _v in unrounded for c in cols}, heads)
            else:
                first = bs.differs(rows, {c: v[0] for c, v in values.items()}, {c: m[0] for c, m in masks.items()})
            upd = self._updated(first, values, F)
            if name in self.system:
                cut = min(cut, self._aligned(name, rows, values, upd, F))
            plans.append((name, rows, values, masks, upd, lazy))
        return plans, cut

    @staticmethod
    def _updated(first: bool, values: dict, F: int) -> np.ndarray:
        """Which frames of the run change the block: the first against the latest update, each
        next against the frame before it."""
        if F == 1:
            return _ONE_TRUE if first else _ONE_FALSE
        upd = np.zeros(F, bool)
        upd[0] = first
        for v in values.values():
            flat = v.reshape(F, -1)
            flat = flat.view(np.uint64) if flat.dtype.itemsize == 8 else flat.view(np.uint8)
            # a moving column differs in its first values: only the frames whose first
            # 8 values repeat the previous frame's are compared in full
            head = min(8, flat.shape[1])
            moved = (flat[1:, :head] != flat[:-1, :head]).any(axis=1)
            rest = np.flatnonzero(~moved)
            if len(rest):
                moved[rest] = (flat[rest + 1] != flat[rest]).any(axis=1)
            upd[1:] |= moved
        return upd

    def _aligned(self, name: str, rows: int, values: dict, upd: np.ndarray, F: int) -> int:
        """The frames of the run before the first update the ``system/`` alignment refuses."""
        n, ids = self.system[name]
        bad = upd.copy() if rows != n else np.zeros(F, bool)
        if ids is not None and "id" in values and rows == n:
            ids = np.asarray(ids)
            v = values["id"]
            if v.dtype != ids.dtype or v.shape[1:] != ids.shape:
                same = np.zeros(F, bool)
            else:
                want = np.ascontiguousarray(ids).reshape(1, -1).view(np.uint8)
                same = (v.reshape(F, -1).view(np.uint8) == want).all(axis=1)
            bad = upd & ~same
        return int(np.argmax(bad)) if bad.any() else F
