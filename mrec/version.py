"""The package version, ``mrec.__version__``: what ``mrec --version`` prints and the creator documents
of the records mrec's converters and live writers make carry (``meta.creator.version``)."""
from __future__ import annotations

__version__ = "0.1.0"
