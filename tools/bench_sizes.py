"""Sizes of small and real records, side by side: reference extents, the writer's size hint,
``mrec repack`` (small, archive), and XTC (issue 15, part 1).

    .venv/bin/python tools/bench_sizes.py            # needs the bench extra for the real files
    .venv/bin/python tools/bench_sizes.py --md       # only issue 28's table (the md and test extras)

* lammps-7x3: a LAMMPS dump of 7 atoms x 3 frames (id type x y z vx vy vz q; the dump text's bytes
  are printed as "source"), written by TrajectoryWriter with the reference extents, with
  ``expected_frames=3``, then repacked.
* dcd / xtc / trr: the MDAnalysisTests files (protein; two solvated systems) at p = 1e-3 nm, written
  with the reference extents, then ``repack --profile archive``; XTC written by MDAnalysis at the
  same grid (3 decimal digits of nm).  Bytes are whole packed ``*.mrec.zip`` files (metadata, shard
  indexes and the zip directory included) against the whole ``.xtc`` file.
* "r[i] chunks" is the number of inner chunks a random frame of the archived record decodes, per
  column (counted with a RecordingFileSystem on the repacked directory): 1 means random access kept.
* issue 28, part 1 (``--md`` runs only this part): what the MD surfaces write by default -- ``mrec
  convert`` of the MDAnalysisTests files, ``mda.Writer`` of the DCD's Universe, ``ase.io.write`` of
  3 four-atom images -- against the source files' bytes, each with its target and whether its values
  are exactly the source's as MDAnalysis / ASE read it (bits; an XTC: its integers, recovered by
  rounding to the declared grid).
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
from mrec.archive.repack import repack  # noqa: E402

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


def _same_bits(a, b) -> bool:
    """``a`` (the record's f64) holds ``b`` (a library's read) exactly: bit for bit once ``b`` is widened,
    or -- ``b`` being float32 parsed from text (a LAMMPS dump), the record holding the text's nearest
    binary64 -- ``a`` narrows to ``b``'s bits."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b)
    return a.tobytes() == b.astype(np.float64).tobytes() or \
        (b.dtype == np.float32 and a.astype(np.float32).tobytes() == b.tobytes())


def _xtc_grid_bits(stored, ts_positions, prec: float = 1000.0) -> bool:
    """Rounding the stored Å to the XTC's grid gives MDAnalysis' float32 read of the XTC bit for bit."""
    i = np.rint(stored * prec / 10.0).astype(np.float32)
    back = ((i * np.float32(1.0 / prec)).astype(np.float32) * np.float32(10.0)).astype(np.float32)
    return back.tobytes() == ts_positions.tobytes()


def _converted(work: Path, name: str, src: str, top, fmt=None, xtc: bool = False) -> tuple[int, bool]:
    """(bytes, exact) of ``mrec convert`` SRC [--top TOP] NAME.mrec.zip with the defaults."""
    import MDAnalysis as mda
    from mrec.md.convert import convert
    out = work / f"{name}.mrec.zip"
    convert(src, out, top=top, fmt=fmt, overwrite=True)
    u = mda.Universe(top, src) if top else mda.Universe(src, format=fmt)
    r = mrec.TrajectoryReader(out)
    exact = len(r) == u.trajectory.n_frames
    for ts in u.trajectory:
        got = r.positions(ts.frame)
        exact &= _xtc_grid_bits(got, ts.positions) if xtc else _same_bits(got, ts.positions)
        for prefix, have, arr in (("v", ts.has_velocities, "velocities"), ("f", ts.has_forces, "forces")):
            if have and not xtc:
                cols = r.read_columns(ts.frame, [("atoms", prefix + c) for c in "xyz"])
                exact &= _same_bits(np.stack([cols[("atoms", prefix + c)] for c in "xyz"], axis=1),
                                    getattr(ts, arr))
    return os.path.getsize(out), bool(exact)


def _mda_written(work: Path, top: str, src: str) -> tuple[int, bool]:
    import MDAnalysis as mda
    import mrec.md.mdanalysis  # noqa: F401 - registers the writer
    u = mda.Universe(top, src)
    out = work / "mda-writer.mrec.zip"
    with mda.Writer(str(out), u.atoms.n_atoms) as w:
        for _ts in u.trajectory:
            w.write(u.atoms)
    r = mrec.TrajectoryReader(out)
    return os.path.getsize(out), all(_same_bits(r.positions(ts.frame), ts.positions) for ts in u.trajectory)


