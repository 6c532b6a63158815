"""An OpenMM reporter that writes a live mrec record (``mrec.openmm.MrecReporter``).

Every ``reportInterval`` steps it appends one frame: ``atoms`` ``x y z`` (nm), ``vx vy vz``
(nm/ps), optionally ``fx fy fz`` (kJ/mol/nm), the periodic cell (when the System is periodic),
the step (``simulation.currentStep``), the time (``State.getTime()``, ps) and per-step meta
``potential_energy`` / ``kinetic_energy`` (kJ/mol) and ``temperature`` (K, as OpenMM's
``StateDataReporter`` computes it).  The values are the State's float64 values, stored exactly
unless ``precision`` (nm) is given.  ``system/`` holds the topology (atom names, elements,
residues, chains, masses, charges from the ``NonbondedForce``, bonds) and the units.

The record is a live ``<stem>.mrec`` directory written through
:class:`~mrec.md.live.LiveTrajectory` (append's crash guarantees; closed by ``close()``, the end
of a ``with`` block or at exit).  ``append=True`` continues a record after a restart: the frames
after the step the simulation resumes from (its checkpoint's ``currentStep`` when the reporter
first sees it) are dropped, then the new frames follow.  A ``CheckpointReporter`` in the same
simulation makes the reporter flush (durably) at every step a checkpoint is written, so a restart
from any checkpoint finds every frame up to it; call :meth:`MrecReporter.flush` before a
``saveCheckpoint`` of your own.

``pipeline=True`` runs the writer's commits (encode, land, ``nstep``) on its committer thread;
it is not the default: measured in a running simulation it saves ~0.15 ms of the simulation's wait
a frame but did not lower the run's time (docs/performance.md, "Issue 28: writing from a running
OpenMM simulation").

OpenMM is the optional extra ``mrec[openmm]``.
"""
from __future__ import annotations

import numpy as np

from ..errors import MrecError
from . import require
from .live import ENERGY_META, LiveControls, LiveTrajectory, md_schema, unit_cell, xyz_columns

openmm = require("openmm")
app = require("openmm.app")
unit = require("openmm.unit")

__all__ = ["MrecReporter", "OPENMM_UNITS"]

#: the units of a record the reporter writes (OpenMM's own)
OPENMM_UNITS = {"length": "nm", "time": "ps", "velocity": "nm/ps", "force": "kJ/(mol*nm)", "energy": "kJ/mol",
                "temperature": "K", "mass": "amu", "charge": "e"}
_NM, _PS, _KJ = unit.nanometer, unit.picosecond, unit.kilojoule_per_mole
_NM_PS, _KJ_NM = _NM / _PS, _KJ / _NM


def _in(q, u):
    """A Quantity's value in unit ``u``: its own value when it is held in ``u`` (a State's values are
    in OpenMM's units), else converted."""
    return q._value if q.unit == u else q.value_in_unit(u)


def _res_ids(atoms) -> np.ndarray | None:
    """Residue ids as u64 when every one is a non-negative integer (PDB insertion codes are not)."""
    ids = [a.residue.id for a in atoms]
    if not all(str(i).strip().isdigit() for i in ids):
        return None
    return np.array([int(i) for i in ids], dtype=np.uint64)


def _charges(system) -> np.ndarray | None:
    for force in system.getForces():
        if isinstance(force, openmm.NonbondedForce):
            return np.array([force.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge)
                             for i in range(system.getNumParticles())], dtype=np.float64)
    return None


def system_section(simulation) -> dict:
    """``system/`` of the simulation: its topology's atoms and bonds, masses, charges, units."""
    top, system = simulation.topology, simulation.system
    atoms = list(top.atoms())

    def strings(values) -> np.ndarray:
        return np.array([str(v) for v in values], dtype=object)

    cols = {"name": strings(a.name for a in atoms),
            "element": strings(a.element.symbol if a.element is not None else "" for a in atoms),
            "res_name": strings(a.residue.name for a in atoms),
            "chain": strings(a.residue.chain.id for a in atoms),
            "mass": np.array([system.getParticleMass(i).value_in_unit(unit.dalton) for i in range(len(atoms))],
                             dtype=np.float64)}
    res_id = _res_ids(atoms)
    if res_id is not None:
        cols["res_id"] = res_id
    charge = _charges(system)
    if charge is not None:
        cols["charge"] = charge
    blocks: dict = {"atoms": cols}
    counts = {"atoms": len(atoms)}
    bonds = np.array([(a.index, b.index) for a, b in top.bonds()], dtype=np.uint64).reshape(-1, 2)
    if len(bonds):
        blocks["bonds"] = {"atomi": bonds[:, 0].copy(), "atomj": bonds[:, 1].copy()}
        counts["bonds"] = len(bonds)
    return {"blocks": blocks, "counts": counts, "meta": {"units": OPENMM_UNITS}}


def degrees_of_freedom(system) -> int:
    """3 per massive particle, less one per constraint touching one, less 3 with a CMMotionRemover."""
    massive = [system.getParticleMass(i).value_in_unit(unit.dalton) > 0 for i in range(system.getNumParticles())]
    dof = 3 * sum(massive)
    for k in range(system.getNumConstraints()):
        i, j, _d = system.getConstraintParameters(k)
        dof -= int(massive[i] or massive[j])
    if any(isinstance(f, openmm.CMMotionRemover) for f in system.getForces()):
        dof -= 3
    return dof


