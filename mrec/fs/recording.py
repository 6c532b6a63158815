"""A file system that logs every operation, in order, over a real one.

Tests use it to prove write order (the commit protocol) and byte counts
(O(chunk + index) per landing).  ``keep_data=True`` also keeps payloads,
which a crash simulator can replay.
"""
from __future__ import annotations

from .base import Op
from .posix import PosixFileSystem


class RecordingFileSystem:
    def __init__(self, inner=None, *, keep_data: bool = False, record_reads: bool = False):
        self.inner = inner if inner is not None else PosixFileSystem()
        self.ops: list[Op] = []
        self.keep_data = keep_data
        self.record_reads = record_reads

    # -- helpers for tests -------------------------------------------------
    def clear(self) -> None:
        self.ops.clear()

    def writes(self) -> list[Op]:
        return [op for op in self.ops if op.kind in ("write_at", "replace", "truncate")]

    def bytes_written(self) -> int:
        return sum(op.length or 0 for op in self.ops if op.kind in ("write_at", "replace"))

    def _log(self, kind, path, offset=None, length=None, fsync=False, data=None):
        self.ops.append(Op(kind, path, offset, length, fsync, bytes(data) if (self.keep_data and data is not None) else None))

    # -- the interface -----------------------------------------------------
    def read(self, path):
        out = self.inner.read(path)
        if self.record_reads:
            self._log("read", path, 0, len(out))
        return out

    def read_range(self, path, offset, length):
        out = self.inner.read_range(path, offset, length)
        if self.record_reads:
            self._log("read_range", path, offset, len(out))
        return out

    def write_at(self, path, offset, data):
        self.inner.write_at(path, offset, data)
        self._log("write_at", path, offset, len(data), data=data)

    def replace(self, path, data, *, fsync=False):
        self.inner.replace(path, data, fsync=fsync)
        self._log("replace", path, 0, len(data), fsync, data=data)

    def rename(self, src, dst):
        self.inner.rename(src, dst)
        self._log("rename", dst, data=src.encode() if self.keep_data else None)

    def create_exclusive(self, path):
        self.inner.create_exclusive(path)
        self._log("write_at", path, 0, 0, data=b"")

    def lock(self, path, *, directory=False, blocking=False):
        """The inner lock; a lock file's contents are logged as a replace, its removal as a remove
        (what a crash can leave of it)."""
        held = self.inner.lock(path, directory=directory, blocking=blocking)
        if held is not None and not directory:
            held.on_write.append(lambda p, d: self._log("replace", p, 0, len(d), False, data=d))
            held.on_release.append(lambda p: self._log("remove", p))
        return held

    def fsync(self, path):
        self.inner.fsync(path)
        self._log("fsync", path)

    def fsync_dir(self, path):
        self.inner.fsync_dir(path)
        self._log("fsync_dir", path)

    def truncate(self, path, size):
        self.inner.truncate(path, size)
        self._log("truncate", path, size)

    def size(self, path):
        return self.inner.size(path)

    def exists(self, path):
        return self.inner.exists(path)

    def is_dir(self, path):
        return self.inner.is_dir(path)

    def is_link(self, path):
        return self.inner.is_link(path)

    def list_dir(self, path):
        return self.inner.list_dir(path)

    def remove(self, path):
        self.inner.remove(path)
        self._log("remove", path)

    def rmdir(self, path):
        self.inner.rmdir(path)
        self._log("rmdir", path)

    def makedirs(self, path):
        existed = self.inner.is_dir(path)
        self.inner.makedirs(path)
        if not existed:
            self._log("mkdir", path)
