"""What one array's reads keep between calls (besides the shard indexes, ``index.py``).

* ``chunk``: the last inner chunk decoded, keyed by ``(shard key, coord, offset, nbytes)``, with
  the rows it was verified for and whether it was decoded from those very bytes (not an older
  copy): a frame-by-frame read of small frames decodes each chunk once (``decode.inner_chunk``);
* ``inflated``: the inflated (still shuffled) bytes of the last chunk read in part, keyed the same
  way: the next frame of that chunk unshuffles it whole from them;
* ``ahead`` / ``last_read``: the bytes a forward walk fetched ahead, and the last chunk fetched;
* ``geo`` / ``frame``: the frame geometry and the frame path's resolved setup, per metadata.
"""
from __future__ import annotations


class ReadCache:
    """One array's read memory (see the module's docstring); :meth:`drop` forgets what was read."""

    __slots__ = ("chunk", "inflated", "ahead", "last_read", "geo", "frame")

    def __init__(self):
        self.chunk: tuple | None = None      # (key, chunk, rows verified, decoded from these bytes)
        self.inflated: tuple | None = None   # (key, inflated bytes)
        self.ahead: tuple | None = None      # (shard key, offset, memoryview of the bytes read ahead)
        self.last_read: tuple | None = None  # (shard key, inner row) of the last chunk fetched
        self.geo: tuple | None = None        # (metadata, plan.frame_geometry of it)
        self.frame: tuple | None = None      # see frame.setup

    def drop(self) -> None:
        self.chunk = self.inflated = None
        self.ahead = self.last_read = None
