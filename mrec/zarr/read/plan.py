"""Read planning: which chunks, which rows of each, which byte ranges, into which rows of the result.

Pure functions of the array's metadata, the leading-axis range asked for and (for byte ranges) a
shard's index: no I/O, no decoding.  The read path (``path.py``) asks the planner, fetches what
it names (``fetch.py``, ``index.py``) and decodes into the result (``decode.py``); the fast cases
are cases of the plan:

* :func:`locate` -- the range lies inside one inner chunk of a frame-aligned column (a frame);
* :func:`plan_rows` -- any range: the chunks (shards) it touches, each one's rows and where they go
  in the result (:class:`ChunkRead`); shards spanning every trailing axis are runs of the result's
  rows (``ReadPlan.by_shards``), any other chunking is placed cell by cell;
* :func:`inner_rows` / :func:`plain_entries` / :func:`run_cuts` / :func:`run_groups` -- inside a
  shard: the inner chunks touched, those read whole (the batch decoder's), the runs of entries
  lying back to back in the file, one range read each (at most :data:`COALESCE_BYTES`), and the
  groups of runs one batch call decodes;
* :func:`prefetch_entries` / :func:`coalesce` -- the other chunks of a shard read, merged into runs;
* :func:`ahead_end` -- how far a forward walk of whole-chunk reads fetches ahead (:data:`READ_AHEAD`);
* :func:`together` / :func:`together_spans` -- a range several columns read by one batch call.
"""
from __future__ import annotations

import math
from typing import Iterator, NamedTuple

import numpy as np

from ...errors import RefusalError
from ..codecs.sharding import EMPTY, ShardIndex, ShardingCodec
from ..metadata import ArrayMetadata, grid_cells

_EMPTY = int(EMPTY)

MAX_READ_ELEMENTS = 2**31     # one read never allocates more (16 GiB of float64)
#: inner chunks lying back to back in a shard are fetched together, up to this many bytes a read
COALESCE_BYTES = 4 << 20
READ_AHEAD = 1 << 20          # a forward walk of whole-chunk reads fetches up to this many bytes at once


#: most bytes of fill value one read materialises beyond what the chunks the store holds can decode to
MAX_FILL_BYTES = 256 << 20
#: a read over more chunks than this visits the stored ones (one listing) instead of the whole grid
SPARSE_WALK = 4096
#: most decoded bytes one stored byte of a compressor's output can give (deflate: 1032; a zstd RLE
#: block: 128 KiB from 4 bytes, doubled)
_EXPANSION = {"gzip": 1032, "zstd": 1 << 16}


def expansion(pipeline) -> int:
    """Most in-memory bytes one stored byte of a chunk of ``pipeline`` can decode to: the product of
    its compressors' expansions (a shard's file bounds its inner chunks'), times 2 for strings (each
    item takes at least 4 stored bytes and 8 in an object array)."""
    r = 1
    for c in pipeline.bytes_bytes:
        r *= _EXPANSION.get(c.name, 1)
    ab = pipeline.array_bytes
    if isinstance(ab, ShardingCodec):
        return r * expansion(ab.codecs)
    return r * (2 if ab.name == "vlen-utf8" else 1)


def check_alloc(shape, where: str) -> None:
    n = 1
    for s in shape:
        n *= int(s)
    if n > MAX_READ_ELEMENTS:
        raise RefusalError(f"a read of shape {list(shape)} ({n} elements) exceeds {MAX_READ_ELEMENTS} elements: "
                           "read a smaller range", path=where, kind="too_large")


# -- one inner chunk: a frame of a frame-aligned column -----------------------------------------

