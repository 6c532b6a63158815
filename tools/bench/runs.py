"""mrec measured: writes (append, extend, a pipelined writer, a simulated MD step between appends),
sequential and random reads, with ``MREC_THREADS`` set for the duration (``threads_env``)."""
from __future__ import annotations

import gc
import os
import shutil
import time
from pathlib import Path

import numpy as np

import mrec

from .baselines import Ceiling
from .common import COLS
from .workloads import Workload, schema


class threads_env:
    """MREC_THREADS=n for the duration (the encode pool reads it at every landing)."""

    def __init__(self, n: int):
        self.n, self.old = str(n), None

    def __enter__(self):
        self.old = os.environ.get("MREC_THREADS")
        os.environ["MREC_THREADS"] = self.n

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("MREC_THREADS", None)
        else:
            os.environ["MREC_THREADS"] = self.old


def mrec_write(wl: Workload, path: Path, p, *, flush_each: bool = False, flush_every=None,
               profile: str = "reference", batch: int | None = None, threads: int = 1,
               pipeline: bool = False) -> float:
    """Seconds to write wl: append per frame, or extend() with lists of ``batch`` frames (built
    inside the timing, as a producer would); ``threads`` encode workers (MREC_THREADS);
    ``pipeline``: the writer's automatic commits on its committer thread."""
    if path.exists():
        shutil.rmtree(path)
    gc.collect()
    with threads_env(threads):
        t0 = time.perf_counter()
        w = mrec.TrajectoryWriter.create(path, schema(wl.atoms, p), durable=False, flush_every=flush_every,
                                         **({"profile": profile} if profile != "reference" else {}),
                                         **({"pipeline": True} if pipeline else {}))
        if batch:
            for f0 in range(0, wl.frames, batch):
                w.extend([wl.frame(f) for f in range(f0, min(wl.frames, f0 + batch))])
        else:
            for f in range(wl.frames):
                w.append(wl.frame(f))
                if flush_each:
                    w.flush()
        w.close()
        return time.perf_counter() - t0


def mrec_read_seq(path: Path) -> tuple[float, float]:
    """(frame by frame through r[i], whole columns through r.column) seconds."""
    r = mrec.TrajectoryReader(path)
    t0 = time.perf_counter()
    for i in range(len(r)):
        r[i]
    t1 = time.perf_counter()
    r.close()
    r = mrec.TrajectoryReader(path)
    t2 = time.perf_counter()
    for c in COLS:
        r.column("atoms", c)
    t3 = time.perf_counter()
    r.close()
    return t1 - t0, t3 - t2


def mrec_random(path: Path, idx, ceil: "Ceiling") -> tuple[list[float], list[float]]:
    """Latencies of r[i] and, right after each, of decoding the same frame's chunks (the ceiling)."""
    r = mrec.TrajectoryReader(path)
    r[0]                                                    # shard indexes cached, as in any long read
    out, one = [], []
    for i in idx:
        t0 = time.perf_counter()
        r[int(i)]
        out.append(time.perf_counter() - t0)
        one.append(ceil.frame_latency(int(i)))
    r.close()
    return out, one


#: the simulated MD step between two appends (``append_blocking(md_step=...)``), seconds
MD_STEP = 0.001


def append_blocking(wl: Workload, path: Path, p, threads: int, pipeline: bool = False,
                    md_step: float = 0.0, md_writes: bool = False) -> tuple[float, float]:
    """(seconds inside append() calls, seconds of the whole write incl. create and close); with
    ``threads`` >= 2 the writer encodes inner chunks ahead on the pool; ``pipeline=True``: its
    automatic commits are queued to a committer thread (the time append blocks excludes them).

    ``md_step``: each append is preceded by a simulated MD step of that many seconds which releases
    the GIL, as a compiled MD engine does (``time.sleep``): what a simulation calling ``append``
    between its steps feels.  0: appends back to back, where with bounded queues the blocking time
    cannot drop below the writer's whole work divided by the cores.

    ``md_writes``: the MD step also writes the frame's coordinates into the simulation's own arrays
    (one set, refilled every step, as an integrator updates its positions), so ``append`` gets
    arrays the step has just written; without it each frame is a view of the workload prepared
    before the loop (14 MB for 200 frames: cold in the cache when appended)."""
    if path.exists():
        shutil.rmtree(path)
    gc.collect()
    frames = [wl.frame(f) for f in range(wl.frames)]
    sim = {c: np.empty(wl.atoms) for c in COLS}
    with threads_env(threads):
        t0 = time.perf_counter()
        w = mrec.TrajectoryWriter.create(path, schema(wl.atoms, p), durable=False, pipeline=pipeline)
        inside = 0.0
        for i, f in enumerate(frames):
            if md_writes:
                for k, c in enumerate(COLS):
                    np.copyto(sim[c], wl.pos[k, i])
                f = {"blocks": {"atoms": sim}}
            if md_step:
                time.sleep(md_step)
            a = time.perf_counter()
            w.append(f)
            inside += time.perf_counter() - a
        w.close()
        return inside, time.perf_counter() - t0
