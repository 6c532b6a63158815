"""The per-atom view of an mrec frame, as MD tools see it.

The ``atoms`` block of a trajectory frame, completed by the record's ``system/atoms`` block
(the topology: ``element name type res_name res_id chain mass charge``) when the row counts
agree.  Canonical column names (mrec-notes §7.1): ``x y z`` positions, ``vx vy vz`` velocities,
``fx fy fz`` forces.  Species for text formats: ``element``, else ``name``, else ``type``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AtomsView", "atoms_view", "species_of", "species_column", "energy_keys", "ENERGY_KEYS"]

#: per-step meta keys that hold the potential energy, in order of preference
ENERGY_KEYS = ("energy", "pe", "potential_energy", "epot")

#: positions, velocities and forces: the columns an AtomsView holds as (N, 3) arrays
MOTION_COLUMNS = frozenset("x y z vx vy vz fx fy fz".split())

TOPOLOGY_COLUMNS = ("element", "name", "type", "res_name", "res_id", "chain", "mass", "charge",
                    "occupancy", "b_factor", "atomic_number", "type_id", "mol_id", "formal_charge", "altloc", "icode")


def _xyz(cols: dict, prefix: str) -> np.ndarray | None:
    names = [f"{prefix}{a}" for a in "xyz"]
    if all(n in cols for n in names):
        return np.stack([np.asarray(cols[n], dtype=np.float64) for n in names], axis=1)
    return None


@dataclass
class AtomsView:
    n: int
    positions: np.ndarray | None
    velocities: np.ndarray | None = None
    forces: np.ndarray | None = None
    columns: dict[str, np.ndarray] = field(default_factory=dict)   # topology columns (frame or system)
    box: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, np.ndarray] = field(default_factory=dict)    # the frame's other per-atom columns

    def get(self, name: str):
        return self.columns.get(name)

    @property
    def species(self) -> list[str]:
        return species_of(self.columns, self.n)


def species_column(columns: dict, n: int) -> str | None:
    """The column the species are taken from: ``element``, else ``name``, else ``type`` (None: all ``X``)."""
    for key in ("element", "name", "type"):
        v = columns.get(key)
        if v is not None and len(v) == n:
            return key
    return None


def species_of(columns: dict, n: int) -> list[str]:
    key = species_column(columns, n)
    if key is None:
        return ["X"] * n
    return [str(s) if str(s) else "X" for s in columns[key]]


def atoms_view(frame, system=None, block: str = "atoms") -> AtomsView:
    """The atoms of ``frame`` (a Frame) with the topology of ``system`` (a Frame or None)."""
    cols = frame.blocks.get(block, {}) if frame is not None else {}
    n = frame.counts.get(block, 0) if frame is not None and block in frame.blocks else 0
    topo: dict[str, np.ndarray] = {}
    if system is not None and block in system.blocks and system.counts.get(block) == n:
        topo.update(system.blocks[block])
    extra: dict[str, np.ndarray] = {}
    for c, v in cols.items():
        if c in TOPOLOGY_COLUMNS:
            topo[c] = v
        elif c not in MOTION_COLUMNS:
            extra[c] = v
    return AtomsView(n, _xyz(cols, ""), _xyz(cols, "v"), _xyz(cols, "f"), topo,
                     frame.box if frame is not None else None, dict(frame.meta) if frame is not None else {}, extra)


def energy_keys(meta: dict) -> str | None:
    for k in ENERGY_KEYS:
        if k in meta:
            return k
    return None
