"""Helpers the MD test files share: the ``mrec`` command line in a subprocess and a quiet Universe."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m mrec ARGS`` from this checkout; with ``check``, a non-zero exit fails the test."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "mrec", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"mrec {args}: exit {p.returncode}: {p.stderr}")
    return p


def universe(*files, **kw):
    """``MDAnalysis.Universe`` with its warnings (missing masses, guessed elements) silenced."""
    import MDAnalysis as mda
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(*files, **kw)
