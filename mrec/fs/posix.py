"""The real file system: os.pread / os.pwrite / os.replace / os.fsync."""
from __future__ import annotations

import os
import secrets

TEMP_MARK = ".mrec-tmp-"


def _open_dir_fd(path: str) -> int:
    return os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


class PosixFileSystem:
    """:class:`mrec.fs.FileSystem` over POSIX calls."""

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"{path}: negative range {offset}+{length}")
        fd = os.open(path, os.O_RDONLY)
        try:
            first = os.pread(fd, length, offset)
            if len(first) == length or not first:      # the usual case: one call, no copies
                return first
            out = bytearray(first)
            while len(out) < length:
                piece = os.pread(fd, length - len(out), offset + len(out))
                if not piece:
                    break
                out += piece
            return bytes(out)
        finally:
            os.close(fd)

    def write_at(self, path: str, offset: int, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], offset + done)
        finally:
            os.close(fd)

    def replace(self, path: str, data: bytes, *, fsync: bool = False) -> None:
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f"{TEMP_MARK}{name}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            done = 0
            while done < len(view):
                done += os.write(fd, view[done:])
            if fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def fsync(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        fd = _open_dir_fd(path)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: str, size: int) -> None:
        os.truncate(path, size)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_link(self, path: str) -> bool:
        return os.path.islink(path)

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def remove(self, path: str) -> None:
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
