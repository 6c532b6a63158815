"""The small file-system interface every upper layer uses (think SQLite's VFS)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Op:
    """One recorded operation: what, where, at which offset, how many bytes."""

    kind: str                 # read, read_range, write_at, replace, fsync, fsync_dir, truncate, remove, mkdir, rmdir, rename
    path: str
    offset: int | None = None
    length: int | None = None
    fsync: bool = False       # for replace: whether the temp file was fsynced
    data: bytes | None = None  # kept only when a recorder asks for payloads


@runtime_checkable
class FileSystem(Protocol):
    """Byte-level file operations on absolute or relative paths (str)."""

    def read(self, path: str) -> bytes:
        """Whole file. Raises FileNotFoundError when absent."""

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (pread); short at end of file."""

    def write_at(self, path: str, offset: int, data: bytes) -> None:
        """Positional write (pwrite); creates the file, never truncates."""

    def replace(self, path: str, data: bytes, *, fsync: bool = False) -> None:
        """Atomic replace: temp file in the same directory, optional fsync, rename."""

    def rename(self, src: str, dst: str) -> None:
        """Atomic rename within one file system."""

    def create_exclusive(self, path: str) -> None:
        """Create an empty file; FileExistsError when the name is taken (O_EXCL)."""

    def lock(self, path: str, *, directory: bool = False, blocking: bool = False):
        """An exclusive OS lock (``flock``) on a lock file (created if absent, never through a
        link) or an existing directory, released when the holder releases it or dies; None
        when another holder has it and not ``blocking``.  See :class:`mrec.fs.posix.FileLock`."""

    def fsync(self, path: str) -> None:
        """Make a file's data durable."""

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries (creates, renames) durable."""

    def truncate(self, path: str, size: int) -> None:
        """Cut or extend a file to ``size`` bytes."""

    def size(self, path: str) -> int:
        """Size in bytes. Raises FileNotFoundError when absent."""

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def is_link(self, path: str) -> bool:
        """True for a symbolic link (whatever it points at)."""

    def list_dir(self, path: str) -> list[str]:
        """Names in a directory, sorted."""

    def remove(self, path: str) -> None:
        """Remove a file."""

    def rmdir(self, path: str) -> None:
        """Remove an empty directory."""

    def makedirs(self, path: str) -> None:
        """Create a directory and its parents (no error if present)."""


def refuse_link(fs: "FileSystem", path: str, action: str) -> None:
    """Refuse (``RefusalError``, kind ``bad_target``, naming the link) a ``path`` that is itself a
    symbolic link -- to a directory, to a file or dangling: mrec removes, replaces, truncates and
    builds only what it names itself, never what a link leads to, and never a link it did not make.
    ``action`` says what was asked of it (``"overwrite"``, ``"repack into"`` ...)."""
    import os
    is_link = getattr(fs, "is_link", None)
    if not (is_link and is_link(path)):
        return
    from ..errors import RefusalError
    try:
        to = f" (to {os.readlink(path)})"
    except (OSError, ValueError):
        to = ""
    raise RefusalError(f"is a symbolic link{to}; mrec will not {action} it: it never writes through a link, nor "
                       "replaces or removes one it did not make, so nothing the link leads to is touched (name "
                       "the real path, or remove the link first)", path=path, kind="bad_target")


def remove_tree(fs: "FileSystem", root: str) -> None:
    """Remove a directory tree through ``fs``, files before their directories; a link inside is
    unlinked, never entered, and a ``root`` that is a link is refused (:func:`refuse_link`)."""
    import os
    refuse_link(fs, root, "remove a tree through")
    for name in fs.list_dir(root):
        child = os.path.join(root, name)
        if fs.is_dir(child) and not fs.is_link(child):   # never recurse through a link
            remove_tree(fs, child)
        else:
            fs.remove(child)
    fs.rmdir(root)
