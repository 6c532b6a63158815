"""Sharded append: rows landed along axis 0 of a ``sharding_indexed`` array, O(chunk + index) a landing.

:class:`ShardedAppender` appends to an :class:`~mrec.zarr.array.Array` whose codec is
``sharding_indexed`` with the index at the start of the shard and shards spanning every trailing
axis: every complete inner chunk is encoded once and written at the tail of its shard file (one
``write_at``), then the shard's index is rewritten in place (one ``write_at`` at offset 0); a
partial tail chunk is encoded padded with the fill value and re-encoded by the next landing.
Chunks are encoded by the chain's resolved encoder, by the batch encoder for landings of many
chunks, or ahead on the pool as rows arrive (``ahead=True``).  ``zarr.json`` is not written here:
the caller publishes the new shape when its commit protocol says so (docs/architecture.md,
"Sharded append and the landing order").
"""
from __future__ import annotations

import bisect
import math
import time

import numpy as np

from ..errors import CorruptionError, MetadataError
from . import shardscan
from .codecs.base import ChunkSpec
from .codecs.batch import batch_encoder
from .codecs.padded import STREAM_FROM, padded_pieces
from .codecs.sharding import EMPTY, ShardIndex
from .metadata import as_rows, grid_cells
from .parallel import batch_threads, encode_all


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
    #: (``codecs.batch.batch_encoder``: one zstandard call per part, which costs a context of its own)
    BATCH_MIN = 8
    #: a landing of at most this many buffered bytes in more than four pieces joins them first (a
    #: dense array's value a frame; a column's frames are landed from their pieces, never copied)
    JOIN_BYTES = 64 * 1024

    def __init__(self, array, rows: int | None = None, *, ahead: bool = False):
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
        self._row_bytes = math.prod(m.shape[1:]) * m.data_type.numpy.itemsize if not m.data_type.is_string else 16
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
        arr = as_rows(data, m)
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
        self.array.fsync_metadata()
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
            self.array.indexes.cache[key] = index.copy()
        return index, keep

    @property
    def _large_chunks(self) -> bool:
        """Inner chunks of more than :data:`~mrec.zarr.codecs.padded.STREAM_FROM` bytes spanning the trailing
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
        if len(parts) > 4 and self.pending_rows * self._row_bytes <= self.JOIN_BYTES:
            # many small pieces (a dense array's value a frame): joined once, not walked piece by
            # piece by every range read below
            parts = [np.concatenate(parts)]
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
                for it in grid_cells(self.grid[1:]):
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
            self.array.indexes.cache[key] = index.copy()
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
