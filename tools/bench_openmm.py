"""ns/day of one OpenMM simulation with no reporter, OpenMM's DCDReporter, its XTCReporter and
mrec's MrecReporter, same system, same interval (issue 28, part 4).  A benchmark, not a test.

    .venv/bin/python tools/bench_openmm.py                       # 2685 TIP3P waters, PME, 1 thread
    .venv/bin/python tools/bench_openmm.py --system villin --steps 500 --interval 10

* systems, both from the files OpenMM ships: ``water`` (``app/data/tip3p.pdb``: 895 TIP3P waters
  in a 3 nm box) and ``villin`` (``app/data/test.pdb``: villin in 8867 atoms of water), amber14 +
  TIP3P, PME at 0.9 nm, HBonds constraints, LangevinMiddle 2 fs, the CPU platform;
* each configuration runs on a fresh Simulation from the same minimised positions and velocities:
  ``--warmup`` steps (the first report included), then ``--steps`` timed steps; the configurations
  take turns, ``--repeat`` rounds, and the median of each is kept;
* time is the process's CPU time (OpenMM's threads included; with ``--threads 1`` it is the run's
  own work, steady on a machine other jobs share) and the wall time; "slowdown" is the CPU time
  over the no-reporter run's, less one; "in report" is the CPU time inside the reporters'
  ``report`` per frame (the State they ask for is OpenMM's cost, in the run's time only);
* rows: DCD and XTC (positions and cell); mrec with ``velocities=False, energies=False`` (positions,
  cell, step, time: what XTC holds), exact and on XTC's grid (``precision=0.001`` nm); OpenMM's
  StateDataReporter (step, time, energies, temperature) alone and beside the XTCReporter; mrec's
  default (positions, velocities, cell, step, time, energies, temperature: what XTC +
  StateDataReporter write, and the velocities).  An
  energy in a State costs OpenMM one force evaluation, about a step, whoever asks for it (once a
  report step for all the reporters of that step).  Bytes: the output files at the end of a run.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openmm  # noqa: E402
import openmm.app as app  # noqa: E402
import openmm.unit as unit  # noqa: E402

from mrec.openmm import MrecReporter  # noqa: E402

SYSTEMS = {"water": "tip3p.pdb", "villin": "test.pdb"}


class Timed:
    """A reporter wrapper adding up the CPU seconds and the wall seconds spent in ``report`` (and the
    frames).  The wall seconds are what the simulation's thread waits for; the CPU seconds are the
    whole process's, a pipelined writer's committer thread included while ``report`` runs."""

    def __init__(self, inner):
        self.inner, self.seconds, self.wall, self.frames = inner, 0.0, 0.0, 0

    def describeNextReport(self, simulation):
        return self.inner.describeNextReport(simulation)

    def report(self, simulation, state):
        t0, w0 = time.process_time(), time.perf_counter()
        self.inner.report(simulation, state)
        self.seconds += time.process_time() - t0
        self.wall += time.perf_counter() - w0
        self.frames += 1


def build(name: str, threads: int):
    pdb = app.PDBFile(os.path.join(os.path.dirname(app.__file__), "data", SYSTEMS[name]))
    ff = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    system = ff.createSystem(pdb.topology, nonbondedMethod=app.PME, nonbondedCutoff=0.9 * unit.nanometer,
                             constraints=app.HBonds)
    sim = simulation(pdb.topology, system, threads)
    sim.context.setPositions(pdb.positions)
    sim.minimizeEnergy(maxIterations=50)
    sim.context.setVelocitiesToTemperature(300 * unit.kelvin, 1)
    return pdb.topology, system, sim.context.getState(positions=True, velocities=True)


def simulation(topology, system, threads: int):
    integ = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.002 * unit.picoseconds)
    integ.setRandomNumberSeed(11)
    return app.Simulation(topology, system, integ, openmm.Platform.getPlatformByName("CPU"),
                          {"Threads": str(threads)})


def reporters(out: Path, interval: int) -> dict:
    """name -> [(a function of an output path making a reporter, the path)]."""
    def state_data(p):
        return app.StateDataReporter(p, interval, step=True, time=True, potentialEnergy=True,
                                     kineticEnergy=True, temperature=True)
    return {
        "none": [],
        "DCDReporter": [(lambda p: app.DCDReporter(p, interval), out / "run.dcd")],
        "XTCReporter": [(lambda p: app.XTCReporter(p, interval), out / "run.xtc")],
        "mrec, positions only": [(lambda p: MrecReporter(p, interval, velocities=False, energies=False),
                                  out / "pos.mrec")],
        "mrec, positions only, pipeline=True": [
            (lambda p: MrecReporter(p, interval, velocities=False, energies=False, pipeline=True),
             out / "piped.mrec")],
        "mrec, positions only, precision 0.001 nm": [
            (lambda p: MrecReporter(p, interval, velocities=False, energies=False, precision=0.001),
             out / "grid.mrec")],
        "StateDataReporter": [(state_data, out / "state.csv")],
        "XTC + StateDataReporter": [(lambda p: app.XTCReporter(p, interval), out / "both.xtc"),
                                    (state_data, out / "both.csv")],
        "MrecReporter (default)": [(lambda p: MrecReporter(p, interval), out / "run.mrec")],
    }


def nbytes(path: Path | None) -> int:
    if path is None or not path.exists():
        return 0
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def run_once(topology, system, start, makers: list, args) -> tuple[float, float, float, int, int, float]:
    """(CPU seconds and wall seconds of the timed steps, CPU seconds in report per reporter summed,
    frames, output bytes, wall seconds in report summed)."""
    sim = simulation(topology, system, args.threads)
    sim.context.setState(start)
    for make, path in makers:
        remove(path)
    timed = [Timed(make(str(path))) for make, path in makers]
    sim.reporters += timed
    sim.step(args.warmup)
    seconds0, frames0 = sum(t.seconds for t in timed), sum(t.frames for t in timed[:1])
    wall0 = sum(t.wall for t in timed)
    c0, w0 = time.process_time(), time.perf_counter()
    sim.step(args.steps)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    for t in timed:
        if hasattr(t.inner, "close"):
            t.inner.close()
    in_report = sum(t.seconds for t in timed) - seconds0
    waited = sum(t.wall for t in timed) - wall0
    frames = sum(t.frames for t in timed[:1]) - frames0
    del sim, timed                 # OpenMM's DCD / XTC files are closed when their reporter goes
    return cpu, wall, in_report, frames, sum(nbytes(p) for _m, p in makers), waited


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), default="water")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    topology, system, start = build(args.system, args.threads)
    out = Path(tempfile.mkdtemp(prefix="bench_openmm_"))
    try:
        table = reporters(out, args.interval)
        runs: dict[str, list[tuple]] = {k: [] for k in table}
        for _ in range(args.repeat):
            for name, makers in table.items():
                runs[name].append(run_once(topology, system, start, makers, args))
        report(args, topology.getNumAtoms(), runs)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 0


def report(args, n_atoms: int, runs: dict) -> None:
    ns = args.steps * 0.002 / 1000
    med = {name: [statistics.median(r[k] for r in rs) for k in range(6)] for name, rs in runs.items()}
    base = med["none"][0]
    print(f"system {args.system} ({n_atoms} atoms), {args.steps} timed steps, interval {args.interval}, "
          f"{args.threads} thread(s), median of {args.repeat}")
    print("| reporter | ns/day (CPU) | ns/day (wall) | slowdown (CPU) | in report, CPU ms/frame "
          "| in report, wall ms/frame | bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    slow, waits = {}, {}
    for name, (cpu, wall, in_report, frames, size, waited) in med.items():
        slow[name] = cpu / base - 1.0
        waits[name] = 1000 * waited / frames if frames else 0.0
        per = f"{1000 * in_report / frames:.2f}" if frames else "-"
        per_wall = f"{waits[name]:.2f}" if frames else "-"
        print(f"| {name} | {ns / cpu * 86400:.2f} | {ns / wall * 86400:.2f} | {100 * slow[name]:+.1f} % | {per} | "
              f"{per_wall} | {int(size) if size else '-'} |")
    for mine, theirs in (("mrec, positions only", "XTCReporter"), ("MrecReporter (default)", "XTC + StateDataReporter")):
        ok = slow[mine] <= slow[theirs]
        print(f"{mine}: slowdown (CPU) {100 * slow[mine]:+.1f} % <= {theirs}'s {100 * slow[theirs]:+.1f} %: "
              f"{'yes' if ok else 'no'}")
        ok = waits[mine] <= waits[theirs]
        print(f"{mine}: the simulation waits {waits[mine]:.2f} ms a frame in report <= {theirs}'s "
              f"{waits[theirs]:.2f} ms: {'yes' if ok else 'no'}")


if __name__ == "__main__":
    sys.exit(main())
