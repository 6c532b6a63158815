"""A streaming writer of stored ZIP archives (the at-rest ``*.mrec.zip``).

Every entry is stored (method 0) and copied in bounded pieces through the
:class:`~mrec.fs.FileSystem` interface, so no file is ever held in memory
whole.  Sizes are known before an entry is written (``fs.size``), so local
headers carry real sizes and no data descriptor is used; the CRC-32 of a
large entry is computed while streaming and patched into its local header
with one positional write afterwards.  Small entries are buffered together
and written with their final headers in one piece.

Archives are deterministic: fixed DOS timestamp 1980-01-01 00:00, UTF-8
name flag (general-purpose bit 11) on every entry, Unix regular-file
attributes 0644, no comments.  ZIP64 records (extra field 0x0001, ZIP64 end
of central directory record and locator) are written whenever a size, an
offset or the entry count needs them.  ``zip64_threshold`` (and
``zip64_count_threshold``) can be lowered so tests exercise exactly the
bytes a real > 4 GiB archive would carry, without writing 4 GiB.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import Callable

from ...errors import StoreError, ZipFormatError
from ...fs import DEFAULT_FS, FileSystem
from .zip_format import (CENTRAL_FMT, CENTRAL_SIG, EOCD_FMT, EOCD_SIG, FLAG_UTF8, LOCAL_FMT, LOCAL_SIG,
                         METHOD_STORED, PIECE_SIZE, U16_MAX, U32_MAX, ZIP64_EOCD_FMT, ZIP64_EOCD_SIG,
                         ZIP64_EXTRA_ID, ZIP64_LOCATOR_FMT, ZIP64_LOCATOR_SIG, entry_name_problem, parent_keys)

VERSION_DEFAULT = 20
VERSION_ZIP64 = 45
MADE_BY_UNIX = 3 << 8
DOS_TIME = 0                        # 00:00:00
DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01
UNIX_FILE_ATTRS = (0o100644 << 16)
CRC_FIELD_OFFSET = 14               # of the CRC-32 inside a local header

OnBytes = Callable[[int], None]


def needs_zip64(value: int, threshold: int, sentinel: int) -> bool:
    """Whether ``value`` must move to a ZIP64 field (its small field then holds the sentinel)."""
    return value > threshold or value >= sentinel


@dataclass(frozen=True)
class WrittenEntry:
    """What the central directory needs to know about one written entry."""

    name: str
    crc32: int
    size: int
    header_offset: int
    sizes64: bool
    offset64: bool

    @property
    def version(self) -> int:
        return VERSION_ZIP64 if (self.sizes64 or self.offset64) else VERSION_DEFAULT


def local_header(name: str, crc32: int, size: int, *, sizes64: bool, version: int) -> bytes:
    """A local file header (plus ZIP64 extra carrying both sizes when ``sizes64``)."""
    name_b = name.encode("utf-8")
    extra = struct.pack("<HHQQ", ZIP64_EXTRA_ID, 16, size, size) if sizes64 else b""
    small = U32_MAX if sizes64 else size
    head = LOCAL_FMT.pack(LOCAL_SIG, version, FLAG_UTF8, METHOD_STORED, DOS_TIME, DOS_DATE,
                          crc32, small, small, len(name_b), len(extra))
    return head + name_b + extra


def central_record(e: WrittenEntry) -> bytes:
    """A central directory header; ZIP64 fields in APPNOTE order (size, compressed, offset)."""
    name_b = e.name.encode("utf-8")
    fields = [e.size, e.size] if e.sizes64 else []
    if e.offset64:
        fields.append(e.header_offset)
    extra = struct.pack(f"<HH{len(fields)}Q", ZIP64_EXTRA_ID, 8 * len(fields), *fields) if fields else b""
    small_size = U32_MAX if e.sizes64 else e.size
    small_offset = U32_MAX if e.offset64 else e.header_offset
    head = CENTRAL_FMT.pack(CENTRAL_SIG, MADE_BY_UNIX | e.version, e.version, FLAG_UTF8, METHOD_STORED,
                            DOS_TIME, DOS_DATE, e.crc32, small_size, small_size, len(name_b),
                            len(extra), 0, 0, 0, UNIX_FILE_ATTRS, small_offset)
    return head + name_b + extra


def end_records(count: int, cd_offset: int, cd_size: int, *, threshold: int, count_threshold: int) -> bytes:
    """ZIP64 end record + locator (when needed) followed by the end of central directory record."""
    count64 = needs_zip64(count, count_threshold, U16_MAX)
    size64 = needs_zip64(cd_size, threshold, U32_MAX)
    offset64 = needs_zip64(cd_offset, threshold, U32_MAX)
    out = b""
    if count64 or size64 or offset64:
        record_offset = cd_offset + cd_size
        out += ZIP64_EOCD_FMT.pack(ZIP64_EOCD_SIG, ZIP64_EOCD_FMT.size - 12, MADE_BY_UNIX | VERSION_ZIP64,
                                   VERSION_ZIP64, 0, 0, count, count, cd_size, cd_offset)
        out += ZIP64_LOCATOR_FMT.pack(ZIP64_LOCATOR_SIG, 0, record_offset, 1)
    small_count = U16_MAX if count64 else count
    out += EOCD_FMT.pack(EOCD_SIG, 0, 0, small_count, small_count,
                         U32_MAX if size64 else cd_size, U32_MAX if offset64 else cd_offset, 0)
    return out


class ZipWriter:
    """Write a stored zip archive entry by entry, then :meth:`close` it.

    The archive file must not exist yet.  Entry names must be relative,
    ``/``-separated, free of ``..``/``.``/empty components and backslashes,
    unique, and name files (no directory entries).
    """

    def __init__(self, path: str | os.PathLike, fs: FileSystem | None = None,
                 zip64_threshold: int = U32_MAX, *, zip64_count_threshold: int = U16_MAX,
                 piece_size: int = PIECE_SIZE):
        self.path = os.fspath(path)
        self.fs = fs if fs is not None else DEFAULT_FS
        self.zip64_threshold = zip64_threshold
        self.zip64_count_threshold = zip64_count_threshold
        self.piece_size = piece_size
        create = getattr(self.fs, "create_exclusive", None)
        try:
            if create is None:
                if self.fs.exists(self.path):
                    raise FileExistsError(self.path)
                self.fs.write_at(self.path, 0, b"")
            else:
                create(self.path)                 # O_EXCL: two writers never share one file
        except FileExistsError:
            raise StoreError("archive already exists; ZipWriter writes new files only", path=self.path) from None
        self.entries: list[WrittenEntry] = []
        self._names: set[str] = set()
        self._dirs: set[str] = set()
        self._buf = bytearray()
        self._buf_start = 0
        self._closed = False

    # -- output ------------------------------------------------------------
    @property
    def position(self) -> int:
        """Offset of the next byte to be written."""
        return self._buf_start + len(self._buf)

    def _emit(self, data: bytes) -> None:
        if len(data) >= self.piece_size:
            self._flush()
            self.fs.write_at(self.path, self._buf_start, data)
            self._buf_start += len(data)
            return
        self._buf += data
        if len(self._buf) >= self.piece_size:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self.fs.write_at(self.path, self._buf_start, bytes(self._buf))
            self._buf_start += len(self._buf)
            self._buf.clear()

    # -- names ---------------------------------------------------------------
    def _claim(self, name: str) -> None:
        def refuse(why: str) -> ZipFormatError:
            return ZipFormatError(f"entry {name!r}: {why}", path=self.path)

        if self._closed:
            raise refuse("archive is already closed")
        if name.endswith("/"):
            raise refuse("directory entries are not written (a Zarr store has keys, not directories)")
        why = entry_name_problem(name)
        if why is not None:
            raise refuse(f"name {why}")
        if len(name.encode("utf-8")) > U16_MAX:
            raise refuse("name is longer than 65535 bytes")
        if name in self._names:
            raise refuse("duplicate entry name")
        if name in self._dirs:
            raise refuse("name is already the directory of another entry")
        parents = parent_keys(name)
        for parent in parents:
            if parent in self._names:
                raise refuse(f"its directory {parent!r} is already a file entry")
        self._names.add(name)
        self._dirs.update(parents)

    def _entry(self, name: str, crc32: int, size: int, offset: int) -> WrittenEntry:
        t = self.zip64_threshold
        return WrittenEntry(name, crc32, size, offset,
                            sizes64=needs_zip64(size, t, U32_MAX),
                            offset64=needs_zip64(offset, t, U32_MAX))

    # -- entries ---------------------------------------------------------------
    def add_bytes(self, name: str, data: bytes) -> WrittenEntry:
        """Add one entry from bytes in memory."""
        self._claim(name)
        entry = self._entry(name, zlib.crc32(data), len(data), self.position)
        self._emit(local_header(name, entry.crc32, entry.size, sizes64=entry.sizes64, version=entry.version))
        self._emit(bytes(data))
        self.entries.append(entry)
        return entry

    def add_file_streaming(self, name: str, src_path: str | os.PathLike, src_fs: FileSystem | None = None,
                           *, on_bytes: OnBytes | None = None) -> WrittenEntry:
        """Add one entry copied from ``src_path`` in pieces of at most ``piece_size`` bytes."""
        src = os.fspath(src_path)
        src_fs = src_fs if src_fs is not None else self.fs
        size = src_fs.size(src)
        if size <= self.piece_size:
            data = self._read_exact(src_fs, src, 0, size)
            entry = self.add_bytes(name, data)
            if on_bytes is not None:
                on_bytes(size)
            return entry
        self._claim(name)
        self._flush()
        entry = self._entry(name, 0, size, self.position)
        self._emit(local_header(name, 0, size, sizes64=entry.sizes64, version=entry.version))
        self._flush()
        crc = 0
        done = 0
        while done < size:
            piece = self._read_exact(src_fs, src, done, min(self.piece_size, size - done))
            crc = zlib.crc32(piece, crc)
            self.fs.write_at(self.path, self._buf_start, piece)
            self._buf_start += len(piece)
            done += len(piece)
            if on_bytes is not None:
                on_bytes(len(piece))
        self.fs.write_at(self.path, entry.header_offset + CRC_FIELD_OFFSET, struct.pack("<I", crc))
        entry = WrittenEntry(name, crc, size, entry.header_offset, entry.sizes64, entry.offset64)
        self.entries.append(entry)
        return entry

    @staticmethod
    def _read_exact(src_fs: FileSystem, src: str, offset: int, length: int) -> bytes:
        data = src_fs.read_range(src, offset, length)
        if len(data) != length:
            raise StoreError(f"file shrank while being packed ({offset + len(data)} bytes, "
                             f"expected at least {offset + length})", path=src)
        return data

    # -- finish ----------------------------------------------------------------
    def close(self) -> None:
        """Write the central directory and end records (idempotent)."""
        if self._closed:
            return
        cd_offset = self.position
        for entry in self.entries:
            self._emit(central_record(entry))
        cd_size = self.position - cd_offset
        self._emit(end_records(len(self.entries), cd_offset, cd_size,
                               threshold=self.zip64_threshold, count_threshold=self.zip64_count_threshold))
        self._flush()
        self._closed = True

    def abort(self) -> None:
        """Stop without writing the central directory (the caller removes the file)."""
        self._buf.clear()
        self._closed = True

    def __enter__(self) -> "ZipWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


__all__ = ["ZipWriter", "WrittenEntry", "local_header", "central_record", "end_records", "needs_zip64"]
