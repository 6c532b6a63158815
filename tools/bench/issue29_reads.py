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

import mrec
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore

from .common import COLS, MB, Target, have, note
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
    reps = 5 if quick else 7
    wl = synthetic(3000, frames, "synthetic")
    path = work / "reads.mrec"
    with threads_env(THREADS):
        mrec_write(wl, path, wl.p, threads=THREADS)
    ceil = Ceiling3(path)
    print(f"\n== issue 29, target 4: public reads on {THREADS} cores, {wl.desc}, {wl.mb:.1f} MB decoded; "
          f"best of {reps}, alternated with the ceiling")
    out = []
    with threads_env(THREADS):
        for what, fn in READS.items():
            t = _alternate({"ceiling": ceil, "hot": _hot(path, fn), "cold": _cold(path, fn)}, reps)
            for how in ("hot", "cold"):
                out.append(_ratio_target(f"{what}, {how}", t["ceiling"], t[how], wl.mb, how))
        t = _alternate({"ceiling": ceil, "evicted": _cold(path, _column, evict=True)}, min(reps, 3))
        print(f"  {'column() of x, y, z, files evicted from the page cache':<66} {t['ceiling'] / t['evicted']:6.2f}x"
              f"  (information: {wl.mb / t['evicted']:.0f} MB/s, reads the disk)")
        out.extend(_peer_targets(work, path, reps))
    return out


def _ratio_target(what: str, t_ceil: float, t: float, mb: float, how: str) -> Target:
    where = "reader reused" if how == "hot" else "fresh reader, open not timed, OS page cache warm"
    return Target(f"{what} >= 1.5 x 1-thread decode ceiling", t_ceil / t, ">=", 1.5,
                  f"{t * 1e3:.1f} ms ({mb / t:.0f} MB/s) against {t_ceil * 1e3:.1f} ms; {where}")


def _peer_targets(work: Path, path: Path, reps: int) -> list[Target]:
    """mrec's column read of x, y, z (fresh reader) against zarrs and tensorstore reading the same
    three arrays (freshly opened, the open not timed)."""
    out = []
    if have("zarr") and have("zarrs"):
        t = _alternate({"mrec": _cold(path, _column), "zarrs": _zarrs(path)}, reps)
        out.append(Target("column() of x, y, z >= 1.0 x zarrs (the same arrays)", t["zarrs"] / t["mrec"], ">=", 1.0,
                          f"{t['mrec'] * 1e3:.1f} ms against {t['zarrs'] * 1e3:.1f} ms (zarr-python 3 + "
                          f"ZarrsCodecPipeline); both freshly opened"))
    else:
        note("zarr / zarrs not installed: the zarrs line skipped")
    if have("tensorstore"):
        plain = work / "plain.mrec"
        _plain_record(path, plain)
        t = _alternate({"mrec": _cold(plain, _column), "tensorstore": _tensorstore(plain)}, reps)
        out.append(Target("column() of x, y, z >= 1.0 x tensorstore (no shuffle: its codecs)",
                          t["tensorstore"] / t["mrec"], ">=", 1.0,
                          f"{t['mrec'] * 1e3:.1f} ms against {t['tensorstore'] * 1e3:.1f} ms; zstd + crc32c "
                          f"copies of x, y, z; both freshly opened"))
    else:
        note("tensorstore not installed: its line skipped")
    return out


def main(quick: bool = True) -> None:
    """Issue 29's read targets printed, in a temporary directory removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="mrec-issue29-reads-"))
    try:
        for t in read_targets(work, quick):
            t.print()
    finally:
        shutil.rmtree(work, ignore_errors=True)
