"""A read-only Zarr store over a stored ZIP archive (the at-rest ``*.mrec.zip``).

The archive is never extracted and never loaded whole: opening reads the end
of central directory record (searched in the last 64 KiB + 22 bytes), the
ZIP64 end record when its locator is present, and the central directory.
Every ``get`` / ``get_range`` is then one byte-range read of the archive.

Each entry's local header is compared with its central record (signature,
name, method, CRC-32, sizes, and its data within the archive) before any
byte of the entry is used, so a damaged central directory is refused
(issue 27) instead of serving another entry's bytes or a renamed chunk as
missing (the fill value): a local archive checks every entry when it opens;
over a URL (``check_headers=False``) the opener checks the headers it
already holds, the rest are checked at an entry's first read, and before a
key is reported absent every unchecked entry whose name could be that key
with a few damaged bytes (:data:`NEAR_NAME_BYTES`) is checked.

Opening validates the packing rules of chunking-and-packing.md ("At-rest
form: *.mrec.zip") and refuses with :class:`~mrec.errors.ZipFormatError`
naming the archive and the entry: unsafe names (absolute, ``..``, ``.``,
empty components, backslashes, NUL), duplicate names, a name that is both a
file and a directory, data ranges that overlap each other or the central
directory, sizes or offsets beyond the archive, stored entries whose
compressed and uncompressed sizes differ, an entry count the central
directory cannot hold (checked before anything is allocated), and a missing
or truncated end record or central directory.

Two things a foreign archive may contain are tolerated when opening and
reported by :func:`zip_problems`: directory entries (names ending in ``/``)
are skipped and listed in :attr:`ZipStore.directory_entries`; compressed or
encrypted entries are listed in :attr:`ZipStore.compressed_entries` and
refused when read.

The ZIP format itself (records, the central directory, the packing rules, the scan)
is :mod:`mrec.zarr.stores.zip_format`.
"""
from __future__ import annotations

import os
import zlib
from typing import Callable, Iterator

from ...errors import CorruptionError, ZipFormatError
from ...fs import DEFAULT_FS, FileSystem
from .directory import ReadableStore
from .zip_format import (FLAG_ENCRYPTED, LOCAL_FMT, METHOD_STORED, NEAR_NAME_BYTES, PIECE_SIZE, ZipEntry, entry_text,
                         format_error, read_data_offset, scan)


