"""What every part of the bench shares: the columns, notes of what was skipped, and the printed rows."""
from __future__ import annotations

import numpy as np


COLS = ("x", "y", "z")
MB = 1e6


def note(msg: str) -> None:
    print(f"  note: {msg}")


def have(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:
        return False


def pct(xs, q) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))


def row(label: str, mbps: float | None, *ratios) -> None:
    r = "  ".join(f"{name} {v:6.2f}x" for name, v in ratios if v is not None)
    print(f"  {label:<44} {mbps:9.1f} MB/s  {r}")
