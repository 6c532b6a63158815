"""Issue 29, targets 1-3: the writer on frames as a simulation hands them.

The frames: 3000 atoms of the chapter's random walk (A, precision 1e-3) with velocities (exact), an
explicit ``step=`` (every 10th MD step) and ``time=`` (ps), a cell (the same ``Box`` each frame, as an
NVT engine gives it) and three per-step meta values (potential / kinetic energy, temperature) — the
schema :func:`mrec.md.live.md_schema` gives a live engine.  Every mrec figure is a ratio to a
baseline timed in the same process:

* the **single-thread ceiling of the same columns**: after the run, each array the writer wrote is
  read back and its inner chunks encoded again by the bare codecs its ``zarr.json`` names (the
  declared precision's rounding, ``numcodecs`` shuffle, zstd, crc32c), one loop, no I/O;
* **XTC's per-frame write**: MDAnalysis' ``XTCWriter`` writing the same positions (what a simulation
  waits for each frame with an XTC reporter);
* **toy frames**: the same columns with no step, time, cell or meta.

Lines: 1. ``append`` one frame at a time >= 0.7 x the ceiling, ``extend`` >= 0.8 x, toy frames not
faster than these by more than 10 %; 2. the default writer's ``append`` blocking <= 0.5 x XTC's
per-frame write, ``pipeline=True`` <= 0.3 x; 3. both cores (``MREC_THREADS=2``) >= 1.2 x the
single-thread ceiling.  Run alone: ``python -c "from tools.bench.issue29_write import main; main()"``.
"""
from __future__ import annotations

import gc
import gzip
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc
import numpy as np
import zstandard
from numcodecs import Shuffle

import mrec
from mrec.md.live import ENERGY_META, md_schema
from mrec.record.model.precision import quantum

from .common import MB, Target, have, note
from .baselines import timed_io
from .runs import MD_STEP, threads_env
from .workloads import Workload, random_walk

P = 1e-3                    # A: the positions' declared precision
ATOMS = 3000


@dataclass
class MdRun:
    """The frames of a run as an engine hands them, and the same columns as toy frames."""
    frames: list
    toys: list
    steps: list
    times: list
    pos: np.ndarray         # (3, frames, atoms), for XTC

    @property
    def mb(self) -> float:
        return len(self.frames) * ATOMS * 6 * 8 / MB


def md_run(n: int) -> MdRun:
    pos = random_walk(ATOMS, n, seed=3)
    rng = np.random.default_rng(4)
    vel = rng.normal(0, 5.0, size=(3, n, ATOMS))
    box = mrec.Box(np.eye(3) * 40.0)
    frames, toys = [], []
    for f in range(n):
        cols = {c: pos[k, f] for k, c in enumerate("xyz")}
        cols.update({"v" + c: vel[k, f] for k, c in enumerate("xyz")})
        toys.append({"blocks": {"atoms": cols}})
        meta = {"potential_energy": -4.1e4 + rng.normal(), "kinetic_energy": 7.4e3 + rng.normal(),
                "temperature": 300.0 + rng.normal()}
        frames.append({"blocks": {"atoms": cols}, "box": box, "meta": meta})
    return MdRun(frames, toys, [10 * f for f in range(n)], [0.02 * f for f in range(n)], pos)


def _schema(toy: bool):
    return md_schema(ATOMS, precision=P, velocities=True, forces=False, meta=() if toy else ENERGY_META)


