"""The encoding of a partial inner chunk padded with the fill value, made a piece at a time.

A landing pads the partial last inner chunk of a shard to the inner chunk's full shape (a Zarr
inner chunk is whole), and a trajectory block's inner chunk is sized from its declared frame rows:
a 3-row frame of a block declared at 2^25 rows padded 800 MB in memory three times over (the
padded array, its encoding, the joined payload) -- 2.3 GB for 72 bytes of data (issue 27).  Here the
padded bytes are never made: the rows' bytes and then the fill's go through the pipeline (a byte
shuffle, one gzip or zstd, crc32c) in pieces of about :data:`PIECE` bytes, which the caller writes
as they come, so memory is the rows plus a few pieces.  The bytes are those
:meth:`~mrec.zarr.pipeline.CodecPipeline.encode` makes of the padded array (gzip, shuffle and
crc32c exactly; a zstd frame states the same size and decodes to the same bytes, its blocks may be
cut elsewhere).
"""
from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np

from .bytes_ import BytesCodec
from .crc32c_ import Crc32cCodec
from .gzip_ import GzipCodec
from .shuffle import ShuffleCodec
from .zstd_ import ZstdCodec

__all__ = ["PIECE", "STREAM_FROM", "padded_pieces"]

#: about this many bytes a piece
PIECE = 1 << 20
#: a padded chunk of more bytes than this is encoded in pieces (below it, whole: the usual path)
STREAM_FROM = 16 << 20


def _tiled(pattern: bytes, n: int) -> Iterator[bytes]:
    """``n`` bytes (a multiple of ``len(pattern)``) of ``pattern`` repeated, in pieces."""
    block = pattern * max(1, PIECE // len(pattern))
    full, rest = divmod(n, len(block))
    yield from itertools.repeat(block, full)
    if rest:
        yield block[:rest]


def _shuffled(data: bytes, fill: bytes, pad: int, e: int) -> Iterator[bytes] | None:
    """numcodecs' byte shuffle (element size ``e``) of ``data`` followed by ``pad`` bytes of the
    element ``fill`` repeated, lane by lane; None when the padding does not start and end on whole
    periods of both (then the caller pads and encodes whole)."""
    period = math.lcm(len(fill), e)
    if len(data) % period or pad % period:
        return None
    rows = np.frombuffer(data, np.uint8)
    block = np.frombuffer(fill * (period // len(fill)), np.uint8)

    def lanes():
        for b in range(e):
            yield rows[b::e].tobytes()
            yield from _tiled(block[b::e].tobytes(), pad // e)
    return lanes()


def padded_pieces(pipeline, rows: np.ndarray, chunk_shape: tuple[int, ...], dtype, fill) -> Iterator[bytes] | None:
    """The encoding by ``pipeline`` of ``rows`` padded with ``fill`` to ``chunk_shape`` (``rows``
    spans the trailing axes), as pieces; None when the pipeline is not one this can stream (an
    array→array codec, strings, a shuffle of another element size, more than one compressor, or
    codecs in another order): the caller then pads and encodes whole."""
    if pipeline.array_array or not isinstance(pipeline.array_bytes, BytesCodec) or dtype.is_string:
        return None
    codecs = list(pipeline.bytes_bytes)
    crc = bool(codecs) and isinstance(codecs[-1], Crc32cCodec)
    codecs = codecs[:-1] if crc else codecs
    shuffle = codecs.pop(0).elementsize if codecs and isinstance(codecs[0], ShuffleCodec) else 1
    if len(codecs) > 1 or (codecs and not isinstance(codecs[0], (GzipCodec, ZstdCodec))):
        return None
    disk = dtype.numpy.newbyteorder("<" if pipeline.array_bytes.endian != "big" else ">") \
        if dtype.numpy.itemsize > 1 or dtype.numpy.kind == "c" else dtype.numpy
    data = np.ascontiguousarray(rows, dtype=disk).tobytes()
    element = np.full(1, fill, dtype=disk).tobytes()
    total = math.prod(chunk_shape) * disk.itemsize
    stream = _shuffled(data, element, total - len(data), shuffle) if shuffle > 1 else \
        itertools.chain((data,), _tiled(element, total - len(data)))
    if stream is None:
        return None
    if codecs:
        c = codecs[0]
        stream = c.encode_pieces(stream, total) if isinstance(c, ZstdCodec) else c.encode_pieces(stream)
    return Crc32cCodec().encode_pieces(stream) if crc else stream
