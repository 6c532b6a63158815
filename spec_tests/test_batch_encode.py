"""Issue 16, the writer on both cores: the batch encoder (``mrec.zarr.pipeline.batch_encoder``).

A landing's inner chunks are shuffled by one numpy copy per run, compressed by one
``multi_compress_to_buffer`` call per thread and checksummed; the bytes must be exactly those of
``CodecPipeline.encode`` chunk by chunk (zstd frames of ``ZstdCompressor.compress``, content size
included), for every plain pipeline, dtype, chunk shape, chunk count, cut into runs and threads; a
landing through it writes the store the per-chunk path writes, byte for byte.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mrec.zarr.array import Array, ShardedAppender
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.pipeline import CodecPipeline, batch_encoder
from mrec.zarr.store import DirectoryStore

from test_encode_ahead import _tree  # noqa: E402  (spec_tests is on sys.path)
from test_parallel_read import VARIANTS, _sharded  # noqa: E402

DTYPES = {"float64": "<f8", "int32": "<i4", "uint8": "u1", "complex128": "<c16", "int16": "<i2", "uint64": "<u8"}


def _pipeline(endian, shuffle, level, checksum):
    codecs = [{"name": "bytes", "configuration": {"endian": endian}}]
    if shuffle is not None:
        codecs.append({"name": "numcodecs.shuffle", "configuration": {"elementsize": shuffle}})
    codecs += [{"name": "zstd", "configuration": {"level": level, "checksum": checksum}}, {"name": "crc32c"}]
    return CodecPipeline.from_json(codecs, "x")


def _values(rng, dtype, shape):
    dt = np.dtype(DTYPES[dtype])
    if dt.kind == "f":
        return np.round(np.cumsum(rng.normal(size=shape), axis=0), 3).astype(dt)
    if dt.kind == "c":
        return (np.round(rng.normal(size=shape), 2) + 1j * np.round(rng.normal(size=shape), 2)).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, endpoint=True).astype(dt)


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(sorted(DTYPES)), endian=st.sampled_from(["little", "big"]),
       shuffle=st.sampled_from([None, 1, 2, 4, 8, 16]), level=st.sampled_from([-7, 1, 3, 9, 19]),
       checksum=st.booleans(), rows=st.integers(1, 300), trailing=st.sampled_from([(), (3,), (2, 5)]),
       count=st.integers(1, 24), threads=st.integers(1, 3), data=st.data())
def test_batch_encode_is_the_pipeline_encode_chunk_by_chunk(dtype, endian, shuffle, level, checksum, rows, trailing,
                                                            count, threads, data):
    p = _pipeline(endian, shuffle, level, checksum)
    spec = ChunkSpec((rows, *trailing), DATA_TYPES[dtype], 0, "x")
    enc = batch_encoder(p, spec)
    nbytes = np.dtype(DTYPES[dtype]).itemsize * rows * int(np.prod(trailing, dtype=int))
    if shuffle is not None and nbytes % shuffle:
        assert enc is None                 # partial shuffle elements: the per-chunk path's
        return
    assert enc is not None
    vals = _values(np.random.default_rng(rows * count), dtype, (count * rows, *trailing))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, count - 1), max_size=4)) if count > 1 else []))
    bounds = [0, *cuts, count]
    runs = [vals[a * rows:b * rows].reshape(b - a, rows, *trailing) for a, b in zip(bounds, bounds[1:])]
    sizes, pieces = enc(runs, threads)
    want = [p.encode(vals[i * rows:(i + 1) * rows], spec) for i in range(count)]
    assert sizes == [len(w) for w in want]
    assert b"".join(pieces) == b"".join(want)


@pytest.mark.parametrize("codecs", ["gzip+shuffle", "crc only"])
def test_batch_encoder_declines_other_pipelines(codecs):
    p = CodecPipeline.from_json(VARIANTS[codecs], "x")
    assert batch_encoder(p, ChunkSpec((4,), DATA_TYPES["float64"], 0, "x")) is None


def _land_all(path, batches, lands, inner, per_shard, codecs, reopen_at=None):
    store = DirectoryStore(str(path))
    trailing = batches[0].shape[1:]
    arr = Array.create(store, "x", ArrayMetadata.create((0, *trailing), DATA_TYPES["float64"],
                                                        (inner * per_shard, *trailing), _sharded(inner, trailing, codecs)))
    ap = ShardedAppender(arr, ahead=True)
    for k, b in enumerate(batches):
        ap.append(b)
        if k in lands:
            ap.land()
            arr.write_metadata()
        if reopen_at == k:
            ap.land()
            arr.write_metadata()
            arr = Array.open(store, "x")
            ap = ShardedAppender(arr, ahead=True)
    ap.land()
    arr.write_metadata()
    return arr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inner=st.integers(1, 7), per_shard=st.integers(1, 12), sizes=st.lists(st.integers(0, 40), min_size=1, max_size=20),
       width=st.sampled_from([(), (3,)]), data=st.data(), threads=st.sampled_from(["1", "2", "3"]),
       codecs=st.sampled_from(["shuffle", "zstd", "big endian"]))
def test_landing_through_the_batch_encoder_writes_the_per_chunk_store(tmp_path_factory, monkeypatch, inner, per_shard,
                                                                     sizes, width, data, threads, codecs):
    rng = np.random.default_rng(len(sizes))
    batches = [np.round(rng.normal(size=(n, *width)), 3) for n in sizes]
    lands = set(data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=6)))
    reopen = data.draw(st.one_of(st.none(), st.integers(0, len(sizes) - 1)))
    a, b = tmp_path_factory.mktemp("per-chunk"), tmp_path_factory.mktemp("batch")
    monkeypatch.setenv("MREC_THREADS", "1")
    monkeypatch.setattr(ShardedAppender, "BATCH_MIN", 10**9)          # never: the per-chunk encoder
    _land_all(a, batches, lands, inner, per_shard, VARIANTS[codecs], reopen)
    monkeypatch.setenv("MREC_THREADS", threads)
    monkeypatch.setattr(ShardedAppender, "BATCH_MIN", 1)              # every landing of a shard
    monkeypatch.setattr("mrec.zarr.parallel.MIN_PARALLEL_BYTES", 0)  # on several threads when asked
    used = []
    real = ShardedAppender._batch_encoder
    monkeypatch.setattr(ShardedAppender, "_batch_encoder", lambda self, where: used.append(1) or real(self, where))
    arr = _land_all(b, batches, lands, inner, per_shard, VARIANTS[codecs], reopen)
    assert _tree(a) == _tree(b)
    assert used or not sum(sizes)
    want = np.concatenate(batches) if sum(sizes) else np.zeros((0, *width))
    assert arr.read().tobytes() == want.tobytes()


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=8), k=st.integers(1, 5), data=st.data())
def test_row_pieces_read_as_their_concatenation(sizes, k, data):
    from mrec.zarr.array import _Rows
    parts = [np.arange(sum(sizes[:i]), sum(sizes[:i + 1]), dtype=float).reshape(-1, 1) * [1, 2] for i in range(len(sizes))]
    whole = np.concatenate(parts)
    rows = _Rows(parts)
    assert len(rows) == len(whole)
    lo = data.draw(st.integers(0, len(whole)))
    hi = data.draw(st.integers(lo, len(whole)))
    assert rows.get(lo, hi).tobytes() == whole[lo:hi].tobytes()
    hi = lo + (hi - lo) // k * k
    runs = rows.runs(lo, hi, k)
    assert all(len(r) % k == 0 and len(r) for r in runs)
    got = np.concatenate(runs) if runs else whole[:0]
    assert got.tobytes() == whole[lo:hi].tobytes()
