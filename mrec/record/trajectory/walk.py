"""Which frames a deep check resolves: bounded by what the store holds, not by ``nstep``.

``validate --deep`` resolves frames to find what only a resolved frame shows (a meta value that is
no document, a row reference out of range, a chunk that fails to decode).  ``nstep`` is one number
in a ``zarr.json``: 2^40 or 2^62 frames of a progression cost that file nothing, and a walk over
every ordinal never ends (issue 27).  What can differ from frame to frame is held in chunks:

* rows of the per-frame arrays (``step``, ``time``, ``meta/*``) and of a regular block's columns
  and masks that lie in chunks the store holds (a shard's inner chunks by its index);
* every update of a ragged block and of the cell (their ``step_index``, read whole on open).

Between two such frames every frame reads the same: the same updates, and only fill values of
chunks never written.  So the walk resolves the frames above and the first frame of each run between
them (:func:`walk_ordinals`): every frame of a store that holds every frame's rows (each is one of
the above), and for a claim the files do not back one frame a run.
"""
from __future__ import annotations

import numpy as np

from ...errors import MrecError
from ...zarr.array import Array
from ...zarr.codecs.sharding import EMPTY

__all__ = ["stored_row_runs", "walk_ordinals"]


def stored_row_runs(arr: Array, n: int) -> list[tuple[int, int]]:
    """Leading-axis row ranges ``[lo, hi)`` below ``n`` of the chunks ``arr`` has in its store: for a
    sharded array the inner chunks its shard index names (a whole shard when its index cannot be
    read: the frames in it are then resolved, and their reads say why)."""
    m = arr.meta
    if m.ndim == 0 or n <= 0:
        return []
    rows = m.chunk_shape[0]
    sh = arr.sharding
    out: list[tuple[int, int]] = []
    for coords in arr.stored_chunks():
        lo = coords[0] * rows
        if lo >= n:
            break
        if sh is None:
            out.append((lo, min(lo + rows, n)))
            continue
        try:
            index = arr.shard_index(arr.chunk_key(coords))
        except MrecError:
            index = None
        if index is None:
            out.append((lo, min(lo + rows, n)))
            continue
        named = (index.offsets != EMPTY) | (index.nbytes != EMPTY)
        inner = sh.chunk_shape[0]
        for i in np.unique(np.nonzero(named)[0]).tolist():
            a = lo + i * inner
            if a < n:
                out.append((a, min(a + inner, n)))
    return out


def _ordinals_of_rows(runs: list[tuple[int, int]], per_frame: int) -> list[np.ndarray]:
    return [np.arange(lo // per_frame, -(-hi // per_frame), dtype=np.int64) for lo, hi in runs]


def walk_ordinals(layout) -> np.ndarray:
    """The sorted frame ordinals a deep walk of ``layout`` (a trajectory's
    :class:`~mrec.record.trajectory.layout.Layout`) resolves: see the module docstring."""
    n = layout.nstep
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    parts: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    for arr in (layout.step_array, layout.time_array, *layout.meta.values()):
        if arr is not None:
            parts += _ordinals_of_rows(stored_row_runs(arr, n), 1)
    for b in layout.blocks.values():
        if b.regular:
            u = b.uniform_rows
            for arr in (*b.columns.values(), *b.masks.values()):
                parts += _ordinals_of_rows(stored_row_runs(arr, b.n_updates * u), u)
            parts.append(np.array([b.n_updates], dtype=np.int64))        # the first carried-forward frame
        elif b.n_updates:
            parts.append(b.step_index[:b.n_updates].astype(np.int64))
    if layout.box.n_updates and layout.box.step_index is not None:
        parts.append(layout.box.step_index[:layout.box.n_updates].astype(np.int64))
    marks = np.unique(np.concatenate(parts))
    marks = marks[marks < n]
    # the first frame of each run between two marks (and after the last) reads like the whole run
    after = marks + 1
    gaps = after[(after < n) & ~np.isin(after, marks)]
    return np.union1d(marks, gaps)
