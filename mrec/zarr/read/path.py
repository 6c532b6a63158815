"""The one read path of a Zarr array: plan -> fetch -> decode, for every public read.

``Array.read``, ``Array.read_into``, ``read_together`` and the validator's chunk reads come here:

1. **plan** (``plan.py``, pure): the frame case (rows inside one inner chunk, ``frame.py``), or the
   chunks of the range with their rows and their place in the result; inside a shard, the inner
   chunks, those read whole, and the byte ranges lying back to back;
2. **fetch** (``fetch.py``, ``index.py``): the shard index (cached, checked, rebuilt where the
   array is appended), the listing of a sparse array, the byte ranges the plan names;
3. **decode** (``decode.py``): the batch decoder for runs of whole chunks, the fused decoder on the
   pool for other whole chunks, one chunk at a time for the rest, each verified -- into the result.

A chunk a fast decoder declines is decoded again by the labelled chain, so values and errors are
those of a serial chunk-by-chunk read.  A shard or chunk never written reads as the fill value.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import CorruptionError
from ..metadata import grid_cells
from ..parallel import decode_parts
from . import decode, fetch, frame, plan


def read(array, rows: slice | None = None, *, threads: int | None = None) -> np.ndarray:
    """``Array.read``: the whole array, or a leading-axis range ``rows`` (step allowed).

    A read of many whole inner chunks of a sharded array decodes them on ``threads`` threads
    (default ``MREC_THREADS``, else the machine's cores; 1 = serial): the same values and the
    same errors as the serial read."""
    if rows is not None and rows.step is None:
        # the usual call (a frame's rows): straight to the one inner chunk holding them
        start, stop = rows.start, rows.stop
        if type(start) is int and type(stop) is int and 0 <= start < stop:
            shape = array.meta.shape
            if shape and stop <= shape[0]:
                fast = frame.read_frame(array, start, stop)
                if fast is not None:
                    return fast
    m = array.meta
    if m.ndim == 0:
        return _scalar(array)
    n = m.shape[0]
    rows = slice(None) if rows is None else rows
    start, stop, step = rows.indices(n)
    if step != 1:
        lo, hi = (start, stop) if step > 0 else (stop + 1, start + 1)
        if hi <= lo:
            return np.full((0, *m.shape[1:]), m.fill_value, dtype=m.data_type.numpy)
        base = array.read(slice(lo, hi), threads=threads)
        return base[(start - lo)::step] if step > 0 else base[(start - lo)::step]
    stop = max(stop, start)
    return read_range(array, start, stop, threads)


def _scalar(array) -> np.ndarray:
    """A 0-d array's one value (its one chunk, or the fill value)."""
    m = array.meta
    key = array.chunk_key(())
    raw = fetch.chunk(array.store, key)
    if raw is None:
        return np.full((), m.fill_value, dtype=m.data_type.numpy)
    return np.array(m.codecs.decode(raw, array.chunk_spec(key)), dtype=m.data_type.numpy)


def read_range(array, start: int, stop: int, threads: int | None = None) -> np.ndarray:
    """Rows [start, stop) of the array (inside it; ``stop <= start`` reads none)."""
    m = array.meta
    if start < stop:
        fast = frame.read_frame(array, start, stop, lean=False)
        if fast is not None:
            return fast
    p = plan.plan_rows(m, start, stop, array.name)
    dtype = m.data_type.numpy
    if p.fill_only:
        return np.full(p.want, m.fill_value, dtype=dtype)
    stored = fetch.stored_for(array, p)
    if p.by_shards:
        out = np.empty(p.want, dtype=dtype) if stored is None else np.full(p.want, m.fill_value, dtype=dtype)
        return shards_into(array, p, out, threads, stored)
    out = None
    for c in p.chunks(stored):
        block = chunk_rows(array, c.coords, c.lo, c.hi, threads)
        if out is None:
            if p.whole and block is not None and block.shape == p.want and block.dtype == dtype:
                # the one copy (a frame of a frame-aligned column); a block the shard read
                # assembled itself (it owns its data: never a view of a cached chunk) is ours
                return block if block.flags.owndata else block.copy()
            out = np.full(p.want, m.fill_value, dtype=dtype)
        if block is None:
            continue
        out[c.dst] = block[c.src]
    return out if out is not None else np.full(p.want, m.fill_value, dtype=dtype)


def read_into(array, rows: slice, out: np.ndarray, threads: int | None) -> np.ndarray:
    """``Array.read_into``: ``out[...] = array.read(rows)``, decoded straight into ``out`` where
    the layout allows (shards spanning the trailing axes; ``out`` may be strided)."""
    m = array.meta
    if m.ndim == 0 or rows.step not in (None, 1):
        out[...] = array.read(rows, threads=threads)
        return out
    start, stop, _ = rows.indices(m.shape[0])
    want = (max(stop - start, 0), *m.shape[1:])
    if tuple(out.shape) != want or out.dtype != m.data_type.numpy:
        raise ValueError(f"read_into needs an array of shape {list(want)} and dtype {m.data_type.numpy}, "
                         f"got {list(out.shape)} {out.dtype}")
    if stop <= start or not plan.shards_span_trailing(m) or any(s == 0 for s in m.shape[1:]):
        out[...] = array.read(rows, threads=threads)
        return out
    return shards_into(array, plan.plan_rows(m, start, stop, array.name), out, threads)


def shards_into(array, p: plan.ReadPlan, out: np.ndarray, threads: int | None,
                stored: list | None = None) -> np.ndarray:
    """The plan's rows (shards spanning the trailing axes) decoded straight into ``out``, their
    shape and dtype (any strides: a column of an interleaved result), shard after shard: the
    chunks, checks and errors of a cell-by-cell read without a fill of the result or a copy of a
    shard's block.  With ``stored`` (``fetch.stored_for``) only those shards are visited: ``out``
    already holds the fill."""
    fill = array.meta.fill_value
    for c in p.chunks(stored, by_shards=True):
        dst = out[c.dst[0]]
        if shard_rows(array, array.chunk_key(c.coords), c.lo, c.hi, threads, into=dst) is None:
            np.copyto(dst, fill, casting="unsafe")
    return out


def chunk_rows(array, coords, r_lo: int, r_hi: int, threads: int | None = None) -> np.ndarray | None:
    """Rows [r_lo, r_hi) of chunk (shard) ``coords`` (None: never written)."""
    key = array.chunk_key(coords)
    if array.sharding is not None:
        return shard_rows(array, key, r_lo, r_hi, threads)
    raw = fetch.chunk(array.store, key)
    if raw is None:
        return None
    plan.check_alloc(array.meta.chunk_shape, array.store.describe(key))     # a chunk is decoded whole
    chunk = array.meta.codecs.decode(raw, array.chunk_spec(key))
    return chunk[r_lo:r_hi]


def shard_rows(array, key: str, r_lo: int, r_hi: int, threads: int | None = None,
               into: np.ndarray | None = None) -> np.ndarray | None:
    """Rows [r_lo, r_hi) of the shard at ``key`` (None: the shard is absent).  ``into`` (an array
    of exactly the rows' shape and the array's dtype, when the shard spans the trailing axes)
    receives them and is returned."""
    index = array.indexes.get(key)
    if index is None:
        return None       # a shard never written reads as the fill value (the Zarr V3 rule)
    m = array.meta
    ics = array.sharding.chunk_shape
    plan.check_alloc((r_hi - r_lo, *m.chunk_shape[1:]), array.store.describe(key))
    grid = index.offsets.shape
    where = array.store.describe(key)
    single = all(g == 1 for g in grid[1:])   # an inner chunk spans every trailing axis
    first, last, _a, _b = plan.inner_rows(ics[0], r_lo, r_hi)
    raws = {}
    out = into
    rest = range(first, last)                   # the inner-chunk rows the loop below decodes
    if last - first > 1 or not single:
        if out is None:
            # every cell of the shard's grid below is written: a chunk, or the fill (as np.full would)
            out = np.empty((r_hi - r_lo, *m.chunk_shape[1:]), dtype=m.data_type.numpy)
        if single and last - first > 2:
            early = decode.batch_whole(array, key, index, out, r_lo, r_hi, threads)
            if len(early) == last - first:
                return out
            if early:
                rest = [*range(first, early.start), *range(early.stop, last)]
        raws = _prefetch(array, key, index, [(i0, *it) for i0 in rest for it in grid_cells(grid[1:])])
    done = decode.pool(array, index, raws, out, r_lo, first, last, threads) \
        if single and len(raws) > 1 and out is not None else ()
    if done:
        zeros = (0,) * (len(grid) - 1)          # done only holds whole chunks of single-cell rows
        rest = [i0 for i0 in rest if (i0, *zeros) not in done]
        if not rest:
            return out
    return _serial(array, key, index, rest, raws, out, r_lo, r_hi, where)


def _prefetch(array, key: str, index, coords: list) -> dict:
    """The raw bytes of the inner chunks ``coords`` lying back to back (``fetch.prefetch``), the
    empty and the cached one left out."""
    cached = array.cache.chunk
    skip = cached[0][1:] if cached is not None and cached[0][0] == key else None
    ents = plan.prefetch_entries(index, coords, skip)
    return fetch.prefetch(array.store, key, ents, array.sharding.codecs._view_decoders is not None)


def _serial(array, key: str, index, rest, raws: dict, out, r_lo: int, r_hi: int, where: str):
    """The inner-chunk rows ``rest`` of the shard decoded one chunk at a time (prefetched bytes from
    ``raws``, the others fetched alone), into ``out`` (None: made here, unless one chunk's rows are
    the whole result)."""
    m = array.meta
    ics = array.sharding.chunk_shape
    grid = index.offsets.shape
    single = all(g == 1 for g in grid[1:])
    for i0 in rest:
        lo0 = i0 * ics[0]
        a, b = max(r_lo, lo0) - lo0, min(r_hi, lo0 + ics[0]) - lo0
        for it in grid_cells(grid[1:]):
            coord = (i0, *it)              # never one decoded on the pool: rest holds none of its rows
            if index.is_empty(coord):
                if key in array.indexes.unverified:
                    raise CorruptionError(f"{array.indexes.reason(key)}, and no copy of inner chunk {list(coord)} "
                                          "verifies: its rows are lost", path=where)
                chunk = None
            else:
                dest = None
                if out is not None and single and a == 0 and b == ics[0]:
                    dest = out[lo0 - r_lo:lo0 + b - r_lo]      # a whole inner chunk: decoded in place
                chunk = decode.inner_chunk(array, key, index, coord, b, where, raw=raws.pop(coord, False), dest=dest)
                if chunk is dest:
                    continue
                if out is None and single and b - a == r_hi - r_lo:
                    return chunk[a:b]          # the whole range in one inner chunk: the caller copies it
            if out is None:
                # every cell of the shard's grid below is written: a chunk, or the fill (as np.full would)
                out = np.empty((r_hi - r_lo, *m.chunk_shape[1:]), dtype=m.data_type.numpy)
            dst = [slice(lo0 + a - r_lo, lo0 + b - r_lo)]
            dst += [slice(c * s, (c + 1) * s) for c, s in zip(it, ics[1:])]
            if chunk is None:
                np.copyto(out[tuple(dst)], m.fill_value, casting="unsafe")
                continue
            out[tuple(dst)] = chunk[a:b]
    if out is None:
        out = np.full((r_hi - r_lo, *m.chunk_shape[1:]), m.fill_value, dtype=m.data_type.numpy)
    return out


def read_together(arrays: list, start: int, stop: int, threads: int | None = None, *,
                  edges: bool = False) -> list | None:
    """``[a.read(slice(start, stop)) for a in arrays]`` decoded by ONE batch-decoder call, in the
    plain case only (see ``mrec.zarr.array.read_together``; the rows may span shards); None
    otherwise.  ``edges``: the rows need not begin and end on inner-chunk boundaries -- the inner
    chunks holding the first and the last rows are decoded whole with the others and cut (each
    result is then a view of the rows of a larger array)."""
    got = _together(arrays, start, stop, edges)
    if got is None:
        return None
    lo, hi = got[0], got[1]
    m = arrays[0].meta
    out = np.empty((len(arrays), hi - lo, *m.shape[1:]), dtype=m.data_type.numpy)
    if not _decode_together(got, out, threads):
        return None
    return list(out[:, start - lo:stop - lo])


def read_together_into(arrays: list, start: int, stop: int, out: np.ndarray, threads: int | None = None) -> bool:
    """:func:`read_together` with ``edges=True`` decoded into ``out`` (a buffer reused from call to
    call: no fresh pages): ``(len(arrays), rows, *trailing)``, C-contiguous, of the arrays' dtype,
    ``rows`` those of the inner chunks holding rows [start, stop) (``out[k, start - lo]`` is row
    ``start`` of array k, ``lo`` the first row of its inner chunk).  False when :func:`read_together`
    would be None (``out`` then holds anything)."""
    got = _together(arrays, start, stop, True)
    if got is None:
        return False
    m = arrays[0].meta
    if out.shape != (len(arrays), got[1] - got[0], *m.shape[1:]) or out.dtype != m.data_type.numpy \
            or not out.flags.c_contiguous:
        return False
    return _decode_together(got, out, threads)


def _together(arrays: list, start: int, stop: int, edges: bool) -> tuple | None:
    """``(lo, hi, batch decoder, pieces, layout)``: the whole inner chunks covering rows [start,
    stop) of every array (``edges``; else [start, stop) must be whole inner chunks), fetched as one
    range a shard and array -- when the arrays are plain columns of one geometry, dtype and inner
    pipeline, their indexes read as written and the chunks lying back to back; else None."""
    if len(arrays) < 2 or stop <= start or start < 0:
        return None
    first = arrays[0]
    geo = frame.geometry(first)
    batch = first.decoders.batch() if geo is not None else None
    if batch is None:
        return None
    lo, hi = (start // geo[1] * geo[1], -(-stop // geo[1]) * geo[1]) if edges else (start, stop)
    spot = plan.together(geo, lo, hi)            # one shard (the usual case), else shard by shard
    spans = [spot] if spot is not None else plan.together_spans(geo, lo, hi)
    if spans is None:
        return None
    tail = geo[2]
    m = first.meta
    pieces, layout = [], []
    for arr in arrays:
        if arr is not first and (frame.geometry(arr) != geo or arr.meta.data_type != m.data_type
                                 or arr.sharding.codecs != first.sharding.codecs):
            return None
        if stop > arr.meta.shape[0]:
            return None
        for c0, a0, n in spans:
            got = _together_run(arr, arr.chunk_key((c0, *tail)), a0, n)
            if got is None:
                return None                      # not one range: the per-array path reads them
            pieces.extend(got[0])
            layout.append(got[1])
    return lo, hi, batch, pieces, layout


def _decode_together(got: tuple, out: np.ndarray, threads: int | None) -> bool:
    """The pieces of :func:`_together` decoded into ``out`` (one row of whole chunks a piece, in
    order) by one batch call."""
    _lo, _hi, batch, pieces, layout = got
    dest = out.reshape(len(pieces), -1)
    return batch(pieces, dest, decode_parts(len(pieces), dest.nbytes, threads), layout)


def _together_run(arr, key: str, a0: int, n: int) -> tuple | None:
    """The ``n`` whole inner chunks from inner row ``a0`` of shard ``key``, fetched as one range
    (``fetch.run``) when its index is read as written and their entries lie back to back within
    16 x COALESCE_BYTES; else None."""
    index = arr.indexes.get(key)
    entries = plan.plain_entries(index, a0, a0 + n) if index is not None and arr.indexes.as_written(key, index) \
        else None
    if entries is None:
        return None
    offs, sizes = entries
    if not plan.back_to_back(offs, sizes) or int(offs[-1] + sizes[-1] - offs[0]) > 16 * plan.COALESCE_BYTES:
        return None
    return fetch.run(arr.store, key, offs, sizes)


def decode_estimate(array, start: int, stop: int) -> int:
    """``Array.decode_estimate``: roughly how many decoded bytes a read of rows [start, stop) costs
    (0: a cached chunk)."""
    geo = frame.geometry(array)
    if geo is None:
        m = array.meta
        if m.ndim == 0 or stop <= start:
            return 0
        return (stop - start) * m.data_type.numpy.itemsize * math.prod(m.shape[1:])
    srows, irows, tail, ibytes = geo
    n = -(-stop // irows) - start // irows
    if n == 1:
        cached = array.cache.chunk
        if cached is not None and cached[0][1][0] == (start % srows) // irows \
                and cached[0][0] == array.chunk_key((start // srows, *tail)):
            return 0
    return max(n, 0) * ibytes
