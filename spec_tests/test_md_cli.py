"""Issue 14, part 2: the command line's first contact (run as a subprocess, as a user would)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, cwd=None, input=None, check=True, env_extra=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, *args], cwd=cwd, input=input, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr}")
    return p


def test_import_prints_nothing_and_loads_no_numcodecs_package():
    """numcodecs' package __init__ warns about crc32c when google_crc32c is missing: mrec loads
    only the C shuffle extension, so importing mrec runs none of numcodecs' own imports."""
    p = run("-W", "error", "-c",
            "import sys, mrec; print(sorted(k for k in sys.modules if k.split('.')[0] == 'numcodecs'))")
    assert p.stderr == ""
    assert p.stdout.strip() == "['numcodecs._shuffle']"
