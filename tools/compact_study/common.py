"""Shared helpers of the compact-profile size study (docs/performance.md, "The compact profile"):
the MDAnalysisTests coordinates as bench.real() loads them, cached; XTC sizes; chunking."""
import sys, math, time, warnings, pickle, os
from pathlib import Path
import numpy as np, zstandard, crc32c
from numcodecs import Shuffle
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tools"))
CACHE = Path(os.environ.get("MREC_STUDY_CACHE", "/tmp/mrec-compact-study"))
CACHE.mkdir(parents=True, exist_ok=True)

def load(kind):
    fn = CACHE / f"{kind}.npy"
    if fn.exists():
        return np.load(fn)
    import bench
    wl = bench.real(kind)
    np.save(fn, wl.pos)          # (3, frames, atoms), A, f64
    return wl.pos

def xtc_bytes(kind):
    fn = CACHE / f"{kind}.xtcsize"
    if fn.exists():
        return float(fn.read_text())
    import bench
    wl = bench.real(kind)
    x = CACHE / f"{kind}.xtc"
    bench.xtc_write(wl, x, bench.xtc_digits(1e-2))
    b = x.stat().st_size / (wl.atoms * wl.frames)
    fn.write_text(repr(b)); x.unlink()
    return b

def quantize(pos, p=1e-2):
    from mrec.record.model.precision import round_to_precision
    return round_to_precision(pos, p)

def chunks(col, F):
    """col: (frames, atoms) -> list of 1-d chunks of F frames, the last padded with 0 (fill)."""
    fr, n = col.shape
    out = []
    for f0 in range(0, fr, F):
        c = col[f0:f0 + F]
        if c.shape[0] < F:
            c = np.concatenate([c, np.zeros((F - c.shape[0], n))])
        out.append(np.ascontiguousarray(c).reshape(-1))
    return out
