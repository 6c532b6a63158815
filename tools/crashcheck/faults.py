"""``--faults``: write errors instead of crashes, ENOSPC / EIO at every injection point of a session
(and, with ``--tmpfs``, really full tmpfs mounts); the failure, the refused retries and the store
left are checked."""
from __future__ import annotations

import os
import shutil
import time

import mrec
from mrec.fs.faulty import FaultyFileSystem

from .checks import check_state, expected_frames, guarded, print_violations
from .plans import Plan, chosen, plans, schema
from .recording import scratch


def replay_with_fault(plan: Plan, root: str, fs: FaultyFileSystem, durable=True):
    """Run ``plan`` on ``fs`` (armed by the caller), injection points counted only inside append /
    flush / close.  Returns (frames appended, the failure or None, committed, nframes, retries) where
    ``retries`` lists the calls after a failure that did not refuse."""
    frames, w = [], None
    for act in plan.actions:
        fs.active = False
        if act[0] == "create":
            w = mrec.TrajectoryWriter.create(root, schema(), fs=fs, flush_every=plan.flush_every, durable=durable)
            continue
        if act[0] == "open":
            w = mrec.TrajectoryWriter.open(root, fs=fs, flush_every=plan.flush_every, durable=durable)
            continue
        fs.active = True
        try:
            if act[0] == "append":
                _, frame, step, t = act
                frames.append((frame, step, t))
                w.append(frame, step=step, time=t)
            elif act[0] == "flush":
                w.flush()
            elif act[0] == "close":
                w.close()
        except Exception as exc:        # noqa: BLE001 -- judged by the caller
            fs.active = False
            committed, nframes = w.committed, w.nframes
            retries = []
            nxt = next((a for a in plan.actions if a[0] == "append" and a[2] > frames[-1][1]), None) \
                if frames else None
            calls = [("flush", w.flush)] + ([("close", w.close)] if act[0] != "close" else [])
            if nxt is not None:
                calls.insert(1, ("append", lambda: w.append(nxt[1], step=nxt[2], time=nxt[3])))
            for name, call in calls:
                try:
                    call()
                    retries.append(name)
                except mrec.WriteError:
                    pass
                except mrec.RefusalError as e2:
                    if e2.kind != "closed":   # a close that failed after its commit: closed, not failed
                        retries.append(f"{name} raised {type(e2).__name__}: {e2}")
                except Exception as e2:   # noqa: BLE001
                    retries.append(f"{name} raised {type(e2).__name__}: {e2}")
            return frames, exc, committed, nframes, retries
    fs.active = False
    return frames, None, None, None, []


def check_fault(root: str, plan: Plan, k: int, err: int, outcome, kinds) -> str | None:
    frames, exc, committed, nframes, retries = outcome
    if exc is None:
        return None if k is None else f"point {k}: no failure was injected"
    if not isinstance(exc, mrec.WriteError):
        return f"the failure surfaced as {type(exc).__name__}: {exc}"
    if exc.errno != err or not isinstance(exc.__cause__, OSError):
        return f"WriteError without the errno / OSError: {exc!r}"
    if not (exc.path or "").startswith(root):
        return f"WriteError names no file of the store: {exc}"
    if retries:
        return f"after the failure the writer accepted {retries}"
    want = expected_frames(frames)
    return guarded(check_state, root, want, committed, nframes, {committed, nframes})


def run_faults(quick: bool, verbose: bool, limit_cuts: int | None = None, only=None, tmpfs: bool = False) -> int:
    import errno as E
    t0 = time.time()
    counts: dict[str, int] = {}
    violations: list[str] = []
    with scratch("mrec-faultcheck-") as work:
        for plan in chosen(plans(quick), only):
            for durable in (True, False):
                probe = FaultyFileSystem()
                probe.arm(None)
                replay_with_fault(plan, os.path.join(work, "probe.mrec"), probe, durable)
                shutil.rmtree(os.path.join(work, "probe.mrec"))
                n = probe.count
                points = range(n) if not limit_cuts else range(0, n, max(1, n // limit_cuts))
                for err in (E.ENOSPC, E.EIO):
                    label = f"{os.strerror(err)}{'' if durable else ', durable=False'}"
                    for k in points:
                        root = os.path.join(work, f"{plan.name}-{k}.mrec")
                        fs = FaultyFileSystem()
                        fs.arm(k, err)
                        outcome = replay_with_fault(plan, root, fs, durable)
                        counts[label] = counts.get(label, 0) + 1
                        bad = check_fault(root, plan, k, err, outcome, None)
                        if bad:
                            op = fs.failures[0] if fs.failures else ("?", "?")
                            violations.append(f"[{label}] {plan.name} point {k}/{n} ({op[0]} "
                                              f"{os.path.relpath(op[1], root)}): {bad}")
                        shutil.rmtree(root, ignore_errors=True)
                if verbose:
                    print(f"  {plan.name}{'' if durable else ' (durable=False)'}: {n} injection points", flush=True)
        if tmpfs:
            t = full_disk_runs(work, quick, violations)
            counts.update(t)
    total = sum(counts.values())
    detail = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(f"crashcheck --faults: {total} failing-write sessions ({detail}), violations {len(violations)}, "
          f"{time.time() - t0:.1f} s")
    return print_violations(violations, verbose)


def full_disk_runs(work: str, quick: bool, violations: list) -> dict:
    """Sessions on really full tmpfs mounts of growing sizes (root only): the first ENOSPC the
    kernel gives, the same checks, then the mount grown and the store reopened."""
    import subprocess
    mnt = os.path.join(work, "tmpfs")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], capture_output=True).returncode:
        print("  tmpfs: cannot mount a tmpfs here (needs root): skipped")
        return {}
    subprocess.run(["umount", mnt], check=True)
    plan = Plan("full-disk", 21, 40 if quick else 120, flush_every=3, explicit_every=4, box_every=5,
                irregular_from=10)
    n = hit = 0
    sizes = range(64, 64 + (12 if quick else 48) * 12, 12)       # KiB
    for kib in sizes:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", mnt], check=True)
        try:
            root = os.path.join(mnt, "t.mrec")
            fs = FaultyFileSystem()
            fs.arm(None)
            try:
                outcome = replay_with_fault(plan, root, fs, True)
            except mrec.WriteError as exc:   # create / open (the layout) did not fit: nothing promised
                if exc.errno != 28:
                    violations.append(f"[full tmpfs {kib} KiB] create failed: {exc}")
                continue
            n += 1
            if outcome[1] is None:
                continue                # the whole session fitted
            hit += 1
            subprocess.run(["mount", "-o", f"remount,size={kib + 4096}k", mnt], check=True)
            bad = check_fault(root, plan, None, 28, outcome, None)
            if bad:
                violations.append(f"[full tmpfs {kib} KiB] {bad}")
        finally:
            subprocess.run(["umount", mnt], check=True)
    return {f"full tmpfs (mounts {len(sizes)}, layout fitted {n}, ENOSPC mid-session {hit})": n}
