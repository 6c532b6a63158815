"""``mrec convert`` from several trajectory files and from a selection of atoms (issue 28, part 5).

* **Several inputs** (``mrec convert a.xtc b.xtc --top t.tpr out.mrec.zip``): the parts are read one
  after the other into one MDAnalysis Universe (``load_new``: one topology, every part must have its
  atom count) and written as one trajectory whose steps continue.  A part whose first step follows
  the previous part's last keeps its steps (a restart continuing the run); a first frame at the
  previous part's last step is that frame again (a GROMACS restart writes the checkpoint's frame in
  both parts) and is dropped; a part whose steps start earlier (numbering from 0 again, or the same
  file twice) is shifted to follow the previous part at its step interval, its times likewise.
  ``--frames`` selects from the concatenation.
* **A selection** (``--select "protein"``): an MDAnalysis selection string; the record holds those
  atoms only -- their coordinates and their topology, with the bonds / angles / dihedrals lying
  wholly inside the selection renumbered to it.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import MrecError, RefusalError
from .foreign import library_frames, reading

__all__ = ["source_list", "select_atoms", "local_relations", "chained_frames"]


def source_list(src) -> list[str]:
    """The input paths of ``src`` (one path, or a list / tuple of them), at least one."""
    parts = [os.fspath(p) for p in src] if isinstance(src, (list, tuple)) else [os.fspath(src)]
    if not parts:
        raise RefusalError("no input given", kind="bad_argument")
    return parts


def select_atoms(u, select: str | None, label: str):
    """The atoms of ``u`` that ``select`` (an MDAnalysis selection string) names; all of them for None.
    A selection MDAnalysis refuses, or one naming no atom, is a ``bad_argument`` refusal."""
    if select is None:
        return u.atoms
    if not isinstance(select, str) or not select.strip():
        raise RefusalError(f"select {select!r} is not an MDAnalysis selection string", kind="bad_argument")
    try:
        ag = u.select_atoms(select)
    except Exception as exc:   # noqa: BLE001 - MDAnalysis raises SelectionError, ValueError, KeyError ...
        raise RefusalError(f"--select {select!r}: MDAnalysis cannot select with it ({exc})", path=label,
                           kind="bad_argument") from exc
    if len(ag) == 0:
        raise RefusalError(f"--select {select!r} selects no atom (of {len(u.atoms)})", path=label,
                           kind="bad_argument")
    return ag


def local_relations(atoms, indices) -> np.ndarray:
    """Rows of ``indices`` (Universe atom indices, one row a bond / angle / dihedral) lying wholly inside
    ``atoms``, renumbered to positions in ``atoms`` (u64)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(len(indices), -1)
    where = np.full(len(atoms.universe.atoms), -1, dtype=np.int64)
    where[atoms.indices] = np.arange(len(atoms), dtype=np.int64)
    local = where[idx]
    return local[(local >= 0).all(axis=1)].astype(np.uint64)


def _load(u, part: str, fmt) -> None:
    import warnings
    with warnings.catch_warnings(), reading(part, "MDAnalysis cannot read it"):
        warnings.simplefilter("ignore")
        u.load_new(part, **({"format": fmt} if fmt else {}))
        u.trajectory.n_frames         # noqa: B018 - an XTC / TRR builds its frame offsets here


class _Steps:
    """Steps and times of the frames written, continued across parts (see the module docstring)."""

    def __init__(self):
        self.written: list[tuple[int, float]] = []     # the last two (step, time) written
        self.shift = (0, 0.0)
        self.part_start = False

    def new_part(self) -> None:
        self.part_start = bool(self.written)

    def place(self, ts, label: str) -> tuple[int, float] | None:
        """(step, time) of ``ts`` in the record, or None for a restart's repeated frame."""
        step = ts.data.get("step")
        step, time = (int(step) if step is not None else int(ts.frame)), float(ts.time)
        if self.part_start:
            self.part_start = False
            last_step, last_time = self.written[-1]
            if step == last_step:
                self.shift = (0, 0.0)
                return None
            self.shift = (0, 0.0) if step > last_step else self._follow(step, time)
        step, time = step + self.shift[0], time + self.shift[1]
        if self.written and step <= self.written[-1][0]:
            raise MrecError(f"frame {ts.frame}: step {step} does not increase (the previous frame's is "
                            f"{self.written[-1][0]}); steps of an mrec trajectory strictly increase", path=label)
        self.written = [*self.written[-1:], (step, time)]
        return step, time

    def _follow(self, step: int, time: float) -> tuple[int, float]:
        (s1, t1) = self.written[-1]
        s0, t0 = self.written[0] if len(self.written) > 1 else (s1 - 1, t1)
        return s1 + (s1 - s0) - step, t1 + (t1 - t0) - time


def chained_frames(u, parts: list[str], sel: slice, fmt):
    """Yield ``(ts, step, time)`` for the frames ``sel`` of the parts read one after the other into
    ``u`` (which holds ``parts[0]``); the expected number of frames first (an int)."""
    steps = _Steps()
    if len(parts) == 1:
        traj = u.trajectory
        yield len(range(*sel.indices(traj.n_frames)))
        for ts in library_frames(traj[sel], parts[0], "MDAnalysis"):
            placed = steps.place(ts, parts[0])
            yield ts, *placed
        return
    counts = [u.trajectory.n_frames]
    for part in parts[1:]:
        _load(u, part, fmt)
        counts.append(u.trajectory.n_frames)
    chosen = np.arange(sum(counts))[sel]
    yield len(chosen)
    bounds = np.cumsum([0, *counts])
    for k, part in enumerate(parts):
        local = chosen[(chosen >= bounds[k]) & (chosen < bounds[k + 1])] - bounds[k]
        if not local.size:
            continue
        _load(u, part, fmt)
        steps.new_part()
        for ts in library_frames(u.trajectory[local], part, "MDAnalysis"):
            placed = steps.place(ts, part)
            if placed is not None:
                yield ts, *placed
