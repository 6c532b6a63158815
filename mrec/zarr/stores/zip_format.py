"""The stored ZIP format of a packed record: records, the central directory, and the packing rules.

Opening an archive reads the end of central directory record (searched in the last 64 KiB + 22
bytes), the ZIP64 end record when its locator is present, and the central directory
(:func:`read_end_record`, :func:`parse_central_directory`); :func:`scan` parses them and collects
every violation of the packing rules of chunking-and-packing.md ("At-rest form: *.mrec.zip") as a
:class:`Problem` naming the entry: unsafe names (absolute, ``..``, ``.``, empty components,
backslashes, NUL), duplicate names, a name that is both a file and a directory, data ranges that
overlap each other or the central directory, sizes or offsets beyond the archive, stored entries
whose compressed and uncompressed sizes differ, an entry count the central directory cannot hold
(checked before anything is allocated), and a missing or truncated end record or central
directory.  Directory entries (names ending in ``/``) and compressed or encrypted entries are
tolerated problems (not fatal).  :func:`read_data_offset` checks an entry's local header against its
central record; :func:`zip_problems` reports every problem of an archive (the validator's).  The
store that reads entries by byte ranges is :class:`~mrec.zarr.stores.zip_read.ZipStore`; the writer
(``zip_write.py``) shares the record layouts.

The byte layouts follow the PKWARE APPNOTE (sections 4.3.7 local file
header, 4.3.12 central directory header, 4.3.14-4.3.16 ZIP64 end records,
4.5.3 ZIP64 extended information extra field).
"""
from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from dataclasses import dataclass, field

from ...errors import StoreError, ZipFormatError
from ...fs import DEFAULT_FS, FileSystem

# -- record layouts (all little endian) -----------------------------------

LOCAL_SIG = 0x04034B50
CENTRAL_SIG = 0x02014B50
EOCD_SIG = 0x06054B50
ZIP64_EOCD_SIG = 0x06064B50
ZIP64_LOCATOR_SIG = 0x07064B50
ZIP64_EXTRA_ID = 0x0001

LOCAL_FMT = struct.Struct("<IHHHHHIIIHH")            # 30 bytes
CENTRAL_FMT = struct.Struct("<IHHHHHHIIIHHHHHII")    # 46 bytes
EOCD_FMT = struct.Struct("<IHHHHIIH")                # 22 bytes
ZIP64_EOCD_FMT = struct.Struct("<IQHHIIQQQQ")        # 56 bytes
ZIP64_LOCATOR_FMT = struct.Struct("<IIQI")           # 20 bytes

MAX_COMMENT = 0xFFFF
U16_MAX = 0xFFFF
U32_MAX = 0xFFFFFFFF

FLAG_ENCRYPTED = 0x0001
FLAG_DATA_DESCRIPTOR = 0x0008
FLAG_UTF8 = 0x0800

METHOD_STORED = 0

#: Bounded piece size for streaming reads (CRC checks, unpacking).
PIECE_SIZE = 8 * 1024 * 1024

#: An entry name of a packed record is a store key: at most this many bytes (Linux PATH_MAX) ...
MAX_NAME_BYTES = 4096
#: ... at most this many '/'-separated components (a record's deepest key, a chunk of a rank-32
#: array under a few groups, has about 40) ...
MAX_NAME_DEPTH = 256
#: ... and each component at most this many bytes (NAME_MAX: the file name it unpacks to).
MAX_COMPONENT_BYTES = 255
#: A key the central directory lacks is believed absent once every unchecked entry whose name has its
#: length and differs from it in at most this many bytes has had its local header checked.
NEAR_NAME_BYTES = 3


# -- names -----------------------------------------------------------------

