"""Core benchmark: append 256 inner chunks, one landing at a time, into one shard.

mrec lands each chunk at the shard's tail and rewrites the index in place; zarr-python does the
same job by resize + write of the new rows (it re-encodes and rewrites the whole shard). Prints
bytes written and seconds per landing at landings 1, 64, 128, 256 for both, side by side, and the
ratio.

    .venv/bin/python tools/bench_core.py [--rows 1024]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings

import numpy as np

from mrec.fs import RecordingFileSystem
from mrec.record import extents as X
from mrec.zarr.array import Array, ShardedAppender, write_group
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.store import DirectoryStore

LANDINGS = 256
MARKS = (1, 64, 128, 256)


def bench_mrec(root: str, rows: int, chunks):
    fs = RecordingFileSystem()
    store = DirectoryStore(root, fs=fs)
    write_group(store, "")
    codecs = X.sharded((rows,), X.inner_pipeline("f64", [X.ZstdCodec(3, False)]), "start")
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (rows * LANDINGS,), codecs))
    ap = ShardedAppender(arr)
    out = {}
    for k, c in enumerate(chunks, 1):
        fs.clear()
        t0 = time.perf_counter()
        ap.append(c)
        ap.land()
        arr.write_metadata()
        dt = time.perf_counter() - t0
        out[k] = (fs.bytes_written(), dt)
    return out


def bench_zarr(root: str, rows: int, chunks):
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
    z = zarr.create_array(store=os.path.join(root, "x"), shape=(0,), dtype="float64", chunks=(rows,),
                          shards=(rows * LANDINGS,), serializer=BytesCodec(endian="little"),
                          compressors=[ZstdCodec(level=3, checksum=False), Crc32cCodec()], fill_value=0.0)
    shard = os.path.join(root, "x", "c", "0")
    out = {}
    n = 0
    for k, c in enumerate(chunks, 1):
        t0 = time.perf_counter()
        z.resize((n + len(c),))
        z[n:n + len(c)] = c
        dt = time.perf_counter() - t0
        n += len(c)
        # zarr-python re-encodes and rewrites the whole shard on each partial write
        out[k] = (os.path.getsize(shard) + os.path.getsize(os.path.join(root, "x", "zarr.json")), dt)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1024, help="rows per inner chunk (f64)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    chunks = [rng.normal(size=args.rows) for _ in range(LANDINGS)]
    work = tempfile.mkdtemp(prefix="mrec-bench-core-")
    try:
        m = bench_mrec(os.path.join(work, "m"), args.rows, chunks)
        z = bench_zarr(os.path.join(work, "z"), args.rows, chunks)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"append {LANDINGS} chunks of {args.rows} f64 rows (zstd 3 + crc32c) into one shard, one landing each")
    print(f"{'landing':>8} {'mrec bytes':>11} {'mrec ms':>8} {'zarr bytes':>11} {'zarr ms':>8} {'bytes x':>8} {'time x':>7}")
    for k in MARKS:
        (mb, mt), (zb, zt) = m[k], z[k]
        print(f"{k:>8} {mb:>11} {mt * 1e3:8.2f} {zb:>11} {zt * 1e3:8.2f} {zb / mb:8.1f} {zt / mt:7.1f}")
    mt_all = sum(t for _, t in m.values())
    zt_all = sum(t for _, t in z.values())
    print(f"total    mrec {mt_all:.2f} s, zarr-python {zt_all:.2f} s, ratio {zt_all / mt_all:.1f}")


if __name__ == "__main__":
    main()