def _ase_written(work: Path) -> tuple[int, int, bool]:
    """(extxyz bytes, record bytes, exact) of ase.io.write of 3 four-atom images with energies and forces."""
    import ase.io
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.io.formats import define_io_format, ioformats
    if "mrec" not in ioformats:                  # what mrec's entry point does once installed
        from mrec.md.ase_io import mrec_format
        define_io_format("mrec", **mrec_format._asdict(), external=True)
    rng = np.random.default_rng(28)
    images = []
    for _ in range(3):
        a = Atoms("H2O2", positions=rng.uniform(0, 5, (4, 3)), cell=np.eye(3) * 6.0, pbc=True)
        a.calc = SinglePointCalculator(a, energy=float(rng.normal()), forces=rng.normal(size=(4, 3)))
        images.append(a)
    ase.io.write(work / "tiny.extxyz", images)
    ase.io.write(work / "tiny.mrec.zip", images)
    back = ase.io.read(work / "tiny.mrec.zip", index=":")
    exact = all(_same_bits(a.positions, b.positions) and _same_bits(a.get_forces(), b.get_forces())
                for a, b in zip(images, back))
    return os.path.getsize(work / "tiny.extxyz"), os.path.getsize(work / "tiny.mrec.zip"), exact


def md_surfaces(work: Path) -> None:
    """Issue 28, part 1: the MD surfaces' defaults against the source files."""
    import warnings
    try:
        import MDAnalysisTests.datafiles as D
        import ase  # noqa: F401
    except ImportError:
        print("  MDAnalysis, MDAnalysisTests or ASE missing (pip install -e '.[md,test]')")
        return
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, src, top, fmt, bound, xtc in (
                ("convert adk_dims.dcd --top adk.psf", D.DCD, D.PSF, None, 1.0, False),
                ("convert cobrotoxin.trr --top cobrotoxin.tpr", D.TRR_xvf, D.TPR_xvf, None, 1.0, False),
                ("convert adk_oplsaa.xtc --top adk_oplsaa.tpr", D.XTC, D.TPR, None, 1.1, True),
                ("convert image_vf.lammpstrj --format LAMMPSDUMP", D.LAMMPSDUMP_image_vf, None, "LAMMPSDUMP",
                 None, False)):
            size, exact = _converted(work, label.split()[1].replace(".", "-"), src, top, fmt, xtc)
            rows.append((label, os.path.getsize(src), size, bound, exact))
        size, exact = _mda_written(work, D.PSF, D.DCD)
        rows.append(("mda.Writer(x.mrec.zip) of adk_dims.dcd", os.path.getsize(D.DCD), size, 1.0, exact))
        src, size, exact = _ase_written(work)
        rows.append(("ase.io.write(x.mrec.zip) of 3 4-atom images (source: their extxyz)", src, size, None, exact))
    print(f"  {'what':66s} {'source B':>10s} {'mrec B':>10s} {'ratio':>6s} {'target':>10s} {'exact':>5s}  verdict")
    for label, src, size, bound, exact in rows:
        target = f"<= {bound:g} x" if bound is not None else "<= 16 KiB"
        ok = size <= bound * src if bound is not None else size <= 16 * KiB
        print(f"  {label:66s} {src:10d} {size:10d} {size / src:6.3f} {target:>10s} {'yes' if exact else 'NO':>5s}  "
              f"{'met' if ok and exact else 'NOT met'}")
    _xtc_floor(work, os.path.getsize(D.XTC))


def _xtc_floor(work: Path, xtc_bytes: int) -> None:
    """The floor under the XTC line: the same record at the densest must-decode setting that keeps
    random access (``mrec repack --profile archive``: every frame in one chunk, zstd 19).  XTC codes
    integer differences between neighbouring atoms; the codec set has no delta or integer codec."""
    dense = work / "xtc-archive.mrec.zip"
    from mrec.archive.repack import repack
    repack(work / "adk_oplsaa-xtc.mrec.zip", dense, profile="archive", overwrite=True)
    size = os.path.getsize(dense)
    print(f"  floor under the XTC line (repack --profile archive of that record): {size} B = "
          f"{size / xtc_bytes:.3f} x the XTC; 1.1 x needs a delta codec in the must-decode set")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="mrec-sizes-"))
    try:
        print(f"mrec bench_sizes; numpy {np.__version__}, python {sys.version.split()[0]}")
        print("\n== issue 28: what the MD surfaces write by default, against the source files (whole files)")
        md_surfaces(work)
        if "--md" in sys.argv[1:]:
            return
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

        from tools.bench.peers import xtc_digits, xtc_write   # noqa: E402  (needs the bench extra)
        from tools.bench.runs import mrec_write   # noqa: E402
        from tools.bench.workloads import real   # noqa: E402
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
