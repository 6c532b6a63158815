"""The row reads behind :class:`~mrec.record.trajectory.reader.TrajectoryReader` (mixed into it as
:class:`RowReads`): the columns of one block update (concurrently when they decode enough bytes),
many frames in batches (iteration and slices: each column's rows of a run of frames in one read),
whole columns across frames (:meth:`~RowReads.column`, :meth:`~RowReads.read_columns`,
:meth:`~RowReads.positions`), and a stored meta value as a frame's value (:func:`meta_value`).

Every read goes through the Zarr core's public reads (``Array.read``, ``Array.read_into``,
``read_together``).  The methods use what the reader sets on open (``layout``, ``store``,
``_read_threads``, ``_refs``) and its frame making (``_ordinal``, ``ordinals``, ``_make_frame``,
``_frames_trusted``, ``box_at``, ``self[i]``).
"""
from __future__ import annotations

import json
import math
from functools import partial

import numpy as np

from ...errors import RefusalError
from ...zarr import parallel
from ...zarr.read.path import read_together, read_together_into
from ..model.frame import Frame
from .layout import TRAJ, BlockLayout, Layout, refuse, tag_layout

#: a frame whose column reads decode at least this many bytes reads them concurrently
PARALLEL_READ_BYTES = 256 * 1024
#: a batch read of many frames (iteration, slices) reads about this many decoded bytes at a time
BATCH_READ_BYTES = 16 << 20
#: and at most this many frames
BATCH_READ_FRAMES = 8192


def _json_value(text, where: str):
    """A stored ``json`` meta value: JSON text nesting at most MAX_JSON_DEPTH levels."""
    from ...zarr.metadata import MAX_JSON_DEPTH, json_depth_exceeds
    try:
        doc = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        why = f"nests deeper than {MAX_JSON_DEPTH} levels" if isinstance(exc, RecursionError) else f"is not JSON ({exc})"
        raise RefusalError(f"a stored json meta value {why}", path=where, kind="meta_tag_mismatch") from None
    if json_depth_exceeds(doc):
        raise RefusalError(f"a stored json meta value nests deeper than {MAX_JSON_DEPTH} levels", path=where,
                           kind="meta_tag_mismatch")
    return doc


def meta_value(tag: str, v, where: str = ""):
    """A frame's value of a stored meta value of tag ``tag`` (``where``: the array, for a refusal)."""
    elem, trailing = tag_layout(tag)
    if trailing:
        return np.asarray(v)
    if tag == "json":
        return _json_value(v, where)
    if elem == "bool":
        return bool(v)
    if elem == "f64":
        return float(v)
    if elem == "string":
        return str(v)
    return int(v)


def _lazy_frames(cols, nf: int):
    """The frames of a batch whose values are read (``cols``: (block, column names, one tuple of
    views a frame)), each made when it is taken (Frame._trusted_blocks: what _make_frame makes of
    these parts); a frame not kept is freed before the next is made."""
    if len(cols) == 1:
        name, keys, rows = cols[0]
        return Frame._trusted_rows(name, tuple(keys), rows)
    return _lazy_blocks(cols, nf)


def _lazy_blocks(cols, nf: int):
    """:func:`_lazy_frames` of several blocks."""
    make = Frame._trusted_blocks
    for k in range(nf):
        yield make({name: dict(zip(keys, rows[k])) for name, keys, rows in cols})


def _read_all(arrs, rows: slice) -> list:
    """``[a.read(rows) for a in arrs]``: the columns of a block decoded together by one batch call on
    every core (``read_together``, the inner chunks at the ends decoded whole and cut) where they
    are plain, else one after the other, each on every core.  Same values and errors.  (One column
    a thread was measured slower: stop 14, docs/performance.md.)"""
    got = read_together(arrs, rows.start, rows.stop, edges=True)
    if got is not None:
        return got
    return [a.read(rows) for a in arrs]


