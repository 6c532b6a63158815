"""The workloads (x, y, z f64 columns of one regular block ``atoms``) and the layout mrec gives them.

``synthetic`` is the chapter's random walk at any size; ``real`` reads an MD trajectory shipped in
MDAnalysisTests; ``workloads`` builds the named ones (``--quick`` scales them down).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import mrec
from mrec.record import extents as X

from .common import COLS, MB, have, note


# -- workloads ------------------------------------------------------------------------------

@dataclass
class Workload:
    name: str
    desc: str
    pos: np.ndarray            # (3, frames, atoms) f64, so pos[c, f] is one contiguous column of a frame
    p: float                   # the precision of the throughput runs, in the data's unit (A)
    real: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return self.pos.shape[1]

    @property
    def atoms(self) -> int:
        return self.pos.shape[2]

    @property
    def mb(self) -> float:
        return self.frames * self.atoms * 3 * 8 / MB

    def head(self, n: int) -> "Workload":
        return Workload(self.name, self.desc, self.pos[:, :n], self.p, self.real, self.extra)

    def frame(self, f: int) -> dict:
        return {"blocks": {"atoms": {c: self.pos[k, f] for k, c in enumerate(COLS)}}}


def random_walk(n_atoms: int, n_frames: int, seed: int = 0) -> np.ndarray:
    """The chapter's synthetic workload at the 3000-atom density (40 A box for 3000 atoms)."""
    rng = np.random.default_rng(seed)
    side = 40.0 * (n_atoms / 3000) ** (1 / 3)
    pos = rng.uniform(0, side, size=(n_atoms, 3))
    rng.shuffle(pos)                                            # random atom order (worst case)
    steps = rng.normal(0, 0.05, size=(n_frames, n_atoms, 3))
    traj = pos[None] + np.cumsum(steps, axis=0)
    return np.ascontiguousarray(traj.transpose(2, 0, 1))


def synthetic(n_atoms: int, n_frames: int, name: str) -> Workload:
    side = 40.0 * (n_atoms / 3000) ** (1 / 3)
    return Workload(name, f"{n_atoms} atoms, {side:.0f} A box, 0.05 A walk, random order, {n_frames} frames, p=1e-3 A",
                    random_walk(n_atoms, n_frames), 1e-3)


REAL = {"dcd": ("PSF", "DCD"), "xtc": ("GRO", "XTC"), "trr": ("GRO", "TRR")}


def real(kind: str) -> Workload | None:
    if not (have("MDAnalysis") and have("MDAnalysisTests")):
        note(f"{kind}: MDAnalysis / MDAnalysisTests not installed (pip install -e '.[bench]'): skipped")
        return None
    import MDAnalysis as mda
    from MDAnalysisTests import datafiles as D
    top, trj = (getattr(D, n) for n in REAL[kind])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(top, trj)
        pos = np.stack([ts.positions.astype(np.float64) for ts in u.trajectory])   # (frames, atoms, 3), A
    return Workload(kind, f"{Path(trj).name}: {pos.shape[1]} atoms, {pos.shape[0]} frames (MDAnalysisTests), "
                          f"p=1e-3 nm (1e-2 A)", np.ascontiguousarray(pos.transpose(2, 0, 1)), 1e-2, real=True)


def workloads(names, quick: bool) -> list[Workload]:
    out = []
    for n in names:
        if n == "synthetic":
            out.append(synthetic(3000, 40 if quick else 200, "synthetic"))
        elif n == "small":
            out.append(synthetic(100, 10_000 if quick else 100_000, "small"))
        elif n == "large":
            out.append(synthetic(50_000, 8 if quick else 40, "large"))
        else:
            w = real(n)
            if w is not None:
                out.append(w)
    return out


# -- layout shared by mrec, the ceiling and zarr-python ---------------------------------------

def layout(n_atoms: int) -> tuple[int, int]:
    """(rows per inner chunk, rows per shard) of an f64 column of a block of n_atoms rows."""
    rpc = X.rows_per_chunk(n_atoms, 8)
    ext = X.column_extent(rpc, 8)
    return rpc, ext.shard_rows


def schema(n_atoms: int, p: float | None):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=n_atoms)
    for c in COLS:
        s.declare_column("atoms", c, "f64", precision=p)
    return s
