"""ASE io-format plugin (public import path; the ``ase.ioformats`` entry point names
``mrec.ase_io:mrec_format``). The code lives in :mod:`mrec.md.ase_io`."""
from .md.ase_io import *  # noqa: F401,F403
from .md.ase_io import __all__  # noqa: F401
