"""What a conversion is asked: which paths are records, which frames, whether an output is replaced.

``is_mrec_path`` tells a record path (``*.mrec`` / ``*.mrec.zip``) from a foreign one; ``frame_slice``
turns ``frames`` (a slice or ``"START:STOP[:STEP]"``) into a checked slice, and ``valid_slice`` /
``is_index`` are its checks (a ``bad_frames`` refusal otherwise); ``refuse_existing`` refuses a link
or an existing output unless it is to be overwritten (``OVERWRITE_HINT`` is how a Python caller is
told to; ``mrec convert`` says ``--overwrite``).  Shared by ``convert``, the MDAnalysis and ASE
plugins and the LAMMPS reader.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import RefusalError

__all__ = ["is_mrec_path", "frame_slice", "is_index", "valid_slice", "OVERWRITE_HINT", "refuse_existing"]


def is_mrec_path(path: str) -> bool:
    p = os.fspath(path).rstrip("/")
    return p.endswith(".mrec") or p.endswith(".mrec.zip")


def _bad_frames(frames, why: str) -> RefusalError:
    return RefusalError(f"frames {frames!r} {why}", kind="bad_frames")


def frame_slice(frames) -> slice:
    """A frame selection as a slice of integers with a non-zero step, or a ``bad_frames`` refusal."""
    if frames is None:
        return slice(None)
    shown = frames
    if isinstance(frames, str):
        try:
            parts = [int(p) if p.strip() else None for p in frames.split(":")]
        except ValueError:
            raise _bad_frames(frames, "is not START:STOP[:STEP] of integers") from None
        if not 1 <= len(parts) <= 3:
            raise _bad_frames(frames, "is not START:STOP[:STEP]")
        if len(parts) == 1 and parts[0] is not None:
            return slice(parts[0], None if parts[0] == -1 else parts[0] + 1)
        frames = slice(*parts)
    if not isinstance(frames, slice):
        raise _bad_frames(frames, "is not a slice or START:STOP[:STEP]")
    return valid_slice(frames, shown)


def is_index(v) -> bool:
    """An integer usable as a frame index (not a bool)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def valid_slice(sel: slice, shown=None) -> slice:
    """``sel`` if its bounds are integers or None and its step is not 0, else a ``bad_frames``
    refusal showing ``shown`` (the selection as the caller gave it)."""
    shown = sel if shown is None else shown
    if not all(v is None or is_index(v) for v in (sel.start, sel.stop, sel.step)):
        raise _bad_frames(shown, "has a bound that is not an integer")
    if sel.step == 0:
        raise _bad_frames(shown, "has step 0")
    return sel


#: how a Python caller replaces an existing output (``mrec convert`` says ``--overwrite``)
OVERWRITE_HINT = "pass overwrite=True"


def refuse_existing(out: str, overwrite: bool) -> None:
    """A link at ``out`` is refused (kind ``bad_target``: nothing it leads to is replaced), an existing
    ``out`` unless ``overwrite``."""
    from ..fs import DEFAULT_FS, refuse_link
    refuse_link(DEFAULT_FS, out, "convert into")
    if os.path.lexists(out) and not overwrite:
        raise RefusalError(f"{out} already exists ({OVERWRITE_HINT} to replace it)", path=out, kind="exists")
