"""Shared test settings.

The tests follow the code's rooms (spec_tests/zarr/, record/, record/trajectory/, archive/,
remote/, check/, md/; the map and the house rules at the top). Shared helpers stay at the top
(``mdtools``, ``servers``) and a few test modules import helpers from another room's tests
(``from test_record import same``): every room's folder is put on ``sys.path`` here, so one file
runs alone as well as in the whole suite.

Hypothesis runs without a per-example deadline: CI machines are shared and
noisy, and speed is measured by the benchmarks in tools/, never by tests.
"""
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

_HERE = Path(__file__).resolve().parent
for _room in sorted({p.parent for p in _HERE.rglob("test_*.py")}):
    if str(_room) not in sys.path:
        sys.path.insert(0, str(_room))

settings.register_profile("mrec", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mrec")
