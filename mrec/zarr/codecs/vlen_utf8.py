"""``vlen-utf8``: u32 item count, then per item a u32 length and its UTF-8 bytes.

MD topologies hold string columns of tens of thousands of atoms with few distinct values (names,
resnames, types), so both directions take a fast path and keep the plain item-by-item loop as the
reference: the fast path only answers for input it has proven valid (exact ``str`` items that
encode, a chunk whose every item parses and decodes) and returns ``None`` otherwise, and the
reference loop then runs on the same input, so every refusal keeps its type and message and every
accepted input its bytes.
"""
from __future__ import annotations

import codecs
import struct
from dataclasses import dataclass

import numpy as np

from ...errors import CorruptionError, MetadataError
from .base import MAX_STRING_CHUNK_BYTES, ArrayBytesCodec

_U32 = struct.Struct("<I")
#: the longest item a u32 length prefix holds
_MAX_ITEM = 0xFFFFFFFF
#: what the fast paths join the items with (encode) or turn each length prefix into, four times
#: (decode); an item holding one is left to the reference loop
_SEP = "\0"
#: the mean item length (characters) above which the item-by-item loops are the faster ones, and
#: how many leading items estimate it before any work
_LONG, _SAMPLE = 64, 256


def _body_lengths(arr: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(joiner offsets, item byte lengths) of ``n`` items' UTF-8 joined by NUL (``arr``), or
    None when an item holds a NUL itself (more joiners than ``n - 1``; and ``n == 0``)."""
    seps = np.flatnonzero(arr == 0)
    if len(seps) != n - 1:
        return None
    bounds = np.empty(n + 1, dtype=np.int64)
    bounds[0], bounds[-1] = -1, len(arr)
    bounds[1:-1] = seps
    return seps, np.diff(bounds) - 1


def _interleave(head: bytes, arr: np.ndarray, seps: np.ndarray, blens: np.ndarray) -> bytes:
    """The chunk: ``head``, then the items joined by NUL (``arr``) with each one's u32 length
    before it instead: item ``i`` (``i >= 1``)'s prefix takes its joiner's place, moved by the
    3 bytes each earlier prefix adds over its joiner, plus the header's and first prefix's 8."""
    n = len(blens)
    chunk = np.empty(4 + len(arr) + 3 * n + 1, dtype=np.uint8)
    chunk[:4] = np.frombuffer(head, dtype=np.uint8)
    at = np.full(n, 4, dtype=np.int64)
    at[1:] = seps + 8 + 3 * np.arange(n - 1)
    prefix = (at[:, None] + np.arange(4)).ravel()
    chunk[prefix] = blens.astype("<u4").view(np.uint8)
    keep = np.ones(len(chunk), dtype=bool)
    keep[:4] = False
    keep[prefix] = False
    chars = np.ones(len(arr), dtype=bool)
    chars[seps] = False
    chunk[keep] = arr[chars]
    return chunk.tobytes()


def _fast_chunk(items: list, head: bytes) -> bytes | None:
    """The chunk of ``items`` after their count ``head``, from one join and one encode of them all,
    the lengths and their interleaving in numpy; None when the reference loop must decide: an
    item not exactly a ``str`` (a subclass may encode its own way), a lone surrogate, a NUL in an
    item, an item too long for its u32 length, no item -- or long items, which the loop encodes
    faster (numpy's byte masks cost more per byte than its per-item work saves)."""
    n = len(items)
    if not set(map(type, items)) <= {str} or sum(map(len, items[:_SAMPLE])) > _LONG * min(n, _SAMPLE):
        return None
    text = _SEP.join(items)
    if len(text) > (_LONG + 1) * n:
        return None
    try:
        payload = text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    arr = np.frombuffer(payload, dtype=np.uint8)
    found = _body_lengths(arr, n)
    if found is None or (len(payload) > _MAX_ITEM and int(found[1].max()) > _MAX_ITEM):
        return None
    return _interleave(head, arr, *found)


def _guess_offsets(a: np.ndarray, n: int) -> tuple[np.ndarray, int] | None:
    """Each item's prefix offset and the end of the last item, all at once, when every length is
    below 256 and no item (nor an empty one's prefix) puts three zero bytes after a byte: the
    prefixes are then the zero triples, taken only if they chain from offset 4 as their lengths
    say (so they are the prefixes the item-by-item walk finds)."""
    end = len(a)
    if end > 4 + 259 * n:                         # not all lengths below 256 (or bytes after them)
        return None
    triple = (a[5:end - 2] == 0) & (a[6:end - 1] == 0) & (a[7:end] == 0)
    at = np.flatnonzero(triple) + 4
    if len(at) != n or (n and at[0] != 4):
        return None
    nxt = at + 4 + a[at]
    last = int(nxt[-1]) if n else 4
    if not np.array_equal(nxt[:-1], at[1:]) or last > end:
        return None
    return at, last


def _walk_short(data: bytes, a: np.ndarray, n: int) -> tuple[np.ndarray, int] | None:
    """:func:`_walk` where each length is the prefix's first byte, checked afterwards against
    its three zero bytes (None on a longer item, or one past the chunk; at once when the first
    item is longer)."""
    if n and any(data[5:8]):
        return None
    at: list[int] = []
    put, pos = at.append, 4
    try:
        for _ in range(n):
            put(pos)
            pos += data[pos] + 4
    except IndexError:
        return None
    offs = np.asarray(at, dtype=np.int64)
    if pos > len(data) or (n and offs[-1] + 4 > len(data)) or any(a[offs + k].any() for k in (1, 2, 3)):
        return None
    return offs, pos


def _walk(data: bytes, a: np.ndarray, n: int) -> tuple[np.ndarray, int] | None:
    """Each item's prefix offset and the end of the last item, item by item (a chunk with empty
    strings or long items); None when an item's prefix or bytes run past the chunk."""
    found = _walk_short(data, a, n)
    if found is not None:
        return found
    at: list[int] = []
    put, pos, unpack = at.append, 4, _U32.unpack_from
    try:
        for _ in range(n):
            put(pos)
            pos += unpack(data, pos)[0] + 4
    except struct.error:
        return None
    return (np.asarray(at, dtype=np.int64), pos) if pos <= len(data) else None


def _fast_items(data: bytes, n: int) -> list[str] | None:
    """The decoded items of a chunk whose header is checked, or None when the reference loop must
    decide (an item does not parse or decode, or holds a NUL). Each length prefix becomes four
    NULs and the chunk is decoded once and split there: a NUL is ASCII, so the whole decodes
    exactly when every item does, to the same text."""
    a = np.frombuffer(data, dtype=np.uint8)
    found = _guess_offsets(a, n) or _walk(data, a, n)
    if found is None:
        return None
    at, end = found
    region = a[4:end].copy()
    region[((at - 4)[:, None] + np.arange(4)).ravel()] = 0
    if len(region) - np.count_nonzero(region) != 4 * n:
        return None
    try:
        return codecs.utf_8_decode(region, "strict", True)[0].split(_SEP * 4)[1:]
    except UnicodeDecodeError:
        return None


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
        head = _U32.pack(len(flat))
        chunk = _fast_chunk(flat.tolist(), head)
        return chunk if chunk is not None else self._encode_items(flat, head, spec)

    @staticmethod
    def _encode_items(flat, head: bytes, spec) -> bytes:
        """The reference encoder, item by item: what the fast path's bytes equal, and the one
        that raises each refusal (a non-``str`` item, a lone surrogate, an over-long item)."""
        parts = [head]
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
        items = _fast_items(data, n)
        if items is None:
            return self._decode_items(data, n, spec).reshape(spec.shape)
        out = np.empty(n, dtype=object)
        out[:] = items
        return out.reshape(spec.shape)

    @staticmethod
    def _decode_items(data: bytes, n: int, spec) -> np.ndarray:
        """The reference decoder, item by item: what the fast path's items equal, and the one
        that raises each refusal (a truncated or corrupt item)."""
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
        return out
