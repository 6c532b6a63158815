"""libzstd called directly, for the one call python-zstandard has no form of: many zstd frames,
back to back, inflated into one caller's buffer by ONE call that releases the GIL once.

Why: a whole-column read inflates thousands of small frames (the chapter's inner chunks of
100-atom frames are ~17 KB decoded, ~4 KB stored).  python-zstandard's stream reader, the only
API of it that inflates several frames into a given buffer, takes the GIL back after every
frame; on two threads the hand-offs cost more than the frames' work (docs/performance.md, issue 16,
"stop 16" and "stop 17").  ``ZSTD_decompressDCtx`` decodes concatenated frames in one call, and a
``ctypes`` call runs without the GIL: the inflate of a column was 19 % faster on two threads and
9 % faster on one, on the same library.

Which library: the libzstd python-zstandard itself ships (its cffi backend module carries the
library with its symbols exported: the same version and code the rest of mrec uses), else the
system's ``libzstd``.  ``MREC_LIBZSTD=0`` turns this off, ``MREC_LIBZSTD=<path>`` names a library.
A library is used only when it is at least version 1.4 and inflates a self-test of two frames
exactly; otherwise :func:`inflater` is None and callers use python-zstandard's stream reader.
Nothing here is a dependency: ctypes is in the standard library, and a missing or odd library
only means the slower path.

The checks are the caller's: the batch decoder has already verified each chunk's checksum and
that each is exactly one frame stating its decoded size.  libzstd then refuses a frame that does
not inflate to the size its header states, and a result of any other total is refused by the
caller, as with the stream reader.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Callable

import numpy as np

__all__ = ["inflater", "library"]

_NAMES = ("libzstd.so.1", "libzstd.so", "libzstd.1.dylib", "libzstd.dylib", "zstd.dll", "libzstd.dll")
_MIN_VERSION = 10400                    # 1.4.0

_lock = threading.Lock()
_resolved: tuple | None = None          # (library path or None, inflate function or None)


def _candidates() -> list[str]:
    """Libraries to try, in order: MREC_LIBZSTD's, python-zstandard's own, the system's."""
    env = os.environ.get("MREC_LIBZSTD", "").strip()
    if env == "0":
        return []
    if env:
        return [env]
    found = []
    try:
        import zstandard
        here = os.path.dirname(zstandard.__file__)
        found += sorted(glob.glob(os.path.join(here, "_cffi*")))
    except Exception:                   # noqa: BLE001 - no python-zstandard module file: the system's
        pass
    return found + list(_NAMES)


def _bind(path: str):
    """The library at ``path`` with the four functions typed, or None."""
    try:
        lib = ctypes.CDLL(path)
        version = lib.ZSTD_versionNumber
        create, free, inflate = lib.ZSTD_createDCtx, lib.ZSTD_freeDCtx, lib.ZSTD_decompressDCtx
    except (OSError, AttributeError):
        return None
    version.restype, version.argtypes = ctypes.c_uint, []
    create.restype, create.argtypes = ctypes.c_void_p, []
    free.restype, free.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    inflate.restype = ctypes.c_size_t
    inflate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    if version() < _MIN_VERSION:
        return None
    return lib


class _Context:
    """One thread's ZSTD_DCtx (not thread-safe), kept in the zstd codec's per-thread context cache
    and freed with it."""

    __slots__ = ("ptr", "_free")

    def __init__(self, lib):
        self.ptr = lib.ZSTD_createDCtx()
        self._free = lib.ZSTD_freeDCtx
        if not self.ptr:
            raise MemoryError("ZSTD_createDCtx failed")

    def __del__(self):
        if self.ptr:
            self._free(self.ptr)
            self.ptr = None


def _make(lib) -> Callable[[bytes, np.ndarray], int]:
    from .zstd_ import _cached             # the per-thread context cache of the zstd codec
    call = lib.ZSTD_decompressDCtx
    # keyed by the code's address, not the object's id (which a later library object may reuse): a
    # context is only ever handed to the library that made it (ctypes never unloads a library)
    key = ("libzstd", ctypes.cast(call, ctypes.c_void_p).value)

    def inflate(frames: bytes, dst: np.ndarray) -> int:
        """Inflate the zstd frames ``frames`` (bytes: one or more whole frames back to back) into
        ``dst`` (a C-contiguous, writable uint8 array): the number of bytes written, or -1 when
        libzstd refuses (a damaged frame, more output than ``dst`` holds, a frame whose decoded
        size differs from its header's)."""
        if dst.dtype != np.uint8 or not dst.flags.c_contiguous or not dst.flags.writeable:
            raise ValueError("inflate needs a C-contiguous writable uint8 array")
        ctx = _cached(key, lambda: _Context(lib))
        cap = dst.nbytes
        got = call(ctx.ptr, dst.ctypes.data if cap else None, cap, frames, len(frames))
        return got if got <= cap else -1       # libzstd's error codes are the top of size_t
    return inflate


def _self_test(inflate) -> bool:
    """Two frames python-zstandard wrote (one with a content checksum), back to back, inflate in
    one call to exactly their bytes; a damaged one and a too-small buffer are refused."""
    import zstandard
    a, b = bytes(range(256)) * 40, b"mrec" * 3000
    frames = zstandard.ZstdCompressor(level=3).compress(a) + \
        zstandard.ZstdCompressor(level=1, write_checksum=True).compress(b)
    out = np.zeros(len(a) + len(b), dtype=np.uint8)
    if inflate(frames, out) != len(out) or out.tobytes() != a + b:
        return False
    bad = bytearray(frames)
    bad[-2] ^= 0xFF                     # inside the second frame's checksum
    small = np.zeros(len(out) - 1, dtype=np.uint8)
    return inflate(bytes(bad), out) == -1 and inflate(frames, small) == -1


def _resolve() -> tuple:
    for path in _candidates():
        lib = _bind(path)
        if lib is None:
            continue
        fn = _make(lib)
        try:
            ok = _self_test(fn)
        except Exception:               # noqa: BLE001 - an unusable library: try the next
            ok = False
        if ok:
            return path, fn
    return None, None


def _get() -> tuple:
    global _resolved
    if _resolved is None:
        with _lock:
            if _resolved is None:
                _resolved = _resolve()
    return _resolved


def inflater() -> Callable[[bytes, np.ndarray], int] | None:
    """``(frames, dst) -> int``: many zstd frames inflated by one GIL-free libzstd call (see the
    module's text), or None when no usable libzstd was found (or ``MREC_LIBZSTD=0``).  Resolved
    once a process."""
    return _get()[1]


def library() -> str | None:
    """The path (or name) of the libzstd :func:`inflater` calls, None when there is none."""
    return _get()[0]
