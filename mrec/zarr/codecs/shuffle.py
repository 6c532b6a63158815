"""``numcodecs.shuffle``: the byte shuffle (configuration ``{"elementsize": n}``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import CorruptionError, MetadataError
from .base import BytesBytesCodec


def shuffle_bytes(data: bytes, n: int) -> bytes:
    if n <= 1 or not data:
        return bytes(data)
    a = np.frombuffer(data, dtype=np.uint8)
    body = len(a) - len(a) % n
    out = np.empty_like(a)
    out[:body] = a[:body].reshape(-1, n).T.ravel()
    out[body:] = a[body:]
    return out.tobytes()


def unshuffle_bytes(data: bytes, n: int) -> bytes:
    if n <= 1 or not data:
        return bytes(data)
    a = np.frombuffer(data, dtype=np.uint8)
    body = len(a) - len(a) % n
    out = np.empty_like(a)
    out[:body] = a[:body].reshape(n, -1).T.ravel()
    out[body:] = a[body:]
    return out.tobytes()


@dataclass(frozen=True)
class ShuffleCodec(BytesBytesCodec):
    name = "numcodecs.shuffle"
    elementsize: int = 8

    @classmethod
    def from_config(cls, config, where):
        n = (config or {}).get("elementsize", 4)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise MetadataError(f"numcodecs.shuffle elementsize {n!r} is not a positive integer", path=where)
        return cls(n)

    def to_json(self):
        return {"name": "numcodecs.shuffle", "configuration": {"elementsize": self.elementsize}}

    def encode(self, data):
        return shuffle_bytes(data, self.elementsize)

    def decode(self, data, spec):
        return unshuffle_bytes(data, self.elementsize)

    def encoded_size(self, n):
        return n