class RowReads:
    """The row-reading methods of :class:`~mrec.record.trajectory.reader.TrajectoryReader`."""

    layout: Layout
    store: object
    _read_threads: int
    _refs: dict

    # -- the columns of one block update ---------------------------------------------
    def _block_rows(self, b: BlockLayout, j: int, columns=None) -> tuple[dict, dict]:
        values, masks = {}, {}
        reads = self._plan_rows(b, j, columns, values)
        if self._concurrent(reads):
            got = parallel.call_all([partial(arr.read, slice(lo, hi)) for _c, arr, lo, hi in reads])
            for (col, _arr, _lo, _hi), v in zip(reads, got):
                values[col] = v
            self._read_masks(b, reads, masks)
        else:                                  # one column after the other, each with its mask
            for read in reads:
                col, arr, lo, hi = read
                values[col] = arr.read(slice(lo, hi))
                self._read_masks(b, (read,), masks)
        if len(values) > len(reads):          # a column without an array: keep declaration order
            values = {c: values[c] for c in b.decl.columns if c in values}
        return values, masks

    def _plan_rows(self, b: BlockLayout, j: int, columns, values: dict) -> list[tuple]:
        """The column reads of update ``j`` of ``b``, in declaration order, as (col, array, lo, hi);
        a column without an array (the block has no rows) goes into ``values`` directly."""
        lo, hi = b.rows_of(j)
        reads = []
        for col, cdecl in b.decl.columns.items():
            if columns is not None and col not in columns:
                continue
            arr = b.columns.get(col)
            if arr is None:
                if hi > lo:
                    raise refuse("broken_index", f"column {col!r} has no array but the block has rows", self.store.describe(f"{TRAJ}/{b.name}"))
                from ..model.dtypes import numpy_dtype
                values[col] = np.zeros((0, *cdecl.trailing), dtype=numpy_dtype(cdecl.dtype))
                continue
            reads.append((col, arr, lo, hi))
        return reads

    @staticmethod
    def _read_masks(b: BlockLayout, reads, masks: dict) -> None:
        for col, _arr, lo, hi in reads:
            m = b.masks.get(col)
            if m is not None:
                mv = m.read(slice(lo, hi))
                if not mv.all():
                    masks[col] = mv

    def _concurrent(self, reads) -> bool:
        """Whether to run these column reads concurrently (zstd and crc32c release the GIL): only
        with ``MREC_READ_THREADS`` >= 2 (read when the reader was opened) and when they decode enough bytes to be worth a thread hop.
        Same arrays, same results, same errors: the first failing read, in order, raises (see
        :func:`mrec.zarr.parallel.call_all`)."""
        if len(reads) < 2 or self._read_threads < 2:
            return False
        n = 0
        for _c, arr, lo, hi in reads:
            n += arr.decode_estimate(lo, hi)
        return n >= PARALLEL_READ_BYTES

    # -- batch reads of many frames ----------------------------------------------------
    def _frame_bytes(self) -> int:
        """Roughly how many decoded bytes one frame's block rows take (a batch size hint only)."""
        n = 0
        for b in self.layout.blocks.values():
            if not b.n_updates:
                continue
            rows = b.uniform_rows if b.regular else -(-b.total_rows // b.n_updates)
            for arr in b.columns.values():
                n += (rows or 0) * arr.dtype.itemsize * math.prod(arr.shape[1:])
        return max(n, 1)

    def _batch_frames(self) -> int:
        """Frames a batch read takes: about BATCH_READ_BYTES of decoded rows (at most
        BATCH_READ_FRAMES), a whole number of inner chunks' frames when every regular block's
        columns hold a whole number of frames a chunk (no chunk decoded by two batches)."""
        k = max(1, min(BATCH_READ_FRAMES, BATCH_READ_BYTES // self._frame_bytes()))
        step = 1
        for b in self.layout.blocks.values():
            if not b.regular or not b.uniform_rows:
                continue
            for arr in b.columns.values():
                sh = arr.sharding
                if sh is None or sh.chunk_shape[0] % b.uniform_rows:
                    return k
                step = math.lcm(step, sh.chunk_shape[0] // b.uniform_rows)
        return k if step > k else k // step * step

    def _iter_frames(self, idx: range):
        """``self[i] for i in idx``, read in batches: each column's rows for a run of consecutive
        frames in one :meth:`Array.read` (every inner chunk decoded once for all the frames it holds,
        on the pool), then cut into frames equal to what ``self[i]`` returns.  A batch that fails in
        any way is read again frame by frame, so the frames before a damaged one are yielded and the
        error raised is the one ``self[i]`` raises, at the same frame.  A step other than 1 reads
        frame by frame.

        (Reading the next batch on the pool while this one's frames are taken was tried and measured
        slower: the frames are made in Python while the reading thread waits for the GIL after every
        zstd call -- docs/performance.md, "Issue 16".)"""
        if idx.step != 1 or len(idx) < 2:
            for i in idx:
                yield self[i]
            return
        k = self._batch_frames()
        for s in range(idx.start, idx.stop, k):
            e = min(idx.stop, s + k)
            try:
                frames = self._frame_batch(s, e)
            except Exception:          # noqa: BLE001 - read again frame by frame: same frames, same error
                frames = None
            if frames is None:
                for i in range(s, e):
                    yield self[i]
            else:
                yield from frames

    def _frame_batch(self, s: int, e: int):
        """Frames ``s .. e-1`` (valid ordinals), each equal to ``self[i]``, as a list or an iterator
        (every value is read before this returns: only frames are made as they are taken); None
        when a block has a column without an array (the frame-by-frame path handles it).

        A block updated at every frame of the batch with one row count (a regular block) gives each
        frame a view of its own rows of the batch's array (the frames never share rows; a frame kept
        keeps its batch's array alive); any other block gives each frame a copy of its rows."""
        nf = e - s
        per_block = []
        for name, b in self.layout.blocks.items():
            if b.regular and e <= b.n_updates:           # update j = frame j: no carry-forward
                ups = None
                lo, hi = b.rows_of(s)[0], b.rows_of(e - 1)[1]
            else:
                ups = [b.update_at(i) for i in range(s, e)]
                present = [j for j in ups if j is not None]
                if not present:
                    continue
                lo, hi = b.rows_of(present[0])[0], b.rows_of(present[-1])[1]
            values, masks = {}, {}
            arrs = [b.columns.get(col) for col in b.decl.columns]
            if any(arr is None for arr in arrs):
                return None
            got = _read_all(arrs, slice(lo, hi))
            for col, arr, v in zip(b.decl.columns, arrs, got):
                if ups is None:
                    v = list(v.reshape(nf, b.uniform_rows, *v.shape[1:]))    # one view a frame
                values[col] = v
                m = b.masks.get(col)
                if m is not None:
                    masks[col] = m.read(slice(lo, hi))
            per_block.append((name, b, ups, values, masks, lo))
        metas = []
        if self.layout.meta:
            tags = self.schema.meta
            for key, arr in self.layout.meta.items():
                metas.append((key, tags[key].tag, arr.read(slice(s, e)), arr.name))
        has_box = bool(self.layout.box.n_updates)
        make = self._make_frame
        # the common case (regular blocks, no masks, meta or cell): frames straight from the views
        if not metas and not has_box and all(ups is None and not bm for _n, _b, ups, _v, bm, _lo in per_block):
            cols = [(name, list(values), list(zip(*values.values())) if values else [()] * nf)
                    for name, _b, _u, values, _m, _lo in per_block]
            if self._frames_trusted() and not self._refs:
                return _lazy_frames(cols, nf)       # made as they are taken: the values are read
            return [make({name: dict(zip(keys, rows[k])) for name, keys, rows in cols}, None, {}, {}, {}, s + k)
                    for k in range(nf)]
        out = []
        for k, i in enumerate(range(s, e)):
            blocks, masks = {}, {}
            for name, b, ups, values, bmasks, lo in per_block:
                if ups is None:
                    j = i
                    blocks[name] = {col: v[k] for col, v in values.items()}
                else:
                    j = ups[k]
                    if j is None:
                        continue
                    a, z = b.rows_of(j)
                    blocks[name] = {col: v[a - lo:z - lo].copy() for col, v in values.items()}
                if bmasks:
                    a, z = b.rows_of(j)
                    got = {}
                    for col, mv in bmasks.items():
                        part = mv[a - lo:z - lo]
                        if not part.all():
                            got[col] = part.copy()
                    if got:
                        masks[name] = got
            meta, types = {}, {}
            for key, tag, batch, where in metas:
                types[key] = tag
                meta[key] = meta_value(tag, batch[k], where)
            box = self.box_at(i) if has_box else None
            out.append(make(blocks, box, meta, masks, types, i))
        return out

    # -- columns across frames ---------------------------------------------------------
    def read_columns(self, i, columns, *, threads: int | None = None) -> dict:
        """Selected ``(block, column)`` pairs of frame ``i``; an absent block is left out.

        ``i`` a slice (or a list of ordinals, a boolean mask): each pair's rows of those frames as
        one ``[frames, rows, *trailing]`` array, :meth:`column`'s (every inner chunk decoded once,
        on ``threads`` threads; no Frame is made), with its refusals for a ragged block or a block
        absent in a frame asked for."""
        wanted: dict[str, set] = {}
        for block, col in columns:
            if block not in self.layout.blocks or col not in self.layout.blocks[block].decl.columns:
                raise KeyError(f"{block}/{col} is not declared")
            wanted.setdefault(block, set()).add(col)
        if not isinstance(i, (int, np.integer, bool, np.bool_)):      # a bool is refused by _ordinal
            if not isinstance(i, slice):
                self.ordinals(i)          # TypeError / IndexError for what is not frames
            together = self._columns_together(i, wanted, columns, threads)
            return {(block, col): together[(block, col)] if (block, col) in together
                    else self.column(block, col, i, threads=threads) for block, col in columns}
        i = self._ordinal(i)
        out = {}
        for block, cols in wanted.items():
            b = self.layout.blocks[block]
            j = b.update_at(i)
            if j is None:
                continue
            values, _ = self._block_rows(b, j, cols)
            for col in cols:
                out[(block, col)] = values[col]
        return out

    def _run_rows(self, b: BlockLayout, frames) -> tuple[int, int, int] | None:
        """``(first row, last row + 1, frames)`` of ``frames`` (a slice, None = all) when they are a
        non-empty run of step 1 of a regular block, each frame one update of it (no refusal to make,
        no carry-forward: rows straight from its columns); else None."""
        if frames is not None and not isinstance(frames, slice):
            return None
        idx = range(*(frames or slice(None)).indices(len(self)))
        if not b.regular or idx.step != 1 or not len(idx) or idx[-1] >= b.n_updates:
            return None
        n = b.uniform_rows
        return idx[0] * n, (idx[-1] + 1) * n, len(idx)

    def _columns_together(self, frames, wanted: dict, columns, threads) -> dict:
        """The pairs :meth:`read_columns` reads of a run of frames whose columns a block decodes by
        one batch call (``read_together``: one hand-out of every column's chunks to the threads
        instead of one a column), as :meth:`column` returns them; the others are left out (read
        by :meth:`column`, which raises what it raises)."""
        out = {}
        for block, cols in wanted.items():
            b = self.layout.blocks[block]
            run = self._run_rows(b, frames) if len(cols) > 1 else None
            if run is None:
                continue
            names = list(dict.fromkeys(c for bl, c in columns if bl == block))
            got = read_together([b.columns[c] for c in names], run[0], run[1], threads, edges=True)
            if got is None:
                continue
            for c, v in zip(names, got):
                out[(block, c)] = v.reshape(run[2], b.uniform_rows, *v.shape[1:])
        return out

    def column(self, block: str, column: str, frames: slice | None = None, *, threads: int | None = None) -> np.ndarray:
        """One ndarray ``[frames, rows, *trailing]`` of a regular block's column.

        Its inner chunks are decoded on ``threads`` threads (default ``MREC_THREADS``, else the
        machine's cores; 1 = serial): the same values and errors."""
        if block not in self.layout.blocks:
            raise KeyError(f"block {block!r} is not declared")
        b = self.layout.blocks[block]
        if column not in b.decl.columns:
            raise KeyError(f"{block}/{column} is not declared")
        if frames is not None and not isinstance(frames, slice):
            sel = self.ordinals(frames)
            if not len(sel):
                return self.column(block, column, slice(0, 0))
            lo = int(sel.min())
            return self.column(block, column, slice(lo, int(sel.max()) + 1))[sel - lo]
        idx = range(*(frames or slice(None)).indices(len(self)))
        if not b.regular and b.n_updates:
            counts = b.counts()
            if len(set(counts.tolist())) != 1:
                raise refuse("row_count_mismatch", f"block {block!r} is ragged: column() needs one row count", self.store.describe(f"{TRAJ}/{block}"))
        if b.n_updates == 0:
            raise refuse("row_count_mismatch", f"block {block!r} is absent in every frame", self.store.describe(f"{TRAJ}/{block}"))
        if len(idx) and idx[0] < int(b.ordinals()[0]):
            raise refuse("row_count_mismatch", f"block {block!r} is absent at frame {idx[0]}", self.store.describe(f"{TRAJ}/{block}"))
        arr = b.columns[column]
        if b.regular and idx.step == 1 and len(idx) and idx[-1] < b.n_updates:
            n = b.uniform_rows
            data = arr.read(slice(idx[0] * n, (idx[-1] + 1) * n), threads=threads)
            return data.reshape(len(idx), n, *data.shape[1:])
        ups = [b.update_at(i) for i in idx]
        uniq = sorted(set(ups))
        if not uniq:
            return np.zeros((0, 0, *arr.shape[1:]), dtype=arr.dtype)
        lo, _ = b.rows_of(uniq[0])
        _, hi = b.rows_of(uniq[-1])
        data = arr.read(slice(lo, hi), threads=threads)
        parts = []
        for j in ups:
            a, z = b.rows_of(j)
            parts.append(data[a - lo:z - lo])
        return np.stack(parts)

    def positions(self, frames=None, block: str = "atoms") -> np.ndarray:
        """Coordinates from ``block``'s columns ``x y z``: frame ``i`` (an int) as (N, 3); several
        frames (a slice, a list of ordinals, a boolean mask; None = all) as (F, N, 3), which needs
        a regular block (one row count).  ``KeyError`` when the block lacks x, y or z."""
        if block not in self.layout.blocks or not all(c in self.layout.blocks[block].decl.columns for c in "xyz"):
            raise KeyError(f"block {block!r} has no x, y, z columns")
        if isinstance(frames, (int, np.integer)) and not isinstance(frames, (bool, np.bool_)):
            cols = self.read_columns(frames, [(block, c) for c in "xyz"])
            if not cols:
                raise KeyError(f"block {block!r} is absent at frame {frames}")
            return np.stack([cols[(block, c)] for c in "xyz"], axis=1)
        fast = self._positions_range(block, frames)
        if fast is not None:
            return fast
        return np.stack([self.column(block, c, frames) for c in "xyz"], axis=-1)

    def _positions_range(self, block: str, frames) -> np.ndarray | None:
        """``positions(frames)`` for a run of frames of a regular block whose x, y, z are 1-d columns
        of one dtype: the three decoded together a group of frames at a time and interleaved into the
        (F, N, 3) result (:func:`_positions_grouped`), else each column decoded straight into its
        lane of the result (no stack of three column copies).  None when that does not apply (the
        general path reads it)."""
        b = self.layout.blocks[block]
        run = self._run_rows(b, frames)
        if run is None:
            return None
        arrs = [b.columns.get(c) for c in "xyz"]
        if any(a is None or a.meta.ndim != 1 for a in arrs) or len({a.dtype for a in arrs}) != 1:
            return None
        rows = slice(run[0], run[1])
        out = np.empty((run[2], b.uniform_rows, 3), dtype=arrs[0].dtype)
        lanes = out.reshape(-1, 3)
        if _positions_grouped(arrs, rows, lanes):
            return out
        if parallel.threads() > 1 and sum(a.decode_estimate(rows.start, rows.stop) for a in arrs) >= PARALLEL_READ_BYTES:
            # one column a thread, each decoded in its batch form (see _read_all)
            parallel.call_all([partial(arr.read_into, rows, lanes[:, k], threads=1) for k, arr in enumerate(arrs)])
            return out
        for k, arr in enumerate(arrs):
            arr.read_into(rows, lanes[:, k])          # a strided view of lane k
        return out


#: decoded bytes of the group of frames :func:`_positions_grouped` decodes at a time, into one buffer
#: reused from group to group (a long run does not fault in a second result's worth of fresh pages).
#: Measured on 72 MB of 3000-atom frames, CPU of one thread: groups of 4 / 8 / 16 MiB / all at once
#: 222 / 204 / 198 / 223 ms (smaller groups pay each group's fetch, checks and two hand-offs)
POSITIONS_GROUP_BYTES = 16 << 20
#: rows a part of :func:`_interleave` copies at a time (their lanes of the result stay in the cache
#: until all are written)
INTERLEAVE_ROWS = 1 << 14


def _positions_grouped(arrs: list, rows: slice, lanes: np.ndarray) -> bool:
    """``lanes[:, k] = arrs[k].read(rows)`` a group of whole inner chunks at a time: the columns of
    the group decoded together by one batch call (``read_together_into``) into one buffer, reused
    for the next group (no fresh pages for a whole-range copy of the columns), then interleaved on
    the pool.  False when a group is not the plain case (the caller reads the whole range again
    through the per-column path, which raises what a column read raises)."""
    sh = arrs[0].sharding
    if sh is None:
        return False
    ir = sh.chunk_shape[0]
    group = max(1, POSITIONS_GROUP_BYTES // (len(arrs) * ir * lanes.itemsize)) * ir
    lo = rows.start // ir * ir
    buf = np.empty(len(arrs) * min(group, -(-rows.stop // ir) * ir - lo), dtype=lanes.dtype)
    for g0 in range(lo, rows.stop, group):
        a, b = max(g0, rows.start), min(g0 + group, rows.stop)
        n = -(-b // ir) * ir - g0                # the rows of the inner chunks holding [a, b)
        planar = buf[:len(arrs) * n].reshape(len(arrs), n)
        if not read_together_into(arrs, a, b, planar):
            return False
        _interleave([p[a - g0:b - g0] for p in planar], lanes[a - rows.start:b - rows.start])
    return True


def _interleave(columns: list, lanes: np.ndarray) -> None:
    """``lanes[:, k] = columns[k]`` a block of rows at a time, the blocks cut into one part a thread
    on the pool (numpy copies run without the GIL)."""
    n = len(lanes)
    blocks = -(-n // INTERLEAVE_ROWS)
    parts = parallel.decode_parts(blocks, lanes.nbytes)
    cuts = [blocks * k // parts * INTERLEAVE_ROWS for k in range(parts)] + [n]

    def copy(lo: int, hi: int) -> None:
        for a in range(lo, hi, INTERLEAVE_ROWS):
            z = min(hi, a + INTERLEAVE_ROWS)
            for k, col in enumerate(columns):
                lanes[a:z, k] = col[a:z]
    parallel.call_all([partial(copy, lo, hi) for lo, hi in zip(cuts, cuts[1:])])
