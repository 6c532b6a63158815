"""Encode / decode one 1-d f64 chunk: bytes(endian) -> shuffle(E) -> zstd(params) -> crc32c."""
import numpy as np, zstandard, crc32c, time
from numcodecs import Shuffle, Zstd

def cparams(level, **kw):
    return zstandard.ZstdCompressionParameters.from_level(level, **kw)

def encode(a, E=8, endian="<", level=19, params=None, blocks=None):
    """blocks: None, or a list of byte offsets where zstd blocks are ended (FLUSH_BLOCK)."""
    raw = a.astype(endian + "f8").tobytes()
    sh = bytes(Shuffle(E).encode(np.frombuffer(raw, np.uint8))) if E else raw
    cctx = zstandard.ZstdCompressor(compression_params=params) if params is not None else zstandard.ZstdCompressor(level=level)
    if blocks is None:
        z = cctx.compress(sh)
    else:
        co = cctx.compressobj(size=len(sh))
        parts, prev = [], 0
        for b in list(blocks) + [len(sh)]:
            if b > prev:
                parts.append(co.compress(sh[prev:b]))
                parts.append(co.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
                prev = b
        parts.append(co.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
        z = b"".join(parts)
    return z + crc32c.crc32c(z).to_bytes(4, "little")

_d = zstandard.ZstdDecompressor()
_nz = Zstd()

def decode(blob, E=8, endian="<", nbytes=None, use_numcodecs=False):
    z = blob[:-4]
    assert crc32c.crc32c(z).to_bytes(4, "little") == blob[-4:]
    sh = bytes(_nz.decode(z)) if use_numcodecs else _d.decompress(z)
    raw = bytes(Shuffle(E).decode(np.frombuffer(sh, np.uint8))) if E else sh
    return np.frombuffer(raw, endian + "f8")

def frame_info(blob):
    p = zstandard.get_frame_parameters(blob[:-4])
    return p.window_size, p.content_size
