"""Progress bars for long command-line work (pack, unpack, validate --deep).

A :class:`Bar` is a ``progress(done, total)`` callback.  It draws on stderr
only when stderr is a terminal (never in pipes, logs or CI), redraws at most
ten times a second, and ends its line on :meth:`close`.
"""
from __future__ import annotations

import sys
import time

__all__ = ["Bar"]


def _size(n: float, unit: str) -> str:
    if unit != "B":
        return f"{int(n)}"
    for u in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or u == "TB":
            return f"{n:.0f} {u}" if u == "B" else f"{n:.1f} {u}"
        n /= 1000
    return f"{n}"


class Bar:
    def __init__(self, label: str, *, unit: str = "B", stream=None, enabled: bool | None = None, width: int = 30):
        self.label, self.unit, self.width = label, unit, width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        frac = 1.0 if total <= 0 else min(1.0, done / total)
        filled = int(frac * self.width)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:5.1f}% "
                          f"{_size(done, self.unit)}/{_size(total, self.unit)}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
