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


@dataclass(frozen=True)
class ChunkSpec:
    """What a codec needs to know about the chunk it transforms."""

    shape: tuple[int, ...]
    dtype: DataType
    fill_value: object
    where: str = ""          # array path / chunk key, for error messages

    @property
    def nbytes(self) -> int:
        n = math.prod(self.shape)
        return n * (self.dtype.itemsize or 16)

    def with_shape(self, shape) -> "ChunkSpec":
        return ChunkSpec(tuple(shape), self.dtype, self.fill_value, self.where)

    def at(self, where: str) -> "ChunkSpec":
        return ChunkSpec(self.shape, self.dtype, self.fill_value, where)


class Codec:
    name: ClassVar[str]

    @classmethod
    def from_config(cls, config: dict, where: str) -> "Codec":
        raise NotImplementedError

    def to_json(self) -> dict:
        raise NotImplementedError


class ArrayArrayCodec(Codec):
    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """The spec of this codec's output given its input spec."""
        raise NotImplementedError

    def encode(self, arr: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        raise NotImplementedError

    def decode(self, arr: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """``spec`` is the spec of the decoded (input-side) array."""
        raise NotImplementedError


class ArrayBytesCodec(Codec):
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
