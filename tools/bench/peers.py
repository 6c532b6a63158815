"""The peers: zarr-python writing and reading the same sharded layout, and XTC through MDAnalysis
(both optional: ``pip install -e '.[bench]'``)."""
from __future__ import annotations

import math
import shutil
import time
import warnings
from pathlib import Path

import numpy as np

from mrec.record.model.precision import quantum

from .common import COLS
from .workloads import Workload, layout


# -- zarr-python -----------------------------------------------------------------------------------

def zarr_arrays(root: Path, n_atoms: int, p: float):
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
    from zarr.codecs.numcodecs import Shuffle as ZShuffle
    rpc, shard = layout(n_atoms)
    g = zarr.open_group(str(root), mode="w")
    return [g.create_array(c, shape=(0,), dtype="float64", chunks=(rpc,),
                           shards={"shape": (shard,), "index_location": "start"},
                           serializer=BytesCodec(endian="little"),
                           filters=[],
                           compressors=[ZShuffle(elementsize=8), ZstdCodec(level=3, checksum=False), Crc32cCodec()],
                           fill_value=0.0) for c in COLS]


def zarr_write(wl: Workload, root: Path, k: int) -> float:
    """resize + write per landing of k frames (mrec's automatic flush), rounded like mrec."""
    if root.exists():
        shutil.rmtree(root)
    q = quantum(wl.p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arrs = zarr_arrays(root, wl.atoms, wl.p)
        n = wl.atoms
        t0 = time.perf_counter()
        for f0 in range(0, wl.frames, k):
            f1 = min(wl.frames, f0 + k)
            for a, col in zip(arrs, wl.pos):
                rows = np.rint(col[f0:f1].reshape(-1) / q) * q
                a.resize(((f1) * n,))
                a[f0 * n:f1 * n] = rows
        return time.perf_counter() - t0


def zarr_read(root: Path, n_atoms: int, frames: int, idx) -> tuple[float, list[float]]:
    import zarr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(str(root), mode="r")
        arrs = [g[c] for c in COLS]
        t0 = time.perf_counter()
        for f in range(frames):
            for a in arrs:
                a[f * n_atoms:(f + 1) * n_atoms]
        seq = time.perf_counter() - t0
        lat = []
        for f in idx:
            t0 = time.perf_counter()
            for a in arrs:
                a[int(f) * n_atoms:(int(f) + 1) * n_atoms]
            lat.append(time.perf_counter() - t0)
    return seq, lat


# -- XTC through MDAnalysis ------------------------------------------------------------------------

def xtc_digits(p_angstrom: float) -> int:
    """XTC precision (decimal digits of nm) of the grid closest to p in A (p A = p/10 nm)."""
    return max(0, round(-math.log10(p_angstrom / 10)))


def xtc_write(wl: Workload, fn: Path, digits: int, md_step: float = 0.0) -> float:
    """Seconds to write wl as XTC.  ``md_step``: each frame is first written into the simulation's
    positions and a simulated MD step of that many seconds (``time.sleep``) runs before the write,
    as :func:`append_blocking` does with ``md_step`` and ``md_writes``; the seconds are then those
    inside the writes alone (what the simulation waits for)."""
    import MDAnalysis as mda
    from MDAnalysis.coordinates.XTC import XTCWriter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe.empty(wl.atoms, trajectory=True)
        u.dimensions = [100.0, 100.0, 100.0, 90.0, 90.0, 90.0]
        frames = [np.ascontiguousarray(wl.pos[:, f].T) for f in range(wl.frames)]
        if md_step:
            sim = np.empty((wl.atoms, 3))
            inside = 0.0
            with XTCWriter(str(fn), wl.atoms, precision=digits) as w:
                for xyz in frames:
                    np.copyto(sim, xyz)
                    time.sleep(md_step)
                    a = time.perf_counter()
                    u.atoms.positions = sim
                    w.write(u.atoms)
                    inside += time.perf_counter() - a
            return inside
        t0 = time.perf_counter()
        with XTCWriter(str(fn), wl.atoms, precision=digits) as w:
            for xyz in frames:
                u.atoms.positions = xyz
                w.write(u.atoms)
        return time.perf_counter() - t0


def xtc_read(fn: Path, idx) -> tuple[float, float, list[float]]:
    """(open + offsets, sequential, random latencies)."""
    from MDAnalysis.coordinates.XTC import XTCReader
    for stale in fn.parent.glob(f".{fn.name}*"):
        stale.unlink()                                       # the offsets cache: open builds them anew
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        r = XTCReader(str(fn))
        t_open = time.perf_counter() - t0
        t0 = time.perf_counter()
        for ts in r:
            ts.positions.copy()
        seq = time.perf_counter() - t0
        lat = []
        for f in idx:
            t0 = time.perf_counter()
            r[int(f)].positions.copy()
            lat.append(time.perf_counter() - t0)
        r.close()
    return t_open, seq, lat
