"""The frame case of the read path: rows inside one inner chunk of a frame-aligned column.

A random frame of a trajectory column is the commonest read and the one whose bookkeeping shows,
so this case of the plan (:func:`~mrec.zarr.read.plan.locate`) is read with as little as it
needs.  :func:`read_frame` takes, in turn:

* the lean path (:func:`_lean`), in the plain case only: the shard index cached and read as written
  (not rebuilt), the chunk not the next of a forward walk; its bytes read whole through the shard's
  kept descriptor and decoded in place by the fused decoder.  A whole chunk is returned as decoded
  (not cached: the next frame is the next chunk).  Part of one is inflated and only its rows
  unshuffled (the part decoder), the inflated bytes kept; the next part read of the same chunk
  unshuffles it whole from them and caches it for its other neighbours (every row verified: an
  index read as written trusts all of them).  The bytes and checks of the general case;
* the general one-chunk case (:func:`_one_chunk`): the index fetched if need be, a forward walk
  read ahead (``fetch.ahead``), the chunk decoded and verified by ``decode.inner_chunk``.

None from both: anything unusual (absent shard, empty entry, another dtype) takes the general plan.
"""
from __future__ import annotations

import numpy as np

from ..codecs.sharding import EMPTY
from . import decode, fetch, plan

_EMPTY = int(EMPTY)


def geometry(array):
    """``plan.frame_geometry`` of the array's metadata, kept per metadata."""
    m = array.meta
    g = array.cache.geo
    if g is not None and g[0] is m:
        return g[1]
    geo = plan.frame_geometry(m)
    array.cache.geo = (m, geo)
    return geo


def setup(array) -> tuple:
    """(metadata, geometry, in-place decoder, per-shard lookups, chunk shape, dtype, part decoder)
    of the frame path, made once per metadata (the in-place decoder None: no lean path)."""
    m = array.meta
    got = array.cache.frame
    if got is None or got[0] is not m:
        geo = geometry(array)
        into = array.decoders.into() if geo is not None else None
        got = array.cache.frame = (m, geo, into, {}, array.sharding.chunk_shape if into else None,
                                   m.data_type.numpy, array.decoders.part() if into else None)
    return got


def read_frame(array, start: int, stop: int, *, lean: bool = True) -> np.ndarray | None:
    """Rows [start, stop) (0 <= start < stop <= len) when one inner chunk of a frame-aligned column
    holds them, fetched and decoded alone (``lean``: the lean path first); None otherwise."""
    s = array.cache.frame
    if s is None or s[0] is not array.meta:
        s = setup(array)
    geo = s[1]
    if geo is None:
        return None
    spot = plan.locate(geo, start, stop)
    if spot is None:
        return None
    if lean and s[2] is not None:
        got = _lean(array, s, spot, start, stop)
        if got is not None:
            return got
    return _one_chunk(array, geo, spot, start, stop)


def _lean(array, s: tuple, spot: tuple, start: int, stop: int) -> np.ndarray | None:
    """The lean path (see the module's docstring), or None."""
    m, geo, into, keys, chunk_shape, np_dtype, part_dec = s
    if start < 0 or stop > m.shape[0]:
        return None
    c0, i0, a, whole = spot
    tail = geo[2]
    indexes = array.indexes
    got = keys.get(c0)
    if got is None:
        key = array.chunk_key((c0, *tail))
        index = indexes.cache.get(key)
        if index is None:
            return None
        got = keys[c0] = (key, index, fetch.range_reader(array.store, key), indexes.as_written(key, index))
    key, index, reader, written = got
    if indexes.cache.get(key) is not index or not written or key in indexes.unverified:
        keys.pop(c0, None)                   # the index was dropped or rebuilt since
        return None
    coord = (i0, *tail)
    off, n = index.offsets.item(coord), index.nbytes.item(coord)
    if off == _EMPTY:
        return None
    cache = array.cache
    ck = (key, coord, off, n)
    if not whole:
        cached = cache.chunk
        if cached is not None and cached[0] == ck and cached[2] >= a + stop - start:
            return cached[1][a:a + stop - start].copy()
        inflated = cache.inflated
        if inflated is not None and inflated[0] == ck:
            return _from_inflated(cache, ck, a, stop - start, chunk_shape, np_dtype, part_dec, geo[1])
    last = cache.last_read
    if last is not None and last[0] == key and last[1] == i0 - 1:
        return None                         # a forward walk: read ahead by the general path
    # the entry lies inside the file (the index's entries were bounded when it was read)
    raw = reader(off, n)
    if raw is None or len(raw) != n:
        return None
    return _decode(cache, ck, raw, a, stop - start, whole, into, chunk_shape, np_dtype, part_dec, geo[1])


