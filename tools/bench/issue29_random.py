"""Issue 29, target 5: a random frame, each against what its chunking leaves to do.

* 100 atoms (``workloads.synthetic``, the reference writer: many frames an inner chunk): ``r[i]``
  against the chunking's floor (:func:`~tools.bench.baselines.frame_floor`: per column one pread of
  the inner chunk, its crc32c, one zstd decompress, the unshuffle of the frame's rows), <= 1.2 x;
* 3000 atoms (one frame an inner chunk): ``r[i]`` against decoding its three inner chunks alone
  (:meth:`~tools.bench.baselines.Ceiling.frame_latency`), <= 1.1 x;
* 3,341 atoms, archived: adk (MDAnalysisTests' PSF + DCD, 98 frames) through ``mrec convert``, then
  ``mrec repack --profile archive``: a random frame against XTC's (the same frames written by
  MDAnalysis at 3 digits, read by its ``XTCReader`` with offsets), <= 2 x.  Every frame is read
  from a chunk the reader has not decoded yet (its chunk memory emptied before each frame, its
  shard indexes kept): what a random frame of a long archive costs.  A 98-frame record otherwise
  decodes its one chunk once and then serves every frame from memory.  The archive profile's
  default chunks (>= 32 frames, up to 4 MiB) are sized for bytes; the line is measured with
  ``--frames-per-chunk`` (the knob trading bytes for random access), the default's row beside it.

Medians (p50) are the ratios; p90 is in the detail.  Each latency set is timed in rounds alternated
with its baseline, the round with the lowest p50 kept for each.  Run alone:
``python -c "from tools.bench.issue29_random import main; main()"``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

import mrec

from .baselines import Ceiling, frame_floor
from .common import Target, have, note, pct
from .peers import xtc_read, xtc_write
from .runs import mrec_random, mrec_write, threads_env
from .workloads import Workload, layout, real, synthetic

#: frames an inner chunk of the archived record the target line reads (``repack --frames-per-chunk``)
ARCHIVE_FRAMES = 2
#: XTC's precision in decimal digits of nm (MDAnalysis' default)
XTC_DIGITS = 3


def _best_rounds(runs: dict[str, Callable[[], list[float]]], rounds: int) -> dict[str, list[float]]:
    """Each run's latencies, the runs alternated ``rounds`` times; per run the round of least p50."""
    best: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            lat = run()
            if name not in best or pct(lat, 50) < pct(best[name], 50):
                best[name] = lat
    return best


def _ms(lat: list[float]) -> str:
    return f"p50 {pct(lat, 50):.3f} p90 {pct(lat, 90):.3f} ms"


# -- the reads timed ------------------------------------------------------------------------------

def random_latencies(path: Path, idx, cold: bool = False) -> list[float]:
    """Latencies of ``r[i]`` for each frame of ``idx`` on one open reader (its shard indexes read
    first, as in any long read; ``MREC_THREADS=1``).  ``cold``: each frame from a chunk not decoded
    yet -- the reader's chunk memory (``Array.cache``) emptied before each frame, its indexes kept."""
    with threads_env(1):
        r = mrec.TrajectoryReader(path)
    try:
        r[0]
        arrays = [a for b in r.layout.blocks.values() for a in b.columns.values() if a is not None] if cold else []
        out = []
        for i in idx:
            for a in arrays:
                a.cache.drop()
            t0 = time.perf_counter()
            r[int(i)]
            out.append(time.perf_counter() - t0)
        return out
    finally:
        r.close()


def frame_case_latencies(path: Path, idx) -> list[float]:
    """Latencies of the read path's frame case alone (``mrec.zarr.read.frame.read_frame`` of each
    column's rows, what ``r[i]`` calls once a column) for each frame of ``idx``: ``r[i]`` without
    the reader's own Python (its plan, the dicts, the frame)."""
    from mrec.zarr.read.frame import read_frame
    r = mrec.TrajectoryReader(path)
    try:
        r[0]
        cols = [(a, b.uniform_rows) for b in r.layout.blocks.values() for a in b.columns.values()]
        out = []
        for i in idx:
            t0 = time.perf_counter()
            for a, u in cols:
                read_frame(a, int(i) * u, (int(i) + 1) * u)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        r.close()


# -- (a) and (b): synthetic records of the reference writer -------------------------------------

def _synthetic_record(work: Path, atoms: int, frames: int) -> tuple[Path, Workload, np.ndarray]:
    """The workload written by the reference writer, and 500 random frames of it."""
    wl = synthetic(atoms, frames, f"random{atoms}")
    path = work / f"random{atoms}.mrec"
    with threads_env(os.cpu_count() or 1):
        mrec_write(wl, path, wl.p, batch=500)
    return path, wl, np.random.default_rng(atoms).integers(0, frames, size=500)


def _small_target(work: Path, quick: bool, rounds: int) -> Target:
    path, wl, idx = _synthetic_record(work, 100, 10_000 if quick else 50_000)
    rpc, _ = layout(wl.atoms)
    got = _best_rounds({"r[i]": lambda: random_latencies(path, idx), "floor": lambda: frame_floor(path, idx, wl.atoms),
                        "core": lambda: frame_case_latencies(path, idx)}, rounds)
    m, f, core = pct(got["r[i]"], 50), pct(got["floor"], 50), pct(got["core"], 50)
    shutil.rmtree(path)
    return Target("random 100-atom frame r[i] <= 1.2 x the chunking's floor", m / f, "<=", 1.2,
                  f"r[i] {_ms(got['r[i]'])}; floor {_ms(got['floor'])}; the read path's frame case alone "
                  f"(read_frame x 3) {_ms(got['core'])} = {core / f:.2f}x the floor",
                  f"{f:.3f} ms: per column pread + crc32c + zstd of its inner chunk ({rpc // wl.atoms} frames) + "
                  f"unshuffle of the frame's rows; of r[i]'s {(m - f) * 1e3:.0f} us over it, {(core - f) * 1e3:.0f} "
                  f"in the read path's frame case (mrec/zarr/read/frame.py), {(m - core) * 1e3:.0f} in the reader")


