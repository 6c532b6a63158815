"""Encode many chunks on every core.

zstd, zlib and crc32c release the GIL while they work, so the inner chunks of
one landing can be encoded by a small thread pool.  Output order (and bytes)
are exactly those of encoding one chunk after the other: :func:`encode_all`
returns results in input order, and each codec is deterministic.

The pool has ``MREC_THREADS`` workers (default: the number of CPUs, at most 8;
``MREC_THREADS=1`` encodes serially).  Small batches are encoded inline, where
a thread hop would cost more than it saves.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

__all__ = ["encode_all", "threads"]

T = TypeVar("T")
R = TypeVar("R")
#: below this many input bytes a batch is encoded inline
MIN_PARALLEL_BYTES = 96 * 1024

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def threads() -> int:
    raw = os.environ.get("MREC_THREADS")
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    return max(1, min(8, os.cpu_count() or 1))


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():        # a forked child makes its own
        _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="mrec-encode")
        _pool_pid = os.getpid()
    return _pool


def encode_all(fn: Callable[[T], R], items: Sequence[T], nbytes: int) -> list[R]:
    """``[fn(x) for x in items]``, on the pool when the batch is worth it."""
    if len(items) < 2 or nbytes < MIN_PARALLEL_BYTES or threads() == 1:
        return [fn(x) for x in items]
    return list(_executor().map(fn, items))
