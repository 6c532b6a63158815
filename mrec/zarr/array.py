"""Zarr V3 arrays: read of any regular chunking, whole writes, and sharded append.

Reading never decodes a chunk outside the requested leading-axis range; for
an array whose array→bytes codec is ``sharding_indexed`` only the shard
index and the inner chunks in range are fetched (byte-range reads).

Appending (:class:`ShardedAppender`) lands rows along axis 0 by positional
writes: new inner chunks at the shard file's tail, then the index (at the
start of the shard) rewritten in place — O(chunk + index) bytes per landing.
"""
from __future__ import annotations

import bisect
import json
import math
import posixpath
import time

import numpy as np

from ..errors import CorruptionError, MetadataError, RefusalError, StoreError
from .codecs.base import ChunkSpec
from . import shardscan
from .codecs.sharding import EMPTY, ShardIndex, ShardingCodec
from .metadata import ArrayMetadata, GroupMetadata, json_dumps, parse_node
from .parallel import batch_threads, concurrent, decode_all, decode_parts, encode_all
from .read.padded import STREAM_FROM, padded_pieces
from .codecs.batch import batch_encoder


_EMPTY = int(EMPTY)


def _cells(grid: tuple[int, ...]):
    """np.ndindex(*grid), without building an iterator for the usual single cell."""
    if all(g == 1 for g in grid):
        return ((0,) * len(grid),)
    return np.ndindex(*grid)

_SHAPE_MARK = "\x00mrec-shape\x00"
_SHAPE_MARK_JSON = json.dumps(_SHAPE_MARK, ensure_ascii=False).encode("utf-8")


def meta_key(path: str) -> str:
    return posixpath.join(path, "zarr.json") if path else "zarr.json"


def read_node(store, path: str):
    """Parsed metadata of the node at ``path`` or None when it has no zarr.json."""
    key = meta_key(path)
    raw = store.get(key)
    if raw is None:
        return None
    return parse_node(raw, store.describe(key))


def write_group(store, path: str, attributes: dict | None = None, *, fsync: bool = False, extra=None) -> GroupMetadata:
    meta = GroupMetadata(dict(attributes or {}), dict(extra or {}))
    store.set(meta_key(path), json_dumps(meta.to_json()), fsync=fsync)
    return meta


def _encoded_chunks(batch, runs) -> list:
    """(On a pool worker.)  The encoded bytes of each chunk of ``runs`` (a batch encoded ahead)."""
    sizes, pieces = batch(runs, 1)
    return [bytes(pieces[2 * i]) + pieces[2 * i + 1] for i in range(len(sizes))]


class _AheadChunk:
    """One chunk of a batch encoded ahead: ``result()`` is its bytes (or raises the batch's error)."""

    __slots__ = ("future", "k")

    def __init__(self, future, k: int):
        self.future, self.k = future, k

    def result(self):
        return self.future.result()[self.k]


