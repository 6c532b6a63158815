"""ASE molecular dynamics: :class:`MrecMDWriter`, an observer for ``dyn.attach`` writing a live
mrec record.

ASE is the optional extra ``mrec[ase]``; importing this module without it raises
:class:`~mrec.md.MissingExtraError` naming the extra::

    from mrec.ase_md import MrecMDWriter
    writer = MrecMDWriter("md.mrec", atoms, dyn)
    dyn.attach(writer, interval=10)

The implementation and what each frame holds: :mod:`mrec.md.ase_md`.
"""
from __future__ import annotations

from .md.ase_md import ASE_MD_UNITS, MrecMDWriter

__all__ = ["MrecMDWriter", "ASE_MD_UNITS"]
