"""Sizes of small and real records, side by side: reference extents, the writer's size hint,
``mrec repack`` (small, archive), and XTC (issue 15, part 1).

    .venv/bin/python tools/bench_sizes.py            # needs the bench extra for the real files

* lammps-7x3: a LAMMPS dump of 7 atoms x 3 frames (id type x y z vx vy vz q; the dump text's bytes
  are printed as "source"), written by TrajectoryWriter with the reference extents, with
  ``expected_frames=3``, then repacked.
* dcd / xtc / trr: the MDAnalysisTests files (protein; two solvated systems) at p = 1e-3 nm, written
  with the reference extents, then ``repack --profile archive``; XTC written by MDAnalysis at the
  same grid (3 decimal digits of nm).  Bytes are whole packed ``*.mrec.zip`` files (metadata, shard
  indexes and the zip directory included) against the whole ``.xtc`` file.
* "r[i] chunks" is the number of inner chunks a random frame of the archived record decodes, per
  column (counted with a RecordingFileSystem on the repacked directory): 1 means random access kept.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mrec  # noqa: E402
from mrec.fs import RecordingFileSystem  # noqa: E402
from mrec.repack import repack  # noqa: E402

KiB = 1024


def lammps_dump(frames) -> str:
    out = []
    for i, f in enumerate(frames):
        a = f["blocks"]["atoms"]
        out += ["ITEM: TIMESTEP", str(100 * i), "ITEM: NUMBER OF ATOMS", "7", "ITEM: BOX BOUNDS pp pp pp",
                "0 10", "0 10", "0 10", "ITEM: ATOMS id type x y z vx vy vz q"]
        for k in range(7):
            out.append(" ".join([str(int(a["id"][k])), str(int(a["type_id"][k]))] +
                                [f"{a[c][k]:.4f}" for c in ("x", "y", "z", "vx", "vy", "vz", "q")]))
    return "\n".join(out) + "\n"


def small_frames():
    rng = np.random.default_rng(7)
    frames = []
    for _ in range(3):
        cols = {"id": np.arange(1, 8, dtype=np.uint64), "type_id": (np.arange(7) % 3 + 1).astype(np.uint64)}
        cols.update({c: np.round(rng.uniform(0, 10, 7), 4) for c in ("x", "y", "z", "vx", "vy", "vz", "q")})
        frames.append({"blocks": {"atoms": cols}, "box": mrec.Box(np.eye(3) * 10.0)})
    return frames


def write(path: Path, frames, **kw) -> Path:
    with mrec.TrajectoryWriter.create(path, frames[0], durable=False, **kw) as w:
        for i, f in enumerate(frames):
            w.append(f, step=100 * i)
    return path


def packed(d: Path) -> int:
    return os.path.getsize(mrec.pack(d, keep=True))


def chunks_per_column(d: Path, n: int) -> tuple[int, float]:
    """(max inner-chunk reads per column of one random frame, p50 ms of r[i]) on a fresh reader each time."""
    rng = np.random.default_rng(0)
    most, times = 0, []
    for i in rng.integers(0, n, 5):
        rec = RecordingFileSystem(record_reads=True)
        r = mrec.TrajectoryReader(d, fs=rec)
        t0 = time.perf_counter()
        r[int(i)]
        times.append((time.perf_counter() - t0) * 1e3)
        per: dict[str, int] = {}
        for op in rec.ops:
            if op.kind == "read_range" and "/c/" in op.path:
                per[op.path] = per.get(op.path, 0) + 1
        most = max(most, max(per.values()) - 1)     # minus the shard index read
    return most, statistics.median(times)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="mrec-sizes-"))
    try:
        print(f"mrec bench_sizes; numpy {np.__version__}, python {sys.version.split()[0]}")
        print("\n== a small record: 7 atoms x 3 frames, 9 columns (LAMMPS dump), bytes of the packed *.mrec.zip")
        frames = small_frames()
        src = len(lammps_dump(frames).encode())
        ref = packed(write(work / "ref.mrec", frames))
        hint = packed(write(work / "hint.mrec", frames, expected_frames=3))
        rs = os.path.getsize(repack(work / "ref.mrec", work / "rs.mrec.zip"))
        ra = os.path.getsize(repack(work / "ref.mrec", work / "ra.mrec.zip", profile="archive"))
        print(f"  {'source dump':>12s} {'reference':>10s} {'expected_frames=3':>18s} {'repack':>8s} "
              f"{'repack archive':>15s}   target <= 16 KiB")
        print(f"  {src:12d} {ref:10d} {hint:18d} {rs:8d} {ra:15d}   {'met' if max(rs, ra) <= 16 * KiB else 'NOT met'}")

        from bench import real, xtc_digits, xtc_write, mrec_write   # noqa: E402  (needs the bench extra)
        print("\n== real trajectories at p = 1e-3 nm (1e-2 A): whole packed record against the whole XTC file")
        print(f"  {'file':5s} {'atoms':>6s} {'frames':>6s} {'XTC':>10s} {'reference':>10s} {'ref/XTC':>8s} "
              f"{'repack':>10s} {'r/XTC':>6s} {'archive':>10s} {'a/XTC':>6s} {'target':>7s} {'r[i] chunks':>11s} "
              f"{'r[i] ms':>8s}")
        for kind, bound in (("dcd", 1.1), ("xtc", 1.3), ("trr", 1.3)):
            wl = real(kind)
            if wl is None:
                print(f"  {kind}: MDAnalysis / MDAnalysisTests missing (pip install -e '.[bench]')")
                continue
            xtc = work / f"{kind}.xtc"
            xtc_write(wl, xtc, xtc_digits(wl.p))
            d = work / f"{kind}.mrec"
            mrec_write(wl, d, wl.p)
            ref = packed(d)
            rs = os.path.getsize(repack(d, work / f"{kind}.small.mrec.zip"))
            arch_dir = repack(d, work / f"{kind}.archive.mrec", profile="archive")
            ra = os.path.getsize(repack(d, work / f"{kind}.archive.mrec.zip", profile="archive"))
            x = os.path.getsize(xtc)
            chunks, ms = chunks_per_column(arch_dir, wl.frames)
            print(f"  {kind:5s} {wl.atoms:6d} {wl.frames:6d} {x:10d} {ref:10d} {ref / x:8.3f} {rs:10d} {rs / x:6.3f} "
                  f"{ra:10d} {ra / x:6.3f} {'<=' + str(bound):>7s} {chunks:11d} {ms:8.2f}   "
                  f"{'met' if ra <= bound * x else 'NOT met'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
