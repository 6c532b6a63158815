"""Issue 29, target 6: the MD surfaces against MDAnalysis' XTC writer, on adk (47,681 atoms x 10 frames).

The workload is MDAnalysisTests' ``adk_oplsaa.tpr`` + ``adk_oplsaa.xtc`` (the earlier measurement's
"adk, 47,681 atoms x 10 frames").  Each line is a throughput ratio, baseline seconds / mrec seconds
(the same frames, timed from open to close), >= 1.0:

* **the MDAnalysis writer**: ``mda.Writer("x.mrec", n_atoms)`` as a user runs it -- open, ``write``
  every timestep of the Universe, close -- against ``mda.Writer("x.xtc", n_atoms)`` (MDAnalysis'
  XTCWriter, its default precision) over the same Universe and frames;
* **mrec convert**: :func:`mrec.md.convert.convert` (what ``mrec convert adk_oplsaa.xtc --top
  adk_oplsaa.tpr x.mrec`` runs) against reading the same two files with MDAnalysis (``Universe``)
  and writing them as XTC.

Both runs of a line alternate, best of N.  The floors say what no change to the surfaces reaches:
the trajectory writer alone on the same frames (``TrajectoryWriter`` create / ``append(frame,
step=, time=)`` / close, the frames in memory), the topology's ``system/`` written alone
(:func:`~mrec.record.whole.system_last.begin_record` + ``write``: its checks, the vlen-utf8 encoding
of seven string columns, the fsyncs), and for convert the MDAnalysis ``Universe`` both sides build.
Run alone: ``python -c "from tools.bench.issue29_md import main; main()"``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

from .common import Target, have, note

#: best of this many alternated runs (quick / full)
RUNS = (3, 7)


def _adk():
    """MDAnalysisTests' adk topology and trajectory (47,681 atoms, 10 frames)."""
    from MDAnalysisTests.datafiles import TPR, XTC
    return TPR, XTC


def _universe():
    import MDAnalysis as mda
    top, trj = _adk()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(top, trj)


def _fresh(path: Path) -> Path:
    """``path`` removed (a record directory or a file), ready to be written again."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    return path


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _alternate(runs: dict[str, Callable[[], float]], n: int) -> dict[str, float]:
    """Each run's best seconds, the runs alternated ``n`` times."""
    best: dict[str, float] = {}
    for _ in range(n):
        for name, run in runs.items():
            best[name] = min(best.get(name, float("inf")), run())
    return best


# -- the runs timed -------------------------------------------------------------------------------