def entry_name_problem(name: str) -> str | None:
    """Why ``name`` is not a safe entry name, or None.

    A trailing ``/`` (a directory entry) is not judged here; the caller
    decides what to do with directory entries.
    """
    if name == "":
        return "has an empty name"
    if len(name) > MAX_NAME_BYTES or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if name.count("/") >= MAX_NAME_DEPTH + (1 if name.endswith("/") else 0):
        return f"has more than {MAX_NAME_DEPTH} path components"
    if "\x00" in name:
        return "contains a NUL byte"
    if "\\" in name:
        return "contains a backslash (separators must be '/')"
    if name.startswith("/"):
        return "is absolute"
    if len(name) >= 2 and name[1] == ":" and name[0].isalpha():
        return "starts with a drive letter"
    body = name[:-1] if name.endswith("/") else name
    parts = body.split("/")
    if ".." in parts:
        return "contains a '..' component"
    if "" in parts:
        return "has an empty path component"
    if "." in parts:
        return "has a '.' path component"
    if any(len(p.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES for p in parts):
        return f"has a path component longer than {MAX_COMPONENT_BYTES} bytes"
    return None


def parent_keys(name: str) -> list[str]:
    """'a/b/c' -> ['a/b', 'a'] (always terminates, whatever the name)."""
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def entry_text(name: str) -> str:
    if len(name) > 200:
        return f"entry {name[:80]!r}... ({len(name)} characters)"
    return f"entry {name!r}"


# -- parsed records ---------------------------------------------------------

@dataclass(frozen=True)
class EndRecord:
    """Where the central directory is, from the EOCD (and ZIP64 EOCD) record."""

    entry_count: int
    cd_offset: int
    cd_size: int
    eocd_offset: int
    zip64_offset: int | None  # offset of the ZIP64 end record, when present


@dataclass(frozen=True)
class ZipEntry:
    """One central directory record, with ZIP64 values already applied."""

    name: str
    index: int            # position in the central directory
    method: int
    flags: int
    crc32: int
    compressed_size: int
    size: int
    header_offset: int
    limit: int = 0        # first byte this entry's data may not reach (next header or CD)

    @property
    def is_directory(self) -> bool:
        return self.name.endswith("/")

    @property
    def name_bytes(self) -> bytes:
        return self.name.encode("utf-8") if self.flags & FLAG_UTF8 else self.name.encode("cp437")


@dataclass(frozen=True)
class Problem:
    """A rule violation found while scanning an archive."""

    message: str           # without the archive prefix
    entry: str | None = None
    fatal: bool = True     # True: ZipStore refuses to open


@dataclass
class Scan:
    """Everything learned from the end records and the central directory."""

    archive: str
    archive_size: int
    end: EndRecord
    entries: list[ZipEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def format_error(archive: str, message: str) -> ZipFormatError:
    return ZipFormatError(message, path=archive)


# -- end of central directory -----------------------------------------------

def _find_eocd(archive: str, tail: bytes) -> int:
    """Index in ``tail`` of the EOCD record whose comment ends the file."""
    sig = struct.pack("<I", EOCD_SIG)
    pos = tail.rfind(sig)
    truncated = False
    misfit = False
    while pos >= 0:
        if pos + EOCD_FMT.size > len(tail):
            truncated = True
        else:
            comment_len = struct.unpack_from("<H", tail, pos + 20)[0]
            if pos + EOCD_FMT.size + comment_len == len(tail):
                return pos
            misfit = True
        pos = tail.rfind(sig, 0, pos)
    if truncated and not misfit:
        raise format_error(archive, "end of central directory record is truncated")
    if misfit:
        raise format_error(archive, "end of central directory record does not end the file "
                             "(trailing bytes or a truncated comment)")
    raise format_error(archive, "no end of central directory record (not a zip archive, or truncated)")


def _read_zip64_end(archive: str, fs: FileSystem, eocd_offset: int, archive_size: int) -> tuple[int, int, int, int] | None:
    """(entry_count, cd_size, cd_offset, record_offset) from the ZIP64 end record, or None."""
    locator_offset = eocd_offset - ZIP64_LOCATOR_FMT.size
    if locator_offset < 0:
        return None
    raw = fs.read_range(archive, locator_offset, ZIP64_LOCATOR_FMT.size)
    sig, disk, record_offset, disks = ZIP64_LOCATOR_FMT.unpack(raw)
    if sig != ZIP64_LOCATOR_SIG:
        return None
    if disk != 0 or disks not in (0, 1):
        raise format_error(archive, f"multi-disk archive (ZIP64 locator names disk {disk} of {disks})")
    if record_offset + ZIP64_EOCD_FMT.size > locator_offset:
        raise format_error(archive, f"ZIP64 end record offset {record_offset} lies beyond its locator "
                             f"at {locator_offset} (archive size {archive_size})")
    raw = fs.read_range(archive, record_offset, ZIP64_EOCD_FMT.size)
    (sig, rest_size, _made_by, _needed, disk, cd_disk,
     count_disk, count, cd_size, cd_offset) = ZIP64_EOCD_FMT.unpack(raw)
    if sig != ZIP64_EOCD_SIG:
        raise format_error(archive, f"no ZIP64 end of central directory record at offset {record_offset}")
    if rest_size < ZIP64_EOCD_FMT.size - 12 or record_offset + 12 + rest_size != locator_offset:
        raise format_error(archive, f"ZIP64 end record size {rest_size} does not reach its locator")
    if disk != 0 or cd_disk != 0 or count_disk != count:
        raise format_error(archive, "multi-disk archive (ZIP64 end record)")
    return count, cd_size, cd_offset, record_offset


def read_end_record(archive: str, fs: FileSystem, archive_size: int) -> EndRecord:
    """Locate and cross-check the EOCD (and ZIP64) end records.

    Refuses (before anything proportional to the entry count is allocated)
    an entry count that the central directory's size cannot hold.
    """
    if archive_size < EOCD_FMT.size:
        raise format_error(archive, f"{archive_size} bytes is too small for a zip archive "
                             "(no end of central directory record)")
    tail_len = min(archive_size, MAX_COMMENT + EOCD_FMT.size)
    tail_start = archive_size - tail_len
    tail = fs.read_range(archive, tail_start, tail_len)
    pos = _find_eocd(archive, tail)
    eocd_offset = tail_start + pos
    (_sig, disk, cd_disk, count_disk, count, cd_size,
     cd_offset, _comment_len) = EOCD_FMT.unpack_from(tail, pos)
    if disk != 0 or cd_disk != 0 or count_disk != count:
        raise format_error(archive, f"multi-disk archive (disk {disk}, central directory on disk {cd_disk})")

    zip64 = _read_zip64_end(archive, fs, eocd_offset, archive_size)
    zip64_offset = None
    cd_end_limit = eocd_offset
    if zip64 is not None:
        count64, size64, offset64, zip64_offset = zip64
        for what, small, big, sentinel in (("entry count", count, count64, U16_MAX),
                                           ("central directory size", cd_size, size64, U32_MAX),
                                           ("central directory offset", cd_offset, offset64, U32_MAX)):
            if small != sentinel and small != big:
                raise format_error(archive, f"end record and ZIP64 end record disagree on the {what} "
                                     f"({small} vs {big})")
        count, cd_size, cd_offset = count64, size64, offset64
        cd_end_limit = zip64_offset

    if cd_offset > archive_size or cd_size > archive_size or cd_offset + cd_size > cd_end_limit:
        raise format_error(archive, f"central directory ({cd_size} bytes at offset {cd_offset}) extends past "
                             f"the end records at {cd_end_limit} (truncated or corrupt; archive size "
                             f"{archive_size})")
    if cd_offset + cd_size != cd_end_limit:
        raise format_error(archive, f"central directory ends at {cd_offset + cd_size} but the end records "
                             f"start at {cd_end_limit} (bytes between them, or a prefixed archive)")
    if count * CENTRAL_FMT.size > cd_size:
        raise format_error(archive, f"entry count {count} claims more records than a central directory "
                             f"of {cd_size} bytes can hold (each record is at least "
                             f"{CENTRAL_FMT.size} bytes)")
    return EndRecord(count, cd_offset, cd_size, eocd_offset, zip64_offset)


# -- central directory --------------------------------------------------------

def _decode_name(raw: bytes, flags: int) -> str:
    if flags & FLAG_UTF8:
        return raw.decode("utf-8")
    return raw.decode("cp437")


def _apply_zip64_extra(archive: str, name: str, extra: bytes, values: list[int]) -> list[int]:
    """Replace sentinel ``values`` [size, compressed_size, header_offset, disk] from extra 0x0001."""
    out = list(values)
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4: pos + 4 + length]
        if len(body) != length:
            raise format_error(archive, f"{entry_text(name)}: extra field {tag:#06x} runs past the extra data")
        if tag == ZIP64_EXTRA_ID:
            cursor = 0
            for i, (sentinel, width) in enumerate(((U32_MAX, 8), (U32_MAX, 8), (U32_MAX, 8), (U16_MAX, 4))):
                if values[i] != sentinel:
                    continue
                if cursor + width > len(body):
                    raise format_error(archive, f"{entry_text(name)}: ZIP64 extra field is too short "
                                         f"for the values its header marks as 0xFFFFFFFF")
                out[i] = int.from_bytes(body[cursor: cursor + width], "little")
                cursor += width
        pos += 4 + length
    return out


def parse_central_directory(archive: str, data: bytes, count: int) -> list[ZipEntry]:
    """``count`` records from the central directory bytes ``data`` (limits left 0)."""
    entries: list[ZipEntry] = []
    pos = 0
    for index in range(count):
        if pos + CENTRAL_FMT.size > len(data):
            raise format_error(archive, f"central directory is truncated: record #{index} of {count} "
                                 f"needs {CENTRAL_FMT.size} bytes, {len(data) - pos} left")
        (sig, _made_by, _needed, flags, method, _time, _date, crc, csize, usize,
         name_len, extra_len, comment_len, disk, _internal, _external,
         offset) = CENTRAL_FMT.unpack_from(data, pos)
        if sig != CENTRAL_SIG:
            raise format_error(archive, f"central directory record #{index} has a bad signature {sig:#010x}")
        name_end = pos + CENTRAL_FMT.size + name_len
        raw_name = data[pos + CENTRAL_FMT.size: name_end]
        try:
            name = _decode_name(raw_name, flags)
        except UnicodeDecodeError:
            raise format_error(archive, f"central directory record #{index}: name {raw_name!r} is not valid UTF-8")
        record_end = name_end + extra_len + comment_len
        if record_end > len(data):
            raise format_error(archive, f"{entry_text(name)}: central directory is truncated (record #{index} "
                                 f"needs {record_end - pos} bytes, {len(data) - pos} left)")
        extra = data[name_end: name_end + extra_len]
        usize, csize, offset, disk = _apply_zip64_extra(archive, name, extra, [usize, csize, offset, disk])
        if disk != 0:
            raise format_error(archive, f"{entry_text(name)}: starts on disk {disk} (multi-disk archive)")
        entries.append(ZipEntry(name, index, method, flags, crc, csize, usize, offset))
        pos = record_end
    if pos != len(data):
        raise format_error(archive, f"central directory has {len(data) - pos} bytes after its {count} records "
                             "(entry count and directory size disagree)")
    return entries


# -- rules over entries -------------------------------------------------------

def _name_problems(entries: list[ZipEntry]) -> list[Problem]:
    out: list[Problem] = []
    seen: set[str] = set()
    unsafe: set[str] = set()      # not walked for parents below (a name may be 64 KiB of '/')
    for e in entries:
        why = entry_name_problem(e.name)
        if why is not None:
            out.append(Problem(f"{entry_text(e.name)}: name {why}", e.name))
            unsafe.add(e.name)
        if e.name in seen:
            out.append(Problem(f"{entry_text(e.name)}: duplicate entry name", e.name))
        seen.add(e.name)
        if e.is_directory:
            out.append(Problem(f"{entry_text(e.name)}: directory entry (a packed record has none)",
                               e.name, fatal=False))
    files = {e.name for e in entries if not e.is_directory and e.name not in unsafe}
    for name in sorted(files):
        for parent in parent_keys(name):
            if parent in files:
                out.append(Problem(f"{entry_text(parent)}: is a file and also the directory of "
                                   f"{entry_text(name)}", parent))
                files.discard(parent)
    return out


def _method_problems(entries: list[ZipEntry]) -> list[Problem]:
    out: list[Problem] = []
    for e in entries:
        if e.flags & FLAG_ENCRYPTED:
            out.append(Problem(f"{entry_text(e.name)}: entry is encrypted", e.name, fatal=False))
        if e.method != METHOD_STORED:
            out.append(Problem(f"{entry_text(e.name)}: compression method {e.method} "
                               "(every entry must be stored, method 0)", e.name, fatal=False))
        elif e.compressed_size != e.size:
            out.append(Problem(f"{entry_text(e.name)}: stored entry with compressed size "
                               f"{e.compressed_size} != uncompressed size {e.size}", e.name))
    return out


def _with_limits(entries: list[ZipEntry], end: EndRecord, archive_size: int) -> tuple[list[ZipEntry], list[Problem]]:
    """Give each entry the offset its data may not reach; flag overlaps and out-of-range data."""
    problems: list[Problem] = []
    order = sorted(entries, key=lambda e: (e.header_offset, e.index))
    limits: dict[int, int] = {}
    for i, e in enumerate(order):
        limit = order[i + 1].header_offset if i + 1 < len(order) else end.cd_offset
        limits[e.index] = min(limit, end.cd_offset)
        least_end = e.header_offset + LOCAL_FMT.size + len(e.name_bytes) + e.compressed_size
        if least_end > archive_size:
            problems.append(Problem(f"{entry_text(e.name)}: data ({e.compressed_size} bytes, local header "
                                    f"at {e.header_offset}) extends beyond the archive size {archive_size}",
                                    e.name))
        elif e.header_offset >= end.cd_offset or least_end > end.cd_offset:
            problems.append(Problem(f"{entry_text(e.name)}: data overlaps the central directory "
                                    f"at offset {end.cd_offset}", e.name))
        elif least_end > limit:
            other = order[i + 1]
            problems.append(Problem(f"{entry_text(e.name)}: data range overlaps "
                                    f"{entry_text(other.name)} (local header at {other.header_offset})",
                                    e.name))
    return [dataclasses.replace(e, limit=limits[e.index]) for e in entries], problems


def scan(archive: str, fs: FileSystem) -> Scan:
    """Read the end records and the central directory; collect rule violations.

    Structural failures (no readable end record or central directory) raise
    :class:`ZipFormatError` (a missing archive :class:`StoreError`); per-entry
    violations are returned as problems.
    """
    try:
        archive_size = fs.size(archive)
    except FileNotFoundError:
        raise StoreError("archive does not exist", path=archive) from None
    end = read_end_record(archive, fs, archive_size)
    data = fs.read_range(archive, end.cd_offset, end.cd_size)
    if len(data) != end.cd_size:
        raise format_error(archive, f"central directory is truncated ({len(data)} of {end.cd_size} bytes)")
    entries = parse_central_directory(archive, data, end.entry_count)
    entries, range_problems = _with_limits(entries, end, archive_size)
    problems = _name_problems(entries) + _method_problems(entries) + range_problems
    return Scan(archive, archive_size, end, entries, problems)


# -- local headers -------------------------------------------------------------

def read_data_offset(archive: str, fs: FileSystem, e: ZipEntry) -> int:
    """Check an entry's local header against its central record; return where its data starts."""
    name_bytes = e.name_bytes
    raw = fs.read_range(archive, e.header_offset, LOCAL_FMT.size + len(name_bytes))
    if len(raw) < LOCAL_FMT.size + len(name_bytes):
        raise format_error(archive, f"{entry_text(e.name)}: local header at {e.header_offset} is truncated")
    (sig, _needed, flags, method, _time, _date, crc, csize, usize,
     name_len, extra_len) = LOCAL_FMT.unpack_from(raw)
    if sig != LOCAL_SIG:
        raise format_error(archive, f"{entry_text(e.name)}: no local file header at offset {e.header_offset}")
    if raw[LOCAL_FMT.size:] != name_bytes or name_len != len(name_bytes):
        raise format_error(archive, f"{entry_text(e.name)}: local header names "
                             f"{raw[LOCAL_FMT.size:LOCAL_FMT.size + name_len]!r}, not the central "
                             "directory's name")
    if method != e.method:
        raise format_error(archive, f"{entry_text(e.name)}: local header method {method} != central "
                             f"directory method {e.method}")
    if not flags & FLAG_DATA_DESCRIPTOR:
        if crc != e.crc32:
            raise format_error(archive, f"{entry_text(e.name)}: local header CRC-32 {crc:#010x} != central "
                                 f"directory CRC-32 {e.crc32:#010x}")
        for what, local, central in (("compressed size", csize, e.compressed_size),
                                     ("size", usize, e.size)):
            if local != U32_MAX and local != central:
                raise format_error(archive, f"{entry_text(e.name)}: local header {what} {local} != central "
                                     f"directory {what} {central}")
    data_offset = e.header_offset + LOCAL_FMT.size + name_len + extra_len
    if data_offset + e.compressed_size > e.limit:
        raise format_error(archive, f"{entry_text(e.name)}: data ({e.compressed_size} bytes at {data_offset}) "
                             f"overlaps the next entry or the central directory at {e.limit}")
    return data_offset


def zip_problems(path: str | os.PathLike, fs: FileSystem | None = None, *, check_crc: bool = False) -> list[str]:
    """Every packing-rule violation of an archive, as messages naming archive and entry.

    Unlike :class:`ZipStore` this does not stop at the first problem where it
    can go on: structural failures (no end record, unreadable central
    directory) end the scan, per-entry problems are all collected, local
    headers of every stored entry are checked, and with ``check_crc`` the
    CRC-32 of every entry is verified.
    """
    archive = os.fspath(path)
    fs = fs if fs is not None else DEFAULT_FS
    try:
        result = scan(archive, fs)
    except (ZipFormatError, StoreError) as exc:
        return [str(exc)]
    messages = [f"{archive}: {p.message}" for p in result.problems]
    bad = {p.entry for p in result.problems if p.fatal}
    for e in result.entries:
        if e.name in bad or e.is_directory:
            continue
        try:
            start = read_data_offset(archive, fs, e)
        except ZipFormatError as exc:
            messages.append(str(exc))
            continue
        readable = e.method == METHOD_STORED and not e.flags & FLAG_ENCRYPTED
        if check_crc and readable and not _crc_matches(archive, fs, start, e):
            messages.append(f"{archive}: {entry_text(e.name)}: CRC-32 mismatch")
    return messages


def _crc_matches(archive: str, fs: FileSystem, start: int, e: ZipEntry) -> bool:
    crc = 0
    done = 0
    while done < e.size:
        piece = fs.read_range(archive, start + done, min(PIECE_SIZE, e.size - done))
        if not piece:
            return False
        crc = zlib.crc32(piece, crc)
        done += len(piece)
    return crc == e.crc32
