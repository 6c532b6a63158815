"""Molecular-dynamics interoperability: text formats, conversions, MDAnalysis and ASE.

* :mod:`mrec.md.text` -- extxyz / xyz / pdb text of mrec frames (no extra needed; ``mrec cat``);
* :mod:`mrec.md.atoms` -- the per-atom view of a frame (positions, species, residues, ...);
* :mod:`mrec.md.convert` -- ``mrec convert``: trajectories in and out through MDAnalysis or ASE;
* :mod:`mrec.mdanalysis` -- an MDAnalysis Reader / topology parser / Writer for ``.mrec``;
* :mod:`mrec.ase_io` -- ASE's io format plugin.

MDAnalysis and ASE are optional extras (``pip install 'mrec[md]'``, or ``mrec[mdanalysis]`` /
``mrec[ase]``), imported only when a conversion needs them: :func:`require` turns a missing one
into an :class:`~mrec.errors.MrecError` naming the extra to install.
"""
from __future__ import annotations

import importlib

from ..errors import MrecError

__all__ = ["require", "MissingExtraError"]

_EXTRAS = {"MDAnalysis": "mdanalysis", "ase": "ase"}


class MissingExtraError(MrecError):
    """An optional integration is not installed (the message names the extra)."""


def require(module: str):
    """Import ``module`` (``"MDAnalysis"``, ``"ase"``, or one of their submodules) or raise a
    :class:`MissingExtraError` naming the pip extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = _EXTRAS.get(top, "md")
        raise MissingExtraError(f"{top} is not installed ({exc}): pip install 'mrec[{extra}]' "
                                f"(or 'mrec[md]' for MDAnalysis and ASE)") from None
