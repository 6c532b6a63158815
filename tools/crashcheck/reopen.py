"""``--reopen``: a second writer session on the states a crash of the first left (issue 17).

``session1_states`` samples the first session's crash states; ``run_session2`` reopens one (appending,
or truncating first), records that session and checks every cut of it; ``run_reopen`` runs them all.
"""
from __future__ import annotations

import os
import random
import shutil
import time

import numpy as np

import mrec
from mrec.fs.faulty import CrashSimulator, recording_fs

from .checks import Checker, classify, compare, expected_frames, model_text, print_violations, process_states
from .plans import LargePlan, Plan, chosen, reopen_plans
from .recording import (PAGE, commit_points, durable_tree_ops, last_before, materialise_torn, next_op, recorded,
                        scratch, torn_prefixes)


def session1_states(ops, published, durable, n: int | None) -> list[tuple]:
    """Crash states of session 1 that a reopen must continue from: around every landing of a chunk
    (the largest chunks' only, when a plan has chunks of more than a page): the process crash after
    the index rewrite (indexed, uncommitted copies), inside it (torn between pages), before it
    (unindexed copies), and a power loss after it; then the
    clean end.  ``n`` of them (all when None), taken by turns from each kind.  Each is (label, cut, how, bounds)."""
    pairs = [i for i in range(1, len(ops)) if ops[i].kind == "write_at" and ops[i].offset == 0
             and ops[i - 1].kind == "write_at" and ops[i - 1].path == ops[i].path and ops[i - 1].offset > 0]
    big = [i for i in pairs if len(ops[i - 1].data) > PAGE]
    pairs = big or pairs
    kinds: dict[str, list] = {"indexed": [], "torn": [], "process": [], "power": []}
    for i in pairs:
        shard = ops[i].path.split("trajectory" + os.sep, 1)[-1].replace(os.sep, "/")
        kinds["indexed"].append((f"indexed uncommitted landing in {shard}", i + 1, "process"))
        kinds["process"].append((f"unindexed landing in {shard}", i, "process"))
        prefixes = torn_prefixes(ops[i])
        if prefixes:
            keep = prefixes[len(prefixes) // 2]
            kinds["torn"].append((f"index rewrite of {shard} torn after {keep} bytes", i, ("torn", keep)))
        kinds["power"].append((f"power loss after a landing in {shard}", i + 1, ("power", i)))
    kinds["clean"] = [("clean close", len(ops), "process")]
    # round robin over the kinds (the defect-2 precondition first), each kind's states spread over
    # the session: its middle one first, then the others in a fixed shuffled order
    for k, lst in kinds.items():
        mid = lst[len(lst) // 2:len(lst) // 2 + 1]
        kinds[k] = mid + random.Random(len(lst)).sample([x for x in lst if x not in mid], len(lst) - len(mid))
    out = []
    for p in range(max(map(len, kinds.values()))):
        out += [lst[p] for lst in kinds.values() if p < len(lst)]
    if n is not None:
        out = out[:n]
    out.sort(key=lambda x: x[1])
    states = []
    for label, cut, how in out:
        received = last_before(published, cut)
        allowed = {0} | {v for i, v in published if i < cut}
        lo = last_before(durable, cut) if isinstance(how, tuple) and how[0] == "power" else received
        states.append((f"{label} (cut {cut}/{len(ops)})", cut, how, (lo, received, allowed)))
    return states


def _materialise(sim: CrashSimulator, cut: int, how, dest: str, ordered: bool) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    if how == "process":
        sim.materialise_process(cut, dest)
    elif how[0] == "torn":
        materialise_torn(sim, cut, dest, how[1])
    else:
        sim.materialise_power(cut, dest, seed=how[1], ordered_metadata=ordered)


def session2_frames(plan: Plan, frames1: list, n1: int, keep: int, count: int, seed: int) -> list:
    """``count`` frames a writer reopened after ``keep`` committed frames appends: fresh values whose
    first row echoes the session-1 frame at the same position (an uncommitted leftover when the
    crash left one) or else an earlier frame; steps and times go on from frame ``keep - 1``."""
    rng = np.random.default_rng(seed)
    step, t = (frames1[keep - 1][1], frames1[keep - 1][2]) if keep else (0, 0.0)
    out = []
    for k in range(count):
        frame = plan.make_frame(rng, k)
        ref = frames1[keep + k][0] if keep + k < len(frames1) else frames1[k % max(1, n1)][0] if frames1 else None
        for name, cols in frame["blocks"].items():
            for c, v in cols.items():
                r = (ref or {"blocks": {}})["blocks"].get(name, {}).get(c)
                if r is not None and len(v) and len(r) and np.asarray(r).dtype == v.dtype:
                    v[0] = np.asarray(r)[0]
        out.append((frame, step + 2 * (k + 1), t + 0.5 * (k + 1)))
    return out


class _OldOrNew:
    """The checker of a truncating reopen: until the lowered commit marker is published (process
    crash) or durable (power loss), a state may still be the old store: it is checked as such when
    it reads as the old store, else as the new one."""

    def __init__(self, old: Checker | None, n_old: int, new: Checker):
        self.old, self.n_old, self.new = old, n_old, new

    def __call__(self, path: str, lo: int, hi: int, allowed: set[int]) -> str | None:
        if self.old is not None:
            try:
                r = mrec.TrajectoryReader(path)
                same = len(r) == self.n_old and compare(r, self.old.want, self.n_old) is None
            except mrec.MrecError:
                same = False
            if same:
                return self.old(path, self.n_old, self.n_old, {self.n_old})
        return self.new(path, lo, hi, allowed)


def run_session2(plan, frames1, base: str, n1: int, keep: int | None, seed: int, count: int, work: str,
                 seeds: int, ordered: bool, limit_cuts, writer_durable, counts: dict, violations: list,
                 label: str, pipeline: bool = False) -> int:
    """Reopen the crash state at ``base`` (``n1`` frames committed) -- with
    ``truncate_after_step`` when ``keep`` is given --, append ``count`` frames, close; then check
    every cut of that session: process crash (whole, and large writes torn between pages) and power
    loss.  Returns the distinct states checked."""
    trunc = keep is not None
    keep = n1 if keep is None else keep
    frames2 = session2_frames(plan, frames1, n1, keep, count, seed)
    start_ops = durable_tree_ops(base)
    fs = recording_fs()
    try:
        w = mrec.TrajectoryWriter.open(base, fs=fs, flush_every=plan.flush_every, durable=writer_durable,
                                       truncate_after_step=frames1[keep - 1][1] if trunc else None,
                                       **({"pipeline": True} if pipeline else {}))
        for j, (frame, step, t) in enumerate(frames2):
            w.append(frame, step=step, time=t)
            if j == count // 2:
                w.flush()
        w.close()
    except mrec.MrecError as exc:
        violations.append(f"[reopen] {label}: the second session failed: {exc}")
        return 0
    ops = start_ops + fs.ops
    start = len(start_ops)
    sim = CrashSimulator(ops, base)
    published, durable = commit_points(ops, base)
    new = Checker(expected_frames(frames1[:keep] + frames2), plan.extra_frame)
    old = Checker(expected_frames(frames1[:n1]), plan.extra_frame) if trunc else None
    lowered = published[0][0] if trunc and published else len(ops) + 1   # the lowered marker's publish
    lowered_durable = durable[0][0] if trunc and durable else len(ops) + 1
    cuts = range(start, len(ops) + 1)
    if limit_cuts:
        cuts = range(start, len(ops) + 1, max(1, (len(ops) + 1 - start) // limit_cuts))
    name = f"{label}, session 2{' (truncate_after_step)' if trunc else ''}"
    for cut in cuts:
        before = [v for i, v in published if i < cut]
        received = before[-1] if before else n1
        allowed = {n1} | set(before)
        check = _OldOrNew(old if cut <= lowered else None, n1, new)
        process_states(sim, ops, cut, work, check, received, allowed, counts, violations, name, torn=True)
        upto = [v for i, v in durable if i < cut]
        must = upto[-1] if upto else (keep if trunc else n1)
        check = _OldOrNew(old if cut <= lowered_durable else None, n1, new)
        for sd in [None, "all"] + [cut * 1000 + k for k in range(seeds)]:
            dest = os.path.join(work, "state.mrec")
            shutil.rmtree(dest, ignore_errors=True)
            sim.materialise_power(cut, dest, seed=sd, ordered_metadata=ordered)
            counts["power"] += 1
            bad = check(dest, min(must, received), received, allowed)
            if bad:
                violations.append(f"[power] {name} cut {cut}/{len(ops)} ({next_op(ops, cut)}) seed {sd}: {bad}")
    return new.distinct + (old.distinct if old else 0)


def run_reopen(quick: bool, seeds: int, ordered: bool, verbose: bool, limit_cuts: int | None = None,
               only: list[str] | None = None, writer_durable=True, s1_states: int | None = None,
               pipeline: bool = False) -> int:
    """``--reopen``: for sampled crash states of a first session (:func:`session1_states`), a second
    session reopens the store (``TrajectoryWriter.open``, and ``open(truncate_after_step=...)``),
    appends frames whose leading values repeat earlier ones and closes; every cut of the second
    session must read exactly the frames committed (session 1's committed prefix, then session 2's)."""
    t0 = time.time()
    counts = {"process": 0, "power": 0, "temp": 0, "torn": 0}
    sessions = {"s1": 0, "append": 0, "truncate": 0}
    distinct = 0
    violations: list[str] = []
    count = 3 if quick else 6
    with scratch("mrec-crashcheck-reopen-") as work:
        for plan in chosen(reopen_plans(quick), only):
            ops1, root1, frames1, sim1, (published1, durable1) = recorded(plan, work, writer_durable, pipeline)
            check1 = Checker(expected_frames(frames1), plan.extra_frame)
            large = isinstance(plan, LargePlan)
            # --quick: the large-frame session (what the defects need) at 4 crash states and every cut of
            # its second sessions; the small-frame one at its clean close, 20 cuts a second session
            n_states = s1_states if s1_states is not None else (12 if not quick else 4 if large else 1)
            cuts2 = limit_cuts or (20 if quick and not large else None)
            states = session1_states(ops1, published1, durable1, n_states)
            for k, (label, cut, how, (lo, hi, allowed)) in enumerate(states):
                label = f"{plan.name} session 1 {label}"
                dest = os.path.join(work, "s1.mrec")
                _materialise(sim1, cut, how, dest, ordered)
                sessions["s1"] += 1
                bad = check1(dest, lo, hi, allowed)
                if bad:
                    violations.append(f"[session 1] {label}: {bad}")
                    continue
                for trunc in (False, True):
                    base = os.path.join(work, "s2", "rec.mrec")
                    shutil.rmtree(os.path.dirname(base), ignore_errors=True)
                    _materialise(sim1, cut, how, base, ordered)
                    try:
                        n1 = len(mrec.TrajectoryReader(base))
                    except mrec.MrecError:
                        break                   # no trajectory yet (check_state allowed it): nothing to reopen
                    if trunc and n1 < 2:
                        break
                    sessions["truncate" if trunc else "append"] += 1
                    distinct += run_session2(plan, frames1, base, n1, n1 // 2 if trunc else None,
                                             plan.seed * 100 + k, count, work, seeds, ordered, cuts2,
                                             writer_durable, counts, violations, label, pipeline)
            distinct += check1.distinct
            if verbose:
                print(f"  {plan.name}: {len(ops1)} ops, {len(frames1)} frames, {len(states)} session-1 states: "
                      + "; ".join(st[0] for st in states), flush=True)
    model = model_text(ordered, writer_durable)
    print(f"crashcheck --reopen: session-1 states {sessions['s1']}, second sessions {sessions['append']} appending "
          f"+ {sessions['truncate']} truncating; their process-crash states {counts['process']}, torn-write states "
          f"{counts['torn']}, power-loss states {counts['power']} [{model}, {seeds} sampled seeds + 2 extremes "
          f"per cut], {distinct} distinct, violations {len(violations)}, {time.time() - t0:.1f} s")
    if violations:
        print("  by kind: " + ", ".join(f"{k} {v}" for k, v in classify(violations).items()))
    return print_violations(violations, verbose)
