"""Key-value stores of a Zarr hierarchy.

Keys are ``/``-separated and relative to the store root (``zarr.json``,
``trajectory/atoms/x/c/0``).  A read-only store offers ``get``,
``get_range``, ``size``, ``list`` and ``list_dir``; a writable store adds
positional writes, atomic replace, truncate, delete and fsync — exactly what
live append needs (chunking-and-packing.md, "Live append needs a POSIX-like
store").
"""
from __future__ import annotations

import os
import posixpath
from typing import Iterator

from ...errors import StoreError, path_refusal as _path_refusal
from ...fs import DEFAULT_FS, FileSystem
from ...fs.posix import TEMP_MARK


#: a range read ending below this offset goes straight to pread; any other is clamped to the file first
_TRUSTED_RANGE_END = 64 << 20


def _check_key(key: str, root: str | None = None) -> None:
    if key.startswith("/") or "\\" in key or "\x00" in key or any(p in ("", ".", "..") for p in key.split("/")):
        raise StoreError(f"invalid store key {key!r} (a key is relative and '/'-separated, with no '.', '..' "
                         "or empty component, backslash or NUL)", path=root)


class ReadableStore:
    """Interface of every store (read side)."""

    readonly = True
    root: str = ""

    def get(self, key: str) -> bytes | None:
        raise NotImplementedError

    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        """``length`` bytes at ``offset`` (offset < 0: from the end); None if absent."""
        raise NotImplementedError

    def size(self, key: str) -> int | None:
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (recursive), sorted."""
        raise NotImplementedError

    def list_dir(self, prefix: str = "") -> list[str]:
        """Immediate child names (files and folders) under ``prefix``."""
        raise NotImplementedError

    def describe(self, key: str) -> str:
        """Human name of a key for error messages."""
        return f"{self.root}/{key}" if self.root else key

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DirectoryStore(ReadableStore):
    """A directory on a POSIX file system, reached only through :mod:`mrec.fs`."""

    def __init__(self, root: str | os.PathLike, *, fs: FileSystem | None = None, readonly: bool = False,
                 keep_open: bool = False):
        self.root = os.fspath(root)
        self.fs = fs if fs is not None else DEFAULT_FS
        self.readonly = readonly
        # keep_open (a reader's snapshot, read-only only): range reads through descriptors kept
        # open until close() (mrec.fs.posix.KeptFiles); a file system without them reads by path
        kept = getattr(self.fs, "kept_files", None) if keep_open and readonly else None
        self._kept = kept() if kept is not None else None
        # an appending writer touches the same few keys at every landing: their checked paths and
        # the directories known to exist are remembered (bounded; a vanished directory is re-made)
        self._paths: dict[str, str] = {}
        self._dirs: set[str] = set()

    def path(self, key: str) -> str:
        if key == "":
            return self.root
        p = self._paths.get(key)
        if p is None:
            _check_key(key, self.root)
            p = os.path.join(self.root, *key.split("/"))
            if len(self._paths) >= 4096:
                self._paths.clear()
            self._paths[key] = p
        return p

    # -- read --------------------------------------------------------------
    def get(self, key):
        try:
            return self.fs.read(self.path(key))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def get_range(self, key, offset, length):
        p = self.path(key)
        try:
            if offset < 0 or offset + length > _TRUSTED_RANGE_END:
                # bounded by the file's size before any read: an offset or length from an untrusted
                # index never reaches pread (which allocates ``length`` bytes first)
                size = self.fs.size(p)
                offset = max(0, size + offset) if offset < 0 else min(offset, size)
                length = max(0, min(length, size - offset))
            if self._kept is not None:
                return self._kept.read_range(p, offset, length)
            return self.fs.read_range(p, offset, length)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def range_reader(self, key: str):
        """``(offset, length) -> bytes`` of ``key`` for ranges already bounded by the file's size (a
        verified shard index's entries), through the kept descriptor of a ``keep_open`` store; None
        when there is none (read with :meth:`get_range`)."""
        if self._kept is None:
            return None
        try:
            return self._kept.reader(self.path(key))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()

    def size(self, key):
        try:
            p = self.path(key)
            if self.fs.is_dir(p):
                return None
            return self.fs.size(p)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list(self, prefix=""):
        out: list[str] = []
        base = self.path(prefix.rstrip("/")) if prefix else self.root

        def walk(dir_path: str, key_prefix: str) -> None:
            try:
                names = self.fs.list_dir(dir_path)
            except (FileNotFoundError, NotADirectoryError):
                return
            for name in names:
                child = os.path.join(dir_path, name)
                key = f"{key_prefix}{name}"
                if self.fs.is_dir(child):
                    walk(child, key + "/")
                else:
                    out.append(key)

        walk(base, (prefix.rstrip("/") + "/") if prefix else "")
        return sorted(out)

    def list_dir(self, prefix=""):
        try:
            return self.fs.list_dir(self.path(prefix.rstrip("/")) if prefix else self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_dir(self, prefix: str) -> bool:
        return self.fs.is_dir(self.path(prefix))

    # -- write -------------------------------------------------------------
    def _writable(self):
        if self.readonly:
            raise StoreError("store is read-only", path=self.root)

    def _parent(self, key: str) -> None:
        parent = posixpath.dirname(key)
        if parent in self._dirs:
            return
        self._makedirs(self.path(parent) if parent else self.root)
        if len(self._dirs) >= 4096:
            self._dirs.clear()
        self._dirs.add(parent)

    def _create(self, key: str, write) -> None:
        """``write()`` after making the key's directory; once more if a remembered one has vanished."""
        self._parent(key)
        try:
            try:
                write()
            except FileNotFoundError:
                if posixpath.dirname(key) not in self._dirs:
                    raise
                self._dirs.clear()
                self._parent(key)
                write()
        except (IsADirectoryError, NotADirectoryError, ValueError) as exc:
            raise _path_refusal(exc, self.path(key)) from None

    def set(self, key: str, data: bytes, *, fsync: bool = False) -> None:
        """Atomic replace of a whole key (temp file + rename)."""
        self._writable()
        data = bytes(data)
        self._create(key, lambda: self.fs.replace(self.path(key), data, fsync=fsync))

    def write_at(self, key: str, offset: int, data: bytes) -> None:
        """Positional write into a key, creating it; never truncates."""
        self._writable()
        self._create(key, lambda: self.fs.write_at(self.path(key), offset, data))

    def truncate(self, key: str, size: int) -> None:
        self._writable()
        self.fs.truncate(self.path(key), size)

    def delete(self, key: str) -> None:
        self._writable()
        try:
            self.fs.remove(self.path(key))
        except FileNotFoundError:
            pass

    def fsync(self, key: str) -> None:
        self.fs.fsync(self.path(key))

    def fsync_dir(self, prefix: str = "") -> None:
        """fsync the directory holding the keys under ``prefix`` (the root for '')."""
        self.fs.fsync_dir(self.path(prefix) if prefix else self.root)

    def makedirs(self, prefix: str) -> None:
        self._writable()
        self._makedirs(self.path(prefix) if prefix else self.root)

    def _makedirs(self, path: str) -> None:
        try:
            self.fs.makedirs(path)
        except (OSError, ValueError) as exc:
            raise _path_refusal(exc, path) from None

    def stray_temp_files(self) -> list[str]:
        """Keys left behind by an interrupted atomic replace."""
        return [k for k in self.list() if posixpath.basename(k).startswith(TEMP_MARK)]


def iter_parents(key: str) -> Iterator[str]:
    """'a/b/c' -> 'a/b', 'a', ''."""
    while key:
        key = posixpath.dirname(key)
        yield key
