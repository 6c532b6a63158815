"""The fuzz run: inputs of every target in turn, each judged by ``attempt`` (read cleanly, refused with
an ``MrecError``, or a failure), failures saved under ``--out``, the summary printed."""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
import traceback

import mrec

from .bounds import bounds_case
from .cut import cut_case
from .inputs import inputs_case
from .links import links_case
from .mutate import build, files_of, mutate_bytes, mutate_json, read_all
from .remote import remote_case, remote_stop


def attempt(fn, target: str, victim: str, data: bytes, failures: list) -> int:
    """Run one input: 0 read cleanly, 1 refused with an MrecError, 2 failed (anything else, or over
    5 s; appended to ``failures``)."""
    started = time.time()
    try:
        fn()
        outcome = 0
    except mrec.MrecError:
        outcome = 1
    except BaseException as exc:           # noqa: BLE001 - the point of the fuzzer
        if isinstance(exc, KeyboardInterrupt):
            raise
        failures.append((target, victim, data, f"{type(exc).__name__}: {exc}"[:500], traceback.format_exc(limit=-6)))
        return 2
    if time.time() - started > 5:
        failures.append((target, victim, data, f"slow: {time.time() - started:.1f} s", ""))
        return 2
    return outcome


def run(n: int, seed: int, out_dir: str | None, verbose: bool) -> int:
    t0 = time.time()
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="mrec-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    targets = ("zarr.json", "shard", "zip", "bounds", "inputs", "cut", "remote", "links")
    counts = {t: [0, 0, 0] for t in targets}     # clean, refused, failed
    failures = []
    try:
        seeds = build(work)
        dirs, archive = seeds[:2], seeds[2]
        metas = [f for d in dirs for f in files_of(d, lambda f, _: f == "zarr.json")]
        shards = [f for d in dirs for f in files_of(d, lambda f, p: f != "zarr.json" and f"{os.sep}c" in p)]
        zip_bytes = open(archive, "rb").read()
        bad_zip = os.path.join(work, "fuzz.mrec.zip")
        for k in range(n):
            target = targets[k % len(targets)]
            if target in ("bounds", "inputs", "links"):
                cases = os.path.join(work, "cases")
                shutil.rmtree(cases, ignore_errors=True)
                os.makedirs(cases)
                what, fn = {"bounds": bounds_case, "inputs": inputs_case, "links": links_case}[target](rng, cases)
                counts[target][attempt(fn, target, what, what.encode("utf-8", "backslashreplace"), failures)] += 1
                continue
            if target == "cut":
                what, fn = cut_case(rng, os.path.join(work, "cut"))
                counts[target][attempt(fn, target, what, what.encode(), failures)] += 1
                continue
            if target == "remote":
                what, fn = remote_case(rng, os.path.join(work, "remote"), seeds)
                counts[target][attempt(fn, target, what, what.encode(), failures)] += 1
                continue
            if target == "zip":
                data = mutate_bytes(rng, zip_bytes)
                with open(bad_zip, "wb") as f:
                    f.write(data)
                path, victim, original = bad_zip, bad_zip, None
            else:
                victim = rng.choice(metas if target == "zarr.json" else shards)
                original = open(victim, "rb").read()
                data = (mutate_json if target == "zarr.json" else mutate_bytes)(rng, original)
                with open(victim, "wb") as f:
                    f.write(data)
                path = next(d for d in dirs if victim.startswith(d + os.sep))
            counts[target][attempt(lambda: read_all(path), target, victim, data, failures)] += 1
            if original is not None:
                with open(victim, "wb") as f:
                    f.write(original)
            if verbose and (k + 1) % 5000 == 0:
                print(f"  {k + 1} inputs, {len(failures)} failures, {time.time() - t0:.0f} s", flush=True)
        if failures and out_dir:
            os.makedirs(out_dir, exist_ok=True)
            for i, (target, victim, data, what, tb) in enumerate(failures[:50]):
                with open(os.path.join(out_dir, f"failure{i}.{target.replace('.', '_')}"), "wb") as f:
                    f.write(data)
                with open(os.path.join(out_dir, f"failure{i}.txt"), "w") as f:
                    where = victim if target in ("bounds", "inputs", "cut", "links", "remote") else os.path.relpath(victim, work)
                    f.write(f"{target} {where}\n{what}\n{tb}")
    finally:
        remote_stop()
        shutil.rmtree(work, ignore_errors=True)
    total = sum(sum(c) for c in counts.values())
    print(f"fuzz: {total} inputs (seed {seed}) in {time.time() - t0:.1f} s; "
          + "; ".join(f"{t}: {c[0]} read, {c[1]} refused, {c[2]} failed" for t, c in counts.items())
          + f"; failures {len(failures)}")
    for target, victim, _, what, tb in failures[:10]:
        print(f"  [{target}] {victim if target in ('bounds', 'inputs', 'cut', 'links', 'remote') else os.path.basename(victim)}: {what}")
        if verbose:
            print(tb)
    return 1 if failures else 0
