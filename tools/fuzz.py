"""Fuzz the readers: mutated zarr.json, shard and zip bytes of real stores.

Builds a few small real records (regular and ragged blocks, masks, a changing box,
meta, irregular steps; one packed to ``*.mrec.zip``), then for each input mutates
one file — a ``zarr.json`` (bit flips, byte edits, truncation, splices of hostile
JSON values: huge, negative, fractional, nested), a shard (bit flips, byte runs,
truncation, extension) or the zip archive (the same, anywhere in it) — and opens
and reads everything with ``mrec.TrajectoryReader``. The only exceptions allowed
are ``mrec.MrecError``; anything else (and any input that takes over 5 s) is a
failure, saved under ``--out`` for reproduction.

    python tools/fuzz.py --n 100000            # the long run
    python tools/fuzz.py --n 300 --seed 1      # a short run (the CI test)

Prints inputs run per target, outcomes (read cleanly / refused) and failures; exits 1
on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import mrec  # noqa: E402

HOSTILE_VALUES = [0, -1, 1.5, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308, "x", "", None, True, [], {},
                  [2**62], [0], [-1], [1] * 40, {"a": [[[[[]]]]]}, "NaN", "Infinity", "0xffffffffffffffff"]


def build(root: str) -> list[str]:
    """Seed records: two directories and one archive; returns their paths."""
    out = []
    for k, (ragged, compression) in enumerate([(True, "zstd"), (False, None)]):
        s = mrec.SequenceSchema()
        s.declare_block("atoms", rows=3)
        s.declare_column("atoms", "x", "f64", precision=1e-3)
        s.declare_column("atoms", "id", "u64")
        if ragged:
            s.declare_block("ions")
            s.declare_column("ions", "q", "f64", nullable=True)
            s.declare_column("ions", "name", "string")
        s.declare_meta("pe", "f64")
        p = os.path.join(root, f"seed{k}.mrec")
        rng = np.random.default_rng(k)
        with mrec.TrajectoryWriter.create(p, s, flush_every=3, compression=compression) as w:
            for i in range(10):
                f = {"blocks": {"atoms": {"x": rng.normal(size=3), "id": np.arange(3, dtype=np.uint64)}},
                     "meta": {"pe": float(i)}}
                if ragged and i % 3 != 2:
                    n = int(rng.integers(0, 4))
                    f["blocks"]["ions"] = {"q": rng.normal(size=n), "name": [f"i{j}" for j in range(n)]}
                    f["masks"] = {"ions": {"q": rng.random(n) < 0.5}}
                if i % 4 == 0:
                    f["box"] = mrec.Box(np.eye(3) * (3 + i), np.zeros(3), np.ones(3, bool), True)
                w.append(f, step=i * i, time=0.1 * i)
        out.append(p)
    z = mrec.pack(out[0], keep=True)
    shutil.move(z, os.path.join(root, "seed.mrec.zip"))
    out.append(os.path.join(root, "seed.mrec.zip"))
    return out


def read_all(path: str) -> None:
    r = mrec.TrajectoryReader(path)
    r.steps
    r.times
    for i in range(len(r)):
        r[i]
    for b in r.schema.blocks:
        for c in r.schema.blocks[b].columns:
            try:
                r.column(b, c)
            except mrec.MrecError:
                pass
    r.close()


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    op = rng.randrange(7)
    if not b:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if op == 0:                                    # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif op == 1:                                  # a byte run overwritten
        i = rng.randrange(len(b))
        n = rng.randint(1, 64)
        b[i:i + n] = bytes([rng.choice([0, 0xFF, rng.randrange(256)])]) * n
    elif op == 2:                                  # truncation
        del b[rng.randrange(len(b)):]
    elif op == 3:                                  # extension
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 600)))
    elif op == 4:                                  # deletion inside
        i = rng.randrange(len(b))
        del b[i:i + rng.randint(1, 32)]
    elif op == 5:                                  # insertion inside
        i = rng.randrange(len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    else:                                          # a little-endian integer field set to an extreme
        i = rng.randrange(max(1, len(b) - 8))
        b[i:i + 8] = rng.choice([2**64 - 1, 2**63, 2**32 - 1, 0, 1 << rng.randrange(64)]).to_bytes(8, "little")
    return bytes(b)


def mutate_json(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.4:
        return mutate_bytes(rng, data)
    try:
        doc = json.loads(data)
    except ValueError:
        return mutate_bytes(rng, data)
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])
    walk(doc, [])
    path = rng.choice(paths[1:] or [[]])
    if not path:
        return json.dumps(rng.choice(HOSTILE_VALUES)).encode()
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(HOSTILE_VALUES)
    return json.dumps(doc).encode()


def files_of(root: str, pred) -> list[str]:
    out = []
    for d, _, fs in os.walk(root):
        for f in fs:
            if pred(f, d):
                out.append(os.path.join(d, f))
    return sorted(out)


def run(n: int, seed: int, out_dir: str | None, verbose: bool) -> int:
    t0 = time.time()
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="mrec-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    counts = {t: [0, 0, 0] for t in ("zarr.json", "shard", "zip")}     # clean, refused, failed
    failures = []
    try:
        seeds = build(work)
        dirs, archive = seeds[:2], seeds[2]
        metas = [f for d in dirs for f in files_of(d, lambda f, _: f == "zarr.json")]
        shards = [f for d in dirs for f in files_of(d, lambda f, p: f != "zarr.json" and f"{os.sep}c" in p)]
        zip_bytes = open(archive, "rb").read()
        bad_zip = os.path.join(work, "fuzz.mrec.zip")
        for k in range(n):
            target = ("zarr.json", "shard", "zip")[k % 3]
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
            started = time.time()
            try:
                read_all(path)
                outcome = 0
            except mrec.MrecError:
                outcome = 1
            except BaseException as exc:           # noqa: BLE001 - the point of the fuzzer
                if isinstance(exc, KeyboardInterrupt):
                    raise
                outcome = 2
                failures.append((target, victim, data, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=-6)))
            if time.time() - started > 5 and outcome != 2:
                outcome = 2
                failures.append((target, victim, data, f"slow: {time.time() - started:.1f} s", ""))
            counts[target][outcome] += 1
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
                    f.write(f"{target} {os.path.relpath(victim, work)}\n{what}\n{tb}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = sum(sum(c) for c in counts.values())
    print(f"fuzz: {total} inputs (seed {seed}) in {time.time() - t0:.1f} s; "
          + "; ".join(f"{t}: {c[0]} read, {c[1]} refused, {c[2]} failed" for t, c in counts.items())
          + f"; failures {len(failures)}")
    for target, victim, _, what, tb in failures[:10]:
        print(f"  [{target}] {os.path.basename(victim)}: {what}")
        if verbose:
            print(tb)
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="inputs to run (default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder for reproducers of failures")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    return run(a.n, a.seed, a.out, a.verbose)


if __name__ == "__main__":
    sys.exit(main())
