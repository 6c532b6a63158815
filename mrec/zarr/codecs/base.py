"""The three codec interfaces of Zarr V3: array→array, array→bytes, bytes→bytes.

Every codec is a frozen dataclass built from its ``zarr.json`` entry by
``from_config`` and emitted with its *full* configuration by ``to_json``
(strict readers such as zarrs refuse partial configurations).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..dtypes import DataType

#: What one string chunk may decode to beyond its 4-byte header and 4-byte item lengths: a
#: vlen-utf8 chunk has no fixed size, so a compressed one is bounded by this (a gzip / zstd
#: bomb stops here instead of filling memory)
MAX_STRING_CHUNK_BYTES = 256 << 20


def bytes_bound(n: int) -> int:
    """Most bytes a compressor (gzip, zstd) may emit for ``n`` input bytes, generously: stored
    deflate blocks add 5 bytes per 64 KiB, raw zstd blocks 3 per 128 KiB, plus headers."""
    return n + n // 256 + 4096


@dataclass(frozen=True)
class ChunkSpec:
    """What a codec needs to know about the chunk it transforms."""

    shape: tuple[int, ...]
    dtype: DataType
    fill_value: object
    where: str = ""          # array path / chunk key, for error messages
    #: most bytes a bytes→bytes decode may produce for this chunk (the pipeline sets it from the
    #: array metadata: what the chunk's shape and dtype can hold); None: :meth:`decode_limit`
    limit: int | None = None

    def decode_limit(self) -> int:
        """:attr:`limit`, or, when unset, what a ``bytes`` (or vlen-utf8) encoding of the chunk holds."""
        if self.limit is not None:
            return self.limit
        n = math.prod(self.shape)
        if self.dtype.is_string:
            return bytes_bound(4 + 4 * n + MAX_STRING_CHUNK_BYTES)
        return bytes_bound(n * self.dtype.itemsize)

    @property
    def nbytes(self) -> int:
        n = math.prod(self.shape)
        return n * (self.dtype.itemsize or 16)

    def with_shape(self, shape) -> "ChunkSpec":
        return ChunkSpec(tuple(shape), self.dtype, self.fill_value, self.where)

    def at(self, where: str) -> "ChunkSpec":
        return ChunkSpec(self.shape, self.dtype, self.fill_value, where, self.limit)


class Codec:
    name: ClassVar[str]

    @classmethod
    def from_config(cls, config: dict, where: str) -> "Codec":
        raise NotImplementedError

    def to_json(self) -> dict:
        raise NotImplementedError


class ArrayArrayCodec(Codec):
    #: the codec only moves elements (transpose): an encoded size fixed after it stays fixed
    keeps_size: ClassVar[bool] = False

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """The spec of this codec's output given its input spec."""
        raise NotImplementedError

    def encode(self, arr: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        raise NotImplementedError

    def decode(self, arr: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """``spec`` is the spec of the decoded (input-side) array."""
        raise NotImplementedError


class ArrayBytesCodec(Codec):
    #: the values' bytes as they are (``bytes``): a fixed size, decoded from any buffer (a view)
    raw_values: ClassVar[bool] = False
    #: the encoding can be read in parts, by byte ranges of the stored chunk (``sharding_indexed``)
    byte_ranges: ClassVar[bool] = False

    def max_encoded(self, spec: ChunkSpec) -> int:
        """Most bytes this codec's encoding of a chunk of ``spec`` can take (what the metadata fixes)."""
        return math.prod(spec.shape) * spec.dtype.itemsize

    def encode(self, arr: np.ndarray, spec: ChunkSpec) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        raise NotImplementedError


class BytesBytesCodec(Codec):
    def encode(self, data: bytes) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes, spec: ChunkSpec) -> bytes:
        raise NotImplementedError

    def encoded_size(self, n: int) -> int | None:
        """Encoded length for ``n`` input bytes when it is fixed (crc32c), else None."""
        return None

    def max_encoded(self, n: int) -> int:
        """Most bytes the encoding of ``n`` input bytes can take."""
        fixed = self.encoded_size(n)
        return bytes_bound(n) if fixed is None else fixed
