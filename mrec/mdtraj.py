"""MDTraj support: :func:`load` reads an mrec record as an ``mdtraj.Trajectory``.

MDTraj is the optional extra ``mrec[mdtraj]``; importing this module without it raises
:class:`~mrec.md.MissingExtraError` naming the extra::

    import mrec.mdtraj
    traj = mrec.mdtraj.load("run.mrec.zip")      # xyz (nm), time (ps), unit cells, topology

The implementation and what is read: :mod:`mrec.md.mdtraj_io`.
"""
from __future__ import annotations

from .md.mdtraj_io import load, topology

__all__ = ["load", "topology"]
