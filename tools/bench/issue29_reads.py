"""Issue 29, target 4: the public reads on two cores against the single-thread decode ceiling of the
same chunks, and against zarrs and tensorstore reading the same arrays.

The workload is the chapter's 3000-atom random walk (``workloads.synthetic``), written by mrec's
default writer (reference profile, p = 1e-3 A).  Each public read -- ``column()`` of x, y, z,
``positions(slice)``, ``read_columns`` of all frames, ``for f in r`` -- is timed two ways, with
``MREC_THREADS=2`` (and ``threads=2`` where the call takes it):

* hot: right after writing, one reader reused (its shard indexes and chunk cache warm);
* cold: a fresh ``TrajectoryReader`` per run (no mrec caches), the read timed after the open.  The
  OS page cache stays warm (dropping it for everyone needs root on a shared machine); one more row
  reads with the record's files evicted by ``posix_fadvise(DONTNEED)``, for information.

Each ratio is the ceiling's time over the read's, both best of N, alternated in one process.  Run
alone: ``python -c "from tools.bench.issue29_reads import main; main()"``.
"""
from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

import mrec
from mrec.zarr.array import Array
from mrec.zarr.read import fetch, plan
from mrec.zarr.stores.directory import DirectoryStore

from .common import COLS, Target, have, note
from .issue16 import _blobs, _ceiling_read, _plain_copy
from .runs import mrec_write, threads_env
from .workloads import synthetic

#: the workers of every read here (the issue's "2 cores")
THREADS = int(os.environ.get("BENCH_THREADS", "2"))
BLOCK = "atoms"
PREFIX = f"trajectory/{BLOCK}/"


# -- the reads timed ----------------------------------------------------------------------------

def _column(r) -> None:
    for c in COLS:
        r.column(BLOCK, c, threads=THREADS)


def _positions(r) -> None:
    r.positions(slice(0, len(r)))


def _read_columns(r) -> None:
    r.read_columns(slice(0, len(r)), [(BLOCK, c) for c in COLS], threads=THREADS)


def _iterate(r) -> None:
    for _f in r:
        pass


READS: dict[str, Callable] = {"column() of x, y, z": _column, "positions(slice of all frames)": _positions,
                              "read_columns(all frames, x, y, z)": _read_columns, "for f in r": _iterate}


# -- timing -------------------------------------------------------------------------------------

def _hot(path: Path, fn: Callable) -> Callable[[], float]:
    """One run of ``fn`` on a reader opened once (and read once before the first run)."""
    r = mrec.TrajectoryReader(path)
    fn(r)

    def run() -> float:
        t0 = time.perf_counter()
        fn(r)
        return time.perf_counter() - t0
    return run


def _cold(path: Path, fn: Callable, evict: bool = False) -> Callable[[], float]:
    """One run of ``fn`` on a fresh reader (the open not timed); ``evict``: the record's files
    dropped from the page cache first."""
    def run() -> float:
        if evict:
            _evict(path)
        gc.collect()
        with mrec.TrajectoryReader(path) as r:
            t0 = time.perf_counter()
            fn(r)
            return time.perf_counter() - t0
    return run


def _evict(path: Path) -> None:
    """The record's files out of the page cache (synced, then ``POSIX_FADV_DONTNEED``)."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _alternate(runs: dict[str, Callable[[], float]], reps: int) -> dict[str, float]:
    """Best of ``reps`` of each run, the runs alternated (a disturbance hits them alike)."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(reps):
        for name, run in runs.items():
            best[name] = min(best[name], run())
    return best


class Ceiling3:
    """The single-thread decode ceiling of the x, y, z chunks a record holds (issue 16's loop)."""

    def __init__(self, path: Path, shuffle: bool = True):
        store = DirectoryStore(str(path))
        self.cols = []
        for c in COLS:
            a = Array.open(store, PREFIX + c)
            self.cols.append((_blobs(a), a.sharding.chunk_shape[0] * 8))
        self.shuffle = shuffle

    def __call__(self) -> float:
        return sum(_ceiling_read(blobs, self.shuffle, nbytes) for blobs, nbytes in self.cols)


class BatchFloor:
    """What no reader of these arrays in this design beats on THREADS threads: mrec's batch decoder
    (the core every public read ends in) over the x, y, z chunks' bytes already in memory, into a
    fresh result (as every read returns one) -- no fetch, no plan, no check of the index, no Python
    of a reader."""

    def __init__(self, path: Path):
        store = DirectoryStore(str(path))
        self.cols = []
        for c in COLS:
            a = Array.open(store, PREFIX + c, appended=True)
            ir, srows = a.sharding.chunk_shape[0], a.meta.chunk_shape[0]
            pieces, layout = [], []
            for s in range(-(-a.shape[0] // srows)):
                key = a.chunk_key((s,))
                n = min(srows, a.shape[0] - s * srows) // ir
                offs, sizes = plan.plain_entries(a.shard_index(key), 0, n)
                got = fetch.run(store, key, offs, sizes)
                pieces += got[0]
                layout.append(got[1])
            self.cols.append((a.decoders.batch(), pieces, layout, (len(pieces), ir), a.dtype))

    def __call__(self) -> float:
        t0 = time.perf_counter()
        for batch, pieces, layout, shape, dtype in self.cols:
            if not batch(pieces, np.empty(shape, dtype=dtype), THREADS, layout):
                raise RuntimeError("the batch decoder declined the record's chunks")
        return time.perf_counter() - t0


# -- the peers ----------------------------------------------------------------------------------

def _zarrs(path: Path) -> Callable[[], float]:
    import zarr

    def run() -> float:
        with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
            zs = [zarr.open_array(str(path / (PREFIX + c)), mode="r") for c in COLS]
            t0 = time.perf_counter()
            for z in zs:
                z[...]
            return time.perf_counter() - t0
    return run


def _tensorstore(path: Path) -> Callable[[], float]:
    import tensorstore as ts

    def run() -> float:
        tss = [ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / (PREFIX + c))}},
                       read=True).result() for c in COLS]
        t0 = time.perf_counter()
        for t in tss:
            t.read().result()
        return time.perf_counter() - t0
    return run


