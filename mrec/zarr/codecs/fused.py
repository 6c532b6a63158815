"""The resolved per-chunk encoders and decoders of a codec chain: the steps bound once, in place.

The read and append paths decode and encode thousands of chunks of one chain and one chunk spec;
these functions resolve the per-chunk work once (which codecs, which sizes, the stored dtype) and
return a function for the plain cases (``bytes``, an optional ``numcodecs.shuffle``, zstd / gzip,
crc32c): :func:`encoder`, :func:`decoder`, :func:`decoder_into` (straight into a destination,
crc32c + zstd fused), :func:`part_decoder` (some rows of a chunk), :func:`decode_into` (one chunk,
labelled).  They give the values and checks of :meth:`CodecChain.decode` / ``encode``; where they
decline (None, False or an exception) the caller decodes through the labelled chain, which raises
the error to report.  ``plan`` is :func:`into_plan` of the chain (cached by its caller).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import MetadataError
from .base import ChunkSpec
from .bytes_ import BytesCodec
from .crc32c_ import Crc32cCodec
from .shuffle import ShuffleCodec, native as _native_shuffle
from .zstd_ import ZstdCodec


def encoder(chain, spec: ChunkSpec):
    """``arr -> bytes``: :meth:`CodecChain.encode` of chunks of ``spec``'s dtype and shape with the per-chunk
    work done once (the steps resolved, the stored dtype checked), the same bytes; None when
    the pipeline has array→array codecs, no ``bytes`` codec or a dtype it cannot view (strings):
    then :meth:`CodecChain.encode` is the way."""
    if chain.array_array or not chain.bytes_bytes or not isinstance(chain.array_bytes, BytesCodec):
        return None
    disk = numeric_disk(chain.array_bytes, spec)
    if disk is None:
        return None
    steps = [getattr(c, "encode_view", c.encode) for c in chain.bytes_bytes[:-1]]
    last = chain.bytes_bytes[-1].encode
    shape = tuple(spec.shape)

    def encode(arr: np.ndarray) -> bytes:
        a = np.ascontiguousarray(arr, dtype=disk)
        if a.shape != shape or not a.size:
            return chain.encode(arr, spec)
        data = memoryview(a.reshape(-1).view(np.uint8))
        for f in steps:
            data = f(data)
        return last(data)
    return encode


def into_plan(chain):
    """(decoders before the shuffle, the shuffle's element size) when the last decode step is a
    numcodecs shuffle straight into the bytes codec's little-endian numbers; else None."""
    views = chain._view_decoders
    if views is None or chain.array_array or not chain.bytes_bytes:
        return None
    first = chain.bytes_bytes[0]
    if not isinstance(first, ShuffleCodec) or first.elementsize <= 1:
        return None
    return views[:-1], first.elementsize


def decode_into(chain, plan, data, spec: ChunkSpec, dest: np.ndarray) -> np.ndarray:
    """:meth:`decode` of one chunk, unshuffled straight into ``dest`` (returned) when the pipeline
    ends in a shuffle into native numbers and every size matches; else the decoded chunk as
    :meth:`decode` returns it (same checks, same errors: only the final copy is skipped)."""
    dt = spec.dtype.numpy
    if plan is None or dt.kind not in "fiuc" or dest.dtype != dt or tuple(dest.shape) != tuple(spec.shape) \
            or not dest.flags.c_contiguous or chain.array_bytes.endian is None \
            or chain.array_bytes._disk_dtype(spec) != dt:
        return chain.decode(data, spec)
    pre, n = plan
    spec = chain._bounded(spec)
    for dec in pre:
        data = dec(data, spec)
    if len(data) != dest.nbytes or len(data) % n:
        # what decode would do from here, to raise (or return) exactly the same
        return chain.array_bytes.decode(chain.bytes_bytes[0].decode_view(data, spec), spec)
    _native_shuffle(n).decode(data, out=dest.reshape(-1).view(np.uint8))
    return dest


def decoder_into(chain, plan, spec: ChunkSpec, release_gil: bool = False, many: bool = False):
    """``(raw, dest) -> bool``: :meth:`decode_into` of whole chunks of ``spec`` with the steps
    resolved once; True when ``dest`` (C-contiguous, of ``spec``'s dtype and shape) now holds the
    chunk.  False, or any exception, means nothing is known: decode through :meth:`decode_into`
    with a labelled spec, which gives the value or raises the error to report.  None when the
    pipeline cannot decode in place (see :meth:`decode_into`).  ``dest`` may also be a 1-d
    strided array (a column of an interleaved result): unshuffled with numpy's strided copy.

    ``release_gil``: unshuffle with numpy's transposed copy, which runs without the GIL (numcodecs'
    C loop, the default, holds it and is ~1.3x faster on one thread): for decodes on several
    threads at once.  The same bytes either way.

    ``many``: ``jobs -> list[bool]`` instead, ``jobs`` a list of ``(raw, dest)``: the same decode
    of each in one loop (a chunk that raises is False), for a run of chunks on one thread."""
    dt = spec.dtype.numpy
    if plan is None:
        # no shuffle last: the bytes codec reads the decoded bytes as they are, so they are copied
        views = chain._view_decoders
        if views is None or chain.array_array or not chain.bytes_bytes \
                or (chain.bytes_bytes[0].__class__ is ShuffleCodec and chain.bytes_bytes[0].elementsize > 1):
            return None
        plan = (views, 1)
        pre_codecs = tuple(reversed(chain.bytes_bytes))
    else:
        pre_codecs = tuple(reversed(chain.bytes_bytes[1:]))
    if dt.kind not in "fiuc" or (chain.array_bytes.endian is None and dt.itemsize > 1) \
            or chain.array_bytes._disk_dtype(spec) != dt:
        return None
    pre, n = plan
    spec = chain._bounded(spec)
    nbytes = dt.itemsize * math.prod(spec.shape)
    if nbytes % n:
        return None               # partial shuffle elements: decode_into's path
    unshuffle = _unshuffler(n, release_gil)
    fused = _fused_crc_zstd(pre_codecs, nbytes)
    itemsize = dt.itemsize
    # a 1-d strided destination (a column of an interleaved result) is written through numpy's
    # strided copy, when each element's bytes are whole in the decoded bytes' layout
    strided = _strided_unshuffler(n, itemsize)

    def place(data, dest: np.ndarray) -> bool:
        if dest.nbytes != nbytes:
            return False
        if dest.flags.c_contiguous:
            unshuffle(data, dest.reshape(-1).view(np.uint8))
            return True
        if strided is None or dest.ndim != 1:
            return False
        strided(data, dest[:, None].view(np.uint8))
        return True

    if fused is not None:
        def decode(data, dest: np.ndarray) -> bool:
            data = fused(data)
            return data is not None and place(data, dest)
    else:
        def decode(data, dest: np.ndarray) -> bool:
            for dec in pre:
                data = dec(data, spec)
            return len(data) == nbytes and place(data, dest)
    if not many:
        return decode
    if fused is None or strided is None:
        def decode_many(jobs) -> list:
            out = []
            for data, dest in jobs:
                try:
                    out.append(decode(data, dest))
                except Exception:          # noqa: BLE001 - False: the labelled path reports
                    out.append(False)
            return out
        return decode_many
    return _fused_many(nbytes, n, itemsize, release_gil, unshuffle, strided)


def part_decoder(chain, plan, spec: ChunkSpec):
    """``(inflate, rows, place)`` for reading some leading rows of a chunk of ``spec`` without
    unshuffling all of it, in the plain case only (what :meth:`decoder_into` takes, its steps
    being crc32c and zstd behind an optional shuffle of the item size); else None.

    ``inflate(raw)``: the decompressed (still shuffled) bytes after the checks of the fused
    decoder, or None (nothing is known: the labelled path decides).  ``rows(data, lo, hi)``: the
    chunk's rows ``lo:hi``, a fresh C-contiguous array of the chunk's trailing shape and dtype --
    with a shuffle, a transposed copy of just those elements of each byte plane (one strided view
    of the inflated bytes, copied once: the fewest numpy calls, a small frame being mostly their
    overhead).  ``place(data, dest)``: the whole chunk into ``dest`` (decoder_into's)."""
    if decoder_into(chain, plan, spec) is None:
        return None
    n = plan[1] if plan is not None else 1
    pre_codecs = tuple(reversed(chain.bytes_bytes[1:] if plan is not None else chain.bytes_bytes))
    dt = spec.dtype.numpy
    spec = chain._bounded(spec)
    nbytes = dt.itemsize * math.prod(spec.shape)
    fused = _fused_crc_zstd(pre_codecs, nbytes)
    if fused is None or n not in (1, dt.itemsize) or not spec.shape or not nbytes:
        return None
    row_bytes = nbytes // spec.shape[0]
    row_items = row_bytes // dt.itemsize
    items = nbytes // dt.itemsize                # elements of the chunk: a byte plane's length
    trailing = tuple(spec.shape[1:])
    ndarray, u8 = np.ndarray, np.uint8
    unshuffle = _unshuffler(n, False)

    if n == 1:
        def rows(data, lo: int, hi: int) -> np.ndarray:
            return ndarray((hi - lo, *trailing), dt, data, lo * row_bytes).copy()
    else:
        def rows(data, lo: int, hi: int) -> np.ndarray:
            # element i's byte b is byte b * items + i of the planes: a (elements, n) strided view
            el = (hi - lo) * row_items
            return ndarray((hi - lo, *trailing), dt, ndarray((el, n), u8, data, lo * row_items, (1, items)).copy())

    def place(data, dest: np.ndarray) -> None:
        unshuffle(data, dest.reshape(-1).view(u8))
    return fused, rows, place


def decoder(chain, spec: ChunkSpec):
    """``raw -> array``: :meth:`decode` of chunks of ``spec`` with the steps resolved once; the
    same values.  Its errors name no chunk: on any exception, decode through :meth:`decode`
    with a labelled spec, which raises the error to report.  None when array→array codecs
    or a non-``bytes`` array→bytes codec are in the pipeline."""
    views = chain._view_decoders
    if views is None or chain.array_array:
        return None
    last = chain.array_bytes.decode
    spec = chain._bounded(spec)

    def decode(data) -> np.ndarray:
        for dec in views:
            data = dec(data, spec)
        return last(data, spec)
    return decode


def _unshuffler(n: int, release_gil: bool):
    """``(data, out)``: the numcodecs unshuffle of element size ``n`` of the bytes ``data`` into the
    flat uint8 array ``out`` of the same length (a plain copy for ``n == 1``).  ``release_gil``:
    numpy's transposed copy (byte plane b of element i is byte ``b * count + i``), which numpy runs
    without the GIL; numcodecs' C loop holds it.  The same bytes."""
    from .shuffle import _doUnshuffle
    if n == 1:
        def unshuffle(data, out):
            out[...] = np.frombuffer(data, dtype=np.uint8)
    elif release_gil or _doUnshuffle is None:
        def unshuffle(data, out):
            out.reshape(-1, n)[...] = np.frombuffer(data, dtype=np.uint8).reshape(n, -1).T
    else:
        def unshuffle(data, out):
            _doUnshuffle(np.frombuffer(data, dtype=np.uint8), out, n)
    return unshuffle


def _strided_unshuffler(n: int, itemsize: int):
    """``(data, dest)``: the unshuffle (``n`` = 1: none) of the bytes ``data`` into ``dest``, a uint8
    array of shape (elements, ``itemsize``) with any strides; None unless ``n`` is 1 or the item
    size (otherwise an element's bytes are not one row of a plane transpose)."""
    if n == 1:
        def unshuffle(data, dest):
            dest[...] = np.frombuffer(data, dtype=np.uint8).reshape(-1, itemsize)
    elif n == itemsize:
        def unshuffle(data, dest):
            dest[...] = np.frombuffer(data, dtype=np.uint8).reshape(n, -1).T
    else:
        return None
    return unshuffle


def _fused_many(nbytes: int, n: int, itemsize: int, release_gil: bool, unshuffle, strided):
    """``jobs -> list[bool]``: the fused crc32c + zstd decode (see :func:`_fused_crc_zstd`) and the
    unshuffle of each ``(raw, dest)`` of a run of chunks, in one loop (the per-chunk work of
    ``decoder_into``'s functions without their calls): the same checks, the same bytes."""
    import zstandard
    from .crc32c_ import crc32c
    from .shuffle import _doUnshuffle
    from .zstd_ import _contexts, _decompressor
    content_size = zstandard.frame_content_size
    frombuffer, u8 = np.frombuffer, np.uint8
    c_loop = _doUnshuffle if (n > 1 and not release_gil and _doUnshuffle is not None) else None

    def decode_many(jobs) -> list:
        try:
            dctx = _contexts.cache["d"]          # this thread's decompression context
        except (AttributeError, KeyError):
            dctx = _decompressor()
        out = []
        ok = out.append
        for raw, dest in jobs:
            try:
                mv = memoryview(raw)
                if len(mv) < 5 or dest.nbytes != nbytes:
                    ok(False)
                    continue
                body = mv[:-4]
                if crc32c(body) != int.from_bytes(mv[-4:], "little") or content_size(body) != nbytes:
                    ok(False)
                    continue
                data = dctx.decompress(body, allow_extra_data=False)
                if len(data) != nbytes:
                    ok(False)
                    continue
                if dest.flags.c_contiguous:
                    if c_loop is not None:
                        c_loop(frombuffer(data, dtype=u8), dest.reshape(-1).view(u8), n)
                    else:
                        unshuffle(data, dest.reshape(-1).view(u8))
                elif dest.ndim == 1:
                    strided(data, dest[:, None].view(u8))
                else:
                    ok(False)
                    continue
                ok(True)
            except Exception:                  # noqa: BLE001 - False: the labelled path reports
                ok(False)
        return out
    return decode_many


def _fused_crc_zstd(codecs: tuple, nbytes: int):
    """``raw -> bytes | None``: the decode steps ``codecs`` (decode order) when they are exactly
    crc32c then zstd, done in one function for the plain case only: the checksum matches and the
    body is one zstd frame stating ``nbytes`` decoded bytes with nothing after it.  None from the
    function means "not the plain case" (nothing is known: the labelled path decides and reports);
    the function may also raise.  Returns None (no fused form) for any other list of steps."""
    if len(codecs) != 2 or codecs[0].__class__ is not Crc32cCodec or codecs[1].__class__ is not ZstdCodec:
        return None
    import zstandard
    from .crc32c_ import crc32c
    from .zstd_ import _contexts, _decompressor
    content_size = zstandard.frame_content_size

    from_bytes = int.from_bytes

    def fused(data):
        body = memoryview(data)[:-4]
        if len(body) < 1 or crc32c(body) != from_bytes(data[-4:], "little") or content_size(body) != nbytes:
            return None
        try:
            dctx = _contexts.cache["d"]          # this thread's decompression context
        except (AttributeError, KeyError):
            dctx = _decompressor()
        # (data, max_output_size, read_across_frames, allow_extra_data): positional, the keyword
        # parse costing a small frame's read a measurable share
        out = dctx.decompress(body, 0, False, False)
        return out if len(out) == nbytes else None
    return fused


def numeric_disk(array_bytes: BytesCodec, spec: ChunkSpec):
    """The dtype the ``bytes`` codec stores ``spec``'s values as, when numeric (what the encoders
    view as bytes); None for strings and what it cannot store."""
    try:
        disk = array_bytes._disk_dtype(spec)
    except MetadataError:
        return None
    return disk if disk.kind in "biufc" else None

