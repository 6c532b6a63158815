"""Molecular-dynamics interoperability: text formats, conversions, MDAnalysis and ASE.

* :mod:`mrec.md.text` -- extxyz / xyz / pdb text of mrec frames (no extra needed; ``mrec cat``);
* :mod:`mrec.md.atoms` -- the per-atom view of a frame (positions, species, residues, ...);
* :mod:`mrec.md.convert` -- ``mrec convert``: trajectories in and out through MDAnalysis or ASE;
* :mod:`mrec.md.options`, :mod:`mrec.md.result`, :mod:`mrec.md.units`, :mod:`mrec.md.columns`,
  :mod:`mrec.md.topology` -- what ``convert`` shares with the plugins and the LAMMPS reader (paths and
  frame selections, the result and creator, units, the ``atoms`` block, the topology);
* :mod:`mrec.md.mdanalysis` (imported as ``mrec.mdanalysis``) -- an MDAnalysis Reader / topology parser / Writer for ``.mrec``;
* :mod:`mrec.md.ase_io` (``mrec.ase_io``, the entry point) -- ASE's io format plugin;
* :mod:`mrec.md.live` -- records written live by a running simulation:
  :mod:`mrec.md.openmm_reporter` (``mrec.openmm.MrecReporter``), :mod:`mrec.md.ase_md`
  (``mrec.ase_md.MrecMDWriter``, for ``dyn.attach``); :mod:`mrec.md.mdtraj_io`
  (``mrec.mdtraj.load``) reads a record as an MDTraj ``Trajectory``.

MDAnalysis, ASE, OpenMM and MDTraj are optional extras (``pip install 'mrec[md]'`` for the first
two, or ``mrec[mdanalysis]`` / ``mrec[ase]`` / ``mrec[openmm]`` / ``mrec[mdtraj]``), imported only
when used: :func:`require` turns a missing one into an :class:`~mrec.errors.MrecError` naming the
extra to install.
"""
from __future__ import annotations

import importlib

from ..errors import MrecError

__all__ = ["require", "MissingExtraError"]

_EXTRAS = {"MDAnalysis": "mdanalysis", "ase": "ase", "openmm": "openmm", "mdtraj": "mdtraj"}


class MissingExtraError(MrecError):
    """An optional integration is not installed (the message names the extra)."""


def require(module: str):
    """Import ``module`` (``"MDAnalysis"``, ``"ase"``, ``"openmm"``, ``"mdtraj"``, or one of their
    submodules) or raise a :class:`MissingExtraError` naming the pip extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = _EXTRAS.get(top, "md")
        both = " (or 'mrec[md]' for MDAnalysis and ASE)" if extra in ("mdanalysis", "ase", "md") else ""
        raise MissingExtraError(f"{top} is not installed ({exc}): pip install 'mrec[{extra}]'{both}") from None
