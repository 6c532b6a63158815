"""The real file system: os.pread / os.pwrite / os.replace / os.fsync, and flock locks."""
from __future__ import annotations

import os
import re
import secrets

try:                                    # POSIX; without it locks are refused, never faked
    import fcntl
except ImportError:                     # pragma: no cover
    fcntl = None

TEMP_MARK = ".mrec-tmp-"
#: Exactly the names :meth:`PosixFileSystem.replace` gives its temporary files
#: (``.mrec-tmp-<name>.<8 hex>``): what a crash inside an atomic replace can leave.
REPLACE_TEMP = re.compile(r"^" + re.escape(TEMP_MARK) + r".+\.[0-9a-f]{8}$", re.DOTALL)


def replace_temp_name(name: str) -> str:
    """The temporary name an atomic replace of ``name`` writes first."""
    return f"{TEMP_MARK}{name}.{secrets.token_hex(4)}"


class FileLock:
    """An exclusive ``flock`` held on an open file or directory until :meth:`release`.

    The kernel drops it when the process dies (however it dies), so a lock is
    never stale; a lock file left behind by a dead holder is just a file.
    ``previous`` is what the lock file held when the lock was taken.
    """

    def __init__(self, path: str, fd: int, *, directory: bool, previous: bytes = b"", created: bool = False):
        self.created = created           # the lock file did not exist before
        self.path = path
        self.fd = fd
        self.directory = directory
        self.previous = previous
        self.on_write: list = []         # hooks(path, data): a recording file system logs through them
        self.on_release: list = []       # hooks(path) after the lock file is unlinked

    @property
    def held(self) -> bool:
        return self.fd is not None

    def write(self, data: bytes) -> None:
        """Replace the lock file's contents (whoever reads it learns who holds the lock)."""
        os.ftruncate(self.fd, 0)
        done = 0
        while done < len(data):
            done += os.pwrite(self.fd, data[done:], done)
        for hook in self.on_write:
            hook(self.path, data)

    def release(self, *, remove: bool = True) -> None:
        """Unlock; a lock *file* is first unlinked (while still held) unless ``remove=False``. Idempotent."""
        if self.fd is None:
            return
        try:
            if remove and not self.directory:
                try:
                    if _same_file(self.path, self.fd):
                        os.unlink(self.path)
                        for hook in self.on_release:
                            hook(self.path)
                except FileNotFoundError:
                    pass
        finally:
            fd, self.fd = self.fd, None
            os.close(fd)                      # closing the last descriptor drops the flock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        # an abandoned holder (never released) lets go as a dead process would: the file stays
        if getattr(self, "fd", None) is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _same_file(path: str, fd: int, follow: bool = False) -> bool:
    try:
        a = os.stat(path, follow_symlinks=follow)
    except FileNotFoundError:
        return False
    b = os.fstat(fd)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _open_dir_fd(path: str) -> int:
    return os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes at ``offset`` of ``fd`` (fewer at the end of the file)."""
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


class KeptFiles:
    """Range reads through read-only descriptors kept open for a read session (a reader's life).

    A reader is a snapshot: it reads the record as it was when opened (its layout and cached shard
    indexes).  Keeping each file it reads open serves that snapshot better than opening by path
    at every read, and saves the ``open`` + ``close`` (~4 us) a read costs: a file replaced by
    rename while the session lasts (a repair, an overwrite by another process) is still read as
    the file the session's indexes describe, never as a new file under an old index; a file
    written or truncated in place is read as it is now, as by path.  At most ``limit`` files are
    kept (further ones are opened per read); :meth:`close` closes them all (also when the session
    is garbage collected).  Thread-safe: a descriptor is never closed while the session is open."""

    def __init__(self, limit: int = 64):
        import weakref
        self._fds: dict[str, int] = {}
        self._limit = limit
        self._finalizer = weakref.finalize(self, KeptFiles._close_all, self._fds)

    @staticmethod
    def _close_all(fds: dict) -> None:
        while fds:
            _path, fd = fds.popitem()
            try:
                os.close(fd)
            except OSError:
                pass

    def _fd(self, path: str) -> int | None:
        """The kept descriptor of ``path`` (opened now if need be: FileNotFoundError when absent);
        None when no more can be kept or the session is closed."""
        fd = self._fds.get(path)
        if fd is None:
            if len(self._fds) >= self._limit or not self._finalizer.alive:
                return None
            fd = os.open(path, os.O_RDONLY)
            kept = self._fds.setdefault(path, fd)
            if kept != fd:                     # another thread kept one first
                os.close(fd)
                fd = kept
        return fd

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"{path}: negative range {offset}+{length}")
        fd = self._fd(path)
        if fd is None:
            return PosixFileSystem.read_range(DEFAULT_POSIX, path, offset, length)
        return _pread_all(fd, length, offset)

    def reader(self, path: str):
        """``(offset, length) -> bytes`` of the file at ``path`` through its kept descriptor (opened
        now: FileNotFoundError when absent), or None when no descriptor can be kept for it."""
        fd = self._fd(path)
        if fd is None:
            return None
        fds = self._fds                 # emptied when the session closes (a dict lookup, not the
        pread = os.pread                # finalizer's Python property: this runs once a chunk read)

        def read(offset: int, length: int) -> bytes:
            if path not in fds:                     # closed since: by path, as any read
                return PosixFileSystem.read_range(DEFAULT_POSIX, path, offset, length)
            first = pread(fd, length, offset)
            return first if len(first) == length else _pread_all(fd, length, offset)
        return read

    def close(self) -> None:
        self._finalizer()


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
            return _pread_all(fd, length, offset)
        finally:
            os.close(fd)

    def kept_files(self) -> KeptFiles:
        """A read session keeping the files it reads open (see :class:`KeptFiles`)."""
        return KeptFiles()

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
        tmp = os.path.join(directory, replace_temp_name(name))
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

    def create_exclusive(self, path: str) -> None:
        """Create an empty file; FileExistsError if anything (even a dangling link) has the name."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))

    def lock(self, path: str, *, directory: bool = False, blocking: bool = False) -> FileLock | None:
        """Take an exclusive ``flock`` on ``path``; None when another holder has it (and not ``blocking``).

        A lock *file* is created when absent (never through a symbolic link: OSError), and the
        lock is only returned once the name still leads to the locked inode — a holder that
        unlinked it on release cannot leave two processes each locking a different file.
        ``directory=True`` locks an existing directory (nothing is created).
        """
        if fcntl is None:                                            # pragma: no cover
            raise OSError("file locks (fcntl.flock) are not available on this platform")
        if directory:           # a directory is locked wherever its name leads
            flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
        else:
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        flags |= getattr(os, "O_CLOEXEC", 0)
        for _ in range(1000):
            created = False
            if directory:
                fd = os.open(path, flags)
            else:
                try:
                    fd = os.open(path, flags | os.O_EXCL, 0o644)
                    created = True
                except FileExistsError:
                    try:
                        fd = os.open(path, flags & ~os.O_CREAT)
                    except FileNotFoundError:
                        continue                 # unlinked in between: create it next time round
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(path, fd, follow=directory):
                previous = b"" if directory else os.pread(fd, 4096, 0)
                return FileLock(path, fd, directory=directory, previous=previous, created=created)
            os.close(fd)                     # the holder we waited for unlinked it: take the new one
            if directory:
                raise FileNotFoundError(path)
        raise OSError(f"{path}: the lock file keeps being replaced")      # pragma: no cover

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


DEFAULT_POSIX = PosixFileSystem()
