"""Trajectory benchmark: the chapter's synthetic workload, sizes and throughput.

3000 atoms uniform in a 40 Å box, a 0.05 Å random walk per frame, atoms in
random order (worst case), x/y/z f64 columns.  Prints bytes/atom/frame raw and
at p = 1e-3 and 1e-2 next to the chapter's figures (24.0, 7.6, 5.8), and write
/ read throughput in MB/s of f64 input.

    .venv/bin/python tools/bench_traj.py [--frames 40]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import mrec
from mrec.zarr.array import Array
from mrec.zarr.codecs.sharding import EMPTY
from mrec.zarr.stores.directory import DirectoryStore

CHAPTER = {None: 24.0, 1e-3: 7.6, 1e-2: 5.8}


def frames(n_frames: int, n_atoms: int = 3000, seed: int = 0):
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 40, size=(n_atoms, 3))
    rng.shuffle(pos)
    for _ in range(n_frames):
        pos = pos + rng.normal(0, 0.05, size=pos.shape)
        yield {"blocks": {"atoms": {"x": pos[:, 0].copy(), "y": pos[:, 1].copy(), "z": pos[:, 2].copy()}}}


def run(p, n_frames: int, workdir: Path) -> tuple[float, float, float]:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3000)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=p)
    path = workdir / f"bench-{p}.mrec"
    data = list(frames(n_frames))
    t0 = time.perf_counter()
    with mrec.TrajectoryWriter.create(path, s, durable=False) as w:
        for f in data:
            w.append(f)
    t_write = time.perf_counter() - t0
    file_bytes = sum(f.stat().st_size for c in "xyz" for f in (path / "trajectory" / "atoms" / c).rglob("*")
                     if f.is_file() and f.name != "zarr.json")
    store = DirectoryStore(path)
    col_bytes = 0
    for c in "xyz":
        arr = Array.open(store, f"trajectory/atoms/{c}")
        for key in store.list(f"trajectory/atoms/{c}/c/"):
            idx = arr.shard_index(key)
            used = idx.nbytes[idx.offsets != EMPTY]
            col_bytes += int(used.sum())
    t0 = time.perf_counter()
    r = mrec.TrajectoryReader(path)
    for i in range(len(r)):
        r.read_columns(i, [("atoms", "x"), ("atoms", "y"), ("atoms", "z")])
    t_read = time.perf_counter() - t0
    mb = n_frames * 3000 * 3 * 8 / 1e6
    return col_bytes / (n_frames * 3000), file_bytes / (n_frames * 3000), mb / t_write, mb / t_read


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=40)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mrec-bench-"))
    try:
        print(f"workload: 3000 atoms, 40 A box, 0.05 A walk, random order, {args.frames} frames")
        print("B/atom/frame = encoded inner chunks (what the chapter's figures measure); files = with the")
        print("64 KiB shard index of each column, a fixed cost that vanishes as the run grows")
        print(f"{'precision':>10} {'B/atom/frame':>13} {'chapter':>8} {'diff':>7} {'files':>7} {'write MB/s':>11} {'read MB/s':>10}")
        for p in (None, 1e-3, 1e-2):
            size, files, w, rd = run(p, args.frames, work)
            ref = CHAPTER[p]
            print(f"{str(p or 'raw'):>10} {size:13.2f} {ref:8.1f} {100 * (size - ref) / ref:6.1f}% {files:7.2f} {w:11.1f} {rd:10.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