def write(run: MdRun, path: Path, *, mode: str, toy: bool = False, threads: int = 1,
          pipeline: bool = False, md_step: float = 0.0) -> tuple[float, float]:
    """(seconds from create to close, seconds inside append / extend calls and close) of one run.
    ``md_step``: each ``append`` is preceded by a simulated MD step of that many seconds that
    releases the GIL (``time.sleep``), as a compiled engine's step does: what the simulation feels."""
    shutil.rmtree(path, ignore_errors=True)
    gc.collect()
    frames = run.toys if toy else run.frames
    inside = 0.0
    with threads_env(threads):
        t0 = time.perf_counter()
        w = mrec.TrajectoryWriter.create(path, _schema(toy), durable=False, pipeline=pipeline)
        if mode == "extend":
            a = time.perf_counter()
            if toy:
                w.extend(frames)
            else:
                w.extend(frames, steps=run.steps, times=run.times)
            inside = time.perf_counter() - a
        else:
            for f, fr in enumerate(frames):
                if md_step:
                    time.sleep(md_step)
                a = time.perf_counter()
                if toy:
                    w.append(fr)
                else:
                    w.append(fr, step=run.steps[f], time=run.times[f])
                inside += time.perf_counter() - a
        a = time.perf_counter()
        w.close()
        b = time.perf_counter()
    return b - t0, inside + (b - a)


# -- the ceiling of the same columns ------------------------------------------------------------------

def _encoder(codecs: list, dtype: np.dtype):
    """The bare encode of one inner chunk by the codec chain a ``zarr.json`` names."""
    steps = []
    for c in codecs:
        name, cfg = c["name"], c.get("configuration", {})
        if name == "numcodecs.shuffle":
            steps.append(Shuffle(elementsize=cfg["elementsize"]).encode)
        elif name == "zstd":
            steps.append(zstandard.ZstdCompressor(level=cfg.get("level", 3), write_content_size=True).compress)
        elif name == "gzip":
            steps.append(lambda b, _lvl=cfg.get("level", 5): gzip.compress(b, _lvl, mtime=0))
        elif name == "crc32c":
            steps.append(lambda b: bytes(b) + _crc.crc32c(b).to_bytes(4, "little"))
        elif name != "bytes":
            raise ValueError(f"no bare encoder for codec {name!r}")

    def encode(a: np.ndarray) -> bytes:
        b = memoryview(np.ascontiguousarray(a, dtype=dtype)).cast("B")
        for s in steps:
            b = s(b)
        return b
    return encode


def ceiling(path: Path) -> float:
    """Seconds the bare codecs take to encode every inner chunk of every array under
    ``trajectory/`` (the rounding of a column with a declared precision included), one thread."""
    import json
    r = mrec.TrajectoryReader(path)
    precision = {(b, c): cd.precision for b, d in r.schema.blocks.items() for c, cd in d.columns.items()}
    work = []
    for meta in sorted(Path(path, "trajectory").rglob("zarr.json")):
        doc = json.loads(meta.read_text())
        if doc.get("node_type") != "array":
            continue
        rel = meta.parent.relative_to(path).as_posix()
        data = _read_array(path, rel)
        shard = doc["codecs"][0]
        inner = shard["configuration"] if shard["name"] == "sharding_indexed" else None
        codecs = inner["codecs"] if inner else doc["codecs"]
        rows = inner["chunk_shape"][0] if inner else doc["chunk_grid"]["configuration"]["chunk_shape"][0]
        parts = rel.split("/")
        p = precision.get((parts[1], parts[2])) if len(parts) == 3 else None
        work.append((data, rows, _encoder(codecs, data.dtype), quantum(p) if p else None))
    r.close()
    t0 = time.perf_counter()
    for data, rows, enc, q in work:
        for i in range(0, len(data), rows):
            a = data[i:i + rows]
            if q is not None:
                a = np.rint(a / q)
                a *= q
            enc(a)
    return time.perf_counter() - t0


def _read_array(path: Path, rel: str) -> np.ndarray:
    from mrec.zarr.array import Array
    from mrec.zarr.stores.directory import DirectoryStore
    a = Array.open(DirectoryStore(str(path)), rel, appended=True)
    return a.read()


# -- XTC's per-frame write ---------------------------------------------------------------------------

def xtc_per_frame(run: MdRun, fn: Path, md_step: float = 0.0) -> float | None:
    """Seconds of MDAnalysis' XTCWriter per frame of the same positions (after the same MD step)."""
    if not have("MDAnalysis"):
        return None
    from .peers import xtc_digits, xtc_write
    wl = Workload("md", "md frames", run.pos, P)
    return xtc_write(wl, fn, xtc_digits(P), md_step=md_step) / len(run.frames)


