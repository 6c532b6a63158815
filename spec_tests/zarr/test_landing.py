"""Sharded append lands O(chunk + index) bytes per landing, chunk bytes before the index."""
from __future__ import annotations

import numpy as np
import pytest
import zarr

from mrec.fs import RecordingFileSystem
from mrec.record import extents as X
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array, write_group
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.stores.directory import DirectoryStore

INNER = 256
CHUNKS = 256


def _array(store, path="x", index_location="start", bb=()):
    inner = X.inner_pipeline("f64", list(bb))
    codecs = X.sharded((INNER,), inner, index_location)
    meta = ArrayMetadata.create((0,), DATA_TYPES["float64"], (INNER * CHUNKS,), codecs)
    return Array.create(store, path, meta)


def test_each_landing_writes_one_chunk_and_the_index(tmp_path):
    fs = RecordingFileSystem()
    store = DirectoryStore(tmp_path / "s.mrec", fs=fs)
    write_group(store, "")
    arr = _array(store)
    ap = ShardedAppender(arr)
    sh = arr.sharding
    index_size = sh.index_size((CHUNKS,))
    assert index_size == CHUNKS * 16 + 4
    rng = np.random.default_rng(0)
    data = []
    for k in range(CHUNKS):
        rows = rng.normal(size=INNER)
        data.append(rows)
        fs.clear()
        ap.append(rows)
        ap.land()
        writes = [op for op in fs.ops if op.kind == "write_at"]
        assert len(writes) == 2, writes
        chunk, index = writes
        assert chunk.length == INNER * 8 + 4            # uncompressed f64 + crc32c
        assert chunk.offset == index_size + k * (INNER * 8 + 4)   # at the shard's tail
        assert (index.offset, index.length) == (0, index_size)     # index rewritten in place, after the chunk
        assert sum(op.length for op in writes) == INNER * 8 + 4 + index_size
        assert not any(op.kind in ("replace", "truncate") for op in fs.ops)
    arr.write_metadata()
    expect = np.concatenate(data)
    assert np.array_equal(Array.open(DirectoryStore(tmp_path / "s.mrec"), "x").read(), expect)
    z = zarr.open_array(str(tmp_path / "s.mrec" / "x"), mode="r")
    assert z[:].tobytes() == expect.tobytes()


def test_partial_tail_is_reencoded_and_reopen_shrinks(tmp_path):
    store = DirectoryStore(tmp_path / "s.mrec")
    write_group(store, "")
    arr = _array(store, bb=[X.GzipCodec(1)] if hasattr(X, "GzipCodec") else [])
    ap = ShardedAppender(arr)
    a = np.arange(100, dtype=np.float64)
    ap.append(a)
    ap.land()
    arr.write_metadata()
    b = np.arange(100, 300, dtype=np.float64)
    ap.append(b)
    ap.land()
    arr.write_metadata()
    assert np.array_equal(Array.open(store, "x").read(), np.concatenate([a, b]))
    # an uncommitted tail: reopen at 150 rows and continue
    arr2 = Array.open(store, "x")
    arr2.set_shape((150,))
    ap2 = ShardedAppender(arr2, rows=150)
    c = -np.arange(50, dtype=np.float64)
    ap2.append(c)
    ap2.land()
    arr2.write_metadata()
    want = np.concatenate([a, b])[:150]
    want = np.concatenate([want, c])
    assert np.array_equal(Array.open(store, "x").read(), want)
    assert np.array_equal(zarr.open_array(str(tmp_path / "s.mrec" / "x"), mode="r")[:], want)


def test_torn_index_is_read_through_verified_chunks(tmp_path):
    """A crash can interrupt the in-place index rewrite at a page boundary: entries are old or
    new, the index checksum fails. Reads stay correct because every inner chunk verifies its own
    crc32c; a wrong entry raises a CorruptionError naming the shard, never wrong data."""
    from mrec.errors import CorruptionError
    root = tmp_path / "s.mrec"
    store = DirectoryStore(root)
    write_group(store, "")
    arr = _array(store)
    ap = ShardedAppender(arr)
    data = np.arange(3 * INNER, dtype=np.float64)
    ap.append(data)
    ap.land()
    arr.write_metadata()
    shard = root / "x" / "c" / "0"
    isize = arr.sharding.index_size((CHUNKS,))
    raw = bytearray(shard.read_bytes())
    raw[isize - 1] ^= 0xFF                         # the index's own crc32c no longer matches
    shard.write_bytes(bytes(raw))
    a2 = Array.open(DirectoryStore(root), "x", appended=True)
    assert np.array_equal(a2.read(), data)
    assert a2.unverified_indexes == {"x/c/0"}
    raw[16] ^= 0x01                               # now a wrong entry: chunk 1 offset moves by one
    shard.write_bytes(bytes(raw))
    a3 = Array.open(DirectoryStore(root), "x", appended=True)    # rebuilt from the chunks that verify (mrec.zarr.shardscan)
    assert np.array_equal(a3.read(), data)
    assert a3.unverified_indexes == {"x/c/0"}
    chunk1 = isize + (INNER * 8 + 4)
    raw[chunk1 + 3] ^= 0x10                       # and chunk 1's own bytes: nothing verifies for it
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError) as e:
        Array.open(DirectoryStore(root), "x", appended=True).read()
    assert "x/c/0" in str(e.value)


def test_parallel_encode_writes_the_same_bytes_as_serial(tmp_path, monkeypatch):
    """Inner chunks of one landing are encoded on a thread pool; the store is byte-identical."""
    import mrec
    from mrec.zarr import parallel

    def write(path):
        s = mrec.SequenceSchema()
        s.declare_block("atoms", rows=3000)
        for c in "xyz":
            s.declare_column("atoms", c, "f64", precision=1e-3)
        rng = np.random.default_rng(5)
        with mrec.TrajectoryWriter.create(path, s, flush_every=20) as w:
            for _ in range(45):
                w.append({"atoms": {c: rng.uniform(0, 40, 3000) for c in "xyz"}})
        return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}

    calls = []
    real = parallel._executor
    monkeypatch.setattr(parallel, "_executor", lambda: calls.append(1) or real())
    monkeypatch.setenv("MREC_THREADS", "2")
    threaded = write(tmp_path / "t.mrec")
    assert calls, "the pool was not used"
    monkeypatch.setenv("MREC_THREADS", "1")
    assert write(tmp_path / "s.mrec") == threaded
