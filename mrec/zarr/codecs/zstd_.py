"""``zstd``: Zstandard frames (level, checksum)."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import zstandard

from ...errors import CorruptionError, MetadataError
from .base import BytesBytesCodec

# Compression contexts are reused (creating one costs as much as encoding a 24 KB chunk) but
# are not thread-safe: one set per thread.
_contexts = threading.local()


def _cached(key, make):
    cache = getattr(_contexts, "cache", None)
    if cache is None:
        cache = _contexts.cache = {}
    ctx = cache.get(key)
    if ctx is None:
        ctx = cache[key] = make()
    return ctx


def _decompressor() -> zstandard.ZstdDecompressor:
    return _cached("d", zstandard.ZstdDecompressor)


@dataclass(frozen=True)
class ZstdCodec(BytesBytesCodec):
    name = "zstd"
    level: int = 3
    checksum: bool = False

    @classmethod
    def from_config(cls, config, where):
        config = config or {}
        level = config.get("level", 0)
        checksum = config.get("checksum", False)
        if isinstance(level, bool) or not isinstance(level, int) or not -131072 <= level <= 22:
            raise MetadataError(f"zstd level {level!r} is not an integer", path=where)
        if not isinstance(checksum, bool):
            raise MetadataError(f"zstd checksum {checksum!r} is not a bool", path=where)
        return cls(level, checksum)

    def to_json(self):
        return {"name": "zstd", "configuration": {"level": self.level, "checksum": self.checksum}}

    def _compressor(self):
        return _cached((self.level, self.checksum), lambda: zstandard.ZstdCompressor(
            level=self.level, write_checksum=self.checksum, write_content_size=True))

    def encode(self, data):
        return self._compressor().compress(data)

    def decode(self, data, spec):
        if not len(data):
            raise CorruptionError("zstd chunk is empty (no frame)", path=spec.where)
        dctx = _decompressor()
        try:
            size = zstandard.frame_content_size(data)
        except zstandard.ZstdError:
            size = -1
        if 0 <= size <= 4 * spec.nbytes + (1 << 20):
            # one frame stating a plausible size (what every writer emits): decoded in one call,
            # which refuses trailing bytes; anything else takes the frame-by-frame path below
            try:
                return dctx.decompress(data, allow_extra_data=False)
            except (zstandard.ZstdError, TypeError):      # TypeError: zstandard < 0.24
                pass
        try:
            out = bytearray()
            view = memoryview(data)
            while view:
                obj = dctx.decompressobj()
                out += obj.decompress(view)
                if not obj.eof:
                    raise zstandard.ZstdError("truncated frame")
                used = len(view) - len(obj.unused_data)
                view = view[used:]
            return bytes(out)
        except zstandard.ZstdError as exc:
            raise CorruptionError(f"zstd frame does not decode: {exc}", path=spec.where) from None