# -- the targets --------------------------------------------------------------------------------------

ROUNDS = [("append", {}), ("extend", {}), ("append toy", {"toy": True}), ("extend toy", {"toy": True}),
          ("append, 2 threads", {"threads": 2}), ("extend, 2 threads", {"threads": 2}),
          ("extend, 2 threads, pipeline", {"threads": 2, "pipeline": True}),
          ("append after MD step", {"threads": 2, "md_step": MD_STEP}),
          ("append after MD step, pipeline", {"threads": 2, "pipeline": True, "md_step": MD_STEP})]


class timed_meta_arrays:
    """The wall time spent landing and publishing the per-step meta arrays (``trajectory/meta/*``:
    the appender's landing, the ``zarr.json`` replace) while the block runs, in ``self.s``: the
    commit protocol's work on the arrays a realistic record has and a toy one has not."""

    def __init__(self):
        self.s = 0.0

    def __enter__(self):
        from mrec.zarr.append import ShardedAppender
        from mrec.zarr.array import Array
        self.saved = (ShardedAppender.land, Array.write_metadata)

        def timed(fn, arr_of):
            def run(obj, *a, **k):
                if "/meta/" not in arr_of(obj).name:
                    return fn(obj, *a, **k)
                t0 = time.perf_counter()
                try:
                    return fn(obj, *a, **k)
                finally:
                    self.s += time.perf_counter() - t0
            return run
        ShardedAppender.land = timed(self.saved[0], lambda ap: ap.array)
        Array.write_metadata = timed(self.saved[1], lambda a: a)
        return self

    def __exit__(self, *exc):
        from mrec.zarr.append import ShardedAppender
        from mrec.zarr.array import Array
        ShardedAppender.land, Array.write_metadata = self.saved


def _measure(run: MdRun, work: Path, repeat: int) -> tuple[dict, float, float, dict]:
    """Best (total, blocking) of each round, alternated; the ceiling; one-thread append's file I/O;
    per mode (append, extend) the least time landing and publishing the meta arrays."""
    path = work / "md29.mrec"
    res: dict = {}
    ceils, ios = [], []
    metas: dict = {}
    for _ in range(repeat):
        for label, kw in ROUNDS:
            t = write(run, path, mode=label.split(",")[0].split()[0], **kw)
            res[label] = min(res.get(label, t), t)
        with timed_io() as io:
            t = write(run, path, mode="append")
        ios.append((t[0], io.s))
        ceils.append(ceiling(path))
        for mode in ("append", "extend"):
            with timed_meta_arrays() as tm:
                write(run, path, mode=mode)
            metas[mode] = min(metas.get(mode, tm.s), tm.s)
    return res, min(ceils), min(ios)[1], metas


