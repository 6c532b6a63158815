"""Checking one crash state: what a reader must see, and what reopen, repair and pack must do with it.

``expected_frames`` is the model (carry-forward, precision applied), ``compare`` reads against it bit
for bit, ``check_state`` also reopens, appends and packs; ``Checker`` memoises it on the state's
bytes; ``process_states`` checks the process-crash states of one cut.  The summary helpers
(``print_violations``, ``model_text``, ``classify``) are here too.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import traceback

import numpy as np

import mrec
from mrec.archive.pack import plan_pack
from mrec.check.repair import repair
from mrec.record.model.precision import round_to_precision

from .plans import PREC, Plan
from .recording import materialise_torn, next_op, torn_prefixes


# -- the model of what a reader must see ----------------------------------------------------

def expected_frames(frames: list) -> list[dict]:
    """Carry-forward resolution of the appended frames, precision applied."""
    out, cur, box = [], {}, None
    for frame, step, t in frames:
        for name, cols in frame["blocks"].items():
            vals = {c: np.asarray(v) for c, v in cols.items()}
            if name == "atoms":
                vals["x"] = round_to_precision(vals["x"].astype(np.float64), PREC)
            m = (frame.get("masks") or {}).get(name, {})
            cur[name] = (vals, {c: np.asarray(v, bool) for c, v in m.items() if not np.all(v)})
        if "box" in frame:
            box = frame["box"]
        meta = {"pe": frame["meta"]["pe"], "tag": frame["meta"].get("tag", "")}
        out.append({"blocks": dict(cur), "box": box, "meta": meta, "step": step, "time": t})
    return out


def bits(a) -> bytes:
    a = np.asarray(a)
    return a.dtype.str.encode() + repr(a.shape).encode() + np.ascontiguousarray(a).tobytes()


def compare(r: mrec.TrajectoryReader, want: list[dict], n: int) -> str | None:
    steps = r.steps
    times = r.times
    for i in range(n):
        e = want[i]
        if int(steps[i]) != e["step"] or times is None or bits(times[i]) != bits(np.float64(e["time"])):
            return f"frame {i}: step/time {steps[i]}/{None if times is None else times[i]} != {e['step']}/{e['time']}"
        f = r[i]
        if set(f.blocks) != set(e["blocks"]):
            return f"frame {i}: blocks {sorted(f.blocks)} != {sorted(e['blocks'])}"
        for name, (vals, masks) in e["blocks"].items():
            for c, v in vals.items():
                got = f.blocks[name][c]
                if bits(got) != bits(v.astype(got.dtype) if v.dtype != got.dtype and v.size == 0 else v):
                    return f"frame {i}: {name}/{c} differs: {got!r} != {v!r}"
            got_m = (f.masks or {}).get(name, {})
            if set(got_m) != set(masks) or any(bits(got_m[c]) != bits(masks[c]) for c in masks):
                return f"frame {i}: masks of {name} differ"
        if (e["box"] is None) != (f.box is None):
            return f"frame {i}: box {f.box} != {e['box']}"
        if e["box"] is not None and any(bits(getattr(f.box, a)) != bits(np.asarray(getattr(e["box"], a)))
                                        for a in ("vectors", "origin", "boundary")):
            return f"frame {i}: box differs: {f.box} != {e['box']}"
        if bits(np.float64(f.meta["pe"])) != bits(np.float64(e["meta"]["pe"])) or f.meta.get("tag", "") != e["meta"]["tag"]:
            return f"frame {i}: meta {f.meta} != {e['meta']}"
    return None


# -- checking one state ------------------------------------------------------------------

def check_state(path: str, want: list[dict], lo: int, hi: int, allowed: set[int], extra_frame=None) -> str | None:
    try:
        r = mrec.TrajectoryReader(path)
    except mrec.MrecError as exc:
        if lo == 0 and hi == 0 and not os.path.exists(os.path.join(path, "trajectory", "zarr.json")):
            return None       # crashed before the trajectory existed: nothing was promised
        return f"reader refused the store: {exc}"
    n = len(r)
    if n < lo:
        return f"nstep {n} lost committed frames (at least {lo} must be visible)"
    if n > hi or n not in allowed:
        return f"nstep {n} claims frames never committed (at most {hi}; published {sorted(allowed)})"
    try:
        bad = compare(r, want, n)
    except mrec.MrecError as exc:
        return f"a visible frame is unreadable: {exc}"
    if bad:
        return bad
    # reopen, append two frames, close, read back
    try:
        w = mrec.TrajectoryWriter.open(path, flush_every=1, durable=False)   # fsync adds nothing here
        base = w.committed
        if base != n:
            return f"writer reopened at {base} frames, reader saw {n}"
        last_step = int(r.steps[-1]) if n else 0
        last_t = float(r.times[-1]) if n else 0.0
        extra = []
        for k in range(2):
            f = (extra_frame or Plan.extra_frame)(k)
            w.append(f, step=last_step + 1 + k, time=last_t + 1.0 + k)
            extra.append((f, last_step + 1 + k, last_t + 1.0 + k))
        w.close()
        r2 = mrec.TrajectoryReader(path)
        if len(r2) != n + 2:
            return f"after reopen + 2 appends nstep is {len(r2)}, expected {n + 2}"
        full = want[:n] + [dict(e, blocks=dict(e["blocks"])) for e in expected_frames(extra)]
        bad = compare(r2, full, n + 2)
        if bad:
            return f"after reopen + append: {bad}"
    except mrec.MrecError as exc:
        return f"reopen + append failed: {exc}"
    try:                                  # nothing the crash left (temp files, the lock) blocks pack
        plan_pack(path)
    except mrec.MrecError as exc:
        return f"pack refuses after reopen + close: {exc}"
    return None


def check_repair_then_pack(path: str) -> str | None:
    """A state a crash inside an atomic replace left: `mrec repair` alone makes it packable."""
    try:
        report = repair(path)
        if not report.ok:
            return f"repair found it unrecoverable: {report.summary()}"
        if os.path.exists(os.path.join(path, "zarr.json")):       # else: cut before there was a record
            plan_pack(path)
    except mrec.MrecError as exc:
        return f"after mrec repair, pack refuses: {exc}"
    left = [os.path.join(d, f) for d, _, fs_ in os.walk(path) for f in fs_ if f.startswith(".mrec-tmp-")]
    return f"temp files left after repair: {left}" if left else None


def tree_digest(root: str) -> str:
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        h.update(os.path.relpath(d, root).encode() + b"\0")
        for f in sorted(files):
            h.update(f.encode() + b"\0")
            with open(os.path.join(d, f), "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


class Checker:
    """check_state, memoised on the state's bytes (many cuts leave identical trees)."""

    def __init__(self, want, extra_frame=None):
        self.want = want
        self.extra_frame = extra_frame
        self.memo: dict = {}
        self.distinct = 0

    def __call__(self, path: str, lo: int, hi: int, allowed: set[int]) -> str | None:
        key = (tree_digest(path), lo, hi, frozenset(allowed))
        if key not in self.memo:
            self.distinct += 1
            self.memo[key] = guarded(check_state, path, self.want, lo, hi, allowed, self.extra_frame)
        return self.memo[key]


