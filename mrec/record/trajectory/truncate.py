"""Restarts: dropping the frames after a step (``TrajectoryWriter.open(..., truncate_after_step=S)``).

A simulation restarted from a checkpoint at step S must discard what the crashed run wrote
after S.  The truncation is the reopen rule run backwards, in two steps that are each a state
every reader accepts:

1. **lower the commit marker**: ``trajectory/zarr.json`` is replaced (fsynced, then its
   directory) with ``nstep`` = the number of frames whose step is <= S.  Everything past it
   is now an uncommitted tail, which readers never read (the chapter's logical lengths:
   ``nstep``, each block's ``step_index`` entries below it, ``offset`` up to its updates, a
   regular block's ``n_updates * uniform_rows``, the box's updates below ``nstep``).
2. **shrink the arrays** to those logical lengths: the writer's reopen does it
   (``TrajectoryWriter._restore`` shrinks every array longer than its logical length, each
   ``zarr.json`` fsynced), and shards wholly past the new length are truncated before the next
   landing.

A crash before step 1's replace leaves the old store; after it, the truncated one (with a
tail, or partly shrunk arrays, both of which a reader and a reopening writer accept).
``python -m tools.crashcheck`` cuts the truncation at every operation and checks exactly that.
"""
from __future__ import annotations

import numpy as np

from ...errors import RefusalError
from ...zarr.array import meta_key
from ...zarr.metadata import GroupMetadata, json_dumps
from .layout import TRAJ

__all__ = ["check_step", "frames_up_to", "lower_commit"]


def check_step(step) -> int:
    """``step`` as an int (refused ``bad_step`` when it is not an integer)."""
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise RefusalError(f"truncate_after_step={step!r} is not an integer step", kind="bad_step")
    return int(step)


def frames_up_to(layout, step: int) -> int:
    """How many committed frames have a step <= ``step`` (steps strictly increase)."""
    if layout.nstep == 0:
        return 0
    return int(np.searchsorted(layout.steps(), step, side="right"))


def lower_commit(store, layout, step: int, *, durable: bool) -> int:
    """Lower ``nstep`` to the frames with step <= ``step``; returns the new ``nstep`` (the old one
    when nothing is dropped, and then nothing is written).  Step 1 of the module docstring."""
    keep = frames_up_to(layout, step)
    if keep >= layout.nstep:
        return layout.nstep
    attrs = dict(layout.attrs)
    attrs["nstep"] = keep
    store.set(meta_key(TRAJ), json_dumps(GroupMetadata(attrs).to_json()), fsync=durable)
    if durable:
        store.fsync_dir(TRAJ)
    return keep