def _big_target(work: Path, quick: bool, rounds: int) -> Target:
    path, wl, idx = _synthetic_record(work, 3000, 300 if quick else 1000)
    ceil = Ceiling(wl, wl.p)
    ceil.write()
    best: tuple[list[float], list[float]] | None = None
    for _ in range(rounds):                # r[i] and its chunks' decode are timed frame by frame together
        with threads_env(1):
            lat, one = mrec_random(path, idx, ceil)
        if best is None or pct(lat, 50) / pct(one, 50) < pct(best[0], 50) / pct(best[1], 50):
            best = (lat, one)
    m, c = best
    shutil.rmtree(path)
    return Target("random 3000-atom frame r[i] <= 1.1 x decoding its chunks", pct(m, 50) / pct(c, 50), "<=", 1.1,
                  f"r[i] {_ms(m)}; its 3 inner chunks' decode {_ms(c)}",
                  f"{pct(c, 50):.3f} ms: crc32c + zstd + unshuffle of the frame's 3 inner chunks, no I/O")


# -- (c): an archived MD record against XTC ---------------------------------------------------------

def _archive_records(work: Path) -> tuple[Path, Path, Path, int, int]:
    """(archive, archive with ARCHIVE_FRAMES a chunk, XTC, atoms, frames) of adk: ``mrec convert`` of
    the PSF + DCD, ``repack --profile archive`` with and without the knob, and the XTC of the frames."""
    from MDAnalysisTests import datafiles as D

    from mrec.archive.repack import repack
    from mrec.md.convert import convert
    src = work / "adk.mrec"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert(D.DCD, src, top=D.PSF, overwrite=True)
    dense = repack(src, work / "adk.archive.mrec", profile="archive", overwrite=True)
    quick = repack(src, work / f"adk.archive{ARCHIVE_FRAMES}.mrec", profile="archive", overwrite=True,
                   frames_per_chunk=ARCHIVE_FRAMES)
    wl = real("dcd")
    xtc = work / "adk.xtc"
    xtc_write(wl, xtc, XTC_DIGITS)
    shutil.rmtree(src)
    return Path(dense), Path(quick), xtc, wl.atoms, wl.frames


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _archive_target(work: Path, quick: bool, rounds: int) -> Target | None:
    if not (have("MDAnalysis") and have("MDAnalysisTests")):
        note("issue 29 target 5 (archive): MDAnalysis / MDAnalysisTests not installed: skipped")
        return None
    dense, fast, xtc, atoms, frames = _archive_records(work)
    idx = np.random.default_rng(3).integers(0, frames, size=100 if quick else 300)
    got = _best_rounds({"xtc": lambda: xtc_read(xtc, idx)[2], "fast": lambda: random_latencies(fast, idx, True),
                        "dense": lambda: random_latencies(dense, idx, True),
                        "floor": lambda: frame_floor(fast, idx, atoms)}, rounds)
    x50, floor = pct(got["xtc"], 50), got["floor"]
    sizes = {k: _tree_bytes(p) for k, p in (("fast", fast), ("dense", dense))}
    x_bytes = xtc.stat().st_size
    for p in (dense, fast):
        shutil.rmtree(p)
    xtc.unlink()
    return Target(f"random 3341-atom frame, archive --frames-per-chunk {ARCHIVE_FRAMES} <= 2 x XTC random",
                  pct(got["fast"], 50) / x50, "<=", 2.0,
                  f"r[i] {_ms(got['fast'])}, {sizes['fast']} B; archive default (>= 32 frames a chunk) "
                  f"{_ms(got['dense'])} = {pct(got['dense'], 50) / x50:.1f}x XTC, {sizes['dense']} B "
                  f"({sizes['fast'] / sizes['dense']:.3f}x its bytes); XTC {_ms(got['xtc'])}, {x_bytes} B at "
                  f"{XTC_DIGITS} digits; adk {atoms} atoms x {frames} frames, exact (mrec convert's default)",
                  f"{pct(floor, 50):.3f} ms = {pct(floor, 50) / x50:.2f}x XTC: pread + crc32c + zstd of "
                  f"{ARCHIVE_FRAMES} frames + unshuffle, per column")


def random_targets(work: Path, quick: bool) -> list[Target]:
    """Issue 29's target 5, three lines (the archive line skipped without MDAnalysisTests)."""
    rounds = 3 if quick else 5
    out = [_small_target(work, quick, rounds), _big_target(work, quick, rounds)]
    arch = _archive_target(work, quick, rounds)
    return out + ([arch] if arch is not None else [])


def main(quick: bool = True) -> None:
    """Print the three lines alone, on records under a temporary directory removed at the end."""
    with tempfile.TemporaryDirectory(prefix="mrec-random-") as work:
        print(f"== issue 29, target 5: random frames{' (quick)' if quick else ''}; load {os.getloadavg()[0]:.2f}")
        targets = random_targets(Path(work), quick)
    for t in targets:
        t.print()


if __name__ == "__main__":
    main()