def _from_inflated(cache, ck: tuple, a: int, k: int, chunk_shape, np_dtype, part_dec, irows: int) -> np.ndarray:
    """Rows ``a:a + k`` of chunk ``ck`` whose inflated bytes the cache keeps: the second frame of a
    chunk, unshuffled whole now and cached for the rest."""
    chunk = np.empty(chunk_shape, dtype=np_dtype)
    part_dec[2](cache.inflated[1], chunk)
    cache.inflated = None
    cache.chunk = (ck, chunk, irows, True)
    return chunk[a:a + k].copy()


def _decode(cache, ck: tuple, raw, a: int, k: int, whole: bool, into, chunk_shape, np_dtype, part_dec,
            irows: int) -> np.ndarray | None:
    """Rows ``a:a + k`` of chunk ``ck`` decoded from its bytes ``raw`` by the fused decoders (None:
    they declined, the general path decodes and reports)."""
    key, i0 = ck[0], ck[1][0]
    if not whole and part_dec is not None:
        # part of a chunk (a small frame): inflated, and only its rows unshuffled; the inflated
        # bytes are kept for a neighbour (every row verified, as below)
        try:
            data = part_dec[0](raw)
            if data is None:
                return None
            out = np.empty((k, *chunk_shape[1:]), dtype=np_dtype)
            part_dec[1](data, a, a + k, out)
        except Exception:                   # noqa: BLE001 - the general path decodes and reports
            return None
        cache.last_read = (key, i0)
        cache.inflated = (ck, data)
        return out
    chunk = np.empty(chunk_shape, dtype=np_dtype)
    try:
        if not into(raw, chunk):
            return None
    except Exception:                       # noqa: BLE001 - the general path decodes and reports
        return None
    cache.last_read = (key, i0)
    if whole:
        return chunk
    cache.chunk = (ck, chunk, irows, True)
    return chunk[a:a + k].copy()


def _one_chunk(array, geo: tuple, spot: tuple, start: int, stop: int) -> np.ndarray | None:
    """Rows [start, stop) copied out of the one inner chunk holding them, or None (general path).

    The same chunk fetch, decode and verification as a shard's rows; only the loop and its
    bookkeeping are skipped.  Anything unusual (absent shard, empty entry) is None."""
    srows, irows, tail, _ = geo
    c0, i0, a, whole = spot
    lo0 = c0 * srows
    key = array.chunk_key((c0, *tail))
    index = array.indexes.cache.get(key)
    if index is None:
        index = array.indexes.get(key)
        if index is None:
            return None
    coord = (i0, *tail)
    span = (index.offsets.item(coord), index.nbytes.item(coord))
    if span[0] == _EMPTY and span[1] == _EMPTY:
        return None
    # a read of a whole inner chunk (a frame of a frame-aligned column) is not cached: the next
    # frame is the next chunk.  When its decode made a fresh writable array (shuffle does),
    # that array is the result and the copy is saved
    raw = False
    if whole:
        ck = array.cache.chunk
        if ck is None or ck[0][:2] != (key, coord):
            limit = min(len(index.offsets), -(-(array.meta.shape[0] - lo0) // irows))
            raw = fetch.ahead(array.cache, array.store, key, index, i0, span[0], span[1], limit)
    chunk = decode.inner_chunk(array, key, index, coord, a + stop - start, None, not whole, raw, None, span)
    if chunk.dtype != array.meta.data_type.numpy:
        return None
    if whole:
        cached = array.cache.chunk
        if chunk.flags.writeable and chunk.flags.c_contiguous \
                and (cached is None or cached[1] is not chunk):
            return chunk
        return chunk.copy()
    return chunk[a:a + stop - start].copy()
