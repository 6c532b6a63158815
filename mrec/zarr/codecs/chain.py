"""The codec chain of a chunk: array→array codecs, exactly one array→bytes codec, bytes→bytes codecs.

:class:`CodecChain` is built from codec objects (never from JSON: ``registry.py`` parses a
``codecs`` list into one) and runs them: ``encode`` forward, ``decode`` backwards, with the sizes a
chain fixes (``encoded_size``, ``max_encoded``).  ``sharding_indexed`` builds its inner chain and its
index chain as chains, so this module imports only the codec interfaces (``base.py``); what a
codec can do is read from its capability flags (``raw_values``, ``keeps_size``, ``byte_ranges``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from ...errors import MetadataError
from .base import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, ChunkSpec, Codec


@dataclass(frozen=True)
class CodecChain:
    array_array: tuple[ArrayArrayCodec, ...]
    array_bytes: ArrayBytesCodec
    bytes_bytes: tuple[BytesBytesCodec, ...]

    @classmethod
    def from_codecs(cls, codecs, where: str) -> "CodecChain":
        aa: list = []
        ab = None
        bb: list = []
        for c in codecs:
            if isinstance(c, ArrayArrayCodec):
                if ab is not None:
                    raise MetadataError(f"array→array codec {c.name!r} after the array→bytes codec", path=where)
                aa.append(c)
            elif isinstance(c, ArrayBytesCodec):
                if ab is not None:
                    raise MetadataError(f"second array→bytes codec {c.name!r}", path=where)
                ab = c
            else:
                if ab is None:
                    raise MetadataError(f"bytes→bytes codec {c.name!r} before the array→bytes codec", path=where)
                bb.append(c)
        if ab is None:
            raise MetadataError("codec list has no array→bytes codec (bytes, vlen-utf8 or sharding_indexed)", path=where)
        return cls(tuple(aa), ab, tuple(bb))

    @property
    def codecs(self) -> tuple[Codec, ...]:
        return (*self.array_array, self.array_bytes, *self.bytes_bytes)

    def to_json(self) -> list[dict]:
        return [c.to_json() for c in self.codecs]

    def _specs(self, spec: ChunkSpec) -> list[ChunkSpec]:
        specs = [spec]
        for c in self.array_array:
            specs.append(c.resolve(specs[-1]))
        return specs

    def max_encoded(self, spec: ChunkSpec) -> int:
        """Most bytes an encoded chunk of ``spec`` can take: what its shape and data type fix."""
        return self._max_resolved(self._specs(spec)[-1])

    def _max_resolved(self, resolved: ChunkSpec) -> int:
        n = self.array_bytes.max_encoded(resolved)
        for c in self.bytes_bytes:
            n = c.max_encoded(n)
        return n

    def _bounded(self, resolved: ChunkSpec) -> ChunkSpec:
        """``resolved`` (the spec after the array→array codecs) carrying the most bytes any
        bytes→bytes decode of it may produce (a gzip / zstd bomb is refused there, not decoded)."""
        if not self.bytes_bytes or resolved.limit is not None:
            return resolved
        return replace(resolved, limit=self._max_resolved(resolved))

    def encode(self, arr: np.ndarray, spec: ChunkSpec) -> bytes:
        specs = self._specs(spec)
        for c, s in zip(self.array_array, specs):
            arr = c.encode(arr, s)
        bb = self.bytes_bytes
        if not bb:
            return self.array_bytes.encode(arr, specs[-1])
        # the steps before the last hand buffers on (no copy to bytes between codecs); the last one
        # returns bytes: the same bytes as encoding through each codec's encode
        data = getattr(self.array_bytes, "encode_view", self.array_bytes.encode)(arr, specs[-1])
        for c in bb[:-1]:
            data = getattr(c, "encode_view", c.encode)(data)
        return bb[-1].encode(data)

    @functools.cached_property
    def _view_decoders(self):
        """The bytes→bytes decoders, in decode order, taking the copy-free variant where a codec has
        one (crc32c, shuffle): only when the array→bytes codec is ``bytes`` (which reads any buffer
        with ``np.frombuffer``); else None.  Same checks, same errors, same values."""
        if not self.array_bytes.raw_values:
            return None
        return tuple(getattr(c, "decode_view", c.decode) for c in reversed(self.bytes_bytes))

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        specs = self._specs(spec)
        views = self._view_decoders
        if self.bytes_bytes:
            bounded = self._bounded(specs[-1])
            if views is not None:
                for dec in views:
                    data = dec(data, bounded)
            else:
                for c in reversed(self.bytes_bytes):
                    data = c.decode(data, bounded)
        arr = self.array_bytes.decode(data, specs[-1])
        for c, s in zip(reversed(self.array_array), reversed(specs[:-1])):
            arr = c.decode(arr, s)
        return arr

    def encoded_size(self, nbytes: int) -> int | None:
        """Fixed encoded size for an all-fixed chain (shard index), else None.  An array→array
        codec that only moves elements (transpose) keeps the size fixed."""
        if not all(c.keeps_size for c in self.array_array) or not self.array_bytes.raw_values:
            return None
        n: int | None = nbytes
        for c in self.bytes_bytes:
            n = c.encoded_size(n) if n is not None else None
        return n

    @functools.cached_property
    def sharding(self):
        """The sharding codec when shards can be read by byte ranges, else None.

        Only a chain that *is* ``sharding_indexed`` (no array→array codec
        before it, no bytes→bytes codec after it) stores the index and inner
        chunks verbatim in the shard file; any other chain holding a
        sharding codec is decoded shard by shard through :meth:`decode`.
        """
        if self.array_array or self.bytes_bytes or not self.array_bytes.byte_ranges:
            return None
        return self.array_bytes