class _Rows:
    """Consecutive pieces of rows (a landing's tail and buffered appends) read as one array of rows
    without joining them all: a range inside one piece is a view of it, one across pieces a join of
    just that range."""

    __slots__ = ("parts", "starts")

    def __init__(self, parts: list):
        self.parts = parts
        starts = [0]
        for p in parts:
            starts.append(starts[-1] + len(p))
        self.starts = starts

    def __len__(self) -> int:
        return self.starts[-1]

    def _at(self, row: int) -> int:
        """The piece holding ``row``."""
        return bisect.bisect_right(self.starts, row) - 1

    def get(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo:hi`` (0 <= lo <= hi <= len)."""
        if lo >= hi:
            return self.parts[0][:0]
        i = self._at(lo)
        st = self.starts
        if hi <= st[i + 1]:
            return self.parts[i][lo - st[i]:hi - st[i]]
        pieces = []
        while lo < hi:
            e = min(hi, st[i + 1])
            pieces.append(self.parts[i][lo - st[i]:e - st[i]])
            lo, i = e, i + 1
        return np.concatenate(pieces, axis=0)

    def runs(self, lo: int, hi: int, k: int) -> list:
        """Rows ``lo:hi`` (a multiple of ``k`` rows) as consecutive arrays of whole multiples of ``k``
        rows: views of the pieces where ``k``-row blocks lie in one piece, a join of the block's rows
        where one spans pieces."""
        out = []
        st = self.starts
        while lo < hi:
            i = self._at(lo)
            n = (min(hi, st[i + 1]) - lo) // k * k
            if n:
                out.append(self.parts[i][lo - st[i]:lo - st[i] + n])
            else:
                n = k
                out.append(self.get(lo, lo + k))
            lo += n
        return out


def _as_rows(data: np.ndarray, meta: ArrayMetadata) -> np.ndarray:
    dt = meta.data_type
    if dt.is_string:
        arr = np.asarray(data, dtype=object)
    else:
        arr = np.asarray(data)
        if arr.dtype != dt.numpy:
            if arr.dtype.kind != dt.numpy.kind or arr.dtype.itemsize != dt.numpy.itemsize:
                raise MetadataError(f"data of dtype {arr.dtype} does not match array type {dt.name}")
            arr = arr.astype(dt.numpy)
    return arr


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


def _expansion(pipeline) -> int:
    """Most in-memory bytes one stored byte of a chunk of ``pipeline`` can decode to: the product of
    its compressors' expansions (a shard's file bounds its inner chunks'), times 2 for strings (each
    item takes at least 4 stored bytes and 8 in an object array)."""
    r = 1
    for c in pipeline.bytes_bytes:
        r *= _EXPANSION.get(c.name, 1)
    ab = pipeline.array_bytes
    if isinstance(ab, ShardingCodec):
        return r * _expansion(ab.codecs)
    return r * (2 if ab.name == "vlen-utf8" else 1)


def _check_alloc(shape, where: str) -> None:
    n = 1
    for s in shape:
        n *= int(s)
    if n > MAX_READ_ELEMENTS:
        raise RefusalError(f"a read of shape {list(shape)} ({n} elements) exceeds {MAX_READ_ELEMENTS} elements: "
                           "read a smaller range", path=where, kind="too_large")


class Array:
    """One Zarr V3 array in a store."""

    def __init__(self, store, path: str, meta: ArrayMetadata):
        self.store = store
        self.path = path
        self.meta = meta
        self._index_cache: dict[str, ShardIndex] = {}
        # the last inner chunk decoded, keyed by (shard key, coord, offset, nbytes), with the rows it was
        # verified for: a frame-by-frame read of small frames decodes each chunk once
        self._chunk_cache: tuple | None = None
        self._json_template: tuple | None = None     # see metadata_json
        self._keys: dict[tuple, str] = {}               # chunk coords -> key, for one key encoding
        self._keys_encoding = None
        self._fast_geo: tuple | None = None          # see _fast_geometry
        self._fast_dec: tuple | None = None          # see _decoder
        self._fast_into: tuple | None = None         # see _decoder_into
        self._fast_into_mt: tuple | None = None      # see _decoder_into
        self._fast_many: tuple | None = None
        self._fast_many_mt: tuple | None = None
        self._fast_batch: tuple | None = None
        self._lean: tuple | None = None         # see _whole_chunk
        self._fast_part: tuple | None = None         # see _part_decoder
        # the inflated (still shuffled) bytes of the last chunk _whole_chunk read part of, keyed as
        # _chunk_cache: its next frame unshuffles the whole chunk from them
        self._inflated: tuple | None = None
        self._ahead: tuple | None = None             # see _raw_ahead
        self._last_read: tuple | None = None         # (shard key, inner row) of the last chunk fetched
        self.unverified_indexes: set[str] = set()   # shards whose index was rebuilt from verified chunks
        self._rebuild_reason: dict[str, str] = {}
        # written by an appender (chunks end to end at each shard's tail, the index rewritten in
        # place): a shard index that fails its crc32c or does not end where the file ends is then a
        # torn or dropped rewrite, rebuilt from the chunks that verify (shardscan).  Any other
        # array's shard may hold unreferenced bytes anywhere (the Zarr spec allows them), so its
        # index is taken as it is
        self.appended = False

    # -- open / create ---------------------------------------------------------
    @classmethod
    def open(cls, store, path: str, *, appended: bool = False) -> "Array":
        node = read_node(store, path)
        if node is None:
            raise StoreError("no zarr.json: not an array", path=store.describe(meta_key(path)))
        if not isinstance(node, ArrayMetadata):
            raise MetadataError("node is a group, not an array", path=store.describe(meta_key(path)))
        arr = cls(store, path, node)
        arr.appended = appended
        return arr

    @classmethod
    def create(cls, store, path: str, meta: ArrayMetadata, *, fsync: bool = False) -> "Array":
        arr = cls(store, path, meta)
        arr.write_metadata(fsync=fsync)
        return arr

    def write_metadata(self, *, fsync: bool = False) -> None:
        self.store.set(meta_key(self.path), self.metadata_json(), fsync=fsync)

    def metadata_json(self) -> bytes:
        """``json_dumps(self.meta.to_json())``, from a template kept per array.

        An appending writer republishes zarr.json at every flush with only the shape changed;
        the indented encoder is pure Python, so the rest of the document is encoded once and
        the shape spliced in (byte-identical; anything unusual takes the plain path).
        """
        m = self.meta
        key = (m.data_type, m.chunk_shape, m.codecs, repr(m.fill_value), m.chunk_key_encoding,
               repr(m.attributes), m.dimension_names, repr(m.extra))
        cached = self._json_template
        if cached is None or cached[0] != key:
            doc = m.to_json()
            doc["shape"] = _SHAPE_MARK
            parts = json_dumps(doc).split(_SHAPE_MARK_JSON)
            cached = self._json_template = (key, parts if len(parts) == 2 else None)
        parts = cached[1]
        if parts is None:
            return json_dumps(m.to_json())
        shape = json_dumps(list(m.shape)).replace(b"\n", b"\n  ")    # "shape" sits one level deep
        return parts[0] + shape + parts[1]

    def set_shape(self, shape, *, fsync: bool = False) -> None:
        """Grow or shrink (axis 0 or any axis) by an atomic replace of zarr.json."""
        self.meta = self.meta.with_shape(shape)
        self.write_metadata(fsync=fsync)

    def set_attributes(self, attrs: dict, *, fsync: bool = False) -> None:
        self.meta = self.meta.with_attributes(attrs)
        self.write_metadata(fsync=fsync)

    # -- geometry --------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.meta.shape

    @property
    def dtype(self):
        return self.meta.data_type.numpy

    @property
    def name(self) -> str:
        return self.store.describe(self.path)

    def __len__(self) -> int:
        return self.meta.shape[0] if self.meta.shape else 1

    def chunk_key(self, coords) -> str:
        coords = tuple(coords)
        k = self._keys.get(coords)
        if k is None or self._keys_encoding is not self.meta.chunk_key_encoding:
            if self._keys_encoding is not self.meta.chunk_key_encoding or len(self._keys) >= 4096:
                self._keys, self._keys_encoding = {}, self.meta.chunk_key_encoding
            k = self.meta.chunk_key_encoding.key(coords)
            k = self._keys[coords] = posixpath.join(self.path, k) if self.path else k
        return k

    def chunk_spec(self, key: str) -> ChunkSpec:
        m = self.meta
        return ChunkSpec(m.chunk_shape, m.data_type, m.fill_value, self.store.describe(key))

    @property
    def sharding(self) -> ShardingCodec | None:
        return self.meta.codecs.sharding

    # -- read ------------------------------------------------------------------
    def read(self, rows: slice | None = None, *, threads: int | None = None) -> np.ndarray:
        """The whole array, or a leading-axis range ``rows`` (step allowed).

        A read of many whole inner chunks of a sharded array decodes them on ``threads`` threads
        (default ``MREC_THREADS``, else the machine's cores; 1 = serial): the same values and the
        same errors as the serial read."""
        if rows is not None and rows.step is None:
            # the usual call (a frame's rows): straight to the one inner chunk holding them
            start, stop = rows.start, rows.stop
            if type(start) is int and type(stop) is int and 0 <= start < stop:
                shape = self.meta.shape
                if shape and stop <= shape[0]:
                    fast = self._whole_chunk(start, stop)
                    if fast is None:
                        fast = self._one_chunk_range(start, stop)
                    if fast is not None:
                        return fast
        m = self.meta
        if m.ndim == 0:
            key = self.chunk_key(())
            raw = self.store.get(key)
            if raw is None:
                return np.full((), m.fill_value, dtype=m.data_type.numpy)
            return np.array(self.meta.codecs.decode(raw, self.chunk_spec(key)), dtype=m.data_type.numpy)
        n = m.shape[0]
        rows = slice(None) if rows is None else rows
        start, stop, step = rows.indices(n)
        if step != 1:
            lo, hi = (start, stop) if step > 0 else (stop + 1, start + 1)
            if hi <= lo:
                return np.full((0, *m.shape[1:]), m.fill_value, dtype=m.data_type.numpy)
            base = self.read(slice(lo, hi), threads=threads)
            return base[(start - lo)::step] if step > 0 else base[(start - lo)::step]
        stop = max(stop, start)
        return self._read_range(start, stop, threads)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self.read(item)
        if isinstance(item, (int, np.integer)):
            n = len(self)
            i = int(item) + (n if item < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"row {item} out of range for {self.name} of {n} rows")
            return self.read(slice(i, i + 1))[0]
        if item is Ellipsis or item == ():
            return self.read()
        raise TypeError("arrays index by an int or a slice of the leading axis")

    def _read_range(self, start: int, stop: int, threads: int | None = None) -> np.ndarray:
        m = self.meta
        cs = m.chunk_shape
        if start < stop:
            fast = self._one_chunk_range(start, stop)
            if fast is not None:
                return fast
        want, dtype = (stop - start, *m.shape[1:]), m.data_type.numpy
        _check_alloc(want, self.name)
        if stop <= start or any(s == 0 for s in m.shape[1:]):
            return np.full(want, m.fill_value, dtype=dtype)
        trailing_grid = tuple(-(-s // c) for s, c in zip(m.shape[1:], cs[1:]))
        c_first, c_stop = start // cs[0], -(-stop // cs[0])
        whole = c_stop - c_first == 1 and all(g == 1 for g in trailing_grid)   # one chunk holds the range
        stored = self._stored_for(c_first, c_stop, math.prod(want) * dtype.itemsize,
                                  (c_stop - c_first) * math.prod(trailing_grid))
        if not whole and self._shards_span_trailing():
            out = np.empty(want, dtype=dtype) if stored is None else np.full(want, m.fill_value, dtype=dtype)
            return self._read_shards_into(start, stop, out, threads, stored)
        out = None
        cells = ((c0, *ct) for c0 in range(c_first, c_stop) for ct in _cells(trailing_grid)) if stored is None \
            else iter(stored)
        for coords in cells:
            c0, ct = coords[0], coords[1:]
            lo0 = c0 * cs[0]
            r_lo, r_hi = max(start, lo0) - lo0, min(stop, lo0 + cs[0]) - lo0
            block = self._read_chunk_rows(coords, r_lo, r_hi, threads)
            if out is None:
                if whole and block is not None and block.shape == want and block.dtype == dtype:
                    # the one copy (a frame of a frame-aligned column); a block the shard read
                    # assembled itself (it owns its data: never a view of a cached chunk) is ours
                    return block if block.flags.owndata else block.copy()
                out = np.full(want, m.fill_value, dtype=dtype)
            if block is None:
                continue
            dst = [slice(lo0 + r_lo - start, lo0 + r_hi - start)]
            src = [slice(None)]
            for c, s, size in zip(ct, cs[1:], m.shape[1:]):
                hi = min((c + 1) * s, size)
                dst.append(slice(c * s, hi))
                src.append(slice(0, hi - c * s))
            out[tuple(dst)] = block[tuple(src)]
        return out if out is not None else np.full(want, m.fill_value, dtype=dtype)

    def stored_chunks(self) -> list[tuple[int, ...]]:
        """Grid coordinates of the chunks (shards) this array has in its store, sorted, from a listing
        of its keys: what the files hold, never what a (1 KB) ``zarr.json`` declares.  A key that
        names no cell of the grid is no chunk of this array and is skipped."""
        m = self.meta
        enc = m.chunk_key_encoding
        grid = m.chunk_grid_shape
        lead = f"{self.path}/" if self.path else ""
        out = []
        for key in self.store.list(self.path):
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

    def _stored_for(self, c_first: int, c_stop: int, nbytes: int, ncells: int) -> list | None:
        """For a read of ``nbytes`` over ``ncells`` chunks of leading coordinates [c_first, c_stop):
        None when it is small (at most :data:`MAX_FILL_BYTES` over at most :data:`SPARSE_WALK` chunks:
        the grid is walked), else the stored chunks in range (one listing), after refusing
        (``too_large``) a read the stored chunks cannot back — each decodes to at most its file's
        size times its codecs' expansion, the rest is fill, of which at most MAX_FILL_BYTES is made.
        So a ``zarr.json`` declaring 2^31 rows over 40 stored bytes allocates nothing and visits one
        chunk, not 2^31 / 5."""
        if nbytes <= MAX_FILL_BYTES and ncells <= SPARSE_WALK:
            return None
        stored = [c for c in self.stored_chunks() if c_first <= c[0] < c_stop]
        if nbytes > MAX_FILL_BYTES:
            m = self.meta
            chunk_bytes = math.prod(m.chunk_shape) * m.data_type.numpy.itemsize
            ratio = _expansion(m.codecs)
            held = 0
            for c in stored:
                held += min(chunk_bytes, (self.store.size(self.chunk_key(c)) or 0) * ratio)
                if held + MAX_FILL_BYTES >= nbytes:
                    break
            else:
                raise RefusalError(f"a read of {nbytes} bytes, of which the {len(stored)} chunks the store holds "
                                   f"for it can decode to at most {held}: the rest would be the fill value of "
                                   f"chunks never written, more than {MAX_FILL_BYTES} bytes (a shape declared "
                                   "beyond the data; read a smaller range)", path=self.name, kind="too_large")
        return stored

    def _shards_span_trailing(self) -> bool:
        """Sharded by byte ranges with shards spanning the trailing axes exactly (each shard's rows
        are a run of the result's rows)."""
        m = self.meta
        return self.sharding is not None and m.ndim >= 1 and tuple(m.chunk_shape[1:]) == tuple(m.shape[1:])

    def _read_shards_into(self, start: int, stop: int, out: np.ndarray, threads: int | None,
                          stored: list | None = None) -> np.ndarray:
        """Rows [start, stop) (inside the array, start < stop) decoded straight into ``out``, their
        shape and dtype (any strides: a column of an interleaved result), shard after shard: the
        chunks, checks and errors of :meth:`_read_range` without a fill of the result or a copy of
        a shard's block.  Only when :meth:`_shards_span_trailing`.  With ``stored`` (the shards the
        store holds, :meth:`_stored_for`) only those are visited: ``out`` already holds the fill."""
        m = self.meta
        cs = m.chunk_shape
        tail = (0,) * (m.ndim - 1)
        for c0 in range(start // cs[0], -(-stop // cs[0])) if stored is None else (c[0] for c in stored):
            lo0 = c0 * cs[0]
            r_lo, r_hi = max(start, lo0) - lo0, min(stop, lo0 + cs[0]) - lo0
            dst = out[lo0 + r_lo - start:lo0 + r_hi - start]
            if self._read_shard_rows(self.chunk_key((c0, *tail)), r_lo, r_hi, threads, into=dst) is None:
                np.copyto(dst, m.fill_value, casting="unsafe")
        return out

    def read_into(self, rows: slice, out: np.ndarray, *, threads: int | None = None) -> np.ndarray:
        """``out[...] = self.read(rows)``, decoding straight into ``out`` where the layout allows (a
        sharded array whose shards span the trailing axes; ``out`` may be strided, e.g. one column
        of an interleaved (frames, atoms, 3) result): the same values and the same errors."""
        m = self.meta
        if m.ndim == 0 or rows.step not in (None, 1):
            out[...] = self.read(rows, threads=threads)
            return out
        start, stop, _ = rows.indices(m.shape[0])
        want = (max(stop - start, 0), *m.shape[1:])
        if tuple(out.shape) != want or out.dtype != m.data_type.numpy:
            raise ValueError(f"read_into needs an array of shape {list(want)} and dtype {m.data_type.numpy}, "
                             f"got {list(out.shape)} {out.dtype}")
        if stop <= start or not self._shards_span_trailing() or any(s == 0 for s in m.shape[1:]):
            out[...] = self.read(rows, threads=threads)
            return out
        _check_alloc(want, self.name)
        return self._read_shards_into(start, stop, out, threads)

    def _fast_geometry(self):
        """(shard rows, inner rows, shard key coords tail) when every read of a range inside one inner
        chunk can skip the general loop: sharded by byte ranges, shards and inner chunks spanning
        exactly the trailing axes (a frame-aligned column); else None.  Cached per metadata."""
        m = self.meta
        g = self._fast_geo
        if g is not None and g[0] is m:
            return g[1]
        geo = None
        sh = self.sharding
        # an inner chunk within MAX_READ_ELEMENTS and no zero-length trailing axis: any range inside
        # one passes _read_range's allocation check and is not empty, so the fast path may skip both
        if sh is not None and m.ndim >= 1 and tuple(m.chunk_shape[1:]) == tuple(m.shape[1:]) \
                and tuple(sh.chunk_shape[1:]) == tuple(m.shape[1:]) and len(sh.chunk_shape) == m.ndim \
                and all(d > 0 for d in m.shape[1:]) and math.prod(sh.chunk_shape) <= MAX_READ_ELEMENTS:
            row = m.data_type.numpy.itemsize * math.prod(m.shape[1:])
            geo = (m.chunk_shape[0], sh.chunk_shape[0], (0,) * (m.ndim - 1), sh.chunk_shape[0] * row)
        self._fast_geo = (m, geo)
        return geo

    def _resolved(self, slot: str, make: str, **kw):
        """``sh.codecs.<make>(spec, **kw)`` of this array's inner chunks, kept in ``self.<slot>`` while
        the sharding codec and the data type are the same objects."""
        sh, m = self.sharding, self.meta
        got = getattr(self, slot)
        if got is None or got[0] is not sh or got[1] is not m.data_type:
            got = (sh, m.data_type, getattr(sh.codecs, make)(ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, ""), **kw))
            setattr(self, slot, got)
        return got[2]

    def _decoder(self):
        """The resolved decoder of this array's inner chunks (CodecPipeline.decoder), or None."""
        return self._resolved("_fast_dec", "decoder")

    def _decoder_into(self, release_gil: bool = False, many: bool = False):
        """The resolved in-place decoder of this array's inner chunks (CodecPipeline.decoder_into), or
        None; ``release_gil``: the variant for decodes on several threads at once; ``many``: the one
        decoding a list of chunks."""
        slot = ("_fast_into", "_fast_into_mt", "_fast_many", "_fast_many_mt")[2 * many + release_gil]
        return self._resolved(slot, "decoder_into", release_gil=release_gil, many=many)

    def _part_decoder(self):
        """The resolved part decoder of this array's inner chunks (CodecPipeline.part_decoder), or None."""
        return self._resolved("_fast_part", "part_decoder")

    def _whole_chunk(self, start: int, stop: int) -> np.ndarray | None:
        """Rows [start, stop) inside one inner chunk of a frame-aligned column (a frame of a random
        read), in the plain case only: its shard index cached and read as written (not rebuilt), the
        chunk not the next of a forward walk (read-ahead is :meth:`_one_chunk_range`'s), its bytes read
        whole through the shard's range reader and decoded in place by the fused decoder.  A whole
        chunk is returned as decoded (not cached: the next frame is the next chunk).  Part of one
        is inflated and only its rows unshuffled (:meth:`CodecPipeline.part_decoder`), the inflated
        bytes kept; the next part read of the same chunk unshuffles it whole from them and caches it
        for its other neighbours (every row verified: an index read as written trusts all of them).
        The bytes and checks of :meth:`_one_chunk_range` without its bookkeeping; None otherwise."""
        lean = self._lean
        m = self.meta
        if lean is None or lean[0] is not m:
            geo = self._fast_geometry()
            into = self._decoder_into() if geo is not None else None
            lean = self._lean = (m, geo, into, {}, self.sharding.chunk_shape if into else None, m.data_type.numpy,
                                 self._part_decoder() if into else None)
        _m, geo, into, keys, chunk_shape, np_dtype, part_dec = lean
        if into is None:
            return None
        srows, irows, tail, _ = geo
        if start < 0 or stop > m.shape[0]:
            return None
        c0 = start // srows
        r_lo = start - c0 * srows
        i0 = r_lo // irows
        a = r_lo - i0 * irows
        if a + stop - start > irows:
            return None                         # more than one inner chunk
        got = keys.get(c0)
        if got is None:
            key = self.chunk_key((c0, *tail))
            index = self._index_cache.get(key)
            if index is None:
                return None
            ranges = getattr(self.store, "range_reader", None)
            got = keys[c0] = (key, index, ranges(key) if ranges is not None else None, self._as_written(key, index))
        key, index, fetch, written = got
        if self._index_cache.get(key) is not index or not written or key in self.unverified_indexes:
            keys.pop(c0, None)                   # the index was dropped or rebuilt since
            return None
        coord = (i0, *tail)
        off, n = index.offsets.item(coord), index.nbytes.item(coord)
        if off == _EMPTY:
            return None
        whole = a == 0 and stop - start == irows
        if not whole:
            cached = self._chunk_cache
            if cached is not None and cached[0] == (key, coord, off, n) and cached[2] >= a + stop - start:
                return cached[1][a:a + stop - start].copy()
            inflated = self._inflated
            if inflated is not None and inflated[0] == (key, coord, off, n):
                # the second frame of a chunk: unshuffled whole now, and cached for the rest
                chunk = np.empty(chunk_shape, dtype=np_dtype)
                part_dec[2](inflated[1], chunk)
                self._inflated = None
                self._chunk_cache = ((key, coord, off, n), chunk, irows, True)
                return chunk[a:a + stop - start].copy()
        last = self._last_read
        if last is not None and last[0] == key and last[1] == i0 - 1:
            return None                         # a forward walk: read ahead by the general path
        # the entry lies inside the file (the index's entries were bounded when it was read)
        raw = fetch(off, n) if fetch is not None else self.store.get_range(key, off, n)
        if raw is None or len(raw) != n:
            return None
        part = None if whole else part_dec
        if part is not None:
            # part of a chunk (a small frame): inflated, and only its rows unshuffled; the inflated
            # bytes are kept for a neighbour (every row verified, as below)
            try:
                data = part[0](raw)
                if data is None:
                    return None
                out = np.empty((stop - start, *chunk_shape[1:]), dtype=np_dtype)
                part[1](data, a, a + stop - start, out)
            except Exception:                   # noqa: BLE001 - the general path decodes and reports
                return None
            self._last_read = (key, i0)
            self._inflated = ((key, coord, off, n), data)
            return out
        chunk = np.empty(chunk_shape, dtype=np_dtype)
        try:
            if not into(raw, chunk):
                return None
        except Exception:                       # noqa: BLE001 - the general path decodes and reports
            return None
        self._last_read = (key, i0)
        if whole:
            return chunk
        self._chunk_cache = ((key, coord, off, n), chunk, irows, True)
        return chunk[a:a + stop - start].copy()

    def _one_chunk_range(self, start: int, stop: int) -> np.ndarray | None:
        """Rows [start, stop) copied out of the one inner chunk holding them, or None (general path).

        The same chunk fetch, decode and verification as :meth:`_read_shard_rows`; only the loop
        and its bookkeeping are skipped.  Anything unusual (absent shard, empty entry) is None."""
        geo = self._fast_geometry()
        if geo is None:
            return None
        srows, irows, tail, _ = geo
        c0 = start // srows
        lo0 = c0 * srows
        r_lo, r_hi = start - lo0, stop - lo0
        i0 = r_lo // irows
        if r_hi > srows or r_hi > (i0 + 1) * irows:
            return None
        key = self.chunk_key((c0, *tail))
        index = self._index_cache.get(key)
        if index is None:
            index = self.shard_index(key)
            if index is None:
                return None
        coord = (i0, *tail)
        span = (index.offsets.item(coord), index.nbytes.item(coord))
        if span[0] == _EMPTY and span[1] == _EMPTY:
            return None
        a = r_lo - i0 * irows
        # a read of a whole inner chunk (a frame of a frame-aligned column) is not cached: the next
        # frame is the next chunk.  When its decode made a fresh writable array (shuffle does),
        # that array is the result and the copy is saved
        whole = a == 0 and stop - start == irows
        raw = False
        if whole:
            ck = self._chunk_cache
            if ck is None or ck[0][:2] != (key, coord):
                limit = min(len(index.offsets), -(-(self.meta.shape[0] - lo0) // irows))
                raw = self._raw_ahead(key, index, i0, span[0], span[1], limit)
        chunk = self._inner_chunk(key, index, coord, r_hi - i0 * irows, None, keep=not whole, raw=raw, span=span)
        if chunk.dtype != self.meta.data_type.numpy:
            return None
        if whole:
            cached = self._chunk_cache
            if chunk.flags.writeable and chunk.flags.c_contiguous \
                    and (cached is None or cached[1] is not chunk):
                return chunk
            return chunk.copy()
        return chunk[a:a + stop - start].copy()

    def decode_estimate(self, start: int, stop: int) -> int:
        """Roughly how many decoded bytes a read of rows [start, stop) costs (0: a cached chunk).

        Only a hint for running reads concurrently; it never changes what a read returns."""
        geo = self._fast_geometry()
        if geo is None:
            m = self.meta
            if m.ndim == 0 or stop <= start:
                return 0
            return (stop - start) * m.data_type.numpy.itemsize * math.prod(m.shape[1:])
        srows, irows, tail, ibytes = geo
        n = -(-stop // irows) - start // irows
        if n == 1:
            cached = self._chunk_cache
            if cached is not None and cached[0][1][0] == (start % srows) // irows \
                    and cached[0][0] == self.chunk_key((start // srows, *tail)):
                return 0
        return max(n, 0) * ibytes

    def _read_chunk_rows(self, coords, r_lo: int, r_hi: int, threads: int | None = None) -> np.ndarray | None:
        key = self.chunk_key(coords)
        if self.sharding is not None:
            return self._read_shard_rows(key, r_lo, r_hi, threads)
        raw = self.store.get(key)
        if raw is None:
            return None
        _check_alloc(self.meta.chunk_shape, self.store.describe(key))     # a chunk is decoded whole
        chunk = self.meta.codecs.decode(raw, self.chunk_spec(key))
        return chunk[r_lo:r_hi]

    # -- sharded read ----------------------------------------------------------
    def shard_index(self, key: str, *, cached: bool = True) -> ShardIndex | None:
        """Decoded index of the shard at ``key`` (None when the shard is absent)."""
        if cached and key in self._index_cache:
            return self._index_cache[key]
        sh = self.sharding
        grid = sh.grid(self.meta.chunk_shape, self.name)
        isize = sh.index_size(grid)
        offset = 0 if sh.index_location == "start" else -isize
        raw = self.store.get_range(key, offset, isize)
        if raw is None:
            return None
        where = self.store.describe(key)
        if len(raw) < isize:
            raise CorruptionError(f"shard of {len(raw)} bytes is shorter than its {isize}-byte index", path=where)
        try:
            index = sh.decode_index(raw, grid, where)
            torn = False
        except CorruptionError as exc:
            if not (self.appended and shardscan.rebuildable(sh, grid)):
                # never read through an index that fails its own crc32c: its entries may name
                # other chunks (swapped, duplicated) that verify, and the rows would be wrong
                raise CorruptionError(f"{exc.detail}; the shard index is not trusted, so the shard is not "
                                      "read (`mrec repair` rebuilds the index of a trajectory shard from "
                                      "the order its chunks were appended in)", path=exc.path or where) from None
            index, torn = None, True
        rebuildable = self.appended and shardscan.rebuildable(sh, grid)
        # byte ranges are bounded before any read.  The size is taken after the index: a concurrent
        # appender writes chunks before the index naming them, so it covers every entry
        size = self.store.size(key) or 0
        if index is not None:
            # entries past the end of an appended shard are a rewrite newer than its chunks: rebuilt below
            index.check_bounds(size, where, past_end=not rebuildable)
        if rebuildable:
            # an index that does not end where the file ends is older than the chunks after it
            # (a dropped or torn in-place rewrite) or points past the end: rebuild it in memory
            if torn or max(index.data_end(), isize) != size:
                end = None if torn else max(index.data_end(), isize)
                self._rebuild_reason[key] = (
                    "its shard index failed its crc32c" if torn else
                    f"truncated shard: its index claims bytes up to {end}, the file holds {size}" if end > size else
                    f"its index ends at byte {end}, the file at {size} (an index older than its chunks)")
                index = self.rebuilt_index(key, raw, grid)
        self._index_cache[key] = index
        return index

    def rebuilt_index(self, key: str, raw_index: bytes | None = None, grid=None) -> ShardIndex:
        """The index of shard ``key`` rebuilt from the inner chunks that verify (see shardscan)."""
        sh = self.sharding
        grid = grid or sh.grid(self.meta.chunk_shape, self.name)
        data = self.store.get(key) or b""
        raw_index = raw_index if raw_index is not None else data[:sh.index_size(grid)]
        entries = shardscan.raw_entries(sh, raw_index, grid) if len(raw_index) == sh.index_size(grid) else None
        spec = ChunkSpec(sh.chunk_shape, self.meta.data_type, self.meta.fill_value, self.store.describe(key))
        index, _ = shardscan.rebuild(sh, grid, spec, data, entries)
        self.unverified_indexes.add(key)
        return index

    def _older_copy(self, key: str, coord, need: int, spec: ChunkSpec, exc: CorruptionError) -> np.ndarray:
        """An earlier copy of a failing inner chunk that provably holds its first ``need`` rows.

        A power loss can leave an index (rewritten in place) pointing at a re-encoded chunk
        whose bytes never reached the disk, while an earlier copy — the one the durable
        commit used — is still in the file.  That copy is used only when its row
        ``need - 1`` is not the fill value (re-encoding pads a partial chunk with fill, so
        real rows are a prefix): it never stands in for rows it did not hold.
        """
        sh = self.sharding
        grid = sh.grid(self.meta.chunk_shape, self.name)
        if key in self.unverified_indexes or not (self.appended and shardscan.rebuildable(sh, grid)):
            raise exc
        data = self.store.get(key) or b""
        isize = sh.index_size(grid)
        index, _ = shardscan.rebuild(sh, grid, spec, data, shardscan.raw_entries(sh, data[:isize], grid)
                                     if len(data) >= isize else None)
        if index.is_empty(coord):
            raise exc
        off, n = int(index.offsets[coord]), int(index.nbytes[coord])
        chunk = np.asarray(sh.codecs.decode(data[off:off + n], spec))
        if not shardscan.trusted(index, coord, chunk, need, self.meta.fill_value):
            raise exc
        return chunk

    def drop_cache(self) -> None:
        self._index_cache.clear()
        self._chunk_cache = self._inflated = None
        self._ahead = self._last_read = None

    def _raw_ahead(self, key: str, index: ShardIndex, i0: int, off: int, n: int, limit: int):
        """Raw bytes ``[off, off + n)`` of inner chunk row ``i0`` of shard ``key`` for a frame read,
        or False (fetch them alone).  A read of the chunk right after the last one fetched (a
        forward walk) fetches it and the chunks lying back to back after it, below inner row
        ``limit`` (the array's shape) and up to READ_AHEAD bytes, in one range; the next reads are
        served from that range.  The same bytes the file
        holds (an appended shard's committed bytes are never rewritten), checked as ever."""
        got = self._ahead
        if got is not None and got[0] == key and got[1] <= off and off + n <= got[1] + len(got[2]):
            self._last_read = (key, i0)
            return got[2][off - got[1]:off - got[1] + n]
        last, self._last_read = self._last_read, (key, i0)
        if last != (key, i0 - 1) or index.offsets.ndim != 1:
            return False
        offs, sizes = index.offsets, index.nbytes
        end, j = off + n, i0 + 1
        while j < limit and end - off < READ_AHEAD and int(offs[j]) == end and int(sizes[j]) != _EMPTY:
            end += int(sizes[j])
            j += 1
        if j == i0 + 1:
            return False
        raw = self.store.get_range(key, off, end - off)
        if raw is None or len(raw) != end - off:
            self._ahead = None
            return False                   # a short file: the chunk alone decides what to report
        ahead = self._ahead = (key, off, memoryview(raw))
        return ahead[2][:n]                # this read's bytes, whatever another thread sets meanwhile

    def _prefetch(self, key: str, index: ShardIndex, coords) -> dict:
        """Raw bytes of the inner chunks ``coords`` of shard ``key`` that lie back to back in the file
        (as an appender lands them), read as one byte range per run of at most
        :data:`COALESCE_BYTES`; the bytes are exactly those one read per chunk returns (None for an
        absent file, short at a truncated end).  Empty, cached and isolated chunks are left out:
        :meth:`_inner_chunk` reads those itself."""
        cached = self._chunk_cache
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
                if cached is not None and cached[0] == (key, coord, off, n):
                    continue
                ents.append((off, n, coord))
        else:
            for coord in coords:
                if index.is_empty(coord):
                    continue
                off, n = int(index.offsets[coord]), int(index.nbytes[coord])
                if cached is not None and cached[0] == (key, coord, off, n):
                    continue
                ents.append((off, n, coord))
        ents.sort()
        views = self.sharding.codecs._view_decoders is not None
        out = {}
        i = 0
        while i < len(ents):
            start = ents[i][0]
            end = start + ents[i][1]
            j = i + 1
            while j < len(ents) and ents[j][0] == end and end + ents[j][1] - start <= COALESCE_BYTES:
                end += ents[j][1]
                j += 1
            if j - i > 1:
                raw = self.store.get_range(key, start, end - start)
                mv = memoryview(raw) if raw is not None else None
                for off, n, coord in ents[i:j]:
                    if mv is None:
                        out[coord] = None
                    else:
                        piece = mv[off - start:off - start + n]
                        out[coord] = piece if views else bytes(piece)
            i = j
        return out

    def _inner_chunk(self, key: str, index: ShardIndex, coord, b: int, where: str | None,
                     keep: bool = True, raw=False, dest: np.ndarray | None = None, span=None) -> np.ndarray:
        """Inner chunk ``coord`` (non-empty in ``index``) of shard ``key``, decoded and verified for its
        first ``b`` rows; the last one decoded is cached.  ``span``: its index entry (offset, bytes)
        when the caller has read it already."""
        sh = self.sharding
        m = self.meta
        off, n = span if span is not None else (int(index.offsets[coord]), int(index.nbytes[coord]))
        ck = (key, coord, off, n)
        cached = self._chunk_cache
        if cached is not None and cached[0] == ck and (cached[2] >= b or (
                cached[3] and shardscan.trusted(index, coord, cached[1], b, m.fill_value))):
            # the same verified bytes.  A chunk decoded from these bytes (not an older copy, which
            # holds only the rows it was checked for) serves more rows after the same check the
            # decode path makes: a frame-by-frame read walks forward through the chunk
            if cached[2] < b:
                self._chunk_cache = (ck, cached[1], b, True)
            return cached[1]
        if raw is False:                       # not prefetched
            raw = self.store.get_range(key, off, n)
        direct = True
        chunk = None
        if dest is None and raw is not None and len(raw) == n:
            # the resolved decoder (no per-chunk labels); any failure is decoded again below through
            # the labelled path, which raises the error to report.  The in-place one (crc32c and zstd
            # fused, unshuffled into a fresh array) when the codecs allow, else the plain one
            into = self._decoder_into()
            if into is not None:
                chunk = np.empty(sh.chunk_shape, dtype=m.data_type.numpy)
                try:
                    if not into(raw, chunk):
                        chunk = None
                except Exception:
                    chunk = None
            else:
                fast = self._decoder()
                try:
                    chunk = fast(raw) if fast is not None else None
                except Exception:
                    chunk = None
            if chunk is not None and shardscan.trusted(index, coord, chunk, b, m.fill_value):
                if keep:
                    self._chunk_cache = (ck, chunk, b, True)
                return chunk
            chunk = None               # not verified: the labelled path below decides
        if where is None:
            where = self.store.describe(key)
        inner_spec = ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, where)
        label = f"{where} inner chunk {list(coord)}"
        try:
            if raw is None or len(raw) != n:
                got = 0 if raw is None else len(raw)
                raise CorruptionError(f"truncated shard: inner chunk {list(coord)} needs bytes "
                                      f"{off}..{off + n}, got {got}", path=where)
            try:
                if dest is None:
                    chunk = sh.codecs.decode(raw, inner_spec.at(label))
                else:                          # decoded in place when the codecs allow: never cached
                    chunk = sh.codecs.decode_into(raw, inner_spec.at(label), dest)
                    keep = keep and chunk is not dest
            except CorruptionError as exc:
                # the entry is as suspect as the bytes: say which range it named
                raise CorruptionError(f"{exc.detail}; its shard index entry {list(coord)} names bytes "
                                      f"{off}..{off + n} (offset {off}, {n} bytes): the entry or the bytes "
                                      "it names are damaged", path=exc.path or where) from None
            if not shardscan.trusted(index, coord, chunk, b, m.fill_value):
                why = self._rebuild_reason.get(key, "its shard index failed verification")
                raise CorruptionError(f"{why}; the newest copy of inner chunk {list(coord)} does "
                                      f"not verify and the copy before it does not provably hold "
                                      f"row {b - 1}", path=where)
        except CorruptionError as exc:
            chunk = self._older_copy(key, coord, b, inner_spec.at(label), exc)
            direct = False
        # remember how many rows were verified (and how): a later read needing more re-checks
        if keep:
            self._chunk_cache = (ck, chunk, b, direct)
        return chunk

    def _decode_whole(self, key: str, index: ShardIndex, raws: dict, out: np.ndarray, r_lo: int,
                      first: int, last: int, where: str, threads: int | None) -> set:
        """Decode the prefetched whole inner chunks of rows [first, last) (inner-chunk rows of a shard
        whose inner chunks span every trailing axis) straight into their rows of ``out``, on the
        pool (:func:`decode_all`); returns the coords done.  Only the plain case is done here: the
        bytes fetched in full, decoded in place and verified as :meth:`_inner_chunk` verifies them.
        Anything else (a failing decode or check, a short read, a decode that cannot go in place)
        is left to the serial loop, which decodes it again through the labelled path and raises
        exactly the error a serial read raises, at the same chunk."""
        sh, m = self.sharding, self.meta
        ir = sh.chunk_shape[0]
        tail = (0,) * (m.ndim - 1)
        jobs = []
        sizes = index.nbytes.reshape(index.nbytes.shape[0], -1)[first:last, 0].tolist()   # one cell a row
        for i0, size in zip(range(first, last), sizes):
            lo0 = i0 * ir
            if lo0 < r_lo or lo0 + ir > r_lo + len(out):
                continue
            coord = (i0, *tail)
            raw = raws.get(coord)
            if raw is None or raw is False or len(raw) != size:
                continue
            jobs.append((coord, raw, out[lo0 - r_lo:lo0 - r_lo + ir]))
        if len(jobs) < 2:
            return set()
        nbytes = len(jobs) * out[:ir].nbytes
        parts = decode_parts(len(jobs), nbytes, threads)
        fill = m.fill_value
        trusted = shardscan.trusted
        if parts > 1 or concurrent():
            # on several threads, or on one beside others (a read ahead): few long GIL-free calls
            done = self._decode_batch(index, jobs, out, r_lo, ir, parts)
            if done is not None:
                for coord in done:
                    raws.pop(coord, None)
                return done
        # on several threads, the unshuffle that runs without the GIL
        into = self._decoder_into(release_gil=parts > 1, many=True)
        if into is None:
            return set()

        def decode(part) -> list:
            try:
                got = into([(raw, dest) for _c, raw, dest in part])
                return [g and trusted(index, coord, dest, ir, fill) for g, (coord, _r, dest) in zip(got, part)]
            except Exception:          # noqa: BLE001 - the serial loop decodes them again and reports
                return [False] * len(part)
        ok = decode_all(decode, jobs, nbytes, threads, per_part=True)
        done = {job[0] for job, good in zip(jobs, ok) if good}
        for coord in done:
            raws.pop(coord, None)
        return done

    def _as_written(self, key: str, index: ShardIndex) -> bool:
        """Whether shard ``key``'s ``index`` is read as written (not rebuilt, nothing degraded), one
        cell a row: every entry is then trusted for all its rows (the batch and lean paths' case)."""
        return key not in self.unverified_indexes and not getattr(index, "degraded", None) \
            and index.offsets.size == index.offsets.shape[0]

    @staticmethod
    def _plain_entries(index: ShardIndex, a: int, b: int):
        """(offsets, sizes) as int64 of the index entries of inner rows [a, b) when each names a
        chunk (none empty, none shorter than a checksum); else None."""
        offs = index.offsets.reshape(-1)[a:b]
        sizes = index.nbytes.reshape(-1)[a:b]
        if len(offs) != b - a or (offs == EMPTY).any() or (sizes < 5).any():
            return None
        return offs.astype(np.int64), sizes.astype(np.int64)

    def _run_pieces(self, key: str, offs: np.ndarray, sizes: np.ndarray) -> tuple | None:
        """The raw bytes of inner chunks whose entries lie back to back, read as one range: (one
        memoryview a chunk, the batch decoder's layout segment ``(bytes, starts, sizes)``); None for
        an absent or short file."""
        o0 = int(offs[0])
        span = int(offs[-1] + sizes[-1]) - o0
        raw = self.store.get_range(key, o0, span)
        if raw is None or len(raw) != span:
            return None
        mv = memoryview(raw)
        starts = offs - o0
        return [mv[o:o + k] for o, k in zip(starts.tolist(), sizes.tolist())], (raw, starts, sizes)

    def _batch_whole(self, key: str, index: ShardIndex, out: np.ndarray, r_lo: int, r_hi: int,
                     threads: int | None) -> range:
        """The whole inner chunks of rows [r_lo, r_hi) of shard ``key`` (inner chunks spanning the
        trailing axes) decoded straight into their rows of ``out`` by the batch decoder, without
        per-chunk bookkeeping: the inner-chunk rows done, one run (``range``: the caller's leftovers
        are then found without a pass over every chunk of the shard, which cost ~10 % of a
        two-thread whole-column read).  Only the plain case: an index read as written (not rebuilt),
        entries back to back in the file (as an appender lands them), bytes read whole, and a batch
        that decodes; anything else is left (from the first run that is not plain) to the general
        path, which decodes it again and raises the error a serial read raises."""
        if not self._as_written(key, index):
            return range(0)
        batch = self._resolved("_fast_batch", "batch_decoder")
        if batch is None:
            return range(0)
        ir = self.sharding.chunk_shape[0]
        a, b = -(-r_lo // ir), r_hi // ir              # the inner chunks wholly inside the rows
        entries = self._plain_entries(index, a, b) if b - a >= 2 else None
        if entries is None:
            return range(0)
        offs, sizes = entries
        chunk_bytes = out[:ir].nbytes
        # runs of entries back to back, cut at COALESCE_BYTES: one range read each
        breaks = (np.nonzero(offs[1:] != offs[:-1] + sizes[:-1])[0] + 1).tolist()
        cuts = [0]
        for stop in breaks + [b - a]:
            lo = cuts[-1]
            while lo < stop:
                extent = offs[lo:stop] + sizes[lo:stop] - offs[lo]
                lo = min(stop, lo + max(1, int(np.searchsorted(extent, COALESCE_BYTES, side="right"))))
                cuts.append(lo)
        done = 0                                       # runs are decoded in order: rows [a, a + done)
        for lo, hi in zip(cuts, cuts[1:]):
            if hi <= lo:
                continue
            got = self._run_pieces(key, offs[lo:hi], sizes[lo:hi])
            if got is None:
                break
            pieces, segment = got
            r0 = (a + lo) * ir - r_lo
            dest = out[r0:r0 + (hi - lo) * ir].view()
            try:
                dest.shape = (hi - lo, -1)            # a view (any strides), never a copy
            except AttributeError:
                break
            if not batch(pieces, dest, decode_parts(hi - lo, (hi - lo) * chunk_bytes, threads), [segment]):
                break
            done = hi
        return range(a, a + done)

    def _decode_batch(self, index: ShardIndex, jobs: list, out: np.ndarray, r_lo: int, ir: int,
                      threads: int) -> set | None:
        """:meth:`_decode_whole`'s jobs decoded by the pipeline's batch decoder (every frame inflated
        in C on ``threads`` threads, then unshuffled on the pool), one run of consecutive inner-chunk
        rows at a time; the coords done (each verified as :meth:`_inner_chunk` verifies it), or None
        when there is no batch decoder or a run does not decode (the caller's per-chunk path then
        decodes them again and reports)."""
        batch = self._resolved("_fast_batch", "batch_decoder")
        if batch is None:
            return None
        fill, trusted = self.meta.fill_value, shardscan.trusted
        done = set()
        s = 0
        while s < len(jobs):
            e = s + 1
            while e < len(jobs) and jobs[e][0][0] == jobs[e - 1][0][0] + 1:
                e += 1
            run = jobs[s:e]
            lo = run[0][0][0] * ir - r_lo
            dest = out[lo:lo + len(run) * ir].view()
            try:
                dest.shape = (len(run), -1)            # a view (any strides), never a copy
            except AttributeError:
                return None if not done else done
            if not batch([raw for _c, raw, _d in run], dest, threads):
                return None if not done else done
            for coord, _raw, d in run:
                if trusted(index, coord, d, ir, fill):
                    done.add(coord)
            s = e
        return done

    def _read_shard_rows(self, key: str, r_lo: int, r_hi: int, threads: int | None = None,
                         into: np.ndarray | None = None) -> np.ndarray | None:
        """Rows [r_lo, r_hi) of the shard at ``key`` (None: the shard is absent).  ``into`` (an array
        of exactly the rows' shape and the array's dtype, when the shard spans the trailing axes)
        receives them and is returned."""
        sh = self.sharding
        index = self.shard_index(key)
        if index is None:
            return None       # a shard never written reads as the fill value (the Zarr V3 rule)
        m = self.meta
        shard_shape = m.chunk_shape
        ics = sh.chunk_shape
        _check_alloc((r_hi - r_lo, *shard_shape[1:]), self.store.describe(key))
        grid = index.offsets.shape
        where = self.store.describe(key)
        single = all(g == 1 for g in grid[1:])   # an inner chunk spans every trailing axis
        first, last = r_lo // ics[0], -(-r_hi // ics[0])
        raws = {}
        out = into
        rest = range(first, last)                   # the inner-chunk rows the loop below decodes
        if last - first > 1 or not single:
            if out is None:
                # every cell of the shard's grid below is written: a chunk, or the fill (as np.full would)
                out = np.empty((r_hi - r_lo, *shard_shape[1:]), dtype=m.data_type.numpy)
            if single and last - first > 2:
                early = self._batch_whole(key, index, out, r_lo, r_hi, threads)
                if len(early) == last - first:
                    return out
                if early:
                    rest = [*range(first, early.start), *range(early.stop, last)]
            raws = self._prefetch(key, index, [(i0, *it) for i0 in rest for it in _cells(grid[1:])])
        done = self._decode_whole(key, index, raws, out, r_lo, first, last, where, threads) \
            if single and len(raws) > 1 and out is not None else ()
        if done:
            zeros = (0,) * (len(grid) - 1)          # done only holds whole chunks of single-cell rows
            rest = [i0 for i0 in rest if (i0, *zeros) not in done]
            if not rest:
                return out
        for i0 in rest:
            lo0 = i0 * ics[0]
            a, b = max(r_lo, lo0) - lo0, min(r_hi, lo0 + ics[0]) - lo0
            for it in _cells(grid[1:]):
                coord = (i0, *it)              # never one of done: rest holds none of its rows
                if index.is_empty(coord):
                    if key in self.unverified_indexes:
                        why = self._rebuild_reason.get(key, "its shard index failed verification")
                        raise CorruptionError(f"{why}, and no copy of inner chunk {list(coord)} verifies: "
                                              "its rows are lost", path=where)
                    chunk = None
                else:
                    dest = None
                    if out is not None and single and a == 0 and b == ics[0]:
                        dest = out[lo0 - r_lo:lo0 + b - r_lo]      # a whole inner chunk: decoded in place
                    chunk = self._inner_chunk(key, index, coord, b, where, raw=raws.pop(coord, False), dest=dest)
                    if chunk is dest:
                        continue
                    if out is None and single and b - a == r_hi - r_lo:
                        return chunk[a:b]          # the whole range in one inner chunk: the caller copies it
                if out is None:
                    # every cell of the shard's grid below is written: a chunk, or the fill (as np.full would)
                    out = np.empty((r_hi - r_lo, *shard_shape[1:]), dtype=m.data_type.numpy)
                dst = [slice(lo0 + a - r_lo, lo0 + b - r_lo)]
                dst += [slice(c * s, (c + 1) * s) for c, s in zip(it, ics[1:])]
                if chunk is None:
                    np.copyto(out[tuple(dst)], m.fill_value, casting="unsafe")
                    continue
                out[tuple(dst)] = chunk[a:b]
        if out is None:
            out = np.full((r_hi - r_lo, *shard_shape[1:]), m.fill_value, dtype=m.data_type.numpy)
        return out

    # -- whole write (fixed-size arrays) ---------------------------------------
    def write(self, data: np.ndarray, *, fsync: bool = False) -> list[str]:
        """Encode and store every chunk of ``data`` (shape must equal the array's).

        Each chunk key is written by atomic replace.  Returns the keys written.
        """
        m = self.meta
        arr = _as_rows(data, m)
        if tuple(arr.shape) != m.shape:
            raise MetadataError(f"data shape {list(arr.shape)} does not match array shape {list(m.shape)}", path=self.name)
        keys = []
        cs = m.chunk_shape
        for coords in np.ndindex(*m.chunk_grid_shape):
            chunk = np.full(cs, m.fill_value, dtype=m.data_type.numpy)
            src, dst = [], []
            for c, s, size in zip(coords, cs, m.shape):
                hi = min((c + 1) * s, size)
                src.append(slice(c * s, hi))
                dst.append(slice(0, hi - c * s))
            chunk[tuple(dst)] = arr[tuple(src)]
            key = self.chunk_key(coords)
            self.store.set(key, self.meta.codecs.encode(chunk, self.chunk_spec(key)), fsync=fsync)
            keys.append(key)
        self._index_cache.clear()
        return keys


def read_together(arrays: list, start: int, stop: int, threads: int | None = None) -> list | None:
    """``[a.read(slice(start, stop)) for a in arrays]`` decoded by ONE batch-decoder call (the columns
    of a block: one hand-out of pieces to the threads instead of one per column), in the plain case
    only: frame-aligned sharded columns of one geometry, dtype and inner pipeline; the rows whole
    inner chunks of one shard; each shard index read as written (not rebuilt) with the chunks' entries
    back to back; the bytes read whole, and every chunk decoding.  None otherwise (read each array:
    the same values, and the errors a serial read raises).  The arrays are views of one
    (arrays, rows, ...) array."""
    if len(arrays) < 2 or stop <= start or start < 0:
        return None
    first = arrays[0]
    geo = first._fast_geometry()
    batch = first._resolved("_fast_batch", "batch_decoder") if geo is not None else None
    if batch is None:
        return None
    srows, irows, tail, ibytes = geo
    if start % irows or (stop - start) % irows or start // srows != (stop - 1) // srows:
        return None
    c0 = start // srows
    a0 = (start - c0 * srows) // irows
    n = (stop - start) // irows
    m = first.meta
    pieces, layout = [], []
    for arr in arrays:
        if arr is not first and (arr._fast_geometry() != geo or arr.meta.data_type != m.data_type
                                 or arr.sharding.codecs != first.sharding.codecs):
            return None
        if stop > arr.meta.shape[0]:
            return None
        key = arr.chunk_key((c0, *tail))
        index = arr.shard_index(key)
        entries = arr._plain_entries(index, a0, a0 + n) if index is not None and arr._as_written(key, index) else None
        if entries is None:
            return None
        offs, sizes = entries
        if (n > 1 and (offs[1:] != offs[:-1] + sizes[:-1]).any()) \
                or int(offs[-1] + sizes[-1] - offs[0]) > 16 * COALESCE_BYTES:
            return None                          # not one range: the per-array path reads them
        got = arr._run_pieces(key, offs, sizes)
        if got is None:
            return None
        pieces.extend(got[0])
        layout.append(got[1])
    out = np.empty((len(arrays), stop - start, *m.shape[1:]), dtype=m.data_type.numpy)
    dest = out.reshape(len(arrays) * n, -1)
    if not batch(pieces, dest, decode_parts(len(pieces), len(pieces) * ibytes, threads), layout):
        return None
    return list(out)


class ShardedAppender:
    """Append rows along axis 0 of an array whose codec is ``sharding_indexed`` (index at start).

    Rows are buffered by :meth:`append` and landed by :meth:`land`: every
    complete inner chunk is encoded once and written at the tail of its
    shard file; a partial tail chunk is encoded padded with the fill value
    and re-encoded (at the tail again) by the next landing — the only source
    of dead bytes.  The index at the start of the shard is rewritten in
    place.  ``zarr.json`` is *not* written: the caller decides when (the
    commit protocol); :attr:`array.meta` carries the new shape.
    """

    #: encodes submitted ahead and not yet landed hold at most this many input bytes (then append waits)
    AHEAD_BYTES = 64 << 20
    #: inner chunks smaller than this are encoded at the landing even with ``ahead=True``: a hand-off
    #: per small chunk cost more than the second core gave (3000-atom frames: append blocked 1.8-2x
    #: longer; 50k-atom frames: 0.90-0.98x, docs/performance.md "Issue 16")
    AHEAD_MIN_BYTES = 96 * 1024
    #: smaller inner chunks are encoded ahead by the batch encoder, a pool task for every run of
    #: complete chunks holding at least this many bytes (one numpy shuffle and one zstandard call a
    #: task, so the GIL changes hands a few times a task, not per chunk).  3000-atom frames, 1 ms
    #: MD step between appends: mean blocking 0.15 ms at 96 KiB, 0.13 at 256 KiB, 0.18 at 512 KiB
    #: (the landing's rest grows), 0.24 without (docs/performance.md, stop 14)
    AHEAD_BATCH_BYTES = 256 * 1024
    #: ... and only when this appender's previous append was at least this long ago (seconds): a
    #: producer that calls append between MD steps.  Back to back (3000-atom frames, no step) the
    #: batches made the whole write ~20 % slower on two cores (GIL hand-offs); with a 1 ms step they
    #: nearly halve the time append blocks
    AHEAD_GAP = 250e-6
    #: a landing of at least this many inner chunks of a shard is encoded by the batch encoder
    #: (``pipeline.batch_encoder``: one zstandard call per part, which costs a context of its own)
    BATCH_MIN = 8

    def __init__(self, array: Array, rows: int | None = None, *, ahead: bool = False):
        sh = array.sharding
        m = array.meta
        if sh is None:
            raise MetadataError("append needs a sharding_indexed array→bytes codec", path=array.name)
        if sh.index_location != "start":
            raise MetadataError("append needs index_location 'start'", path=array.name)
        if m.ndim == 0:
            raise MetadataError("cannot append to a 0-d array", path=array.name)
        if any(c < s for c, s in zip(m.chunk_shape[1:], m.shape[1:])):
            raise MetadataError("append needs shards spanning every trailing axis", path=array.name)
        self.array = array
        array.appended = True
        self.sharding = sh
        self.shard_rows = m.chunk_shape[0]
        self.inner_rows = sh.chunk_shape[0]
        self.grid = sh.grid(m.chunk_shape, array.name)
        self.index_size = sh.index_size(self.grid)
        self.rows = m.shape[0] if rows is None else int(rows)
        if not 0 <= self.rows <= m.shape[0]:
            raise MetadataError(f"cannot append after row {self.rows}: the array holds {m.shape[0]} rows", path=array.name)
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.indexes: dict[int, ShardIndex] = {}
        self.ends: dict[int, int] = {}     # shard number -> byte offset where the next chunk lands
        self.tail: np.ndarray | None = None
        part = self.rows % self.inner_rows
        if part:
            self.tail = array.read(slice(self.rows - part, self.rows))
        self.bytes_written = 0
        self._fast: tuple | None = None
        self._batch = False                          # the batch encoder (None: not applicable), made once
        # encode ahead (``ahead=True`` and more than one thread): every complete inner chunk of the
        # buffered rows is handed to the pool as soon as append() completes it; land() writes the
        # bytes it encoded (the same bytes, in the same order: only the time of the encode moves)
        self._ahead_on = ahead
        self._futures: dict[int, object] = {}        # inner chunk number (global) -> Future of its bytes
        self._inflight = 0                           # input bytes of the futures not yet landed
        self._carry: list[np.ndarray] = []           # buffered rows not yet in a submitted chunk
        self._carry_rows = 0
        self._carry_start = 0                        # global row where the carry begins (inner-chunk aligned)
        self.ahead_error: BaseException | None = None   # the first encode that failed on a worker
        self._ahead_mode: tuple | None = None        # (chunk encoder, batch encoder, chunk bytes), made once
        self._ahead_seen = time.perf_counter()       # the last append that completed a chunk (or the start)
        self._reset_carry()

    def _batch_encoder(self, where: str):
        """The pipeline's batch encoder of this array's inner chunks (``pipeline.batch_encoder``) or
        None, made once."""
        if self._batch is False:
            m, sh = self.array.meta, self.sharding
            self._batch = batch_encoder(sh.codecs, ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, where))
        return self._batch

    def _encoder(self, where: str):
        """The pipeline's resolved encoder of this array's inner chunks (or None), made once."""
        if self._fast is None:
            m, sh = self.array.meta, self.sharding
            self._fast = (sh.codecs.encoder(ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, where)),)
        return self._fast[0]

    @property
    def total_rows(self) -> int:
        return self.rows + self.pending_rows

    def append(self, data) -> None:
        m = self.array.meta
        arr = _as_rows(data, m)
        if arr.ndim != m.ndim or tuple(arr.shape[1:]) != m.shape[1:]:
            raise MetadataError(f"rows of shape {list(arr.shape)} do not fit array shape {list(m.shape)}", path=self.array.name)
        if len(arr):
            self.pending.append(arr)
            self.pending_rows += len(arr)
            if self._ahead_on:
                self._encode_ahead(arr)

    def append_many(self, pieces: list) -> None:
        """``for p in pieces: self.append(p)`` in one call: numpy arrays of exactly the array's dtype
        and trailing shape are buffered as they are, with one check each (a pipelined writer's
        committer hands over a commit's rows this way: little Python holding the GIL); anything else
        goes through :meth:`append`."""
        m = self.array.meta
        dt, nd, trailing = m.data_type.numpy, m.ndim, m.shape[1:]
        if self._ahead_on and not self._futures:
            # the caller lands right after (a committer): nothing to gain from encoding ahead
            self._ahead_on = False
            self._carry, self._carry_rows = [], 0
        if self._ahead_on or m.data_type.is_string or not all(
                type(a) is np.ndarray and a.dtype == dt and a.ndim == nd and a.shape[1:] == trailing for a in pieces):
            for a in pieces:
                self.append(a)
            return
        pieces = [a for a in pieces if len(a)]
        self.pending.extend(pieces)
        self.pending_rows += sum(len(a) for a in pieces)

    # -- encode ahead -------------------------------------------------------------------------
    def _ahead_encoder(self):
        """The resolved encoder when encoding ahead applies (one inner chunk spans every trailing
        axis, the pipeline resolves, more than one thread), else None."""
        from .parallel import threads
        m, sh = self.array.meta, self.sharding
        if threads() < 2 or tuple(sh.chunk_shape[1:]) != tuple(m.shape[1:]) or any(g != 1 for g in self.grid[1:]) \
                or math.prod(sh.chunk_shape) * m.data_type.numpy.itemsize < self.AHEAD_MIN_BYTES:
            return None
        return self._encoder(self.array.store.describe(self.array.chunk_key((0,) * m.ndim)))

    def _note_error(self, fut) -> None:
        """(On the worker, when an encode ends.)  Keep the first failure for the owner to see at its
        next call; land() raises it too, before writing anything of that landing."""
        if not fut.cancelled() and fut.exception() is not None and self.ahead_error is None:
            self.ahead_error = fut.exception()

    def _reset_carry(self) -> None:
        """After a landing (or at the start): the carry is the partial tail chunk, if any."""
        self._futures.clear()
        self._inflight = 0
        self._ahead_hold = False
        self._carry = [self.tail] if self.tail is not None else []
        self._carry_rows = len(self.tail) if self.tail is not None else 0
        self._carry_start = self.rows - self._carry_rows

    def _ahead_batch(self):
        """The batch encoder when inner chunks too small to hand over one by one are encoded ahead in
        batches (one chunk spans every trailing axis, more than one thread), else None."""
        from .parallel import threads
        m, sh = self.array.meta, self.sharding
        if threads() < 2 or tuple(sh.chunk_shape[1:]) != tuple(m.shape[1:]) or any(g != 1 for g in self.grid[1:]):
            return None
        return self._batch_encoder(self.array.store.describe(self.array.chunk_key((0,) * m.ndim)))

    def _bound(self) -> None:
        """A bounded queue: past AHEAD_BYTES in flight, wait for what is in flight (an error is
        raised by land(), in order)."""
        if self._inflight > self.AHEAD_BYTES:
            from concurrent.futures import wait
            wait({getattr(f, "future", f) for f in self._futures.values()})
            self._inflight = 0

    def _encode_ahead(self, arr: np.ndarray) -> None:
        self._carry.append(arr)
        self._carry_rows += len(arr)
        ir = self.inner_rows
        if self._carry_rows < ir:
            return
        mode = self._ahead_mode
        if mode is None:                        # decided once per appender, at its first complete chunk
            fast = self._ahead_encoder()
            batch = self._ahead_batch() if fast is None else None
            m = self.array.meta
            mode = self._ahead_mode = (fast, batch, ir * math.prod(m.shape[1:]) * m.data_type.numpy.itemsize)
        fast, batch, chunk = mode
        if fast is None and batch is None:
            self._ahead_on = False              # this array encodes at the landing, as ever
            self._carry, self._carry_rows = [], 0
            return
        from .parallel import submit
        n_full = self._carry_rows // ir
        c0 = self._carry_start // ir
        if batch is not None:
            # small chunks: one pool task a batch of >= AHEAD_BATCH_BYTES (one numpy shuffle, one
            # zstandard call: few GIL hand-offs), each chunk's bytes taken from it by land()
            if len(arr) >= self.BATCH_MIN * ir:
                # a run of frames at once (extend): its landing follows, where the calling thread
                # encodes beside the pool instead of waiting for it; nothing more ahead until then
                self._ahead_hold = True
            now = time.perf_counter()
            gap, self._ahead_seen = now - self._ahead_seen, now
            if self._ahead_hold or n_full * chunk < self.AHEAD_BATCH_BYTES or gap < self.AHEAD_GAP:
                # not yet: the carry waits for more rows, or for a producer that leaves the writer
                # time between appends (back to back, a worker would only fight the producer for
                # the GIL and the landing would wait for it)
                return
            m = self.array.meta
            rows = _Rows(self._carry)
            runs = [r.reshape(len(r) // ir, ir, *m.shape[1:]) for r in rows.runs(0, n_full * ir, ir)]
            self._bound()
            fut = submit(_encoded_chunks, batch, runs)
            fut.add_done_callback(self._note_error)
            for k in range(n_full):
                self._futures[c0 + k] = _AheadChunk(fut, k)
            self._inflight += n_full * chunk
            rest = rows.get(n_full * ir, len(rows))
        else:
            data = np.concatenate(self._carry, axis=0) if len(self._carry) > 1 else self._carry[0]
            for k in range(n_full):
                rows = data[k * ir:(k + 1) * ir]
                self._bound()
                fut = self._futures[c0 + k] = submit(fast, rows)
                fut.add_done_callback(self._note_error)
                self._inflight += rows.nbytes
            rest = data[n_full * ir:]
        self._carry = [rest] if len(rest) else []
        self._carry_rows = len(rest)
        self._carry_start += n_full * ir

    def _load_shard(self, s: int, key: str, fresh: bool) -> tuple[ShardIndex, int]:
        if s in self.indexes:
            return self.indexes[s], self.ends[s]
        store = self.array.store
        size = store.size(key)
        if fresh or size is None:
            if size is not None:
                store.truncate(key, 0)      # an uncommitted leftover beyond the logical length
            index, end = ShardIndex.empty(self.grid), self.index_size
        else:
            index = self.array.shard_index(key, cached=False)
            index = index.copy() if index is not None else ShardIndex.empty(self.grid)
            end = max(size, self.index_size)
            if all(g == 1 for g in self.grid[1:]):
                index, end = self._settle(s, key, index, size)
        self.indexes[s], self.ends[s] = index, end
        return index, end

    def settle(self) -> None:
        """A reopened writer's first step: settle the shard holding the last committed row
        (:meth:`_settle`), before anything is appended.  Idempotent."""
        if self.rows and not self.pending:
            s = (self.rows - 1) // self.shard_rows
            key = self.array.chunk_key((s,) + (0,) * (self.array.meta.ndim - 1))
            if self.array.store.size(key) is not None:
                self._load_shard(s, key, False)

    def _settle(self, s: int, key: str, index: ShardIndex, size: int) -> tuple[ShardIndex, int]:
        """Before the first landing into a shard that already holds committed rows (a reopened or
        restarted writer): leave no copy in it past the committed ones, so that a later index
        rebuild (docs/reliability.md) sees copies in landing order, only the last coordinate
        re-encoded.

        * First the array's ``zarr.json`` (already shrunk to the logical shape) is made durable.
        * The file is truncated after the copy of the last committed coordinate: what lies past
          it is a crashed writer's uncommitted chunks (or chunks a restart dropped), which the
          reopened writer would otherwise append after.  The truncation is fsynced before anything
          is written over those bytes again.
        * When the copy of a partial last coordinate holds rows past the committed ones (an
          uncommitted re-encoding the index names, or a restart's dropped rows), it is re-encoded
          now with exactly the committed rows (and padding), the index rewritten to name it, and
          both fsynced: later re-encodings then add rows to a copy that holds only committed ones.
        Returns the index and the byte offset where the next copy lands.
        """
        store, sh, m = self.array.store, self.sharding, self.array.meta
        ir = self.inner_rows
        local = self.rows - s * self.shard_rows              # committed rows in this shard (> 0)
        ncoord = -(-local // ir)
        offs, nbs = index.offsets.reshape(-1), index.nbytes.reshape(-1)
        named = [(int(offs[c]), int(nbs[c])) for c in range(min(ncoord, len(offs)))
                 if int(offs[c]) != int(EMPTY) and int(nbs[c]) != int(EMPTY)]
        keep = max([o + n for o, n in named], default=self.index_size)
        if keep > size:              # a committed copy past the end of the file: read it as ever (errors)
            return index, max(size, self.index_size)
        index.offsets[ncoord:] = EMPTY
        index.nbytes[ncoord:] = EMPTY
        part = local % ir
        reland = False
        if part and ncoord - 1 < len(offs) and int(offs[ncoord - 1]) != int(EMPTY):
            off, nb = int(offs[ncoord - 1]), int(nbs[ncoord - 1])
            spec = ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, store.describe(key))
            raw = store.get_range(key, off, nb) or b""
            try:
                held = np.asarray(sh.codecs.decode(raw, spec))
            except (CorruptionError, ValueError):
                held = None          # read through the reader's checks when the rows are needed
            reland = held is not None and not shardscan.padded_after(held, part, m.fill_value)
        if size <= keep and not reland:
            return index, max(keep, self.index_size)
        # what is cut or re-encoded below may be rows the array's previous zarr.json still covers
        # (a reopen shrinks it to the logical shape first: the reopen rule): that shrink reaches the
        # disk before any of those rows leave it, so no state has the old shape over cut rows
        store.fsync(meta_key(self.array.path))
        store.fsync_dir(self.array.path)
        if size > keep:
            store.truncate(key, keep)
            store.fsync(key)
        if reland:
            where = store.describe(key)
            coord = (ncoord - 1,) + (0,) * (m.ndim - 1)
            tail = self._streamed_tail(self.tail) if self._large_chunks else None
            if tail is None:
                tail = (sh.codecs.encode(self._padded(self.tail), ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value,
                                                                           f"{where} inner chunk {[ncoord - 1]}")),)
            index.offsets[coord], index.nbytes[coord] = keep, self._write_pieces(key, keep, tail)
            keep += int(index.nbytes[coord])
            raw_index = sh.encode_index(index, where)
            store.write_at(key, 0, raw_index)
            store.fsync(key)
            self.bytes_written += len(raw_index)
            self.array._index_cache[key] = index.copy()
        return index, keep

    @property
    def _large_chunks(self) -> bool:
        """Inner chunks of more than :data:`~mrec.zarr.read.padded.STREAM_FROM` bytes spanning the trailing
        axes (a block declared with far more rows than its frames have): a partial one is padded in
        pieces (:meth:`_streamed_tail`)."""
        m, sh = self.array.meta, self.sharding
        return math.prod(sh.chunk_shape) * m.data_type.numpy.itemsize > STREAM_FROM \
            and tuple(sh.chunk_shape[1:]) == tuple(m.shape[1:])

    def _streamed_tail(self, rows: np.ndarray):
        """The encoding of the partial inner chunk ``rows`` padded to a whole one, as pieces; None
        when its pipeline cannot be streamed (the chunk is padded and encoded whole, as before)."""
        m, sh = self.array.meta, self.sharding
        return padded_pieces(sh.codecs, rows, sh.chunk_shape, m.data_type, m.fill_value)

    def _write_pieces(self, key: str, pos: int, pieces) -> int:
        """Write ``pieces`` one after the other from byte ``pos`` of ``key``; returns how many bytes."""
        store, n = self.array.store, 0
        for p in pieces:
            if p:
                store.write_at(key, pos + n, p)
                n += len(p)
        self.bytes_written += n
        return n

    def _padded(self, rows: np.ndarray) -> np.ndarray:
        """The rows of a partial inner chunk padded with the fill value to a whole one."""
        m = self.array.meta
        pad = np.full((self.inner_rows, *m.shape[1:]), m.fill_value, dtype=m.data_type.numpy)
        pad[:len(rows)] = rows
        return pad

    def land(self) -> list[str]:
        """Write buffered rows; returns the shard keys touched (in order)."""
        if not self.pending:
            return []
        m = self.array.meta
        parts = ([self.tail] if self.tail is not None else []) + self.pending
        data = _Rows(parts)               # the rows from base on, never concatenated as a whole
        base = self.rows - (len(self.tail) if self.tail is not None else 0)
        end_row = base + len(data)
        touched: list[str] = []
        sh = self.sharding
        ir = self.inner_rows
        inner_trailing = sh.chunk_shape[1:]
        # one inner chunk across the trailing axes: the rows are the chunk
        whole_rows = tuple(inner_trailing) == tuple(m.shape[1:]) and all(g == 1 for g in self.grid[1:])
        for s in range(base // self.shard_rows, -(-end_row // self.shard_rows)):
            s_lo = s * self.shard_rows
            key = self.array.chunk_key((s,) + (0,) * (m.ndim - 1))
            first_inner = max(base, s_lo) - s_lo
            # a shard is fresh when nothing of it lies below the logical length
            fresh = base < s_lo or (base == s_lo and self.tail is None)
            index, pos = self._load_shard(s, key, fresh)
            items = []                    # (coord, inner chunk array): encoded together below
            start_pos = pos
            last_inner = -(-(min(end_row, s_lo + self.shard_rows) - s_lo) // ir)
            where = self.array.store.describe(key)
            f0 = first_inner // ir
            full_end = (min(end_row, s_lo + self.shard_rows) - s_lo) // ir      # chunks wholly below end_row
            # a large padded partial chunk is encoded and written in pieces after the others
            tail = self._streamed_tail(data.get(s_lo + full_end * ir - base, end_row - base)) \
                if whole_rows and full_end < last_inner and self._large_chunks else None
            stop_inner = last_inner - (tail is not None)
            batch = self._batch_encoder(where) if whole_rows and not self._futures \
                and stop_inner - f0 >= self.BATCH_MIN else None
            if batch is not None:
                # few, long GIL-free calls for the whole shard's chunks (pipeline.batch_encoder), read
                # from the buffered pieces as they are (a chunk spanning two pieces is joined alone)
                runs = [r.reshape(len(r) // ir, ir, *m.shape[1:])
                        for r in data.runs(s_lo + f0 * ir - base, s_lo + full_end * ir - base, ir)]
                if full_end < stop_inner:
                    r0 = s_lo + full_end * ir
                    runs.append(self._padded(data.get(r0 - base, end_row - base))[None])
                coords = [(i0,) + (0,) * (m.ndim - 1) for i0 in range(f0, stop_inner)]
                items = [(c, None) for c in coords]
                sizes, pieces = batch(runs, batch_threads((stop_inner - f0) * ir * math.prod(m.shape[1:])
                                                          * m.data_type.numpy.itemsize))
                blobs = None
            for i0 in range(f0, stop_inner) if batch is None else ():
                r0 = s_lo + i0 * ir
                rows = data.get(r0 - base, min(r0 + ir, end_row) - base)
                if len(rows) < ir:
                    rows = self._padded(rows)
                if whole_rows:
                    items.append(((i0,) + (0,) * (m.ndim - 1), rows))
                    continue
                for it in _cells(self.grid[1:]):
                    sub = rows[(slice(None), *(slice(c * w, (c + 1) * w) for c, w in zip(it, inner_trailing)))]
                    if sub.shape[1:] != tuple(inner_trailing):
                        full = np.full((ir, *inner_trailing), m.fill_value, dtype=m.data_type.numpy)
                        full[tuple(slice(0, d) for d in sub.shape)] = sub
                        sub = full
                    items.append(((i0, *it), sub))

            fast = self._encoder(where)
            futures = self._futures
            if batch is not None:
                items_encoded = True
            elif futures and whole_rows:
                # chunks encoded ahead: their bytes (or the error their encode raised), the rest here
                ahead = [futures.get(s_lo // ir + item[0][0]) if len(item[1]) == ir else None for item in items]
                rest = [item for item, f in zip(items, ahead) if f is None]
                if fast is not None:
                    done = encode_all(lambda item, fast=fast: fast(item[1]), rest, sum(x[1].nbytes for x in rest))
                else:
                    done = [sh.codecs.encode(item[1], ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value,
                                                                f"{where} inner chunk {list(item[0])}")) for item in rest]
                it = iter(done)
                blobs = [f.result() if f is not None else next(it) for f in ahead]
                fast = None
                items_encoded = True
            else:
                items_encoded = False
            if items_encoded:
                pass
            elif fast is not None:
                def encode(item, fast=fast):
                    return fast(item[1])
            else:
                def encode(item, sh=sh, m=m, where=where):
                    return sh.codecs.encode(item[1], ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value,
                                                               f"{where} inner chunk {list(item[0])}"))

            if not items_encoded:
                blobs = encode_all(encode, items, sum(x[1].nbytes for x in items))
            if blobs is not None:
                sizes, pieces = [len(b) for b in blobs], blobs
            for (coord, _sub), size in zip(items, sizes):
                index.offsets[coord] = pos
                index.nbytes[coord] = size
                pos += size
            # entries past the new end are stale leftovers of an uncommitted tail
            stale_from = last_inner
            if stale_from < self.grid[0]:
                index.offsets[stale_from:] = EMPTY
                index.nbytes[stale_from:] = EMPTY
            payload = b"".join(pieces)
            store = self.array.store
            if payload or tail is None:
                store.write_at(key, start_pos, payload)
            if tail is not None:
                coord = (stop_inner,) + (0,) * (m.ndim - 1)
                index.offsets[coord], index.nbytes[coord] = pos, self._write_pieces(key, pos, tail)
                pos += int(index.nbytes[coord])
            raw_index = sh.encode_index(index, store.describe(key))
            store.write_at(key, 0, raw_index)
            self.bytes_written += len(payload) + len(raw_index)
            self.ends[s] = pos
            self.array._index_cache[key] = index.copy()
            touched.append(key)
            # forget indexes of shards we have moved past
            for old in [k for k in self.indexes if k < s]:
                del self.indexes[old], self.ends[old]
        part = end_row % ir
        self.tail = np.array(data.get(len(data) - part, len(data))) if part else None
        self.rows = end_row
        self.pending, self.pending_rows = [], 0
        self.array.meta = m.with_shape((end_row, *m.shape[1:]))
        if self._ahead_on:
            self._reset_carry()
        return touched