def frame_geometry(meta: ArrayMetadata):
    """(shard rows, inner rows, shard key coords tail, inner chunk bytes) when every read of a range
    inside one inner chunk can skip the general plan: sharded by byte ranges, shards and inner chunks
    spanning exactly the trailing axes (a frame-aligned column); else None."""
    m = meta
    sh = m.codecs.sharding
    # an inner chunk within MAX_READ_ELEMENTS and no zero-length trailing axis: any range inside
    # one passes the allocation check and is not empty, so the frame plan may skip both
    if sh is not None and m.ndim >= 1 and tuple(m.chunk_shape[1:]) == tuple(m.shape[1:]) \
            and tuple(sh.chunk_shape[1:]) == tuple(m.shape[1:]) and len(sh.chunk_shape) == m.ndim \
            and all(d > 0 for d in m.shape[1:]) and math.prod(sh.chunk_shape) <= MAX_READ_ELEMENTS:
        row = m.data_type.numpy.itemsize * math.prod(m.shape[1:])
        return (m.chunk_shape[0], sh.chunk_shape[0], (0,) * (m.ndim - 1), sh.chunk_shape[0] * row)
    return None


def locate(geo, start: int, stop: int) -> tuple | None:
    """``(shard, inner row, first row inside it, whole)`` of rows [start, stop) (0 <= start < stop)
    when one inner chunk of ``geo`` (:func:`frame_geometry`) holds them all; else None."""
    srows, irows = geo[0], geo[1]
    c0 = start // srows
    r_lo = start - c0 * srows
    i0 = r_lo // irows
    a = r_lo - i0 * irows
    if a + stop - start > irows:
        return None                         # more than one inner chunk
    return c0, i0, a, a == 0 and stop - start == irows


def together(geo, start: int, stop: int) -> tuple | None:
    """``(shard, first inner row, inner chunks)`` when rows [start, stop) are whole inner chunks of
    one shard of ``geo`` (what several columns decode by one batch call); else None."""
    spans = together_spans(geo, start, stop)
    return spans[0] if spans is not None and len(spans) == 1 else None


