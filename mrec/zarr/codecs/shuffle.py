"""``numcodecs.shuffle``: the byte shuffle (configuration ``{"elementsize": n}``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numcodecs import Shuffle as _NumcodecsShuffle

from ...errors import CorruptionError, MetadataError
from .base import BytesBytesCodec

try:        # numcodecs' C loops themselves: its Shuffle wraps them in buffer checks and a zeroed output
    from numcodecs._shuffle import _doShuffle, _doUnshuffle
except ImportError:            # pragma: no cover - a numcodecs without the module: its codec then
    _doShuffle = _doUnshuffle = None

_native: dict[int, _NumcodecsShuffle] = {}


def _c_loop(fn, data, n: int):
    """``fn`` (numcodecs' C shuffle or unshuffle) over whole elements into a fresh uint8 array."""
    src = np.frombuffer(data, dtype=np.uint8)
    out = np.empty(len(src), dtype=np.uint8)
    fn(src, out, n)
    return out


def native(n: int) -> _NumcodecsShuffle:
    """numcodecs' C shuffle of element size n (one instance per size)."""
    codec = _native.get(n)
    if codec is None:
        codec = _native[n] = _NumcodecsShuffle(elementsize=n)
    return codec


def _whole(data, n: int):
    """numcodecs' C shuffle for n when data is whole elements (it refuses a partial one), else None."""
    if len(data) % n:
        return None
    codec = _native.get(n)
    if codec is None:
        codec = _native[n] = _NumcodecsShuffle(elementsize=n)
    return codec


def shuffle_bytes(data: bytes, n: int) -> bytes:
    if n <= 1 or not data:
        return bytes(data)
    codec = _whole(data, n)
    if codec is not None:
        return _c_loop(_doShuffle, data, n).tobytes() if _doShuffle else bytes(codec.encode(data))
    a = np.frombuffer(data, dtype=np.uint8)
    body = len(a) - len(a) % n
    out = np.empty_like(a)
    out[:body] = a[:body].reshape(-1, n).T.ravel()
    out[body:] = a[body:]
    return out.tobytes()


def unshuffle_bytes(data: bytes, n: int) -> bytes:
    if n <= 1 or not data:
        return bytes(data)
    codec = _whole(data, n)
    if codec is not None:
        return _c_loop(_doUnshuffle, data, n).tobytes() if _doUnshuffle else bytes(codec.decode(data))
    a = np.frombuffer(data, dtype=np.uint8)
    body = len(a) - len(a) % n
    out = np.empty_like(a)
    out[:body] = a[:body].reshape(n, -1).T.ravel()
    out[body:] = a[body:]
    return out.tobytes()


#: an element of the shuffle is at most this many bytes (numcodecs has no bound; a larger one
#: would only ever leave a chunk unshuffled, and huge values overflow numpy's dimensions)
MAX_ELEMENTSIZE = 2**31


@dataclass(frozen=True)
class ShuffleCodec(BytesBytesCodec):
    name = "numcodecs.shuffle"
    elementsize: int = 8

    @classmethod
    def from_config(cls, config, where):
        n = (config or {}).get("elementsize", 4)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ELEMENTSIZE:
            raise MetadataError(f"numcodecs.shuffle elementsize {n!r} is not an integer in 1..{MAX_ELEMENTSIZE}",
                                path=where)
        return cls(n)

    def to_json(self):
        return {"name": "numcodecs.shuffle", "configuration": {"elementsize": self.elementsize}}

    def encode(self, data):
        return shuffle_bytes(data, self.elementsize)

    def encode_view(self, data):
        """:meth:`encode` without the final copy to ``bytes``: a buffer (for the next codec)."""
        n = self.elementsize
        if n > 1 and len(data) and _doShuffle is not None and _whole(data, n) is not None:
            return memoryview(_c_loop(_doShuffle, data, n))
        return shuffle_bytes(data, n)

    def decode(self, data, spec):
        return unshuffle_bytes(data, self.elementsize)

    def decode_view(self, data, spec):
        """:meth:`decode` without the final copy to ``bytes``: a memoryview of a fresh buffer."""
        n = self.elementsize
        if n > 1 and len(data):
            codec = _whole(data, n)
            if codec is not None:
                return memoryview(_c_loop(_doUnshuffle, data, n) if _doUnshuffle else codec.decode(data))
        return unshuffle_bytes(data, n)

    def encoded_size(self, n):
        return n
