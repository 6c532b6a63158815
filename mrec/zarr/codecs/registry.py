"""Codec names to codec classes, and the parser of a ``codecs`` list of ``zarr.json``.

Only the must-decode set is admitted: bytes, gzip, zstd, numcodecs.shuffle, crc32c, vlen-utf8,
sharding_indexed, transpose; anything else is refused naming the array.  :func:`parse_codecs`
builds a chain (any :class:`CodecChain` class, the root pipeline's included) and hands itself to
``sharding_indexed``, which parses its inner and index codec lists with it: the sharding codec
never imports the registry, and no codec module imports a module above ``codecs/``.
"""
from __future__ import annotations

from functools import partial

from ...errors import MetadataError, UnsupportedError
from .base import Codec
from .bytes_ import BytesCodec
from .chain import CodecChain
from .crc32c_ import Crc32cCodec
from .gzip_ import GzipCodec
from .sharding import ShardingCodec
from .shuffle import ShuffleCodec
from .transpose import TransposeCodec
from .vlen_utf8 import VlenUtf8Codec
from .zstd_ import ZstdCodec

MUST_DECODE = ("bytes", "gzip", "zstd", "numcodecs.shuffle", "crc32c", "vlen-utf8", "sharding_indexed", "transpose")

CODECS: dict[str, type[Codec]] = {
    "bytes": BytesCodec, "gzip": GzipCodec, "zstd": ZstdCodec,
    "numcodecs.shuffle": ShuffleCodec, "crc32c": Crc32cCodec,
    "vlen-utf8": VlenUtf8Codec, "transpose": TransposeCodec,
    "sharding_indexed": ShardingCodec,
}


def codec_from_json(entry, where: str, chain: type[CodecChain] = CodecChain) -> Codec:
    """The codec of one ``codecs`` entry (a name or ``{"name", "configuration"}``); a sharding
    codec's inner chains are built as ``chain``."""
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise MetadataError(f"codec entry {entry!r} is not an object with a name", path=where)
    name = entry["name"]
    cls = CODECS.get(name)
    if cls is None:
        raise UnsupportedError(
            f"codec {name!r} is outside the must-decode set ({', '.join(MUST_DECODE)})",
            path=where, kind="unsupported_codec")
    config = entry.get("configuration", {})
    if config is not None and not isinstance(config, dict):
        raise MetadataError(f"codec {name!r} configuration is not an object", path=where)
    if cls is ShardingCodec:
        return cls.from_config(config or {}, where, parse=partial(parse_codecs, chain=chain))
    return cls.from_config(config or {}, where)


def parse_codecs(entries, where: str, chain: type[CodecChain] = CodecChain) -> CodecChain:
    """A ``codecs`` list of ``zarr.json`` as a ``chain`` (order checked by ``chain.from_codecs``)."""
    if not isinstance(entries, list) or not entries:
        raise MetadataError("codecs is not a non-empty list", path=where)
    return chain.from_codecs([codec_from_json(e, where, chain) for e in entries], where)
