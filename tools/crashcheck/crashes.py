"""The crash runs of a writer session: every cut of the recorded sessions (``run``, which also
runs the overwrite sessions) and of a restart's truncation (``run_truncation``, ``--truncate``)."""
from __future__ import annotations

import os
import shutil
import time

import mrec
from mrec.fs.faulty import CrashSimulator, recording_fs

from .checks import Checker, expected_frames, model_text, print_violations, process_states
from .overwrite import run_nested_overwrite, run_overwrite
from .plans import Plan, chosen, plans, schema
from .recording import commit_points, last_before, next_op, recorded, scratch


def run(quick: bool, seeds: int, ordered: bool, verbose: bool, limit_cuts: int | None = None,
        only: list[str] | None = None, writer_durable=True, pipeline: bool = False) -> int:
    t0 = time.time()
    counts = {"process": 0, "power": 0, "temp": 0}
    distinct = 0
    violations: list[str] = []
    with scratch("mrec-crashcheck-") as work:
        for plan in chosen(plans(quick), only):
            ops, root, frames, sim, (published, durable) = recorded(plan, work, writer_durable, pipeline)
            want = expected_frames(frames)
            check = Checker(want, plan.extra_frame)
            cuts = range(len(ops) + 1)
            if limit_cuts:
                cuts = range(0, len(ops) + 1, max(1, (len(ops) + 1) // limit_cuts))
            for cut in cuts:
                received = last_before(published, cut)
                allowed = {0} | {v for i, v in published if i < cut}
                # process crash: exactly what the OS received
                process_states(sim, ops, cut, work, check, received, allowed, counts, violations, plan.name)
                # power loss: the extremes and sampled drop / tear combinations
                must = last_before(durable, cut)
                for seed in [None, "all"] + [cut * 1000 + k for k in range(seeds)]:
                    dest = os.path.join(work, "state.mrec")
                    shutil.rmtree(dest, ignore_errors=True)
                    sim.materialise_power(cut, dest, seed=seed, ordered_metadata=ordered)
                    counts["power"] += 1
                    bad = check(dest, must, received, allowed)
                    if bad:
                        violations.append(f"[power] {plan.name} cut {cut}/{len(ops)} ({next_op(ops, cut)}) seed {seed}: {bad}")
            distinct += check.distinct
            if verbose:
                print(f"  {plan.name}: {len(ops)} ops, {len(frames)} frames, {len(published)} commits "
                      f"({len(durable)} durable)", flush=True)
        if not only or "overwrite" in only:
            ow = run_overwrite(work, seeds, ordered, limit_cuts, violations)
            if verbose:
                print(f"  overwrite: {ow['ops']} ops, process-crash states {ow['process']}, "
                      f"power-loss states {ow['power']}", flush=True)
            counts["ow-process"], counts["ow-power"] = ow["process"], ow["power"]
        if not only or "nested-overwrite" in only:
            run_nested_overwrite(work, seeds, ordered, limit_cuts, violations, verbose)
    model = model_text(ordered, writer_durable)
    print(f"crashcheck: process-crash states {counts['process']}, power-loss states {counts['power']} "
          f"[{model}, {seeds} sampled seeds + 2 extremes per cut], {distinct} distinct, "
          f"temp-leftover states repaired then packed {counts['temp']}, "
          f"overwrite states {counts.get('ow-process', 0)} process / {counts.get('ow-power', 0)} power, "
          f"violations {len(violations)}, {time.time() - t0:.1f} s")
    return print_violations(violations, verbose)


def run_truncation(seeds: int, ordered: bool, verbose: bool) -> int:
    """Restarts: a durable session of 10 frames, then ``TrajectoryWriter.open(truncate_after_step=S)``
    and ``close()``; every cut of the truncation's operations must open at the old state or the
    truncated one -- exactly the one the OS last received for a process crash, and the truncated
    one once its commit marker was fsynced -- with every visible frame intact, and must reopen,
    take two frames and read back."""
    t0 = time.time()
    counts = {"process": 0, "power": 0}
    violations: list[str] = []
    with scratch("mrec-crashcheck-trunc-") as work:
        plan = Plan("truncation", 21, 10, flush_every=3, explicit_every=4, box_every=3, irregular_from=6)
        fs = recording_fs()
        root = os.path.join(work, "rec.mrec")
        frames = []
        w = mrec.TrajectoryWriter.create(root, schema(), fs=fs, flush_every=plan.flush_every)
        for act in plan.actions[1:]:
            if act[0] == "append":
                w.append(act[1], step=act[2], time=act[3])
                frames.append(act[1:])
            elif act[0] == "flush":
                w.flush()
        w.close()
        old = len(frames)
        keep = 4
        start = len(fs.ops)
        w = mrec.TrajectoryWriter.open(root, fs=fs, truncate_after_step=frames[keep - 1][1] + 1)
        w.close()
        ops = fs.ops
        sim = CrashSimulator(ops, root)
        published, durable = commit_points(ops, root)
        want = expected_frames(frames)
        check = Checker(want)
        for cut in range(start, len(ops) + 1):
            received = last_before(published, cut)
            process_states(sim, ops, cut, work, check, received, {received}, counts, violations, "truncation")
            # power loss: the truncated state is always allowed, the old one until the lowered
            # marker is durable
            lo, hi = keep, (keep if last_before(durable, cut) == keep else old)
            for seed in [None, "all"] + [cut * 1000 + k for k in range(seeds)]:
                dest = os.path.join(work, "state.mrec")
                shutil.rmtree(dest, ignore_errors=True)
                sim.materialise_power(cut, dest, seed=seed, ordered_metadata=ordered)
                counts["power"] += 1
                bad = check(dest, lo, hi, {keep, hi})
                if bad:
                    violations.append(f"[power] truncation cut {cut}/{len(ops)} ({next_op(ops, cut)}) seed {seed}: {bad}")
        if verbose:
            print(f"  truncation: {len(ops) - start} ops cut, {old} -> {keep} frames", flush=True)
    print(f"crashcheck truncation: process-crash states {counts['process']}, power-loss states {counts['power']} "
          f"[{'ordered metadata' if ordered else 'strict'}], {check.distinct} distinct, violations {len(violations)}, "
          f"{time.time() - t0:.1f} s")
    for v in violations[: (None if verbose else 40)]:
        print("  " + v)
    return 1 if violations else 0