def together_spans(geo, start: int, stop: int) -> list[tuple[int, int, int]] | None:
    """``[(shard, first inner row, inner chunks)]``, shard after shard, when rows [start, stop) are
    whole inner chunks of ``geo`` (several columns decoded by one batch call, across shards); else
    None."""
    srows, irows = geo[0], geo[1]
    if stop <= start or start < 0 or start % irows or (stop - start) % irows:
        return None
    spans = []
    lo = start
    while lo < stop:
        c0 = lo // srows
        hi = min(stop, (c0 + 1) * srows)
        spans.append((c0, (lo - c0 * srows) // irows, (hi - lo) // irows))
        lo = hi
    return spans


# -- any range: the chunks it touches -----------------------------------------------------------

class ChunkRead(NamedTuple):
    """Rows ``[lo, hi)`` of chunk (shard) ``coords`` into the result at ``dst`` from ``src`` of the
    chunk's block (read shard by shard: ``dst`` the result's rows alone, ``src`` empty)."""

    coords: tuple
    lo: int
    hi: int
    dst: tuple
    src: tuple


class ReadPlan(NamedTuple):
    """Rows [start, stop) of an array: the result's shape, whether it is all fill value (nothing to
    read), whether one chunk holds it, and how chunks are visited (see :meth:`chunks`)."""

    meta: ArrayMetadata
    start: int
    stop: int
    want: tuple
    fill_only: bool
    whole: bool                 # one chunk holds the whole range (its block may be the result)
    spans: bool                 # shards spanning every trailing axis: each a run of the result's rows
    c_first: int = 0
    c_stop: int = 0
    trailing_grid: tuple = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.want) * self.meta.data_type.numpy.itemsize

    @property
    def ncells(self) -> int:
        return (self.c_stop - self.c_first) * math.prod(self.trailing_grid)

    @property
    def sparse(self) -> bool:
        """Too large to walk the grid: the chunks the store holds are listed and visited instead."""
        return self.nbytes > MAX_FILL_BYTES or self.ncells > SPARSE_WALK

    @property
    def by_shards(self) -> bool:
        """Read shard after shard straight into the result (more than one chunk, :attr:`spans`)."""
        return self.spans and not self.whole

    def chunks(self, stored: list | None = None, by_shards: bool | None = None) -> Iterator[ChunkRead]:
        """Every chunk of the range (or, given ``stored``, only those the store holds) with its rows:
        shard by shard (``by_shards``, default :attr:`by_shards`: ``dst`` the result's rows), else
        cell by cell of the chunk grid (``dst`` / ``src`` the cell's part of the result / chunk)."""
        m = self.meta
        cs = m.chunk_shape
        start, stop = self.start, self.stop
        if self.by_shards if by_shards is None else by_shards:
            tail = (0,) * (m.ndim - 1)
            for c0 in range(self.c_first, self.c_stop) if stored is None else (c[0] for c in stored):
                lo0 = c0 * cs[0]
                r_lo, r_hi = max(start, lo0) - lo0, min(stop, lo0 + cs[0]) - lo0
                yield ChunkRead((c0, *tail), r_lo, r_hi, (slice(lo0 + r_lo - start, lo0 + r_hi - start),), ())
            return
        cells = ((c0, *ct) for c0 in range(self.c_first, self.c_stop) for ct in grid_cells(self.trailing_grid)) \
            if stored is None else iter(stored)
        for coords in cells:
            c0, ct = coords[0], coords[1:]
            lo0 = c0 * cs[0]
            r_lo, r_hi = max(start, lo0) - lo0, min(stop, lo0 + cs[0]) - lo0
            dst = [slice(lo0 + r_lo - start, lo0 + r_hi - start)]
            src = [slice(None)]
            for c, s, size in zip(ct, cs[1:], m.shape[1:]):
                hi = min((c + 1) * s, size)
                dst.append(slice(c * s, hi))
                src.append(slice(0, hi - c * s))
            yield ChunkRead(coords, r_lo, r_hi, tuple(dst), tuple(src))


def shards_span_trailing(meta: ArrayMetadata) -> bool:
    """Sharded by byte ranges with shards spanning the trailing axes exactly (each shard's rows
    are a run of the result's rows)."""
    m = meta
    return m.codecs.sharding is not None and m.ndim >= 1 and tuple(m.chunk_shape[1:]) == tuple(m.shape[1:])


def plan_rows(meta: ArrayMetadata, start: int, stop: int, where: str) -> ReadPlan:
    """The plan of rows [start, stop) of an array of ``meta`` (inside it; ``stop <= start`` reads
    none); refuses (``too_large``) a result of more than :data:`MAX_READ_ELEMENTS` elements."""
    m = meta
    cs = m.chunk_shape
    want = (stop - start, *m.shape[1:])
    check_alloc(want, where)
    if stop <= start or any(s == 0 for s in m.shape[1:]):
        return ReadPlan(m, start, stop, want, True, False, False)
    trailing_grid = tuple(-(-s // c) for s, c in zip(m.shape[1:], cs[1:]))
    c_first, c_stop = start // cs[0], -(-stop // cs[0])
    whole = c_stop - c_first == 1 and all(g == 1 for g in trailing_grid)   # one chunk holds the range
    return ReadPlan(m, start, stop, want, False, whole, shards_span_trailing(m), c_first, c_stop, trailing_grid)


# -- inside a shard: inner chunks and byte ranges ---------------------------------------------

def inner_rows(ir: int, r_lo: int, r_hi: int) -> tuple[int, int, int, int]:
    """``(first, last, a, b)``: rows [r_lo, r_hi) of a shard of ``ir``-row inner chunks touch inner
    rows [first, last) and hold inner rows [a, b) whole."""
    return r_lo // ir, -(-r_hi // ir), -(-r_lo // ir), r_hi // ir


def plain_entries(index: ShardIndex, a: int, b: int):
    """(offsets, sizes) as int64 of the index entries of inner rows [a, b) when each names a
    chunk (none empty, none shorter than a checksum); else None."""
    offs = index.offsets.reshape(-1)[a:b]
    sizes = index.nbytes.reshape(-1)[a:b]
    if len(offs) != b - a or (offs == EMPTY).any() or (sizes < 5).any():
        return None
    return offs.astype(np.int64), sizes.astype(np.int64)


def back_to_back(offs: np.ndarray, sizes: np.ndarray) -> bool:
    """Whether the entries lie back to back in the file (one range holds them)."""
    return not (len(offs) > 1 and (offs[1:] != offs[:-1] + sizes[:-1]).any())


def run_cuts(offs: np.ndarray, sizes: np.ndarray) -> list[int]:
    """Where entries ``offs`` / ``sizes`` are cut into runs lying back to back in the file, each
    spanning at most :data:`COALESCE_BYTES` (one range read each): ``[0, ..., len(offs)]``."""
    breaks = (np.nonzero(offs[1:] != offs[:-1] + sizes[:-1])[0] + 1).tolist()
    cuts = [0]
    for stop in breaks + [len(offs)]:
        lo = cuts[-1]
        while lo < stop:
            extent = offs[lo:stop] + sizes[lo:stop] - offs[lo]
            lo = min(stop, lo + max(1, int(np.searchsorted(extent, COALESCE_BYTES, side="right"))))
            cuts.append(lo)
    return cuts


def run_groups(cuts: list[int], sizes: np.ndarray, limit: int) -> list[list[tuple[int, int]]]:
    """The runs ``cuts`` (:func:`run_cuts`) as groups of consecutive runs ``[(lo, hi), ...]``, each
    closed once its entries hold ``limit`` bytes or more (what one batch call decodes)."""
    groups, cur, held = [], [], 0
    for lo, hi in zip(cuts, cuts[1:]):
        if hi <= lo:
            continue
        cur.append((lo, hi))
        held += int(sizes[lo:hi].sum())
        if held >= limit:
            groups.append(cur)
            cur, held = [], 0
    if cur:
        groups.append(cur)
    return groups


def prefetch_entries(index: ShardIndex, coords: list, skip) -> list:
    """``(offset, nbytes, coord)`` of the non-empty inner chunks ``coords`` of a shard, sorted by
    offset, leaving out ``skip`` (the cached chunk's ``(offset, nbytes, coord)`` key check)."""
    ents = []
    if coords and index.offsets.size == index.offsets.shape[0] and \
            all(len(c) == index.offsets.ndim and not any(c[1:]) for c in (coords[0], coords[-1])) \
            and coords[-1][0] - coords[0][0] + 1 == len(coords):
        # a run of rows of a one-cell-a-row grid (the usual whole read): the entries taken at once
        lo = coords[0][0]
        offs = index.offsets.reshape(-1)[lo:lo + len(coords)].tolist()
        sizes = index.nbytes.reshape(-1)[lo:lo + len(coords)].tolist()
        for coord, off, n in zip(coords, offs, sizes):
            if off == _EMPTY and n == _EMPTY:
                continue
            if skip is not None and skip == (coord, off, n):
                continue
            ents.append((off, n, coord))
    else:
        for coord in coords:
            if index.is_empty(coord):
                continue
            off, n = int(index.offsets[coord]), int(index.nbytes[coord])
            if skip is not None and skip == (coord, off, n):
                continue
            ents.append((off, n, coord))
    ents.sort()
    return ents


def coalesce(ents: list) -> list[tuple[int, int, list]]:
    """Runs ``(start, end, entries)`` of at least two of the sorted ``ents`` lying back to back,
    each at most :data:`COALESCE_BYTES` (isolated chunks are left out: read alone)."""
    runs = []
    i = 0
    while i < len(ents):
        start = ents[i][0]
        end = start + ents[i][1]
        j = i + 1
        while j < len(ents) and ents[j][0] == end and end + ents[j][1] - start <= COALESCE_BYTES:
            end += ents[j][1]
            j += 1
        if j - i > 1:
            runs.append((start, end, ents[i:j]))
        i = j
    return runs


def ahead_end(index: ShardIndex, i0: int, off: int, n: int, limit: int) -> int:
    """End of the range a forward walk reads at inner row ``i0`` (entry ``off``, ``n`` bytes): the
    chunks lying back to back after it, below inner row ``limit``, up to :data:`READ_AHEAD` bytes
    (``off + n``: none)."""
    offs, sizes = index.offsets, index.nbytes
    end, j = off + n, i0 + 1
    while j < limit and end - off < READ_AHEAD and int(offs[j]) == end and int(sizes[j]) != _EMPTY:
        end += int(sizes[j])
        j += 1
    return end