def _plain_record(src: Path, dst: Path) -> None:
    """The record at ``src`` copied to ``dst`` with x, y, z stored without the shuffle (bytes +
    zstd + crc32c, same shards and inner chunks): what tensorstore reads."""
    shutil.copytree(src, dst)
    for c in COLS:
        shutil.rmtree(dst / (PREFIX + c))
        _plain_copy(src, dst, PREFIX + c)


# -- the targets --------------------------------------------------------------------------------

def read_targets(work: Path, quick: bool) -> list[Target]:
    """Issue 29's target 4, measured: one Target per public read (hot and cold) against the
    single-thread decode ceiling, and the column read against zarrs and tensorstore."""
    frames = 300 if quick else 1000
    reps = 9 if quick else 11
    wl = synthetic(3000, frames, "synthetic")
    path = work / "reads.mrec"
    with threads_env(THREADS):
        mrec_write(wl, path, wl.p, threads=THREADS)
    ceil, floor = Ceiling3(path), BatchFloor(path)
    print(f"\n== issue 29, target 4: public reads on {THREADS} cores, {wl.desc}, {wl.mb:.1f} MB decoded; "
          f"best of {reps}, alternated with the ceiling")
    out = []
    with threads_env(THREADS):
        for what, fn in READS.items():
            t = _alternate({"ceiling": ceil, "floor": floor, "hot": _hot(path, fn), "cold": _cold(path, fn)}, reps)
            for how in ("hot", "cold"):
                out.append(_ratio_target(f"{what}, {how}", t, how, wl.mb))
        t = _alternate({"ceiling": ceil, "evicted": _cold(path, _column, evict=True), "disk": _disk(path)},
                       min(reps, 3))
        print(f"  {'column() of x, y, z, the record evicted from the page cache':<66} "
              f"{t['ceiling'] / t['evicted']:6.2f}x  of the ceiling ({t['evicted'] * 1e3:.1f} ms, information: "
              f"reading its files alone from the disk takes {t['disk'] * 1e3:.1f} ms)")
        out.extend(_peer_targets(work, path, reps))
    return out


def _disk(path: Path) -> Callable[[], float]:
    """Reading the record's files from the disk (evicted first), nothing decoded: the floor of a
    read with an empty page cache."""
    def run() -> float:
        _evict(path)
        t0 = time.perf_counter()
        for root, _dirs, files in os.walk(path):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    f.read()
        return time.perf_counter() - t0
    return run


def _ratio_target(what: str, t: dict, how: str, mb: float) -> Target:
    """A read's Target: the ceiling's time over its time, its floor the batch decoder alone."""
    where = "reader reused" if how == "hot" else "fresh reader (open not timed), OS page cache warm"
    tr, tc, tf = t[how], t["ceiling"], t["floor"]
    return Target(f"{what} >= 1.5 x 1-thread decode ceiling", tc / tr, ">=", 1.5,
                  f"{tr * 1e3:.1f} ms ({mb / tr:.0f} MB/s) against {tc * 1e3:.1f} ms; {where}",
                  floor=f"the batch decoder alone on {THREADS} threads (bytes in memory, a fresh result): "
                        f"{tf * 1e3:.1f} ms = {tc / tf:.2f}x the ceiling; this read is {tr / tf:.2f}x it")


def _peer_targets(work: Path, path: Path, reps: int) -> list[Target]:
    """mrec's column read of x, y, z (fresh reader) against zarrs and tensorstore reading the same
    three arrays (freshly opened, the open not timed)."""
    out = []
    if have("zarr") and have("zarrs"):
        out.append(_peer_target("zarrs", path, _zarrs(path), reps,
                                "zarr-python 3 + ZarrsCodecPipeline; the same arrays"))
    else:
        note("zarr / zarrs not installed: the zarrs line skipped")
    if have("tensorstore"):
        plain = work / "plain.mrec"
        _plain_record(path, plain)
        out.append(_peer_target("tensorstore", plain, _tensorstore(plain), reps,
                                "zstd + crc32c copies of x, y, z (tensorstore has no shuffle)"))
    else:
        note("tensorstore not installed: its line skipped")
    return out


def _peer_target(peer: str, path: Path, run: Callable[[], float], reps: int, what: str) -> Target:
    """column() of x, y, z on a fresh reader against ``run`` (the peer reading the same arrays)."""
    t = _alternate({"mrec": _cold(path, _column), peer: run, "floor": BatchFloor(path)}, reps)
    tm, tp, tf = t["mrec"], t[peer], t["floor"]
    return Target(f"column() of x, y, z >= 1.0 x {peer}", tp / tm, ">=", 1.0,
                  f"{tm * 1e3:.1f} ms against {tp * 1e3:.1f} ms; {what}; both freshly opened",
                  floor=f"the batch decoder alone on {THREADS} threads: {tf * 1e3:.1f} ms = {tp / tf:.2f}x {peer}")


def main(quick: bool = True) -> None:
    """Issue 29's read targets printed, in a temporary directory removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="mrec-issue29-reads-"))
    try:
        for t in read_targets(work, quick):
            t.print()
    finally:
        shutil.rmtree(work, ignore_errors=True)