def mda_write(u, out: Path) -> float:
    """Seconds of ``mda.Writer(out)``: open, every timestep of ``u`` written, close (the format by name)."""
    import MDAnalysis as mda
    import mrec.mdanalysis  # noqa: F401 - registers the MREC format
    _fresh(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        with mda.Writer(str(out), n_atoms=u.atoms.n_atoms) as w:
            for _ts in u.trajectory:
                w.write(u.atoms)
        return time.perf_counter() - t0


def convert_run(out: Path) -> float:
    """Seconds of ``mrec convert adk_oplsaa.xtc --top adk_oplsaa.tpr out`` (its Python API)."""
    from mrec.md.convert import convert
    top, trj = _adk()
    _fresh(out)
    return _timed(lambda: convert(trj, str(out), top=top))


def mda_to_xtc(out: Path) -> float:
    """Seconds to read adk with MDAnalysis (the Universe of both files) and write it as XTC."""
    _fresh(out)
    t0 = time.perf_counter()
    u = _universe()
    mda_write(u, out)
    return time.perf_counter() - t0


# -- the floors -----------------------------------------------------------------------------------

def _frames(u) -> list[tuple[dict, int, float]]:
    """(frame, step, time) of every timestep of ``u`` as the MDAnalysis writer hands them on."""
    from mrec.md.columns import box_of_dimensions, xyz_cols
    out = []
    for ts in u.trajectory:
        frame: dict = {"blocks": {"atoms": xyz_cols("", ts.positions)}}
        box = box_of_dimensions(ts.dimensions)
        if box is not None:
            frame["box"] = box
        out.append((frame, int(ts.data.get("step", ts.frame)), float(ts.time)))
    return out


def trajectory_alone(frames, n_atoms: int, precision: float | None, out: Path) -> float:
    """Seconds of the trajectory writer alone: create, ``append`` each frame, close (MD compression)."""
    from mrec.md.columns import schema_atoms
    from mrec.md.sizing import md_compression
    from mrec.record.trajectory.writer import TrajectoryWriter
    _fresh(out)
    schema = schema_atoms(n_atoms, precision, False, False)
    t0 = time.perf_counter()
    with TrajectoryWriter.create(str(out), schema, compression=md_compression("auto"),
                                 expected_frames=len(frames)) as w:
        for frame, step, t in frames:
            w.append(frame, step=step, time=t)
    return time.perf_counter() - t0


def topology_alone(u, out: Path) -> tuple[float, float]:
    """(seconds of the topology read from MDAnalysis, seconds of its ``system/`` written alone)."""
    from mrec.md.columns import schema_atoms
    from mrec.md.sizing import md_compression
    from mrec.md.topology import topology_system
    from mrec.record.whole.system_last import begin_record
    _fresh(out)
    t0 = time.perf_counter()
    system, _ = topology_system(u, [])
    t1 = time.perf_counter()
    begin_record(str(out), meta={}, system=system, schema=schema_atoms(len(u.atoms), None, False, False),
                 compression=md_compression("auto")).write()
    return t1 - t0, time.perf_counter() - t1


def strings_alone(u, out: Path) -> float:
    """Seconds to write the topology's string columns alone (vlen-utf8 arrays, no fsync)."""
    from mrec.md.topology import topology_system
    from mrec.record.sections.fixed import write_fixed_array
    from mrec.zarr.stores.directory import DirectoryStore
    cols = [v for v in topology_system(u, [])[0]["blocks"]["atoms"].values() if v.dtype == object]
    store = DirectoryStore(str(_fresh(out)))
    t0 = time.perf_counter()
    for i, v in enumerate(cols):
        write_fixed_array(store, f"s{i}", v, "string")
    return time.perf_counter() - t0


def _resolution(u) -> float | None:
    from mrec.md.convert import _xtc_resolution
    return _xtc_resolution(u.trajectory)


# -- the targets ----------------------------------------------------------------------------------

def writer_target(u, work: Path, n: int) -> Target:
    best = _alternate({"xtc": lambda: mda_write(u, work / "a.xtc"),
                       "mrec": lambda: mda_write(u, work / "a.mrec")}, n)
    frames = _frames(u)
    traj = min(trajectory_alone(frames, len(u.atoms), None, work / "t.mrec") for _ in range(n))
    topo, system = min(topology_alone(u, work / "s.mrec") for _ in range(n))
    strings = min(strings_alone(u, work / "strings") for _ in range(n))
    return Target("MDAnalysis writer: adk x.mrec / XTC writer, open to close", best["xtc"] / best["mrec"], ">=",
                  1.0, f"mrec {best['mrec']:.3f} s, XTC {best['xtc']:.3f} s",
                  floor=f"trajectory writer alone {traj:.3f} s ({best['xtc'] / traj:.2f}x XTC, exact f64 "
                        f"shuffle+zstd); topology from MDAnalysis {topo:.3f} s + system/ alone {system:.3f} s "
                        f"(its 7 string columns' vlen-utf8 {strings:.3f} s), which XTC does not write; best "
                        f"reachable {best['xtc'] / (traj + topo + system):.2f}x")


def convert_target(u, work: Path, n: int) -> Target:
    best = _alternate({"xtc": lambda: mda_to_xtc(work / "b.xtc"),
                       "mrec": lambda: convert_run(work / "b.mrec")}, n)
    uni = min(_timed(_universe) for _ in range(n))
    traj = min(trajectory_alone(_frames(u), len(u.atoms), _resolution(u), work / "t.mrec") for _ in range(n))
    topo, system = min(topology_alone(u, work / "s.mrec") for _ in range(n))
    reach = best["xtc"] / (uni + traj + topo + system)
    return Target("mrec convert adk.xtc --top adk.tpr / MDAnalysis read + XTC write", best["xtc"] / best["mrec"],
                  ">=", 1.0, f"mrec {best['mrec']:.3f} s, MDAnalysis {best['xtc']:.3f} s",
                  floor=f"Universe(tpr, xtc) {uni:.3f} s on both sides; trajectory writer alone {traj:.3f} s "
                        f"(XTC's grid); topology {topo:.3f} s + system/ {system:.3f} s; best reachable "
                        f"{reach:.2f}x")


def md_targets(work: Path, quick: bool) -> list[Target]:
    """Target 6's two lines (the MDAnalysis writer, ``mrec convert``) on adk; none without MDAnalysis."""
    if not (have("MDAnalysis") and have("MDAnalysisTests")):
        note("MDAnalysis / MDAnalysisTests not installed: target 6 not measured")
        return []
    n = RUNS[0] if quick else RUNS[1]
    work.mkdir(parents=True, exist_ok=True)
    u = _universe()
    return [writer_target(u, work, n), convert_target(u, work, n)]


def main(quick: bool = True) -> None:
    work = Path(tempfile.mkdtemp(prefix="mrec-md-"))
    try:
        print(f"== issue 29, target 6: MD surfaces on adk{' (quick)' if quick else ''}; "
              f"load {os.getloadavg()[0]:.2f}")
        for t in md_targets(work, quick):
            t.print()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
