"""Zarr V3 arrays: metadata, chunk keys, whole writes, and the read facade over ``read/``.

:class:`Array` is one array of a store: its ``zarr.json`` (open, create, the shape and attributes
republished by an atomic replace), its chunk keys, and its reads, which all go through the one
read path of ``mrec/zarr/read/`` (plan -> fetch -> decode: ``read/path.py``).  An array keeps what
its reads learn between calls: its shard indexes (``read/index.py``), its last chunk and read-ahead
bytes (``read/cache.py``) and its resolved decoders (``read/decode.py``).  Reading never decodes a
chunk outside the requested leading-axis range; for an array whose array→bytes codec is
``sharding_indexed`` only the shard index and the inner chunks in range are fetched.

Appending along axis 0 is :class:`~mrec.zarr.append.ShardedAppender`.
"""
from __future__ import annotations

import json
import posixpath

import numpy as np

from ..errors import MetadataError, StoreError
from .codecs.base import ChunkSpec
from .codecs.sharding import ShardIndex, ShardingCodec
from .metadata import ArrayMetadata, GroupMetadata, as_rows, json_dumps, parse_node
from .read import fetch
from .read import path as read_path
from .read.cache import ReadCache
from .read.decode import Decoders
from .read.index import ShardIndexes


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


class Array:
    """One Zarr V3 array in a store."""

    def __init__(self, store, path: str, meta: ArrayMetadata):
        self.store = store
        self.path = path
        self.meta = meta
        self.indexes = ShardIndexes(self)   # the shard indexes, fetched once, checked, maybe rebuilt
        self.cache = ReadCache()            # the last chunk decoded, read-ahead bytes, the frame setup
        self.decoders = Decoders(self)      # the resolved decoders of the inner chunks
        self._json_template: tuple | None = None     # see metadata_json
        self._keys: dict[tuple, str] = {}               # chunk coords -> key, for one key encoding
        self._keys_encoding = None
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

    def fsync_metadata(self) -> None:
        """Make this array's ``zarr.json`` (and its directory entry) durable."""
        self.store.fsync(meta_key(self.path))
        self.store.fsync_dir(self.path)

    # -- read (plan -> fetch -> decode: mrec/zarr/read/path.py) ---------------------------------
    #: ``read(rows=None, *, threads=None)``: the whole array, or a leading-axis range ``rows`` (step
    #: allowed); the read path's function itself (a frame read is the hot path: no call in between)
    read = read_path.read

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

    def read_into(self, rows: slice, out: np.ndarray, *, threads: int | None = None) -> np.ndarray:
        """``out[...] = self.read(rows)``, decoding straight into ``out`` where the layout allows (a
        sharded array whose shards span the trailing axes; ``out`` may be strided, e.g. one column
        of an interleaved (frames, atoms, 3) result): the same values and the same errors."""
        return read_path.read_into(self, rows, out, threads)

    def decode_estimate(self, start: int, stop: int) -> int:
        """Roughly how many decoded bytes a read of rows [start, stop) costs (0: a cached chunk).

        Only a hint for running reads concurrently; it never changes what a read returns."""
        return read_path.decode_estimate(self, start, stop)

    def stored_chunks(self) -> list[tuple[int, ...]]:
        """Grid coordinates of the chunks (shards) this array has in its store, sorted, from a listing
        of its keys (see :func:`mrec.zarr.read.fetch.stored_chunks`)."""
        return fetch.stored_chunks(self)

    def read_chunk_rows(self, coords, r_lo: int, r_hi: int, threads: int | None = None) -> np.ndarray | None:
        """Rows [r_lo, r_hi) of chunk (shard) ``coords``, None when it was never written (the
        validator reads chunk by chunk)."""
        return read_path.chunk_rows(self, coords, r_lo, r_hi, threads)

    # -- shard indexes (mrec/zarr/read/index.py) --------------------------------------------------
    def shard_index(self, key: str, *, cached: bool = True) -> ShardIndex | None:
        """Decoded index of the shard at ``key`` (None when the shard is absent)."""
        return self.indexes.get(key, cached=cached)

    def rebuilt_index(self, key: str, raw_index: bytes | None = None, grid=None) -> ShardIndex:
        """The index of shard ``key`` rebuilt from the inner chunks that verify (see shardscan)."""
        return self.indexes.rebuilt(key, raw_index, grid)

    @property
    def unverified_indexes(self) -> set[str]:
        """Shards whose index was rebuilt from verified chunks."""
        return self.indexes.unverified

    def drop_cache(self) -> None:
        self.indexes.drop()
        self.cache.drop()

    # -- what the read path keeps (inspected by tests) ---------------------------------------------
    @property
    def _chunk_cache(self) -> tuple | None:
        return self.cache.chunk

    @property
    def _inflated(self) -> tuple | None:
        return self.cache.inflated

    def _decoder_into(self, release_gil: bool = False, many: bool = False):
        return self.decoders.into(release_gil, many)

    def _part_decoder(self):
        return self.decoders.part()

    # -- whole write (fixed-size arrays) ---------------------------------------
    def write(self, data: np.ndarray, *, fsync: bool = False) -> list[str]:
        """Encode and store every chunk of ``data`` (shape must equal the array's).

        Each chunk key is written by atomic replace.  Returns the keys written.
        """
        m = self.meta
        arr = as_rows(data, m)
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
        self.indexes.drop()
        return keys


def read_together(arrays: list, start: int, stop: int, threads: int | None = None) -> list | None:
    """``[a.read(slice(start, stop)) for a in arrays]`` decoded by ONE batch-decoder call (the columns
    of a block: one hand-out of pieces to the threads instead of one per column), in the plain case
    only: frame-aligned sharded columns of one geometry, dtype and inner pipeline; the rows whole
    inner chunks, across shards; each shard index read as written (not rebuilt) with the chunks' entries
    back to back; the bytes read whole, and every chunk decoding.  None otherwise (read each array:
    the same values, and the errors a serial read raises).  The arrays are views of one
    (arrays, rows, ...) array."""
    return read_path.read_together(arrays, start, stop, threads)
