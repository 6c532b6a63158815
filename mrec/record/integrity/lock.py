"""The single-writer lock of a record: ``<record>/.mrec-writer.lock``.

One holder at a time — a trajectory writer, ``mrec pack`` or ``mrec repair``
— across and within processes.  The authority is an OS lock (``flock``) on the
lock file, held for the holder's whole life and dropped by the kernel when the
process dies however it dies, so no stale lock can admit two holders and none
needs clearing by hand.  The file also says who holds it (JSON ``{"pid",
"holder"}``) for people and for tools that only read it; a holder unlinks it on
release.  A lock file nobody holds is a leftover: taken over — unless it names
a living process other than this one, a writer that does not take the OS lock
(an older mrec, another program), which is refused as before.
"""
from __future__ import annotations

import json
import os
import re

from ...errors import RefusalError, StoreError

LOCK_NAME = ".mrec-writer.lock"


def parse_lock_pid(text: bytes) -> int | None:
    """The writer pid a lock file holds: a bare integer, or JSON with ``pid``; None if unreadable."""
    try:
        s = text.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if s.isdigit():
        pid = int(s)
        return pid if pid > 0 else None
    try:
        doc = json.loads(s)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and type(doc.get("pid")) is int and doc["pid"] > 0:
        return doc["pid"]
    match = re.match(r"^\s*(\d+)\b", s)
    if match and int(match.group(1)) > 0:
        return int(match.group(1))
    return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 probes without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def lock_holder(text: bytes) -> str:
    """``writer`` / ``pack`` / ``repair`` as a lock file names its holder (``writer`` by default)."""
    try:
        doc = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "writer"
    holder = doc.get("holder") if isinstance(doc, dict) else None
    return holder if isinstance(holder, str) and holder.isidentifier() else "writer"


def _locker(fs):
    lock = getattr(fs, "lock", None)
    if lock is None:
        from ...fs.posix import PosixFileSystem
        lock = PosixFileSystem().lock
    return lock


def announce(held, holder: str) -> None:
    """Write who holds the lock into the lock file."""
    held.write(json.dumps({"pid": os.getpid(), "holder": holder}).encode() + b"\n")


def lock_store(fs, root: str, holder: str, *, write: bool = True):
    """Take the writer lock of the record directory ``root`` for ``holder``; the held
    :class:`~mrec.fs.posix.FileLock` (``release()`` it), or a :class:`RefusalError`:

    * ``live_writer`` — another holder (any process, this one included) has the lock, or the
      lock file names a living process that holds no lock (a writer that does not take it);
    * ``not_a_record`` — the directory is gone (another pack removed it);
    * ``bad_layout`` — the lock file is a symbolic link;

    or a :class:`~mrec.errors.StoreError` when the lock file cannot be made (a read-only record).

    ``write=False`` leaves the lock file as found (call :func:`announce` later).
    """
    path = os.path.join(root, LOCK_NAME)
    try:
        held = _locker(fs)(path)
    except (FileNotFoundError, NotADirectoryError):
        raise RefusalError("no such record directory (removed or packed meanwhile?)", path=root,
                           kind="not_a_record") from None
    except OSError as exc:
        if os.path.islink(path):
            raise RefusalError("the writer lock is a symbolic link: a record holds files, not links",
                               path=path, kind="bad_layout") from None
        raise StoreError(f"cannot take the writer lock ({exc.strerror or exc}): is the record read-only?",
                         path=path) from None
    if held is None:
        try:
            raw = fs.read(path)
        except OSError:
            raw = b""
        pid, who = parse_lock_pid(raw), lock_holder(raw)
        by = f"{'a writer' if who == 'writer' else 'mrec ' + who} (pid {pid})" if pid else "another holder"
        raise RefusalError(f"{by} holds this store's writer lock: a store has one writer at a time "
                           "(pack and repair count as writers)", path=path, kind="live_writer")
    pid = parse_lock_pid(held.previous)
    if pid is not None and pid != os.getpid() and pid_alive(pid):
        held.release(remove=False)
        raise RefusalError(f"the lock file names a living process (pid {pid}) that holds no lock: a "
                           "writer that does not take the OS lock; if no writer runs, remove the file",
                           path=path, kind="live_writer")
    if write:                         # pack writes it once its refusals (which change nothing) are past
        announce(held, holder)
    return held
