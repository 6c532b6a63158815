"""The shard-index source of one array: every shard index a read uses, read once and trusted.

:class:`ShardIndexes` fetches a shard's index (one range read at its start or end), refuses one
that fails its own crc32c or names bytes past the file -- unless the array is ``appended`` (written
by an appender, a trajectory array), where such an index is a torn or dropped in-place rewrite and
is rebuilt in memory from the inner chunks that verify (``shardscan``; the shard is then
``unverified`` and its reason kept for the errors).  Indexes are cached per shard key until
:meth:`ShardIndexes.drop`.  :meth:`ShardIndexes.older_copy` finds, for a chunk whose newest copy
fails, the earlier copy a power loss left behind (reliability.md, "Rebuilding an index").
"""
from __future__ import annotations

import weakref

import numpy as np

from ...errors import CorruptionError
from .. import shardscan
from ..codecs.base import ChunkSpec
from ..codecs.sharding import ShardIndex


class ShardIndexes:
    """The shard indexes of ``array`` (an :class:`~mrec.zarr.array.Array`): fetched, checked, cached."""

    def __init__(self, array):
        # a proxy, not the array: no cycle, so an array (a reader's, its files kept open) is freed
        # as soon as it is dropped, not at the next garbage collection
        self.array = weakref.proxy(array)
        self.cache: dict[str, ShardIndex | None] = {}
        self.unverified: set[str] = set()      # shards whose index was rebuilt from verified chunks
        self.reasons: dict[str, str] = {}      # why, per shard key

    def drop(self) -> None:
        self.cache.clear()

    def reason(self, key: str) -> str:
        return self.reasons.get(key, "its shard index failed verification")

    def get(self, key: str, *, cached: bool = True) -> ShardIndex | None:
        """Decoded index of the shard at ``key`` (None when the shard is absent)."""
        if cached and key in self.cache:
            return self.cache[key]
        arr = self.array
        store = arr.store
        sh = arr.sharding
        grid = sh.grid(arr.meta.chunk_shape, arr.name)
        isize = sh.index_size(grid)
        offset = 0 if sh.index_location == "start" else -isize
        raw = store.get_range(key, offset, isize)
        if raw is None:
            return None
        where = store.describe(key)
        if len(raw) < isize:
            raise CorruptionError(f"shard of {len(raw)} bytes is shorter than its {isize}-byte index", path=where)
        try:
            index = sh.decode_index(raw, grid, where)
            torn = False
        except CorruptionError as exc:
            if not (arr.appended and shardscan.rebuildable(sh, grid)):
                # never read through an index that fails its own crc32c: its entries may name
                # other chunks (swapped, duplicated) that verify, and the rows would be wrong
                raise CorruptionError(f"{exc.detail}; the shard index is not trusted, so the shard is not "
                                      "read (`mrec repair` rebuilds the index of a trajectory shard from "
                                      "the order its chunks were appended in)", path=exc.path or where) from None
            index, torn = None, True
        rebuildable = arr.appended and shardscan.rebuildable(sh, grid)
        # byte ranges are bounded before any read.  The size is taken after the index: a concurrent
        # appender writes chunks before the index naming them, so it covers every entry
        size = store.size(key) or 0
        if index is not None:
            # entries past the end of an appended shard are a rewrite newer than its chunks: rebuilt below
            index.check_bounds(size, where, past_end=not rebuildable)
        if rebuildable:
            # an index that does not end where the file ends is older than the chunks after it
            # (a dropped or torn in-place rewrite) or points past the end: rebuild it in memory
            if torn or max(index.data_end(), isize) != size:
                end = None if torn else max(index.data_end(), isize)
                self.reasons[key] = (
                    "its shard index failed its crc32c" if torn else
                    f"truncated shard: its index claims bytes up to {end}, the file holds {size}" if end > size else
                    f"its index ends at byte {end}, the file at {size} (an index older than its chunks)")
                index = self.rebuilt(key, raw, grid)
        self.cache[key] = index
        return index

    def rebuilt(self, key: str, raw_index: bytes | None = None, grid=None) -> ShardIndex:
        """The index of shard ``key`` rebuilt from the inner chunks that verify (see shardscan)."""
        arr = self.array
        sh = arr.sharding
        grid = grid or sh.grid(arr.meta.chunk_shape, arr.name)
        data = arr.store.get(key) or b""
        raw_index = raw_index if raw_index is not None else data[:sh.index_size(grid)]
        entries = shardscan.raw_entries(sh, raw_index, grid) if len(raw_index) == sh.index_size(grid) else None
        spec = ChunkSpec(sh.chunk_shape, arr.meta.data_type, arr.meta.fill_value, arr.store.describe(key))
        index, _ = shardscan.rebuild(sh, grid, spec, data, entries)
        self.unverified.add(key)
        return index

    def as_written(self, key: str, index: ShardIndex) -> bool:
        """Whether shard ``key``'s ``index`` is read as written (not rebuilt, nothing degraded), one
        cell a row: every entry is then trusted for all its rows (the batch and frame paths' case)."""
        return key not in self.unverified and not getattr(index, "degraded", None) \
            and index.offsets.size == index.offsets.shape[0]

    def older_copy(self, key: str, coord, need: int, spec: ChunkSpec, exc: CorruptionError) -> np.ndarray:
        """An earlier copy of a failing inner chunk that provably holds its first ``need`` rows.

        A power loss can leave an index (rewritten in place) pointing at a re-encoded chunk
        whose bytes never reached the disk, while an earlier copy — the one the durable
        commit used — is still in the file.  That copy is used only when its row
        ``need - 1`` is not the fill value (re-encoding pads a partial chunk with fill, so
        real rows are a prefix): it never stands in for rows it did not hold.
        """
        arr = self.array
        sh = arr.sharding
        grid = sh.grid(arr.meta.chunk_shape, arr.name)
        if key in self.unverified or not (arr.appended and shardscan.rebuildable(sh, grid)):
            raise exc
        data = arr.store.get(key) or b""
        isize = sh.index_size(grid)
        index, _ = shardscan.rebuild(sh, grid, spec, data, shardscan.raw_entries(sh, data[:isize], grid)
                                     if len(data) >= isize else None)
        if index.is_empty(coord):
            raise exc
        off, n = int(index.offsets[coord]), int(index.nbytes[coord])
        chunk = np.asarray(sh.codecs.decode(data[off:off + n], spec))
        if not shardscan.trusted(index, coord, chunk, need, arr.meta.fill_value):
            raise exc
        return chunk
