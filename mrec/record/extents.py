"""The reference writer's extents, codecs and flush cadence (chunking-and-packing.md).

Pure functions: they turn a declaration into chunk/shard shapes and codec
pipelines.  Trajectory extents are frozen at creation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import RefusalError
from ..zarr.codecs.bytes_ import BytesCodec
from ..zarr.codecs.crc32c_ import Crc32cCodec
from ..zarr.codecs.gzip_ import GzipCodec
from ..zarr.codecs.sharding import ShardingCodec
from ..zarr.codecs.shuffle import ShuffleCodec
from ..zarr.codecs.vlen_utf8 import VlenUtf8Codec
from ..zarr.codecs.zstd_ import ZstdCodec
from ..zarr.pipeline import CodecPipeline
from .model.dtypes import numpy_dtype, row_bytes  # noqa: F401  (row_bytes re-exported: the extents rules use it)

KiB, MiB = 1024, 1024 * 1024
COLUMN_CHUNK_TARGET = 16 * KiB
SHARD_TARGET = 256 * MiB
MAX_CHUNKS_PER_SHARD = 4096
DENSE_CHUNK_ROWS = 1024
DENSE_CHUNKS_PER_SHARD = 256
FIXED_CHUNK_TARGET = 512 * KiB
FIXED_MAX_CHUNKS = 4
FLUSH_TARGET = 4 * MiB
MAX_FLUSH_FRAMES = 4096
# the opt-in "compact" writer profile (not the reference extents): several frames per inner chunk,
# so shuffle + zstd see each atom's bytes across frames, and a high zstd level; still the
# must-decode codec set, and a frame is still inside one chunk
PROFILES = ("reference", "compact")
COMPACT_FRAMES_PER_CHUNK = 16
COMPACT_ZSTD_LEVEL = 19


def rows_per_chunk(frame_rows: int | None, narrowest_row_bytes: int, min_frames: int = 1) -> int:
    """Smallest multiple of frame_rows >= max(frame_rows, ceil(16 KiB / row_bytes)).

    A block with frame_rows 0 (or unknown) takes max(1, ceil(16 KiB / row_bytes)).
    A zero-width row (a trailing axis of length 0) counts as one byte.  ``min_frames``
    (the compact profile) raises the floor to that many frames.
    """
    rb = max(1, narrowest_row_bytes)
    target = -(-COLUMN_CHUNK_TARGET // rb)
    if not frame_rows:
        return max(1, target)
    need = max(frame_rows * max(1, min_frames), target)
    return -(-need // frame_rows) * frame_rows


def chunks_per_shard(chunk_bytes: int) -> int:
    return max(1, min(MAX_CHUNKS_PER_SHARD, SHARD_TARGET // max(1, chunk_bytes)))


@dataclass(frozen=True)
class Extent:
    inner_rows: int
    shard_rows: int


def column_extent(rpc: int, rb: int, expected_rows: int | None = None) -> Extent:
    """``expected_rows`` (the writer's size hint): no more chunks a shard than that many rows fill."""
    cps = chunks_per_shard(rpc * max(1, rb))
    if expected_rows is not None:
        cps = max(1, min(cps, -(-expected_rows // rpc)))
    return Extent(rpc, rpc * cps)


DENSE_EXTENT = Extent(DENSE_CHUNK_ROWS, DENSE_CHUNK_ROWS * DENSE_CHUNKS_PER_SHARD)


def hinted_rows_per_chunk(rpc: int, frame_rows: int | None, expected_frames: int | None) -> int:
    """The size hint: a chunk holds no more rows than ``expected_frames`` frames (still whole frames)."""
    if not expected_frames or not frame_rows:
        return rpc
    return max(frame_rows, min(rpc, expected_frames * frame_rows))


def dense_extent(expected_frames: int | None) -> Extent:
    """Dense arrays under the size hint: one inner chunk of expected_frames + 1 rows (offset has one more
    entry than updates), a shard of one chunk; the reference 1024 x 256 without a hint or past it."""
    if not expected_frames or expected_frames + 1 >= DENSE_CHUNK_ROWS:
        return DENSE_EXTENT
    return Extent(expected_frames + 1, expected_frames + 1)


def flush_every(frame_bytes_total: int, frames_per_chunk_of_largest: int) -> int:
    """K = max(1, ceil(4 MiB / frame_bytes)), rounded up to a multiple of the largest
    block's frames-per-chunk, then capped at 4096 frames."""
    k = max(1, -(-FLUSH_TARGET // max(1, frame_bytes_total)))
    f = max(1, frames_per_chunk_of_largest)
    k = -(-k // f) * f
    return min(k, MAX_FLUSH_FRAMES)


def fixed_extent(n: int, rb: int) -> tuple[int, int]:
    """Fixed-size arrays: (rows per chunk, number of chunks) along the leading axis."""
    rows = min(n, max(1, FIXED_CHUNK_TARGET // max(1, rb)))
    chunks = -(-n // rows) if rows else 1
    return rows, chunks


# -- codecs -------------------------------------------------------------------

@dataclass(frozen=True)
class Compression:
    """The writer knob: None | gzip[:level] | zstd[:level], optionally ``shuffle+`` before the
    compressor (``shuffle+zstd[:level]``): the byte shuffle of the must-decode set then also goes
    before the compressor of float columns without a precision (mrec's choice for exact MD columns:
    the zero low bytes of widened float32 and the slowly changing exponent bytes line up), and
    shuffle + that compressor replace gzip 1 on the integer and bool columns (ids, residue numbers,
    bond indices); strings and the dense arrays keep gzip 1.  ``min_chunk_bytes``: an inner chunk
    smaller than that takes the reference codecs instead (no compressor on floats): a compressor gains
    nothing on a few hundred bytes and its description costs bytes in every array's zarr.json."""

    name: str | None = None
    level: int | None = None
    shuffle: bool = False
    min_chunk_bytes: int = 0

    def for_chunk(self, nbytes: int | None) -> "Compression":
        """This knob for an inner chunk of ``nbytes`` raw bytes (the reference's under ``min_chunk_bytes``)."""
        return self if nbytes is None or nbytes >= self.min_chunk_bytes else Compression()

    @classmethod
    def parse(cls, value) -> "Compression":
        if value is None or isinstance(value, Compression):
            return value or cls()
        if not isinstance(value, str):
            raise _bad_compression(value)
        shuffle = value.startswith(SHUFFLE_PREFIX)
        name, _, level = value[len(SHUFFLE_PREFIX) if shuffle else 0:].partition(":")
        if name not in ("gzip", "zstd", "none") or (shuffle and name == "none"):
            raise _bad_compression(value)
        if name == "none":
            return cls()
        if level:
            try:
                lv = int(level)
            except ValueError:
                raise RefusalError(f"compression level {level!r} is not an integer", kind="bad_compression") from None
        else:
            lv = 1 if name == "gzip" else 3
        if name == "gzip" and not 0 <= lv <= 9:
            raise RefusalError(f"gzip level {lv} is not 0..9", kind="bad_compression")
        if name == "zstd" and not -7 <= lv <= 22:
            raise RefusalError(f"zstd level {lv} is not -7..22", kind="bad_compression")
        return cls(name, lv, shuffle)

    def codec(self):
        if self.name == "gzip":
            return GzipCodec(self.level)
        if self.name == "zstd":
            return ZstdCodec(self.level, False)
        return None

    def __str__(self):
        return "none" if self.name is None else f"{SHUFFLE_PREFIX if self.shuffle else ''}{self.name}:{self.level}"


SHUFFLE_PREFIX = "shuffle+"


def _bad_compression(value) -> RefusalError:
    return RefusalError(f"compression {value!r} is not None, '[shuffle+]gzip[:N]' or '[shuffle+]zstd[:N]'",
                        kind="bad_compression")


def bytes_to_bytes(dtype: str, *, precision: bool, dense: bool, compression: Compression,
                   chunk_bytes: int | None = None) -> list:
    """The column's bytes→bytes codecs before crc32c (chapter, "Reference writer: codecs");
    ``chunk_bytes`` -- the raw bytes of one inner chunk (for ``compression.min_chunk_bytes``)."""
    if dense:
        return [GzipCodec(1)]
    compression = compression.for_chunk(chunk_bytes)
    if dtype in ("f64", "c64", "c128"):
        if precision:
            return [ShuffleCodec(8), compression.codec() or ZstdCodec(3, False)]
        c = compression.codec()
        if c is not None and compression.shuffle and dtype == "f64":
            return [ShuffleCodec(8), c]
        return [c] if c is not None else []
    if compression.shuffle and compression.codec() is not None and dtype != "string":
        size = numpy_dtype(dtype).itemsize                   # integers and bools: shuffled, compressed alike
        return ([ShuffleCodec(size)] if size > 1 else []) + [compression.codec()]
    return [GzipCodec(1)]


def inner_pipeline(dtype: str, bb: list) -> CodecPipeline:
    serializer = VlenUtf8Codec() if dtype == "string" else BytesCodec("little")
    return CodecPipeline((), serializer, (*bb, Crc32cCodec()))


def index_pipeline() -> CodecPipeline:
    return CodecPipeline((), BytesCodec("little"), (Crc32cCodec(),))


def sharded(inner_chunk_shape, inner: CodecPipeline, index_location: str) -> CodecPipeline:
    return CodecPipeline((), ShardingCodec(tuple(inner_chunk_shape), inner, index_pipeline(), index_location), ())
