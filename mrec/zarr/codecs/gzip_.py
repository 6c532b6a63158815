"""``gzip``: RFC 1952 members (header as Python's GzipFile writes it, mtime 0)."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from ...errors import CorruptionError, MetadataError
from .base import BytesBytesCodec


@dataclass(frozen=True)
class GzipCodec(BytesBytesCodec):
    name = "gzip"
    level: int = 1

    @classmethod
    def from_config(cls, config, where):
        level = (config or {}).get("level", 5)
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
            raise MetadataError(f"gzip level {level!r} is not an integer 0..9", path=where)
        return cls(level)

    def to_json(self):
        return {"name": "gzip", "configuration": {"level": self.level}}

    def _header(self) -> bytes:
        xfl = 2 if self.level == 9 else (4 if self.level == 1 else 0)
        return b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + bytes([xfl, 255])

    def _compressobj(self):
        return zlib.compressobj(self.level, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0)

    def encode(self, data):
        comp = self._compressobj()
        body = comp.compress(data) + comp.flush()
        trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
        return self._header() + body + trailer

    def encode_pieces(self, pieces):
        """:meth:`encode` of the concatenated ``pieces``, as pieces (the same bytes, never all held)."""
        yield self._header()
        comp = self._compressobj()
        crc = n = 0
        for p in pieces:
            crc, n = zlib.crc32(p, crc), n + len(p)
            out = comp.compress(p)
            if out:
                yield out
        yield comp.flush() + struct.pack("<II", crc & 0xFFFFFFFF, n & 0xFFFFFFFF)

    def decode(self, data, spec):
        limit = spec.decode_limit()
        try:
            out = bytearray()
            rest = bytes(data)
            while True:                 # one member, then any concatenated ones
                d = zlib.decompressobj(wbits=47)
                # never more than one byte past what the chunk can hold (max_length 0 means no bound)
                out += d.decompress(rest, limit - len(out) + 1)
                if len(out) > limit:
                    raise CorruptionError(f"gzip stream decodes to more than the {limit} bytes this chunk "
                                          "can hold (its shape and data type fix them)", path=spec.where)
                if not d.eof:
                    raise zlib.error("truncated stream")
                rest = d.unused_data
                if not rest:
                    return bytes(out)
        except zlib.error as exc:
            raise CorruptionError(f"gzip stream does not decode: {exc}", path=spec.where) from None