class ZipStore(ReadableStore):
    """Read-only :class:`ReadableStore` over a stored zip archive, by byte ranges."""

    readonly = True

    def __init__(self, path: str | os.PathLike, *, fs: FileSystem | None = None, keep_open: bool = False,
                 check_headers: bool | None = None):
        """``check_headers``: compare every entry's local header with its central record now (default:
        yes, unless ``fs`` is remote, where each costs a request: see :meth:`check_local_headers`)."""
        self.root = os.fspath(path)
        self.fs = fs if fs is not None else DEFAULT_FS
        # keep_open (a reader's snapshot): entry reads through the archive's descriptor kept open
        # until close() (mrec.fs.posix.KeptFiles); a file system without them reads by path
        kept = getattr(self.fs, "kept_files", None) if keep_open else None
        self._kept = kept() if kept is not None else None
        result = scan(self.root, self.fs)
        for problem in result.problems:
            if problem.fatal:
                raise format_error(self.root, problem.message)
        self.archive_size = result.archive_size
        self.end = result.end
        self.entries: list[ZipEntry] = result.entries
        self.directory_entries: list[str] = [e.name for e in result.entries if e.is_directory]
        self.compressed_entries: list[str] = [
            e.name for e in result.entries
            if not e.is_directory and (e.method != METHOD_STORED or e.flags & FLAG_ENCRYPTED)
        ]
        self._files: dict[str, ZipEntry] = {e.name: e for e in result.entries if not e.is_directory}
        self._keys: list[str] = sorted(self._files)
        self._data_offsets: dict[str, int] = {}
        self._unchecked: dict[int, dict[str, ZipEntry]] = {}     # name length -> local header not yet checked
        for e in self._files.values():
            self._unchecked.setdefault(len(e.name_bytes), {})[e.name] = e
        if check_headers if check_headers is not None else not getattr(self.fs, "remote", False):
            self.check_local_headers()

    # -- entries -------------------------------------------------------------
    def entry(self, key: str) -> ZipEntry | None:
        """The central directory record of a file entry, or None."""
        return self._files.get(key)

    def data_offset(self, key: str) -> int:
        """Archive offset of an entry's first data byte (local header read once, cached)."""
        cached = self._data_offsets.get(key)
        if cached is not None:
            return cached
        return self._check_header(self._readable(key))

    def _check_header(self, e: ZipEntry) -> int:
        """Compare ``e``'s local header with its central record (ZipFormatError naming it); its data offset."""
        offset = read_data_offset(self.root, self._kept or self.fs, e)
        self._data_offsets[e.name] = offset
        same_length = self._unchecked.get(len(e.name_bytes))
        if same_length is not None:
            same_length.pop(e.name, None)
        return offset

    def check_local_headers(self, held: Callable[[int, int], bool] | None = None) -> None:
        """Check the local header of every entry not checked yet, or only of those whose header bytes
        ``held(offset, end)`` says are at hand (a remote archive: what the open fetched)."""
        for group in list(self._unchecked.values()):
            for e in list(group.values()):
                if held is None or held(e.header_offset, e.header_offset + LOCAL_FMT.size + len(e.name_bytes)):
                    self._check_header(e)

    def _absent(self, key: str) -> None:
        """Before ``key`` is reported absent: check every unchecked entry whose name could be ``key``
        damaged in a few bytes (its local header then names ``key``: ZipFormatError)."""
        want = key.encode("utf-8", "surrogatepass")
        group = self._unchecked.get(len(want))
        if not group:
            return
        for e in list(group.values()):
            if sum(a != b for a, b in zip(e.name_bytes, want)) <= NEAR_NAME_BYTES:
                self._check_header(e)

    def _readable(self, key: str) -> ZipEntry:
        e = self._files[key]
        if e.flags & FLAG_ENCRYPTED:
            raise format_error(self.root, f"{entry_text(key)}: entry is encrypted; mrec reads stored entries only")
        if e.method != METHOD_STORED:
            raise format_error(self.root, f"{entry_text(key)}: compression method {e.method}; a packed record "
                                   "stores every entry (method 0), so it cannot be read by byte range")
        return e

    def _read(self, e: ZipEntry, offset: int, length: int) -> bytes:
        start = self.data_offset(e.name)
        data = (self._kept or self.fs).read_range(self.root, start + offset, length)
        if len(data) != length:
            raise format_error(self.root, f"{entry_text(e.name)}: archive is truncated inside the entry's data")
        return data

    # -- ReadableStore ---------------------------------------------------------
    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()

    def get(self, key: str) -> bytes | None:
        """An entry's bytes, read whole and checked against the CRC-32 of its central record."""
        e = self._files.get(key)
        if e is None:
            return self._absent(key)
        self._readable(key)
        return self._checked(e, self._read(e, 0, e.size))

    def _checked(self, e: ZipEntry, data: bytes) -> bytes:
        if zlib.crc32(data) != e.crc32:
            raise CorruptionError(f"{entry_text(e.name)}: CRC-32 mismatch (the entry's bytes are not the bytes "
                                  "that were packed)", path=self.root)
        return data

    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        e = self._files.get(key)
        if e is None:
            return self._absent(key)
        self._readable(key)
        if offset < 0:
            offset = max(0, e.size + offset)
        offset = min(offset, e.size)
        length = max(0, min(length, e.size - offset))
        data = self._read(e, offset, length)
        # a range that is the whole entry is checked like get(); a part of an entry cannot be (the
        # CRC-32 covers the whole entry): the crc32c codec of shard indexes and chunks covers those
        return self._checked(e, data) if offset == 0 and length == e.size else data

    def size(self, key: str) -> int | None:
        e = self._files.get(key)
        return self._absent(key) if e is None else e.size

    def list(self, prefix: str = "") -> list[str]:
        base = prefix.rstrip("/")
        if not base:
            return list(self._keys)
        lead = base + "/"
        return [k for k in self._keys if k.startswith(lead)]

    def list_dir(self, prefix: str = "") -> list[str]:
        base = prefix.rstrip("/")
        lead = base + "/" if base else ""
        children = {k[len(lead):].split("/", 1)[0] for k in self._keys if k.startswith(lead)}
        return sorted(children)

    # -- streaming and checks ---------------------------------------------------
    def iter_pieces(self, key: str, piece_size: int = PIECE_SIZE) -> Iterator[bytes]:
        """An entry's bytes in bounded pieces (never the whole entry at once)."""
        e = self._files.get(key)
        if e is None:
            raise ZipFormatError(f"{entry_text(key)}: no such entry", path=self.root)
        self._readable(key)
        done = 0
        while done < e.size:
            n = min(piece_size, e.size - done)
            yield self._read(e, done, n)
            done += n

    def verify_crc(self, key: str, *, on_bytes: Callable[[int], None] | None = None) -> bool:
        """True when the entry's bytes match the CRC-32 of its central record."""
        e = self._files.get(key)
        if e is None:
            raise ZipFormatError(f"{entry_text(key)}: no such entry", path=self.root)
        crc = 0
        for piece in self.iter_pieces(key):
            crc = zlib.crc32(piece, crc)
            if on_bytes is not None:
                on_bytes(len(piece))
        return crc == e.crc32

    def check_crc(self, key: str) -> None:
        """Raise :class:`CorruptionError` when :meth:`verify_crc` fails."""
        if not self.verify_crc(key):
            raise CorruptionError(f"{entry_text(key)}: CRC-32 mismatch", path=self.root)

    def __repr__(self) -> str:
        return f"ZipStore({self.root!r}, {len(self._keys)} entries)"
