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
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

__all__ = ["batch_threads", "call_all", "concurrent", "decode_all", "decode_parts", "encode_all", "in_worker", "one_thread",
           "read_threads", "submit", "threads"]

T = TypeVar("T")
R = TypeVar("R")
#: below this many input bytes a batch is encoded inline
MIN_PARALLEL_BYTES = 96 * 1024
#: below this many decoded bytes a read decodes its chunks inline
MIN_PARALLEL_DECODE = 256 * 1024
#: the pool's size: a ``threads=`` argument above MREC_THREADS may use up to this many workers
MAX_WORKERS = 8

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


_cpus: int | None = None


def _env_count(name: str) -> int | None:
    """A positive count from the environment variable ``name`` (None when unset or not an integer)."""
    raw = os.environ.get(name)
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    return None


def threads() -> int:
    global _cpus
    n = _env_count("MREC_THREADS")
    if n is not None:
        return n
    if _cpus is None:                   # os.cpu_count() costs ~15 us: asked once
        _cpus = max(1, min(8, os.cpu_count() or 1))
    return _cpus


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():        # a forked child makes its own
        # the concurrency of a call is the number of parts it submits; idle workers are never started
        _pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="mrec-encode")
        _pool_pid = os.getpid()
    return _pool


def encode_all(fn: Callable[[T], R], items: Sequence[T], nbytes: int) -> list[R]:
    """``[fn(x) for x in items]``, on the pool when the batch is worth it.

    The items are cut into one contiguous slice per worker, the first encoded in this thread:
    a task per chunk cost more in hand-offs (and GIL ping-pong over each chunk's Python) than
    the second core gave.  The first failing item in input order raises, as in the loop."""
    n = threads()
    if len(items) < 2 or nbytes < MIN_PARALLEL_BYTES or n == 1 or in_worker():
        return [fn(x) for x in items]
    k = min(n, len(items))
    cut = [len(items) * i // k for i in range(k + 1)]
    parts = [items[cut[i]:cut[i + 1]] for i in range(k)]
    done = call_all([lambda part=part: [fn(x) for x in part] for part in parts])
    return [r for part in done for r in part]


def batch_threads(nbytes: int) -> int:
    """How many threads a batch encode of ``nbytes`` input bytes uses (``pipeline.batch_encoder``):
    :func:`threads`, or 1 below :data:`MIN_PARALLEL_BYTES`, inside a pool worker, and inside
    :class:`one_thread` while it says so."""
    n = threads()
    if n == 1 or nbytes < MIN_PARALLEL_BYTES or in_worker():
        return 1
    solo = getattr(_local, "solo", False)
    if solo is not False and (solo is True or solo()):
        return 1
    return min(n, MAX_WORKERS + 1)


_local = threading.local()


class one_thread:
    """``with one_thread(on):`` batch encodes made by this thread use only this thread when ``on``
    (:func:`batch_threads` is 1): a pipelined writer's committer keeping up with its producer leaves
    the other cores to the producer (the simulation), and uses the pool only when commits queue up
    or the producer waits for them.  ``on`` is a bool, or a callable asked at every batch encode
    (the answer may change while one commit lands its arrays)."""

    def __init__(self, on=True):
        self.on, self.old = (on if callable(on) else bool(on)), False

    def __enter__(self):
        self.old = getattr(_local, "solo", False)
        _local.solo = self.on

    def __exit__(self, *exc):
        _local.solo = self.old


def decode_all(fn: Callable, items: Sequence[T], nbytes: int, n: int | None = None, *,
               per_part: bool = False) -> list:
    """``[fn(x) for x in items]`` for a read: the items cut into ``n`` contiguous parts (default
    :func:`threads`, i.e. ``MREC_THREADS`` or the machine's cores), the first decoded in this
    thread, the rest on the pool.  Inline below :data:`MIN_PARALLEL_DECODE` decoded bytes, for a
    single item, with ``n == 1`` and inside a pool worker.  Results in input order; ``fn`` is
    expected not to raise (a read's fast path reports failure as a value and leaves the error to
    the serial, labelled path), but if it does the first failing part in order raises.
    ``per_part``: ``fn`` takes a part (a list of items) and returns its list of results."""
    n = decode_parts(len(items), nbytes, n)
    if n < 2:
        return fn(list(items)) if per_part else [fn(x) for x in items]
    cut = [len(items) * i // n for i in range(n + 1)]
    parts = [items[cut[i]:cut[i + 1]] for i in range(n)]
    if per_part:
        done = call_all([lambda part=part: fn(part) for part in parts])
    else:
        done = call_all([lambda part=part: [fn(x) for x in part] for part in parts])
    return [r for part in done for r in part]


def decode_parts(count: int, nbytes: int, n: int | None = None) -> int:
    """How many parts :func:`decode_all` cuts ``count`` items of ``nbytes`` decoded bytes into with
    ``n`` threads (1: decoded inline, in this thread)."""
    n = threads() if n is None else max(1, int(n))
    n = min(n, MAX_WORKERS + 1, count)
    if n < 2 or nbytes < MIN_PARALLEL_DECODE or in_worker():
        return 1
    return n


def submit(fn: Callable[..., R], *args):
    """``fn(*args)`` on the pool: a Future (an appender's encode ahead of its landing)."""
    return _executor().submit(fn, *args)


def read_threads() -> int:
    """Concurrent column reads of one frame: ``MREC_READ_THREADS`` (default 1, i.e. serial).

    Off by default: on the project's shared 2-core machine they made a 50k-atom random read
    slower (numcodecs' unshuffle holds the GIL; see docs/performance.md)."""
    return _env_count("MREC_READ_THREADS") or 1


def in_worker() -> bool:
    """Whether this thread is one of the pool's workers (its work runs beside another thread's)."""
    return threading.current_thread().name.startswith("mrec-encode")


_side = threading.local()


def concurrent() -> bool:
    """Whether this thread's work runs beside other threads' right now: a pool worker, or the
    thread running the first of :func:`call_all`'s calls while the pool runs the rest.  Decoders
    then take their batch form (few, long GIL-free calls) even on one thread."""
    return getattr(_side, "busy", False) or in_worker()


def call_all(calls: Sequence[Callable[[], R]]) -> list[R]:
    """``[c() for c in calls]``: the first in this thread, the rest on the pool at the same time.

    The pool is the encoder's (``MREC_THREADS`` workers) plus this thread.
    Results are in input order.  Every call runs to its end before this returns; when some
    raise, the exception of the first failing call in input order is raised — the one the
    serial loop would have raised (later calls have then also run, which for reads only
    warms caches).  Serial for a single call and inside a pool worker
    (a nested wait could take every worker).
    """
    if len(calls) < 2 or in_worker():
        return [c() for c in calls]
    from concurrent.futures import wait
    futures = [_executor().submit(c) for c in calls[1:]]
    first, error = None, None
    was = getattr(_side, "busy", False)
    _side.busy = True
    try:
        first = calls[0]()
    except BaseException as exc:       # noqa: BLE001 - re-raised below, after the others finished
        error = exc
    finally:
        _side.busy = was
    wait(futures)
    if error is not None:
        raise error
    return [first] + [f.result() for f in futures]
