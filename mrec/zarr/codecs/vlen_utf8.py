"""``vlen-utf8``: u32 item count, then per item a u32 length and its UTF-8 bytes."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ...errors import CorruptionError, MetadataError
from .base import MAX_STRING_CHUNK_BYTES, ArrayBytesCodec


@dataclass(frozen=True)
class VlenUtf8Codec(ArrayBytesCodec):
    name = "vlen-utf8"

    @classmethod
    def from_config(cls, config, where):
        return cls()

    def to_json(self):
        return {"name": "vlen-utf8", "configuration": {}}

    def max_encoded(self, spec):
        return 4 + 4 * int(np.prod(spec.shape, dtype=object)) + MAX_STRING_CHUNK_BYTES

    def encode(self, arr, spec):
        flat = np.asarray(arr, dtype=object).ravel(order="C")
        parts = [struct.pack("<I", len(flat))]
        for item in flat:
            if not isinstance(item, str):
                raise MetadataError(f"string array holds a {type(item).__name__}", path=spec.where)
            b = item.encode("utf-8")
            parts.append(struct.pack("<I", len(b)))
            parts.append(b)
        return b"".join(parts)

    def decode(self, data, spec):
        data = bytes(data)
        n = int(np.prod(spec.shape, dtype=np.int64))
        if len(data) < 4:
            raise CorruptionError("vlen-utf8 chunk shorter than its header", path=spec.where)
        (count,) = struct.unpack_from("<I", data, 0)
        if count != n:
            raise CorruptionError(f"vlen-utf8 chunk holds {count} items, expected {n}", path=spec.where)
        if 4 + 4 * n > len(data):
            # checked before anything of n items is allocated: each item takes at least its 4-byte length
            raise CorruptionError(f"vlen-utf8 chunk of {len(data)} bytes cannot hold {n} items (each takes "
                                  "at least 4 bytes)", path=spec.where)
        out = np.empty(n, dtype=object)
        pos = 4
        try:
            for i in range(n):
                (ln,) = struct.unpack_from("<I", data, pos)
                pos += 4
                if pos + ln > len(data):
                    raise CorruptionError("vlen-utf8 item runs past the chunk", path=spec.where)
                out[i] = data[pos:pos + ln].decode("utf-8")
                pos += ln
        except (struct.error, UnicodeDecodeError) as exc:
            raise CorruptionError(f"vlen-utf8 chunk does not decode: {exc}", path=spec.where) from None
        return out.reshape(spec.shape)
