"""``bytes``: fixed-size elements in C order, little or big endian."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import CorruptionError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec


@dataclass(frozen=True)
class BytesCodec(ArrayBytesCodec):
    name = "bytes"
    raw_values = True
    endian: str | None = "little"

    @classmethod
    def from_config(cls, config, where):
        endian = (config or {}).get("endian")
        if endian not in ("little", "big", None):
            raise MetadataError(f"bytes codec endian {endian!r} is not 'little' or 'big'", path=where)
        return cls(endian)

    def to_json(self):
        if self.endian is None:
            return {"name": "bytes", "configuration": {}}
        return {"name": "bytes", "configuration": {"endian": self.endian}}

    def _disk_dtype(self, spec: ChunkSpec) -> np.dtype:
        dt = spec.dtype
        if dt.is_string:
            raise MetadataError("the bytes codec cannot hold strings (use vlen-utf8)", path=spec.where)
        if dt.itemsize > 1 or dt.numpy.kind == "c":
            if self.endian is None:
                raise MetadataError(f"bytes codec needs an endian for {dt.name}", path=spec.where)
            return dt.numpy.newbyteorder("<" if self.endian == "little" else ">")
        return dt.numpy

    def encode(self, arr, spec):
        disk = self._disk_dtype(spec)
        return np.ascontiguousarray(arr, dtype=disk).tobytes()

    def encode_view(self, arr, spec):
        """:meth:`encode` without copying an array already C-contiguous in the stored byte order:
        a read-only byte view of it, valid while ``arr`` is unchanged (for the next codec)."""
        disk = self._disk_dtype(spec)
        a = np.ascontiguousarray(arr, dtype=disk)
        if a.dtype.kind in "biufc" and a.size:
            return memoryview(a.reshape(-1).view(np.uint8))
        return a.tobytes()

    def decode(self, data, spec):
        disk = self._disk_dtype(spec)
        n = math.prod(spec.shape)
        if len(data) != n * disk.itemsize:
            raise CorruptionError(
                f"chunk holds {len(data)} bytes, expected {n * disk.itemsize} for shape {list(spec.shape)} {spec.dtype.name}",
                path=spec.where)
        out = np.frombuffer(data, dtype=disk).reshape(spec.shape)
        if spec.dtype.numpy.kind == "b":
            if out.size and out.view(np.uint8).max() > 1:
                raise CorruptionError("bool chunk holds a byte other than 0 or 1", path=spec.where)
        return out.astype(spec.dtype.numpy, copy=False) if disk != spec.dtype.numpy else out
