"""``crc32c``: a 4-byte little-endian CRC-32C appended to the bytes, checked on decode."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc

from ...errors import CorruptionError
from .base import BytesBytesCodec


#: ``crc32c(data) -> int``: the C function itself (no Python frame: it runs once a chunk read)
crc32c = _crc.crc32c


@dataclass(frozen=True)
class Crc32cCodec(BytesBytesCodec):
    name = "crc32c"

    @classmethod
    def from_config(cls, config, where):
        return cls()

    def to_json(self):
        return {"name": "crc32c"}

    def encode(self, data):
        return bytes(data) + struct.pack("<I", crc32c(data))

    def encode_pieces(self, pieces):
        """:meth:`encode` of the concatenated ``pieces``, as pieces (the checksum runs along)."""
        crc = 0
        for p in pieces:
            crc = _crc.crc32c(p, crc)
            yield p
        yield struct.pack("<I", crc)

    def decode(self, data, spec):
        if len(data) < 4:
            raise CorruptionError(f"{len(data)} bytes cannot hold a crc32c checksum", path=spec.where)
        body = memoryview(data)[:-4]
        stored = struct.unpack("<I", bytes(data[-4:]))[0]
        actual = crc32c(body)
        if stored != actual:
            raise CorruptionError(f"crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})", path=spec.where)
        return bytes(body)

    def decode_view(self, data, spec):
        """:meth:`decode` without copying the body: a read-only memoryview of ``data``."""
        if len(data) < 4:
            raise CorruptionError(f"{len(data)} bytes cannot hold a crc32c checksum", path=spec.where)
        view = memoryview(data)
        body = view[:-4]
        stored = int.from_bytes(view[-4:], "little")
        actual = crc32c(body)
        if stored != actual:
            raise CorruptionError(f"crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})", path=spec.where)
        return body

    def encoded_size(self, n):
        return n + 4
