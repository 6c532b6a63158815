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

    def encode_pieces(self, pieces, size: int):
        """One frame of the concatenated ``pieces`` (``size`` bytes, stated in the frame as
        :meth:`encode` states it), as pieces: it decodes to what :meth:`encode` gives, never all held."""
        cobj = zstandard.ZstdCompressor(level=self.level, write_checksum=self.checksum,
                                        write_content_size=True).compressobj(size=size)
        for p in pieces:
            out = cobj.compress(p)
            if out:
                yield out
        yield cobj.flush()

    def decode(self, data, spec):
        if not len(data):
            raise CorruptionError("zstd chunk is empty (no frame)", path=spec.where)
        limit = spec.decode_limit()
        dctx = _decompressor()
        try:
            size = zstandard.frame_content_size(data)
        except zstandard.ZstdError:
            size = -1
        if size > limit:
            raise CorruptionError(f"zstd frame declares {size} decoded bytes, more than the {limit} bytes this "
                                  "chunk can hold (its shape and data type fix them)", path=spec.where)
        if size >= 0:
            # one frame stating its size (what every writer emits): decoded in one call, which
            # refuses trailing bytes; anything else takes the bounded frame-by-frame path below
            try:
                return dctx.decompress(data, allow_extra_data=False)
            except (zstandard.ZstdError, TypeError):      # TypeError: zstandard < 0.24
                pass
        try:
            return _bounded_frames(dctx, data, limit, spec.where)
        except zstandard.ZstdError as exc:
            raise CorruptionError(f"zstd frame does not decode: {exc}", path=spec.where) from None


#: input fed to a streaming decode at a time: one zstd block of 3 bytes may decode to 128 KiB,
#: so a piece decodes to at most ~45 MiB before the bound is checked again
_PIECE = 1024


def _bounded_frames(dctx, data, limit: int, where: str) -> bytes:
    """Every frame of ``data`` decoded, refusing once the output passes ``limit`` bytes (a frame
    that does not state its size, or several frames)."""
    out = bytearray()
    view = memoryview(data)
    obj, started = dctx.decompressobj(), False
    for pos in range(0, len(view), _PIECE):
        pending = view[pos:pos + _PIECE]
        while pending:
            started = True
            out += obj.decompress(pending)
            if len(out) > limit:
                raise CorruptionError(f"zstd frames decode to more than the {limit} bytes this chunk can hold "
                                      "(its shape and data type fix them)", path=where)
            if not obj.eof:
                break
            pending = obj.unused_data      # the next frame starts inside this piece
            obj, started = dctx.decompressobj(), False
    if started:
        raise zstandard.ZstdError("truncated frame")
    return bytes(out)
