"""An ASE molecular-dynamics observer writing a live mrec record (``mrec.ase_md.MrecMDWriter``).

Attach it as ASE's own trajectory writers are attached::

    writer = MrecMDWriter("md.mrec", atoms, dyn)
    dyn.attach(writer, interval=10)
    dyn.run(1000)
    writer.close()

Each call appends one frame of ``atoms``: ``atoms`` ``x y z`` (Å), ``vx vy vz`` (Å/ps), ``fx fy
fz`` (eV/Å, the calculator's forces), the cell (when it has three lattice vectors; ``pbc`` as its
boundary), the step (``dyn.nsteps``), the time (``dyn.get_time()``, in ps) and per-step meta
``potential_energy`` / ``kinetic_energy`` (eV) and ``temperature`` (K).  ``system/`` holds the
elements, masses and the units.  Without ``dyn`` the steps are 0, 1, 2, ... and there is no time.
The record is a live ``<stem>.mrec`` directory (:class:`~mrec.md.live.LiveTrajectory`:
``append``'s crash guarantees, closed by ``close()`` or at exit).  ``append=True`` continues an
existing record: frames after the step the dynamics is at when the writer is made (``dyn.nsteps``,
a restart's), or at its first write when that is earlier, are dropped first.

ASE reads the record back (``ase.io.read("md.mrec", index=":", format="mrec")``) with these
energies and forces as its calculator results.  ASE is the optional extra ``mrec[ase]``.
"""
from __future__ import annotations

import numpy as np

from ..errors import MrecError
from . import require
from .live import ENERGY_META, LiveControls, LiveTrajectory, md_schema, unit_cell, xyz_columns

__all__ = ["MrecMDWriter", "ASE_MD_UNITS"]

ase_units = require("ase.units")

#: the units of a record the writer writes (ASE's, with times and velocities in ps)
ASE_MD_UNITS = {"length": "angstrom", "time": "ps", "velocity": "angstrom/ps", "force": "eV/angstrom",
                "energy": "eV", "temperature": "K", "mass": "amu", "charge": "e"}
_PS = 1000.0 * ase_units.fs          # one ps in ASE's time unit


class MrecMDWriter(LiveControls):
    """Append ``atoms`` to a live ``<stem>.mrec`` record at each call (see the module docstring).

    ``dyn`` -- the dynamics (steps and times from it); ``velocities`` / ``forces`` -- store them;
    ``precision`` -- positions' absolute precision in Å (default: exact); ``append`` /
    ``overwrite`` -- as :class:`mrec.openmm.MrecReporter`'s; ``flush_every``, ``durable``,
    ``compression``, ``profile``, ``expected_frames``, ``pipeline`` -- the
    :class:`~mrec.TrajectoryWriter`'s.
    """

    def __init__(self, path, atoms, dyn=None, *, append: bool = False, overwrite: bool = False,
                 velocities: bool = True, forces: bool = True, precision: float | None = None, **writer_options):
        self.atoms, self.dyn = atoms, dyn
        self._velocities, self._forces, self._precision = bool(velocities), bool(forces), precision
        self._resume = int(dyn.nsteps) if dyn is not None else None
        self._count = 0
        self._live = LiveTrajectory(path, what="an ASE MD writer", append=append, overwrite=overwrite,
                                    **writer_options)

    def __call__(self) -> None:
        """ASE's observer call: write the current state."""
        self.write()

    def write(self, atoms=None) -> None:
        """Append ``atoms`` (default: the writer's) as the frame of the current step."""
        atoms = self.atoms if atoms is None else atoms
        step = int(self.dyn.nsteps) if self.dyn is not None else self._count
        if not self._live.started:
            resume = step - 1 if self._resume is None else min(self._resume, step - 1)
            self._live.start(lambda: self._system(atoms), lambda: self._schema(len(atoms)), resume_after=resume)
        time = float(self.dyn.get_time()) / _PS if self.dyn is not None else None
        self._live.append(self._frame(atoms), step=step, time=time)
        self._count = step + 1

    # -- the record ----------------------------------------------------------------------
    @staticmethod
    def _system(atoms) -> dict:
        cols = {"element": np.array(atoms.get_chemical_symbols(), dtype=object),
                "mass": np.asarray(atoms.get_masses(), dtype=np.float64)}
        return {"blocks": {"atoms": cols}, "counts": {"atoms": len(atoms)}, "meta": {"units": ASE_MD_UNITS}}

    def _schema(self, n: int):
        return md_schema(n, precision=self._precision, velocities=self._velocities, forces=self._forces)

    def _frame(self, atoms) -> dict:
        pbc = np.asarray(atoms.get_pbc(), dtype=bool)
        box = unit_cell(atoms.get_cell()[:], pbc)
        if box is None and pbc.any():
            raise MrecError(f"atoms with periodic axes {pbc.tolist()} but no full cell cannot be stored",
                            path=self._live.path)
        cols = xyz_columns("", atoms.get_positions())
        if self._velocities:
            cols.update(xyz_columns("v", atoms.get_velocities() * _PS))
        if self._forces:
            cols.update(xyz_columns("f", atoms.get_forces()))
        energies = (atoms.get_potential_energy(), atoms.get_kinetic_energy(), atoms.get_temperature())
        frame: dict = {"blocks": {"atoms": cols}, "meta": dict(zip(ENERGY_META, map(float, energies)))}
        if box is not None:
            frame["box"] = box
        return frame

    def __repr__(self) -> str:
        return f"MrecMDWriter({self.path!r}, {len(self.atoms)} atoms, frames committed {self._live.committed})"
