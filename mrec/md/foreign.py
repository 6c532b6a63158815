"""What a reader library (MDAnalysis, ASE) raises on damaged input, as mrec's own errors.

* :func:`reading` -- a block calling the library: a foreign exception becomes a
  :class:`~mrec.errors.RefusalError` ``bad_input`` (an OS-level failure with an ``errno``: a
  :class:`~mrec.errors.StoreError`) naming the file, the library's exception chained as
  ``__cause__``; the ``__del__`` noise of the half-built objects it leaves is not printed;
* :func:`library_frames` -- the same around each step of a library's frame iterator;
* :func:`check_xyz_headers` -- the frame headers of an (ext)xyz walked before ASE sees the file,
  so that a claimed atom count the file cannot hold is refused naming its line (ASE loops over
  the claim: 999999999 atoms ran for minutes).
"""
from __future__ import annotations

import gc
import os
import sys
from contextlib import contextmanager
from itertools import islice
from typing import Iterator

from ..errors import MrecError, RefusalError, StoreError

__all__ = ["reading", "library_frames", "check_xyz_headers"]

#: the packages whose objects' ``__del__`` noise is dropped after a refusal
_LIBRARIES = ("MDAnalysis", "ase")


def _foreign_error(exc: BaseException, path: str, what: str) -> MrecError:
    """``what`` (e.g. ``"ASE cannot read it"``) with the library's message on one line, naming ``path``."""
    text = f"{what} ({' '.join(f'{type(exc).__name__}: {exc}'.split())})"
    if isinstance(exc, OSError) and exc.errno is not None:
        return StoreError(text, path=path)
    return RefusalError(text, path=path, kind="bad_input")


def _from_library(unraisable) -> bool:
    """Whether an unraisable exception comes from a library's code (a ``__del__`` of a half-built object)."""
    module = getattr(unraisable.object, "__module__", None) or ""
    return module.split(".")[0] in _LIBRARIES


def _release(exc: BaseException) -> None:
    """Clear the finished frames of ``exc``'s chain (their locals hold the library's half-built
    objects) and collect those objects now, while their ``__del__`` noise is dropped; the
    tracebacks themselves stay."""
    import traceback
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    gc.collect()


@contextmanager
def reading(path: str, what: str) -> Iterator[None]:
    """Run a block calling a reader library: an exception not mrec's is re-raised as a
    ``bad_input`` refusal (a :class:`StoreError` for an OS error with an ``errno``) naming ``path``:
    ``what`` and the library's message, the library's exception as ``__cause__``."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: None if _from_library(u) else hook(u)
    try:
        yield
    except MrecError:
        raise
    except Exception as exc:            # noqa: BLE001 - the libraries raise many types for bad input
        err = _foreign_error(exc, path, what)
        _release(exc)
        raise err from exc
    finally:
        sys.unraisablehook = hook


def library_frames(it, path: str, library: str) -> Iterator:
    """The items of a library's frame iterator ``it``; a failure names the frame of the selection."""
    it = iter(it)
    k = 0
    while True:
        with reading(path, f"{library} cannot read frame {k} of the selection"):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item
        k += 1


# -- extxyz headers --------------------------------------------------------------------------------

#: bytes an atom line takes at least: one character and its newline
MIN_ATOM_LINE = 2
#: lines skipped per batch while walking a frame's atom lines
_SKIP_BATCH = 4096
_COMPRESSED = (".gz", ".bz2", ".xz")


def _open_text(path: str):
    """``path`` as text the way ASE opens it (universal newlines; undecodable bytes kept, ASE
    refuses them when it parses the line)."""
    import bz2
    import gzip
    import lzma
    openers = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
    opener = openers.get(os.path.splitext(path)[1].lower(), open)
    return opener(path, "rt", encoding="utf-8", errors="surrogateescape", newline=None)


def _skip(fh, n: int) -> tuple[int, int]:
    """Skip up to ``n`` lines of ``fh``: (lines skipped, fewer at the end of the file; their characters)."""
    lines = chars = 0
    while lines < n:
        batch = list(islice(fh, min(_SKIP_BATCH, n - lines)))
        if not batch:
            break
        lines += len(batch)
        chars += sum(map(len, batch))
    return lines, chars


def _refuse(path: str, message: str) -> RefusalError:
    return RefusalError(f"ASE cannot read it: {message}", path=path, kind="bad_input")


def _atom_count(head: str, line: int, path: str) -> int:
    try:
        n = int(head)
    except ValueError:
        raise _refuse(path, f"line {line}: {head.strip()[:40]!r} is not an atom count (an xyz frame "
                            "begins with one)") from None
    if n < 0:
        raise _refuse(path, f"line {line}: atom count {n} is negative")
    return n


def _check_room(n: int, line: int, left: int, path: str) -> None:
    """Refuse a claim of ``n`` atoms that ``left`` bytes (an upper bound) cannot hold."""
    if MIN_ATOM_LINE * n > left:
        raise _refuse(path, f"line {line} claims {n} atoms, more than the {left} bytes after it can hold "
                            f"(an atom line takes at least {MIN_ATOM_LINE})")


def check_xyz_headers(path: str, frames_needed: int | None = None) -> int:
    """Walk the frame headers of an (ext)xyz file the way ASE's reader indexes it (count line,
    comment line, that many atom lines, then any ``VEC`` lines; a blank line where a count is due
    ends the file), over the first ``frames_needed`` frames (all when None).  A header that is no
    count, or a count the rest of the file cannot hold (by its byte size when it is not
    compressed, before reading on; by its lines in any case), is a ``bad_input`` refusal naming
    the line.  One pass over the text, holding at most one batch of lines.  Returns the number of
    frames walked (the file's, when they are fewer than ``frames_needed``)."""
    size = None if path.lower().endswith(_COMPRESSED) else os.path.getsize(path)
    with _open_text(path) as fh:
        line, frame, read, head = 0, 0, 0, fh.readline()
        while frames_needed is None or frame < frames_needed:
            line += 1
            read += len(head)              # characters read: at most the bytes they came from
            if not head.strip():
                return frame
            n = _atom_count(head, line, path)
            if size is not None:
                _check_room(n, line, size - read, path)
            got, chars = _skip(fh, n + 1)
            if got < n + 1:
                raise _refuse(path, f"line {line} claims {n} atoms: the file ends {max(got - 1, 0)} atom lines "
                                    "later (truncated?)")
            line, read, head = line + got, read + chars, fh.readline()
            while head.lstrip().startswith("VEC"):
                line, read, head = line + 1, read + len(head), fh.readline()
            frame += 1
    return frame
