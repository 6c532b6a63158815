"""``sharding_indexed``: inner chunks of a shard with an index of (offset, nbytes) pairs.

The index is a uint64 array of shape ``chunks_per_shard + [2]`` encoded with
``index_codecs`` (default ``bytes`` little + ``crc32c``) and stored at the
start or the end of the shard.  An entry of ``2^64-1, 2^64-1`` is an empty
inner chunk, read as the fill value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...errors import CorruptionError, MetadataError
from ..dtypes import DATA_TYPES
from .base import ArrayBytesCodec, ChunkSpec
from .chain import CodecChain

EMPTY = np.uint64(2**64 - 1)


#: bounds of an inner chunk shape (as metadata.MAX_RANK / MAX_DIM; an inner chunk is decoded whole,
#: so its element count is bounded too, as one read is)
_MAX_RANK, _MAX_DIM, _MAX_INNER_ELEMENTS = 32, 2**62, 2**31


def _shape(v, where, what) -> tuple[int, ...]:
    if (not isinstance(v, list) or len(v) > _MAX_RANK
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 < i <= _MAX_DIM for i in v)):
        raise MetadataError(f"sharding {what} {v!r} is not a list of at most {_MAX_RANK} positive integers "
                            f"up to 2^62", path=where)
    n = 1
    for i in v:
        n *= i
    if n > _MAX_INNER_ELEMENTS:
        raise MetadataError(f"sharding {what} {v!r} makes inner chunks of {n} elements (at most "
                            f"{_MAX_INNER_ELEMENTS})", path=where)
    return tuple(v)


@dataclass(frozen=True)
class ShardIndex:
    """Offsets and byte counts of every inner chunk of one shard (C order)."""

    offsets: np.ndarray   # uint64, shape chunks_per_shard
    nbytes: np.ndarray

    @classmethod
    def empty(cls, grid: tuple[int, ...]) -> "ShardIndex":
        return cls(np.full(grid, EMPTY, dtype=np.uint64), np.full(grid, EMPTY, dtype=np.uint64))

    def is_empty(self, coord) -> bool:
        return self.offsets[coord] == EMPTY and self.nbytes[coord] == EMPTY

    def copy(self) -> "ShardIndex":
        return ShardIndex(self.offsets.copy(), self.nbytes.copy())

    def as_array(self) -> np.ndarray:
        out = np.empty((*self.offsets.shape, 2), dtype=np.uint64)     # np.stack, without its overhead
        out[..., 0] = self.offsets
        out[..., 1] = self.nbytes
        return out

    def data_end(self) -> int:
        """End of the furthest byte an entry names (Python ints: never wraps around 2^64)."""
        used = (self.offsets != EMPTY) | (self.nbytes != EMPTY)
        if not used.any():
            return 0
        offs, sizes = self.offsets[used], self.nbytes[used]
        if int(offs.max()) < 2**63 and int(sizes.max()) < 2**63:       # the sum fits: numpy
            return int((offs + sizes).max())
        return max(int(o) + int(n) for o, n in zip(offs.tolist(), sizes.tolist()))

    def half_empty(self):
        """Coordinates of entries with exactly one of offset / nbytes 2^64-1 (neither empty nor a
        range: never written by any writer, and never left by a torn sector, which holds whole entries)."""
        bad = (self.offsets == EMPTY) != (self.nbytes == EMPTY)
        return [tuple(int(i) for i in c) for c in np.argwhere(bad)]

    def check_bounds(self, size: int, where: str, *, past_end: bool = True) -> None:
        """Refuse, naming the entry, an index with a half-empty entry or (``past_end``) an entry
        naming bytes past ``size`` (the shard file's length): checked before any range is read,
        so nothing is read or allocated from an untrusted offset or length."""
        half = self.half_empty()
        if half:
            c = half[0]
            raise CorruptionError(f"shard index entry {list(c)} is half-empty (offset {int(self.offsets[c])}, "
                                  f"nbytes {int(self.nbytes[c])}): an entry is a byte range or both 2^64-1; "
                                  "the index cannot be trusted", path=where)
        if not past_end:
            return
        used = self.offsets != EMPTY
        if not used.any():
            return
        # offset + nbytes > size, without wrapping: nbytes > size, or offset > size - nbytes
        over = used & ((self.nbytes > np.uint64(size)) | (self.offsets > np.uint64(size) - np.minimum(self.nbytes, np.uint64(size))))
        if over.any():
            c = tuple(int(i) for i in np.argwhere(over)[0])
            off, n = int(self.offsets[c]), int(self.nbytes[c])
            raise CorruptionError(f"shard index entry {list(c)} names bytes {off}..{off + n}, past the end of "
                                  f"the {size}-byte shard file (a truncated shard or a damaged index)", path=where)


@dataclass(frozen=True)
class ShardingCodec(ArrayBytesCodec):
    name = "sharding_indexed"
    byte_ranges = True             # inner chunks are read by byte ranges of the shard file
    chunk_shape: tuple[int, ...] = ()
    codecs: CodecChain = None          # the chain of inner chunks
    index_codecs: CodecChain = None    # the chain of the index
    index_location: str = "end"

    @classmethod
    def from_config(cls, config, where, *, parse: Callable[[object, str], CodecChain]):
        """``parse(codecs, where)`` builds a chain from a ``codecs`` list (the registry's parser:
        this codec holds codec lists of its own)."""
        chunk_shape = _shape(config.get("chunk_shape"), where, "chunk_shape")
        inner = parse(config.get("codecs", [{"name": "bytes", "configuration": {"endian": "little"}}]), where)
        index = parse(config.get("index_codecs", [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]), where)
        loc = config.get("index_location", "end")
        if loc not in ("start", "end"):
            raise MetadataError(f"sharding index_location {loc!r} is not 'start' or 'end'", path=where)
        if index.encoded_size(16) is None:
            raise MetadataError("sharding index_codecs must have a fixed size (optional transpose, bytes, crc32c)", path=where)
        return cls(chunk_shape, inner, index, loc)

    def to_json(self):
        return {"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(self.chunk_shape),
            "codecs": self.codecs.to_json(),
            "index_codecs": self.index_codecs.to_json(),
            "index_location": self.index_location,
        }}

    # -- geometry ------------------------------------------------------------
    def grid(self, shard_shape: tuple[int, ...], where: str = "") -> tuple[int, ...]:
        if len(shard_shape) != len(self.chunk_shape):
            raise MetadataError(f"inner chunk_shape {list(self.chunk_shape)} does not match shard rank {len(shard_shape)}", path=where)
        out = []
        for s, c in zip(shard_shape, self.chunk_shape):
            if s % c:
                raise MetadataError(f"shard shape {list(shard_shape)} is not a multiple of inner chunk shape {list(self.chunk_shape)}", path=where)
            out.append(s // c)
        return tuple(out)

    def index_size(self, grid: tuple[int, ...]) -> int:
        n = int(np.prod(grid, dtype=np.int64)) * 16
        return self.index_codecs.encoded_size(n)

    def max_encoded(self, spec: ChunkSpec) -> int:
        grid = self.grid(spec.shape, spec.where)
        n = int(np.prod(grid, dtype=object))
        return self.index_size(grid) + n * self.codecs.max_encoded(self.inner_spec(spec))

    def inner_spec(self, spec: ChunkSpec) -> ChunkSpec:
        return spec.with_shape(self.chunk_shape)

    # -- index ---------------------------------------------------------------
    def _index_spec(self, grid, where):
        return ChunkSpec((*grid, 2), DATA_TYPES["uint64"], np.uint64(0), where)

    def encode_index(self, index: ShardIndex, where: str = "") -> bytes:
        grid = index.offsets.shape
        return self.index_codecs.encode(index.as_array(), self._index_spec(grid, where))

    def decode_index(self, data: bytes, grid: tuple[int, ...], where: str) -> ShardIndex:
        try:
            arr = self.index_codecs.decode(data, self._index_spec(grid, f"{where} (shard index)"))
        except CorruptionError:
            raise
        arr = np.asarray(arr, dtype=np.uint64)
        # np.array, not np.ascontiguousarray: that makes the 0-d index of a 0-d shard 1-d
        return ShardIndex(np.array(arr[..., 0], order="C"), np.array(arr[..., 1], order="C"))

    def read_index(self, shard: bytes, grid, where) -> tuple[ShardIndex, int]:
        """Index of a whole shard, and the size of the index region."""
        size = self.index_size(grid)
        if len(shard) < size:
            raise CorruptionError(f"shard of {len(shard)} bytes is shorter than its {size}-byte index", path=where)
        raw = shard[:size] if self.index_location == "start" else shard[len(shard) - size:]
        return self.decode_index(raw, grid, where), size

    def check_entry(self, index: ShardIndex, coord, shard_len: int, where: str) -> tuple[int, int] | None:
        if index.is_empty(coord):
            return None
        off, n = int(index.offsets[coord]), int(index.nbytes[coord])
        if off + n > shard_len:
            raise CorruptionError(
                f"inner chunk {list(coord)} claims bytes {off}..{off + n} beyond the shard's {shard_len} bytes",
                path=where)
        return off, n

    # -- whole-shard codec ---------------------------------------------------
    def encode(self, arr, spec):
        grid = self.grid(spec.shape, spec.where)
        inner = self.inner_spec(spec)
        index = ShardIndex.empty(grid)
        parts: list[bytes] = []
        isize = self.index_size(grid)
        pos = isize if self.index_location == "start" else 0
        for coord in np.ndindex(*grid):
            sl = tuple(slice(c * s, (c + 1) * s) for c, s in zip(coord, self.chunk_shape))
            data = self.codecs.encode(arr[sl], inner.at(f"{spec.where}/{'.'.join(map(str, coord))}"))
            index.offsets[coord] = pos
            index.nbytes[coord] = len(data)
            parts.append(data)
            pos += len(data)
        raw_index = self.encode_index(index, spec.where)
        body = b"".join(parts)
        return raw_index + body if self.index_location == "start" else body + raw_index

    def decode(self, data, spec):
        grid = self.grid(spec.shape, spec.where)
        index, _ = self.read_index(data, grid, spec.where)
        index.check_bounds(len(data), spec.where)
        out = np.full(spec.shape, spec.fill_value, dtype=spec.dtype.numpy)
        inner = self.inner_spec(spec)
        for coord in np.ndindex(*grid):
            ent = self.check_entry(index, coord, len(data), spec.where)
            if ent is None:
                continue
            off, n = ent
            sl = tuple(slice(c * s, (c + 1) * s) for c, s in zip(coord, self.chunk_shape))
            out[sl] = self.codecs.decode(data[off:off + n], inner.at(f"{spec.where} inner chunk {list(coord)}"))
        return out
