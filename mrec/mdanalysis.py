"""MDAnalysis plugin (public import path): importing it registers the ``MREC`` format with MDAnalysis.

The code lives in :mod:`mrec.md.mdanalysis`; this module keeps ``import mrec.mdanalysis`` working.
"""
from .md.mdanalysis import *  # noqa: F401,F403
from .md.mdanalysis import __all__  # noqa: F401
