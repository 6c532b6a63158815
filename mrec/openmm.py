"""OpenMM support: :class:`MrecReporter`, a reporter writing a live mrec record.

OpenMM is the optional extra ``mrec[openmm]``; importing this module without it raises
:class:`~mrec.md.MissingExtraError` naming the extra::

    from mrec.openmm import MrecReporter
    simulation.reporters.append(MrecReporter("run.mrec", 1000))

The implementation and what each frame holds: :mod:`mrec.md.openmm_reporter`.
"""
from __future__ import annotations

from .md.openmm_reporter import OPENMM_UNITS, MrecReporter

__all__ = ["MrecReporter", "OPENMM_UNITS"]
