"""A frames progress bar for long conversions: count, frames/s and ETA on stderr.

Drawn only when enabled: by default when stderr is a terminal (never in pipes, logs or CI);
``mrec convert --progress`` forces it, ``--no-progress`` turns it off.
"""
from __future__ import annotations

import time

from ..progress import Bar

__all__ = ["FrameBar"]


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class FrameBar(Bar):
    """:class:`mrec.progress.Bar` counting frames, with the rate and the time left."""

    def __init__(self, label: str, total: int | None, *, stream=None, enabled: bool | None = None,
                 width: int = 24, every: float = 0.2):
        super().__init__(label, unit="frames", stream=stream, enabled=enabled, width=width)
        self.total, self.every = total, every
        self.t0 = time.monotonic()
        self._last = -1.0
        self.done = 0
        self._drawn = False

    def update(self, done: int) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.every and (self.total is None or done < self.total):
            return
        self._last = now
        elapsed = max(now - self.t0, 1e-9)
        rate = done / elapsed
        if self.total:
            frac = min(1.0, done / self.total)
            filled = int(frac * self.width)
            eta = (self.total - done) / rate if rate > 0 else 0.0
            text = (f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} frames "
                    f"{rate:.1f} frames/s ETA {_clock(eta)}")
        else:
            text = f"\r{self.label} {done} frames {rate:.1f} frames/s elapsed {_clock(elapsed)}"
        self.stream.write(text)
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled:
            self._last = -1.0
            self.update(self.done)          # the final count and rate
        super().close()
