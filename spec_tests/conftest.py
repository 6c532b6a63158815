"""Shared test settings.

Hypothesis runs without a per-example deadline: CI machines are shared and
noisy, and speed is measured by the benchmarks in tools/, never by tests.
"""
from hypothesis import HealthCheck, settings

settings.register_profile("mrec", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mrec")
