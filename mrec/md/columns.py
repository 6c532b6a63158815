"""An MD trajectory's ``atoms`` block in mrec terms, shared by every importer and writer of ``md/``.

``schema_atoms`` declares it (``x y z`` at a precision or exact, ``vx vy vz`` / ``fx fy fz`` when the
source has them, extra columns); ``xyz_cols`` splits an (N, 3) array into its three columns;
``box_of_dimensions`` is the cell of MDAnalysis ``dimensions`` (a, b, c, alpha, beta, gamma), or
None when they describe no cell.
"""
from __future__ import annotations

import numpy as np

__all__ = ["schema_atoms", "xyz_cols", "box_of_dimensions"]


def schema_atoms(n: int | None, precision: float | None, vel: bool, frc: bool, extra: dict | None = None):
    from ..record.model.schema import SequenceSchema
    s = SequenceSchema()
    s.declare_block("atoms", rows=n)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=precision)
    if vel:
        for c in ("vx", "vy", "vz"):
            s.declare_column("atoms", c, "f64")
    if frc:
        for c in ("fx", "fy", "fz"):
            s.declare_column("atoms", c, "f64")
    for c, dt in (extra or {}).items():
        s.declare_column("atoms", c, dt)
    return s


def xyz_cols(prefix: str, a) -> dict:
    a = np.asarray(a, dtype=np.float64)
    return {f"{prefix}x": np.ascontiguousarray(a[:, 0]), f"{prefix}y": np.ascontiguousarray(a[:, 1]),
            f"{prefix}z": np.ascontiguousarray(a[:, 2])}


def box_of_dimensions(dims):
    from ..record.model.box import Box
    if dims is None:
        return None
    d = np.asarray(dims, dtype=np.float64)
    if d.shape != (6,) or not np.all(np.isfinite(d)) or not np.all(d[:3] > 0) or not np.all(d[3:] > 0):
        return None
    return Box.from_dimensions(*d.tolist())
