"""``numcodecs.shuffle``: the byte shuffle (configuration ``{"elementsize": n}``)."""
from __future__ import annotations

from dataclasses import dataclass

import importlib.machinery
import importlib.util
import os
import warnings

import numpy as np

from ...errors import CorruptionError, MetadataError
from .base import BytesBytesCodec


def _load_c_loops():
    """numcodecs' C shuffle loops (``numcodecs._shuffle``), loaded from its extension file alone.

    Importing any ``numcodecs`` submodule runs the package's ``__init__``, which imports every
    codec it ships -- and its crc32c codec prints a DeprecationWarning when only the ``crc32c``
    package (mrec's dependency) is installed.  mrec needs the shuffle loops only, so the extension
    is loaded by path; a numcodecs laid out otherwise falls back to its package import, with its
    import-time warnings kept off the user's terminal."""
    spec = importlib.util.find_spec("numcodecs")          # locates the package, runs none of it
    for d in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_shuffle" + suffix)
            if os.path.exists(path):
                try:
                    s = importlib.util.spec_from_file_location("numcodecs._shuffle", path)
                    mod = importlib.util.module_from_spec(s)
                    s.loader.exec_module(mod)
                    return mod._doShuffle, mod._doUnshuffle
                except (ImportError, AttributeError, OSError):  # pragma: no cover - fall back below
                    break
    try:                                                   # pragma: no cover - another layout
        with warnings.catch_warnings(record=True):
            from numcodecs._shuffle import _doShuffle, _doUnshuffle
        return _doShuffle, _doUnshuffle
    except ImportError:                                    # pragma: no cover - the numpy loops serve
        return None, None


_doShuffle, _doUnshuffle = _load_c_loops()


def _c_loop(fn, data, n: int):
    """``fn`` (numcodecs' C shuffle or unshuffle) over whole elements into a fresh uint8 array."""
    src = np.frombuffer(data, dtype=np.uint8)
    out = np.empty(len(src), dtype=np.uint8)
    fn(src, out, n)
    return out


def _whole(data, n: int) -> bool:
    """Whether the C loops apply: they exist and ``data`` is whole elements (partial ones are not theirs)."""
    return _doShuffle is not None and len(data) % n == 0


class _Native:
    """numcodecs' C unshuffle of element size n, decoding into a caller's buffer (``decode(data, out=)``)."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def decode(self, data, out=None):
        if out is None:
            return _c_loop(_doUnshuffle, data, self.n) if _doUnshuffle else \
                np.frombuffer(unshuffle_bytes(data, self.n), dtype=np.uint8)
        if _doUnshuffle is None:
            out[...] = np.frombuffer(unshuffle_bytes(data, self.n), dtype=np.uint8)
        else:
            _doUnshuffle(np.frombuffer(data, dtype=np.uint8), out, self.n)
        return out


_native: dict[int, _Native] = {}


def native(n: int) -> _Native:
    """The C unshuffle of element size n (one instance per size)."""
    codec = _native.get(n)
    if codec is None:
        codec = _native[n] = _Native(n)
    return codec


def shuffle_bytes(data: bytes, n: int) -> bytes:
    if n <= 1 or not data:
        return bytes(data)
    if _whole(data, n):
        return _c_loop(_doShuffle, data, n).tobytes()
    a = np.frombuffer(data, dtype=np.uint8)
    body = len(a) - len(a) % n
    out = np.empty_like(a)
    out[:body] = a[:body].reshape(-1, n).T.ravel()
    out[body:] = a[body:]
    return out.tobytes()


def unshuffle_bytes(data: bytes, n: int) -> bytes:
    if n <= 1 or not data:
        return bytes(data)
    if _whole(data, n):
        return _c_loop(_doUnshuffle, data, n).tobytes()
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
        if n > 1 and len(data) and _whole(data, n):
            return memoryview(_c_loop(_doShuffle, data, n))
        return shuffle_bytes(data, n)

    def decode(self, data, spec):
        return unshuffle_bytes(data, self.elementsize)

    def decode_view(self, data, spec):
        """:meth:`decode` without the final copy to ``bytes``: a memoryview of a fresh buffer."""
        n = self.elementsize
        if n > 1 and len(data) and _whole(data, n):
            return memoryview(_c_loop(_doUnshuffle, data, n))
        return unshuffle_bytes(data, n)

    def encoded_size(self, n):
        return n