class MrecReporter(LiveControls):
    """Write a Simulation's frames to a live ``<stem>.mrec`` record (see the module docstring).

    ``file`` -- the ``*.mrec`` directory; ``reportInterval`` -- steps between frames;
    ``append`` -- continue an existing record after a restart (a new one when there is none);
    ``enforcePeriodicBox`` -- as OpenMM's DCDReporter; ``velocities`` / ``forces`` / ``energies``
    (potential and kinetic energy, temperature) -- store them (an energy costs OpenMM one force
    evaluation per report unless another reporter asks for it at the same step, as
    ``StateDataReporter`` does);
    ``precision`` -- positions' absolute precision in nm (default: exact); ``overwrite`` -- replace
    an existing record when not appending (otherwise refused, kind ``exists``); ``flush_every``,
    ``durable``, ``compression``, ``profile``, ``expected_frames``, ``pipeline`` -- the
    :class:`~mrec.TrajectoryWriter`'s.
    """

    def __init__(self, file, reportInterval: int, append: bool = False, enforcePeriodicBox: bool | None = None, *,
                 velocities: bool = True, forces: bool = False, energies: bool = True,
                 precision: float | None = None, overwrite: bool = False, **writer_options):
        if isinstance(reportInterval, bool) or not isinstance(reportInterval, int) or reportInterval < 1:
            raise MrecError(f"reportInterval {reportInterval!r} is not a positive integer")
        self._reportInterval = reportInterval
        self._enforcePeriodicBox = enforcePeriodicBox
        self._velocities, self._forces, self._precision = bool(velocities), bool(forces), precision
        self._energies_on = bool(energies)
        self._include = ["positions"] + [k for k, on in (("velocities", velocities), ("forces", forces),
                                                         ("energy", energies)) if on]
        self._live = LiveTrajectory(file, what="an OpenMM reporter", append=append, overwrite=overwrite,
                                    **writer_options)
        self._dof: int | None = None
        self._periodic = False
        self._cell: tuple | None = None

    # -- OpenMM's reporter protocol ---------------------------------------------------
    def describeNextReport(self, simulation) -> dict:
        """The next report's step and what it needs (OpenMM >= 8.2's dict form)."""
        if not self._live.started:
            self._start(simulation)
        steps = self._reportInterval - simulation.currentStep % self._reportInterval
        return {"steps": steps, "periodic": self._enforcePeriodicBox, "include": self._include}

    def report(self, simulation, state) -> None:
        """Append the State as one frame (flushed when a CheckpointReporter writes at this step)."""
        if not self._live.started:
            self._start(simulation)
        step = int(simulation.currentStep)
        self._live.append(self._frame(simulation, state), step=step,
                          time=float(state.getTime().value_in_unit(_PS)))
        if self._checkpoint_at(simulation, step):
            self._live.flush()

    # -- the record ----------------------------------------------------------------------
    def _start(self, simulation) -> None:
        system = simulation.system
        self._periodic = bool(system.usesPeriodicBoundaryConditions())
        self._dof = degrees_of_freedom(system)
        self._live.start(lambda: system_section(simulation), lambda: self._schema(system.getNumParticles()),
                         resume_after=int(simulation.currentStep))

    def _schema(self, n: int):
        return md_schema(n, precision=self._precision, velocities=self._velocities, forces=self._forces,
                         meta=ENERGY_META if self._energies_on else ())

    def _frame(self, simulation, state) -> dict:
        cols = xyz_columns("", _in(state.getPositions(asNumpy=True), _NM))
        if self._velocities:
            cols.update(xyz_columns("v", _in(state.getVelocities(asNumpy=True), _NM_PS)))
        if self._forces:
            cols.update(xyz_columns("f", _in(state.getForces(asNumpy=True), _KJ_NM)))
        frame: dict = {"blocks": {"atoms": cols}}
        if self._energies_on:
            frame["meta"] = self._energies(simulation, state)
        if self._periodic:
            frame["box"] = self._box(np.asarray(_in(state.getPeriodicBoxVectors(asNumpy=True), _NM), dtype=np.float64))
        return frame

    def _box(self, rows: np.ndarray):
        """The cell of these rows: the last one again while the rows are unchanged (NVT)."""
        key = rows.tobytes()
        if self._cell is None or self._cell[0] != key:
            self._cell = (key, unit_cell(rows, (True, True, True)))
        return self._cell[1]

    def _energies(self, simulation, state) -> dict:
        ke = state.getKineticEnergy()
        integrator = simulation.context.getIntegrator()
        if hasattr(integrator, "computeSystemTemperature"):
            temp = integrator.computeSystemTemperature().value_in_unit(unit.kelvin)
        else:
            temp = (2 * ke / (self._dof * unit.MOLAR_GAS_CONSTANT_R)).value_in_unit(unit.kelvin) if self._dof else 0.0
        return dict(zip(ENERGY_META, (float(_in(state.getPotentialEnergy(), _KJ)), float(_in(ke, _KJ)), float(temp))))

    @staticmethod
    def _checkpoint_at(simulation, step: int) -> bool:
        """Whether a CheckpointReporter of the simulation writes a checkpoint at ``step``."""
        for r in simulation.reporters:
            k = getattr(r, "_reportInterval", None) if isinstance(r, app.CheckpointReporter) else None
            if isinstance(k, int) and k > 0 and step % k == 0:
                return True
        return False

    def flush(self) -> None:
        """Commit every frame reported so far, durably: call it before ``simulation.saveCheckpoint``."""
        self._live.flush()

    def __repr__(self) -> str:
        return f"MrecReporter({self.path!r}, reportInterval={self._reportInterval}, frames committed {self._live.committed})"
