"""The frame case of the read path: rows inside one inner chunk of a frame-aligned column.

A random frame of a trajectory column is the commonest read and the one whose bookkeeping shows,
so this case of the plan (:func:`~mrec.zarr.read.plan.locate`) is read with as little as it
needs.  :func:`read_frame` takes, in turn:

* the lean path (written out in :func:`read_frame`), in the plain case only: the shard index
  cached and read as written (not rebuilt, its entries kept as lists per shard), the chunk not the
  next of a forward walk; its bytes read whole through the shard's
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


class Setup:
    """The frame path's facts of one array, made once per metadata (:func:`setup`): the metadata,
    its frame geometry (``plan.frame_geometry``; its rows an inner chunk and cell tail split out),
    the rows it holds, the in-place decoder (None: no lean path), the part decoder, the inner
    chunk's shape and dtype, and per shard the lean path's entry (:func:`_entry`)."""

    __slots__ = ("meta", "geo", "irows", "tail", "rows", "into", "part", "chunk_shape", "dtype", "shards")

    def __init__(self, array, m, geo):
        self.meta, self.geo = m, geo
        self.irows, self.tail = (geo[1], geo[2]) if geo is not None else (0, ())
        self.rows = m.shape[0] if m.shape else 0
        self.into = array.decoders.into() if geo is not None else None
        self.part = array.decoders.part() if self.into is not None else None
        self.chunk_shape = array.sharding.chunk_shape if self.into is not None else None
        self.dtype = m.data_type.numpy
        self.shards: dict[int, tuple] = {}


def setup(array) -> Setup:
    """The array's :class:`Setup`, made once per metadata."""
    m = array.meta
    got = array.cache.frame
    if got is None or got.meta is not m:
        got = array.cache.frame = Setup(array, m, geometry(array))
    return got


def read_frame(array, start: int, stop: int, *, lean: bool = True) -> np.ndarray | None:
    """Rows [start, stop) (0 <= start < stop <= len) when one inner chunk of a frame-aligned column
    holds them, fetched and decoded alone (``lean``: the lean path first); None otherwise.

    The lean path is written out here, in one function: a random small frame of a trajectory is the
    commonest read, and its Python (not its decode) is what shows."""
    cache = array.cache
    s = cache.frame
    if s is None or s.meta is not array.meta:
        s = setup(array)
    if s.geo is None:
        return None                         # not a frame-aligned column
    spot = plan.locate(s.geo, start, stop)
    if spot is None:
        return None                         # more than one inner chunk
    if not lean or s.into is None or start < 0 or stop > s.rows:
        return _one_chunk(array, s.geo, spot, start, stop)
    c0, i0, a, whole = spot
    k = stop - start
    # -- the lean path: the shard's entry (its index cached and read as written) --------------------
    got = s.shards.get(c0)
    indexes = array.indexes
    if got is None or indexes.cache.get(got[0]) is not got[1] or got[0] in indexes.unverified:
        # first read of the shard, or its index dropped or rebuilt since
        got = _entry(array, s, c0)
        if got is None:
            return _one_chunk(array, s.geo, spot, start, stop)
    key, _index, offs, sizes, reader = got
    off, n = offs[i0], sizes[i0]
    if off == _EMPTY:
        return _one_chunk(array, s.geo, spot, start, stop)
    ck = (key, (i0, *s.tail), off, n)
    if not whole:
        cached = cache.chunk
        if cached is not None and cached[0] == ck and cached[2] >= a + k:
            return cached[1][a:a + k].copy()
        inflated = cache.inflated
        if inflated is not None and inflated[0] == ck:
            return _from_inflated(cache, ck, a, k, s)
    last = cache.last_read
    if last is not None and last[0] == key and last[1] == i0 - 1:
        # a forward walk: read ahead by the general path
        return _one_chunk(array, s.geo, spot, start, stop)
    # the entry lies inside the file (the index's entries were bounded when it was read)
    raw = reader(off, n)
    if raw is not None and len(raw) == n:
        part = s.part
        if whole or part is None:
            got = _decoded(cache, s, ck, raw, a, k, whole)
            if got is not None:
                return got
        else:
            # part of a chunk (a small frame): inflated, and only its rows unshuffled; the inflated
            # bytes are kept for a neighbour (every row verified, as below)
            try:
                data = part[0](raw)
                got = part[1](data, a, a + k) if data is not None else None
            except Exception:               # noqa: BLE001 - the general path decodes and reports
                got = None
            if got is not None:
                cache.last_read = (key, i0)
                cache.inflated = (ck, data)
                return got
    return _one_chunk(array, s.geo, spot, start, stop)


def _entry(array, s: Setup, c0: int) -> tuple | None:
    """The lean path's facts of shard ``c0``, kept in ``s`` until its index is dropped or rebuilt:
    (shard key, its cached index, the index's offsets and sizes as lists, the kept descriptor's
    reader); None when the index is not cached or not read as written (the general path then).
    Cached indexes are never changed in place (an appender caches a copy), so the lists stay true
    while the index object is the cached one."""
    s.shards.pop(c0, None)
    key = array.chunk_key((c0, *s.tail))
    indexes = array.indexes
    index = indexes.cache.get(key)
    if index is None or not indexes.as_written(key, index):
        return None
    got = s.shards[c0] = (key, index, index.offsets.reshape(-1).tolist(), index.nbytes.reshape(-1).tolist(),
                          fetch.range_reader(array.store, key))
    return got


def _decoded(cache, s: Setup, ck: tuple, raw, a: int, k: int, whole: bool) -> np.ndarray | None:
    """Rows ``a:a + k`` of chunk ``ck`` decoded whole from its bytes ``raw`` by the fused in-place
    decoder (None: it declined, the general path decodes and reports); part of a chunk is kept
    for its neighbours (every row verified: an index read as written trusts all of them)."""
    chunk = np.empty(s.chunk_shape, dtype=s.dtype)
    try:
        if not s.into(raw, chunk):
            return None
    except Exception:                       # noqa: BLE001 - the general path decodes and reports
        return None
    cache.last_read = (ck[0], ck[1][0])
    if whole:
        return chunk
    cache.chunk = (ck, chunk, s.irows, True)
    return chunk[a:a + k].copy()


def _from_inflated(cache, ck: tuple, a: int, k: int, s: Setup) -> np.ndarray:
    """Rows ``a:a + k`` of chunk ``ck`` whose inflated bytes the cache keeps: the second frame of a
    chunk, unshuffled whole now and cached for the rest."""
    chunk = np.empty(s.chunk_shape, dtype=s.dtype)
    s.part[2](cache.inflated[1], chunk)
    cache.inflated = None
    cache.chunk = (ck, chunk, s.irows, True)
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
