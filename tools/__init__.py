"""Tools of the mrec project: checkers, fuzzers and benchmarks, run from the repository root.

The packages run as ``python -m tools.<name>`` (``crashcheck``, ``fuzz``, ``bench``); the one-file
tools as ``python tools/<name>.py``.
"""