def write_targets(work: Path, quick: bool, repeat: int = 3) -> list[Target]:
    n = 200 if quick else 600
    run = md_run(n)
    print(f"\n== issue 29, targets 1-3: {ATOMS} atoms x {n} frames, positions (p={P} A) + velocities (exact), "
          f"step=, time=, a cell, 3 meta values ({run.mb:.0f} MB of f64 input); best of {repeat} ==")
    res, ceil, io, metas = _measure(run, work, repeat)
    xtc = min((xtc_per_frame(run, work / "md29.xtc") or 0) for _ in range(repeat)) or None
    xtc_md = min((xtc_per_frame(run, work / "md29.xtc", MD_STEP) or 0) for _ in range(repeat)) or None
    for label, (total, inside) in res.items():
        print(f"  {label:<34} {run.mb / total:8.1f} MB/s  {total / n * 1e3:7.3f} ms/frame  "
              f"blocking {inside / n * 1e3:7.3f} ms/frame  of ceiling {ceil / total:5.2f}x")
    print(f"  {'single-thread ceiling':<34} {run.mb / ceil:8.1f} MB/s  {ceil / n * 1e3:7.3f} ms/frame")
    if xtc:
        print(f"  {'XTC write (MDAnalysis)':<34} {'':>13} {xtc * 1e3:7.3f} ms/frame back to back, "
              f"{xtc_md * 1e3:.3f} after the same {MD_STEP * 1e3:g} ms MD step")
    else:
        note("MDAnalysis missing: the XTC lines are skipped (pip install -e '.[bench]')")
    t_app, t_ext = res["append"][0], res["extend"][0]
    py = t_app - ceil - io
    no_py = ceil / (ceil + io)
    both = min(res["extend, 2 threads"][0], res["extend, 2 threads, pipeline"][0])
    block, block_p = res["append after MD step"][1] / n, res["append after MD step, pipeline"][1] / n
    frame_py = (t_ext - ceil - io) / n          # the batch path's own Python a frame, no codec, no I/O
    nan = float("nan")
    return [
        Target("realistic frames: append, one thread / single-thread ceiling", ceil / t_app, ">=", 0.7,
               f"ceiling {ceil / n * 1e3:.3f} ms/frame, append {t_app / n * 1e3:.3f} (file I/O "
               f"{io / n * 1e3:.3f}, Python {py / n * 1e3:.3f})",
               f"{no_py:.2f}x with no Python at all (ceiling + the commit protocol's file I/O)"),
        Target("realistic frames: extend(steps=, times=), one thread / ceiling", ceil / t_ext, ">=", 0.8,
               "", f"{no_py:.2f}x with no Python at all"),
        Target("toy frames (no step/time/cell/meta): realistic append time / toy",
               t_app / res["append toy"][0], "<=", 1.1, "> 1: toy frames faster",
               _toy_floor(res["append toy"][0], metas["append"], n)),
        Target("toy frames: realistic extend time / toy", t_ext / res["extend toy"][0], "<=", 1.1, "",
               _toy_floor(res["extend toy"][0], metas["extend"], n)),
        Target(f"default writer: append blocking after a {MD_STEP * 1e3:g} ms MD step / XTC's write",
               block / xtc_md if xtc else nan, "<=", 0.5,
               f"{block * 1e3:.3f} vs {xtc_md * 1e3:.3f} ms/frame" if xtc else "no MDAnalysis",
               f"{ceil / n / xtc_md:.2f}x: a frame's codec work alone, which the default writer does in "
               "append's thread at each automatic flush" if xtc else ""),
        Target("pipeline=True: append blocking after the MD step / XTC's write",
               block_p / xtc_md if xtc else nan, "<=", 0.3,
               f"{block_p * 1e3:.3f} ms/frame" if xtc else "",
               f"{frame_py / xtc_md:.2f}x: the batch path's Python a frame (extend, no codec, no I/O)"
               if xtc else ""),
        Target("both cores (MREC_THREADS=2): best of extend / pipelined extend / ceiling", ceil / both, ">=", 1.2,
               f"extend {ceil / res['extend, 2 threads'][0]:.2f}x, pipelined "
               f"{ceil / res['extend, 2 threads, pipeline'][0]:.2f}x",
               f"{ceil / max(t_ext / 2, t_ext - ceil - io):.2f}x: one-thread extend spread over 2 cores, "
               "no faster than its Python (one core at a time under the GIL)"),
    ]


def _toy_floor(toy: float, meta: float, n: int) -> str:
    """The toy line's floor: the toy run plus what the realistic record's three meta arrays cost at
    its automatic flushes (landing: the 1024-row tail chunk gzip-encoded again, the shard and index
    writes; publishing: each zarr.json replaced), the commit protocol's work on arrays the toy
    record has not."""
    return (f"{(toy + meta) / toy:.2f}x: the toy run + the 3 meta arrays' landing and zarr.json at "
            f"each automatic flush ({meta / n * 1e3:.3f} ms/frame)")


def main(quick: bool = True) -> None:
    work = Path(tempfile.mkdtemp(prefix="mrec-bench29w-"))
    try:
        for t in write_targets(work, quick, repeat=2 if quick else 3):
            t.print()
    finally:
        shutil.rmtree(work, ignore_errors=True)
