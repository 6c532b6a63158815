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


class Target:
    """One line of an issue's targets table: a measured ratio against its limit, met or not, with
    the baseline it is a ratio of and the floor (what no writer / reader of this layout can beat)."""

    def __init__(self, what: str, value: float, op: str, limit: float, detail: str = "", floor: str = ""):
        self.what, self.value, self.op, self.limit, self.detail, self.floor = what, value, op, limit, detail, floor

    @property
    def met(self) -> bool:
        return self.value >= self.limit if self.op == ">=" else self.value <= self.limit

    def print(self) -> None:
        print(f"  {self.what:<66} {self.value:6.2f}x  {self.op} {self.limit:<4} "
              f"{'met' if self.met else 'NOT met':<7}  {self.detail}")
        if self.floor:
            print(f"  {'':<66} floor: {self.floor}")
