"""The baselines timed beside mrec: the codec ceiling, a random frame's floor, and file-system time.

``Ceiling`` is the pure codec cost of the inner chunks mrec writes (no I/O, no bookkeeping);
``frame_floor`` the least work any reader does for one frame; ``timed_io`` the wall time spent in
``mrec.fs.posix`` while a block runs.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import crc32c as _crc
import numpy as np
import zstandard
from numcodecs import Shuffle

from mrec.record.model.precision import quantum
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore

from .common import COLS
from .workloads import Workload, layout


# -- the ceiling: codecs only ------------------------------------------------------------------

class Ceiling:
    """The pure codec cost of the inner chunks mrec writes for a workload (no I/O, no bookkeeping)."""

    def __init__(self, wl: Workload, p: float):
        self.wl, self.q = wl, quantum(p)
        self.rpc, _ = layout(wl.atoms)
        self.shuffle = Shuffle(elementsize=8)
        self.cctx = zstandard.ZstdCompressor(level=3, write_content_size=True)
        self.dctx = zstandard.ZstdDecompressor()
        self.columns = [wl.pos[k].reshape(-1) for k in range(3)]
        self.blobs: list[list[bytes]] = []

    def encode_chunk(self, a: np.ndarray) -> bytes:
        r = np.rint(a / self.q)
        r *= self.q
        z = self.cctx.compress(self.shuffle.encode(r))
        return z + _crc.crc32c(z).to_bytes(4, "little")

    def decode_chunk(self, blob: bytes) -> np.ndarray:
        body = memoryview(blob)[:-4]
        if _crc.crc32c(body) != int.from_bytes(blob[-4:], "little"):
            raise ValueError("crc")
        return np.frombuffer(self.shuffle.decode(self.dctx.decompress(body)), dtype="<f8")

    def write(self) -> float:
        t0 = time.perf_counter()
        self.blobs = [[self.encode_chunk(col[i:i + self.rpc]) for i in range(0, len(col), self.rpc)]
                      for col in self.columns]
        return time.perf_counter() - t0

    def read(self) -> float:
        t0 = time.perf_counter()
        for blobs in self.blobs:
            for b in blobs:
                self.decode_chunk(b)
        return time.perf_counter() - t0

    def frame_latency(self, f: int) -> float:
        """Decoding the inner chunk holding frame f, in each of the three columns."""
        c = f * self.wl.atoms // self.rpc
        t0 = time.perf_counter()
        for blobs in self.blobs:
            self.decode_chunk(blobs[c])
        return time.perf_counter() - t0


# -- floors ---------------------------------------------------------------------------------------

def frame_floor(path: Path, idx, atoms: int) -> list[float]:
    """Latencies of the least work any reader of this store does for one frame, with no Python of a
    reader around it: per column, one ``pread`` of the inner chunk holding the frame (from a file
    kept open, the offsets looked up beforehand), its crc32c, one zstd decompress, and the byte
    unshuffle of the frame's rows only.  What ``r[i]`` is measured against when it cannot reach
    XTC: the chapter's chunking decides this floor."""
    store = DirectoryStore(str(path))
    cols = []                       # per column: (rows a chunk, rows a shard, {shard: (fd, offsets, sizes)})
    for c in COLS:
        a = Array.open(store, f"trajectory/atoms/{c}", appended=True)
        rpc, per_shard = a.sharding.chunk_shape[0], a.meta.chunk_shape[0]
        shards = {}
        for s in range(-(-a.shape[0] // per_shard)):
            key = a.chunk_key((s,))
            index = a.shard_index(key)
            shards[s] = (os.open(store.path(key), os.O_RDONLY), index.offsets.reshape(-1).tolist(),
                         index.nbytes.reshape(-1).tolist())
        cols.append((rpc, per_shard, shards))
    dctx = zstandard.ZstdDecompressor()
    out = []
    try:
        for f in idx:
            row0 = int(f) * atoms
            t0 = time.perf_counter()
            for rpc, per_shard, shards in cols:
                fd, offs, sizes = shards[row0 // per_shard]
                c = row0 % per_shard // rpc
                blob = os.pread(fd, sizes[c], offs[c])
                body = memoryview(blob)[:-4]
                if _crc.crc32c(body) != int.from_bytes(blob[-4:], "little"):
                    raise ValueError("crc")
                # the frame's bytes of each byte plane, one strided view copied once (numpy's
                # cheapest form of the partial unshuffle)
                np.ndarray((atoms, 8), np.uint8, dctx.decompress(body), row0 % rpc, (1, rpc)).copy().view("<f8")
            out.append(time.perf_counter() - t0)
    finally:
        for _rpc, _ps, shards in cols:
            for fd, *_rest in shards.values():
                os.close(fd)
    return out


class timed_io:
    """The wall time spent in the POSIX file-system layer (:mod:`mrec.fs.posix`: every ``pwrite``,
    atomic replace, directory and lock operation of the store) while the block runs, in ``self.s``."""

    METHODS = ("read", "read_range", "write_at", "replace", "rename", "create_exclusive", "lock", "fsync",
               "fsync_dir", "truncate", "size", "exists", "is_dir", "is_link", "list_dir", "remove", "rmdir",
               "makedirs")

    def __init__(self):
        self.s = 0.0
        self.saved: dict = {}

    def __enter__(self):
        from mrec.fs.posix import PosixFileSystem
        for name in self.METHODS:
            fn = self.saved[name] = getattr(PosixFileSystem, name)

            def timed(*a, _fn=fn, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    self.s += time.perf_counter() - t0
            setattr(PosixFileSystem, name, timed)
        return self

    def __exit__(self, *exc):
        from mrec.fs.posix import PosixFileSystem
        for name, fn in self.saved.items():
            setattr(PosixFileSystem, name, fn)
