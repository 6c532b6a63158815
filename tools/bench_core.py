"""Core benchmark: append 256 inner chunks, one landing at a time, into one shard.

The job: an f64 column, ``--rows`` rows per inner chunk (default 2048), one shard of 256 inner
chunks with the index at the start, codecs ``bytes`` + ``zstd 3`` + ``crc32c``; each landing adds
one inner chunk of new rows and publishes the array's new shape.

* mrec: ``ShardedAppender.land()`` (the chunk at the shard's tail, then the index in place) and
  ``Array.write_metadata()``.  Bytes are every byte mrec's I/O layer wrote, measured with
  ``RecordingFileSystem`` (write_at + replace).
* zarr-python: ``resize`` + ``z[n:n+rows] = rows`` into a sharded array with the same codecs and
  index location.  Bytes are every byte zarr-python handed its store (a ``LocalStore`` subclass
  that counts ``set``), which is the whole re-encoded shard plus ``zarr.json`` each landing.

Prints bytes written (and read) and milliseconds per landing at landings 1, 64, 128, 256 for
both, in the same run, with the ratios.

    .venv/bin/python tools/bench_core.py [--rows 2048] [--landings 256]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mrec.fs import RecordingFileSystem  # noqa: E402
from mrec.zarr.append import ShardedAppender  # noqa: E402
from mrec.zarr.array import Array  # noqa: E402
from mrec.zarr.dtypes import DATA_TYPES  # noqa: E402
from mrec.zarr.metadata import ArrayMetadata  # noqa: E402
from mrec.zarr.pipeline import CodecPipeline  # noqa: E402
from mrec.zarr.stores.directory import DirectoryStore  # noqa: E402

MARKS = (1, 64, 128, 256)
INNER = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
         {"name": "crc32c"}]


def bench_mrec(root: str, rows: int, chunks):
    fs = RecordingFileSystem(record_reads=True)
    store = DirectoryStore(root, fs=fs)
    codecs = CodecPipeline.from_json([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [rows], "codecs": INNER,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "start"}}], "x")
    arr = Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (rows * len(chunks),), codecs))
    ap = ShardedAppender(arr)
    index_size = arr.sharding.index_size((len(chunks),))
    out = {}
    for k, c in enumerate(chunks, 1):
        fs.clear()
        t0 = time.perf_counter()
        ap.append(c)
        ap.land()
        arr.write_metadata()
        dt = time.perf_counter() - t0
        data = [op for op in fs.ops if op.kind == "write_at"]
        assert len(data) == 2 and data[1].offset == 0 and data[1].length == index_size   # chunk, then index
        read = sum(op.length or 0 for op in fs.ops if op.kind in ("read", "read_range"))
        out[k] = (fs.bytes_written(), read, dt, data[0].length)
    return out, index_size


def bench_zarr(root: str, rows: int, chunks):
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
    from zarr.storage import LocalStore

    class CountingStore(LocalStore):
        written = 0
        read = 0

        async def set(self, key, value):
            CountingStore.written += len(value)
            await super().set(key, value)

        async def get(self, key, prototype, byte_range=None):
            buf = await super().get(key, prototype, byte_range)
            if buf is not None:
                CountingStore.read += len(buf)
            return buf

    store = CountingStore(root)
    z = zarr.create_array(store=store, name="x", shape=(0,), dtype="float64", chunks=(rows,),
                          shards={"shape": (rows * len(chunks),), "index_location": "start"},
                          serializer=BytesCodec(endian="little"),
                          compressors=[ZstdCodec(level=3, checksum=False), Crc32cCodec()], fill_value=0.0)
    out = {}
    n = 0
    for k, c in enumerate(chunks, 1):
        CountingStore.written = CountingStore.read = 0
        t0 = time.perf_counter()
        z.resize((n + len(c),))
        z[n:n + len(c)] = c
        dt = time.perf_counter() - t0
        n += len(c)
        out[k] = (CountingStore.written, CountingStore.read, dt)
    assert np.array_equal(z[...], np.concatenate(chunks))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2048, help="f64 rows per inner chunk")
    ap.add_argument("--landings", type=int, default=256, help="inner chunks per shard = landings")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    # a smooth signal rounded to 1e-3: compressible like a precision column, never all fill
    chunks = [np.round(np.cumsum(rng.normal(size=args.rows)) * 0.01, 3) for _ in range(args.landings)]
    work = tempfile.mkdtemp(prefix="mrec-bench-core-")
    t_all = time.perf_counter()
    try:
        m, index_size = bench_mrec(os.path.join(work, "m"), args.rows, chunks)
        z = bench_zarr(os.path.join(work, "z"), args.rows, chunks)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    marks = [k for k in MARKS if k <= args.landings]
    print(f"append {args.landings} inner chunks of {args.rows} f64 rows, one landing each, into one shard "
          f"(index at start, {index_size} B; bytes + zstd 3 + crc32c)")
    print("bytes = all bytes written in the landing (data + index + zarr.json); read = bytes read back")
    print(f"{'landing':>7} | {'mrec B':>8} {'chunk B':>8} {'read B':>6} {'ms':>6} | "
          f"{'zarr B':>9} {'read B':>9} {'ms':>7} | {'bytes x':>7} {'time x':>6}")
    for k in marks:
        mb, mr, mt, mc = m[k]
        zb, zr, zt = z[k]
        print(f"{k:>7} | {mb:>8} {mc:>8} {mr:>6} {mt * 1e3:6.2f} | {zb:>9} {zr:>9} {zt * 1e3:7.2f} | "
              f"{zb / mb:7.1f} {zt / mt:6.1f}")
    mb_all = sum(v[0] for v in m.values())
    zb_all = sum(v[0] for v in z.values())
    mt_all = sum(v[2] for v in m.values())
    zt_all = sum(v[2] for v in z.values())
    print(f"all {args.landings} landings: mrec {mb_all / 2**20:.2f} MiB in {mt_all:.2f} s, "
          f"zarr-python {zb_all / 2**20:.2f} MiB in {zt_all:.2f} s "
          f"(bytes x{zb_all / mb_all:.1f}, time x{zt_all / mt_all:.1f}); run {time.perf_counter() - t_all:.1f} s")


if __name__ == "__main__":
    main()
