"""Fetching: the I/O of reading -- store listings and sizes, whole chunks, byte ranges of shards.

Every byte a read takes from the store comes through here or through the shard-index source
(``index.py``): a chunk or inner chunk alone, runs of inner chunks lying back to back in one range
(:func:`prefetch`, :func:`run`, as the plan cut them), and a forward walk's read-ahead
(:func:`ahead`).  A store that keeps descriptors open (a reader's session) reads through them;
the bytes are exactly those one read per chunk returns (None for an absent file, short at a
truncated end), so the decode step checks them as ever.
"""
from __future__ import annotations

import math
from functools import partial

from ...errors import RefusalError
from .cache import ReadCache
from . import plan as planning
from .plan import ReadPlan, ahead_end, coalesce, expansion


def stored_chunks(array) -> list[tuple[int, ...]]:
    """Grid coordinates of the chunks (shards) ``array`` has in its store, sorted, from a listing
    of its keys: what the files hold, never what a (1 KB) ``zarr.json`` declares.  A key that
    names no cell of the grid is no chunk of this array and is skipped."""
    m = array.meta
    enc = m.chunk_key_encoding
    grid = m.chunk_grid_shape
    lead = f"{array.path}/" if array.path else ""
    out = []
    for key in array.store.list(array.path):
        rel = key[len(lead):]
        if rel == "zarr.json":
            continue
        parts = rel.split(enc.separator)
        if enc.name == "default":
            if parts[0] != "c":
                continue
            parts = parts[1:]
        if len(parts) != m.ndim or not all(p.isdigit() and p.isascii() and len(p) <= 20 for p in parts):
            continue
        coords = tuple(int(p) for p in parts)
        if all(c < g for c, g in zip(coords, grid)) and enc.key(coords) == rel:
            out.append(coords)
    return sorted(out)


def stored_for(array, plan: ReadPlan) -> list | None:
    """For a read of ``plan.nbytes`` over ``plan.ncells`` chunks: None when it is small (at most
    :data:`MAX_FILL_BYTES` over at most :data:`SPARSE_WALK` chunks: the grid is walked), else the
    stored chunks in range (one listing), after refusing (``too_large``) a read the stored chunks
    cannot back -- each decodes to at most its file's size times its codecs' expansion, the rest is
    fill, of which at most MAX_FILL_BYTES is made.  So a ``zarr.json`` declaring 2^31 rows over 40
    stored bytes allocates nothing and visits one chunk, not 2^31 / 5."""
    if not plan.sparse:
        return None
    nbytes = plan.nbytes
    stored = [c for c in stored_chunks(array) if plan.c_first <= c[0] < plan.c_stop]
    limit = planning.MAX_FILL_BYTES
    if nbytes > limit:
        m = array.meta
        chunk_bytes = math.prod(m.chunk_shape) * m.data_type.numpy.itemsize
        ratio = expansion(m.codecs)
        held = 0
        for c in stored:
            held += min(chunk_bytes, (array.store.size(array.chunk_key(c)) or 0) * ratio)
            if held + limit >= nbytes:
                break
        else:
            raise RefusalError(f"a read of {nbytes} bytes, of which the {len(stored)} chunks the store holds "
                               f"for it can decode to at most {held}: the rest would be the fill value of "
                               f"chunks never written, more than {limit} bytes (a shape declared "
                               "beyond the data; read a smaller range)", path=array.name, kind="too_large")
    return stored


def chunk(store, key: str) -> bytes | None:
    """A whole chunk (or shard) file."""
    return store.get(key)


def entry(store, key: str, off: int, n: int) -> bytes | None:
    """The ``n`` bytes at ``off`` of shard ``key`` (one inner chunk)."""
    return store.get_range(key, off, n)


def range_reader(store, key: str):
    """``(offset, n) -> bytes`` of shard ``key``: through the store's kept descriptor when it keeps
    one (a reader's session), else ``store.get_range`` bound to the key."""
    ranges = getattr(store, "range_reader", None)
    reader = ranges(key) if ranges is not None else None
    return reader if reader is not None else partial(store.get_range, key)


def prefetch(store, key: str, ents: list, views: bool) -> dict:
    """Raw bytes of the inner chunks ``ents`` (``plan.prefetch_entries``) of shard ``key`` that lie
    back to back in the file (as an appender lands them), read as one byte range per run of
    ``plan.coalesce``: ``{coord: bytes}`` (memoryviews with ``views``; None for an absent file).
    Isolated chunks are left out: read alone by the decode loop."""
    out = {}
    for start, end, run in coalesce(ents):
        raw = store.get_range(key, start, end - start)
        mv = memoryview(raw) if raw is not None else None
        for off, n, coord in run:
            if mv is None:
                out[coord] = None
            else:
                piece = mv[off - start:off - start + n]
                out[coord] = piece if views else bytes(piece)
    return out


def run(store, key: str, offs, sizes) -> tuple | None:
    """The raw bytes of inner chunks whose entries lie back to back, read as one range: (one
    memoryview a chunk, the batch decoder's layout segment ``(bytes, starts, sizes)``); None for
    an absent or short file."""
    o0 = int(offs[0])
    span = int(offs[-1] + sizes[-1]) - o0
    raw = store.get_range(key, o0, span)
    if raw is None or len(raw) != span:
        return None
    mv = memoryview(raw)
    starts = offs - o0
    return [mv[o:o + k] for o, k in zip(starts.tolist(), sizes.tolist())], (raw, starts, sizes)


def ahead(cache: ReadCache, store, key: str, index, i0: int, off: int, n: int, limit: int):
    """Raw bytes ``[off, off + n)`` of inner chunk row ``i0`` of shard ``key`` for a frame read,
    or False (fetch them alone).  A read of the chunk right after the last one fetched (a
    forward walk) fetches it and the chunks lying back to back after it, below inner row
    ``limit`` (the array's shape) and up to READ_AHEAD bytes, in one range; the next reads are
    served from that range.  The same bytes the file
    holds (an appended shard's committed bytes are never rewritten), checked as ever."""
    got = cache.ahead
    if got is not None and got[0] == key and got[1] <= off and off + n <= got[1] + len(got[2]):
        cache.last_read = (key, i0)
        return got[2][off - got[1]:off - got[1] + n]
    last, cache.last_read = cache.last_read, (key, i0)
    if last != (key, i0 - 1) or index.offsets.ndim != 1:
        return False
    end = ahead_end(index, i0, off, n, limit)
    if end == off + n:
        return False
    raw = store.get_range(key, off, end - off)
    if raw is None or len(raw) != end - off:
        cache.ahead = None
        return False                   # a short file: the chunk alone decides what to report
    got = cache.ahead = (key, off, memoryview(raw))
    return got[2][:n]                  # this read's bytes, whatever another thread sets meanwhile