def guarded(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:      # anything outside the MrecError family is itself a violation
        return f"unexpected {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"


def process_states(sim, ops, cut, work, check, received, allowed, counts, violations, name,
                    torn: bool = False) -> None:
    """The process-crash states of one cut (plus a stray temp file when the next op is a replace):
    each must open at exactly ``received`` frames; a state with a stray temp file must also, on a
    copy, be made packable by ``mrec repair`` alone.  With ``torn``, a next op that is a write_at of
    more than a page also gives the states where only a page-aligned prefix of it landed
    (:func:`torn_prefixes`: a fatal signal can end a large pwrite between pages)."""
    variants = [False, True] if cut < len(ops) and ops[cut].kind == "replace" else [False]
    for stray in variants:
        dest = os.path.join(work, "state.mrec")
        shutil.rmtree(dest, ignore_errors=True)
        sim.materialise_process(cut, dest, stray_temp=stray)
        counts["process"] += 1
        if stray:                  # first: mrec repair alone makes it packable
            counts["temp"] = counts.get("temp", 0) + 1
            copy = os.path.join(work, "state-repair.mrec")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(dest, copy)
            bad = guarded(check_repair_then_pack, copy)
            if bad:
                violations.append(f"[temp] {name} cut {cut}/{len(ops)} ({next_op(ops, cut)}): {bad}")
        bad = check(dest, received, received, allowed)
        if bad:
            violations.append(f"[process] {name} cut {cut}/{len(ops)} ({next_op(ops, cut)})"
                              f"{' +temp' if stray else ''}: {bad}")
    for keep in (torn_prefixes(ops[cut]) if torn and cut < len(ops) else ()):
        dest = os.path.join(work, "state.mrec")
        shutil.rmtree(dest, ignore_errors=True)
        materialise_torn(sim, cut, dest, keep)
        counts["torn"] = counts.get("torn", 0) + 1
        bad = check(dest, received, received, allowed)
        if bad:
            violations.append(f"[torn] {name} cut {cut}/{len(ops)} ({next_op(ops, cut)}, {keep} of "
                              f"{len(ops[cut].data)} bytes landed): {bad}")


# -- the summary -------------------------------------------------------------------------

def model_text(ordered: bool, writer_durable) -> str:
    """The crash model as the summary lines name it."""
    model = "ordered metadata (journaling fs)" if ordered else "strict (only fsync orders)"
    return model + (", writer durable='always'" if writer_durable == "always" else "")


def print_violations(violations: list, verbose: bool) -> int:
    for v in violations[: (None if verbose else 40)]:
        print("  " + v)
    if len(violations) > 40 and not verbose:
        print(f"  ... {len(violations) - 40} more (use -v)")
    return 1 if violations else 0


def classify(violations: list[str]) -> dict[str, int]:
    """Violations by what went wrong: committed frames read with other rows (silently), the store
    refused as a contradicting shard index, other refusals, wrong nstep, anything else."""
    out: dict[str, int] = {}
    for v in violations:
        if "contradict the file" in v:
            k = "refused: shard index contradicts the file"
        elif any(w in v for w in (" differs", "masks of", "blocks [", "meta {")):
            k = "wrong rows / values of a committed frame"
        elif "nstep" in v or "reopened at" in v:
            k = "wrong frame count"
        elif "refused" in v or "unreadable" in v or "failed" in v:
            k = "refused / failed otherwise"
        else:
            k = "other"
        out[k] = out.get(k, 0) + 1
    return out
