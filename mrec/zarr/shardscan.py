"""Rebuilding a shard index from the inner chunks a shard file holds.

mrec appends inner chunks at a shard's tail and rewrites the index (at the
start) in place.  A power loss can tear that rewrite (each 512-byte sector old
or new, the index's crc32c then fails) or drop it (the old index, crc intact,
while newer chunks and a newer ``zarr.json`` reached the disk).  The chunk
bytes themselves are never overwritten, and every inner chunk ends with its
own crc32c, so the index can be rebuilt from what verifies:

1. walk the file from the end of the index region: each inner chunk is a blob
   whose last 4 bytes are the crc32c of the rest and that decodes to one inner
   chunk; blobs lie end to end in landing order (every landing writes at the
   file's end), and the walk stops at the first byte that starts no verifying
   blob (a tail the disk never received);
   a copy an old or new entry names beyond that gap, whole and verifying, is taken too, and
   the walk goes on from its end (an earlier copy torn while a later one landed);
2. give each blob its inner-chunk coordinate: a blob an old or new index entry
   points at exactly has that entry's coordinate; any other blob is either a
   re-encoded version of the *last* coordinate (it agrees with that coordinate's
   latest copy on a leading run of rows past which one of the two is padding:
   :func:`reencodes`) or the next chunk.  Only the last coordinate can be
   re-encoded because a reopening writer removes the copies a crash left past
   the committed ones before it appends (``ShardedAppender._settle``);
3. every coordinate takes its *latest* blob.  A re-encoding only ever adds rows
   to a partial chunk, so the latest version agrees with every earlier one on
   every committed row — whether it was committed or is an uncommitted tail.

Only shards of one inner chunk across the trailing axes (what mrec's appender
writes) whose inner pipeline ends in ``crc32c`` are rebuilt; for any other
layout :func:`rebuildable` is False and a failing index stays an error.
Limitation (documented in docs/reliability.md): step 2 cannot tell a
re-encoded chunk from the next chunk when no index entry names the blob and
real rows equal the fill value bit for bit exactly where the two readings
differ.
"""
from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass, field

import numpy as np
from crc32c import crc32c

from ..errors import CorruptionError, MrecError, StandInWarning
from .codecs.base import ChunkSpec
from .codecs.bytes_ import BytesCodec
from .codecs.vlen_utf8 import VlenUtf8Codec
from .codecs.crc32c_ import Crc32cCodec
from .codecs.sharding import EMPTY, ShardIndex

MAX_SCAN = 1 << 24      # longest blob searched byte by byte (16 MiB)
SECTOR = 512


@dataclass
class Blob:
    offset: int
    nbytes: int
    first_row: bytes


def rebuildable(sharding, grid) -> bool:
    ix = sharding.index_codecs
    inner = sharding.codecs
    return (sharding.index_location == "start" and int(np.prod(grid[1:], dtype=np.int64)) == 1
            and isinstance(ix.array_bytes, BytesCodec) and not ix.array_array
            and [type(c) for c in ix.bytes_bytes] == [Crc32cCodec]
            and bool(inner.bytes_bytes) and isinstance(inner.bytes_bytes[-1], Crc32cCodec))


def raw_entries(sharding, raw: bytes, grid) -> ShardIndex:
    """The entries of an index region without checking its crc32c (they may be torn)."""
    endian = "<" if sharding.index_codecs.array_bytes.endian != "big" else ">"
    arr = np.frombuffer(raw[:-4], dtype=f"{endian}u8").reshape(*grid, 2).astype(np.uint64)
    return ShardIndex(np.array(arr[..., 0], order="C"), np.array(arr[..., 1], order="C"))


def _decode(sharding, spec: ChunkSpec, data: bytes) -> bytes | None:
    """First row of the inner chunk ``data`` decodes to, or None when it does not verify."""
    try:
        arr = sharding.codecs.decode(data, spec)
    except (MrecError, ValueError, TypeError):
        return None
    arr = np.asarray(arr)
    if tuple(arr.shape) != tuple(spec.shape):
        return None
    row = arr[:1]
    return repr(row.tolist()).encode() if row.dtype == object else row.tobytes()


def _exact(sharding, spec, data: bytes, off: int, nb: int) -> Blob | None:
    """The blob of exactly ``data[off:off + nb]`` when it verifies its crc32c and decodes."""
    if nb < 4 or off < 0 or off + nb > len(data):
        return None
    if struct.unpack_from("<I", data, off + nb - 4)[0] != crc32c(data[off:off + nb - 4]):
        return None
    first = _decode(sharding, spec, data[off:off + nb])
    return Blob(off, nb, first) if first is not None else None


def _blob_at(sharding, spec, data: bytes, pos: int, sizes: list[int]) -> Blob | None:
    n = len(data)
    for size in sizes:
        blob = _exact(sharding, spec, data, pos, size)
        if blob is not None:
            return blob
    if len(sizes) == 1 and sharding.codecs.encoded_size(1) is not None:
        return None             # a fixed-size pipeline: no other length can verify
    running = 0
    limit = min(n - 4, pos + MAX_SCAN)
    for end in range(pos, limit + 1):            # body = data[pos:end], crc at data[end:end+4]
        if end > pos:
            running = crc32c(data[end - 1:end], running)
        if struct.unpack_from("<I", data, end)[0] == running and end - pos + 4 not in sizes:
            first = _decode(sharding, spec, data[pos:end + 4])
            if first is not None:
                return Blob(pos, end + 4 - pos, first)
    return None


def scan(sharding, spec: ChunkSpec, data: bytes, start: int, hints=()) -> list[Blob]:
    """Every verifying inner chunk laid end to end from ``start``, up to the first gap."""
    chunk_bytes = int(np.prod(spec.shape, dtype=np.int64)) * (spec.dtype.numpy.itemsize if not spec.dtype.is_string else 1)
    fixed = sharding.codecs.encoded_size(chunk_bytes)
    sizes = [fixed] if fixed is not None else sorted({int(h) for h in hints if 4 <= int(h) < len(data)})
    out = []
    pos = start
    while pos + 4 <= len(data):
        blob = _blob_at(sharding, spec, data, pos, sizes)
        if blob is None:
            break
        out.append(blob)
        if fixed is None and blob.nbytes not in sizes:
            sizes.append(blob.nbytes)
        pos += blob.nbytes
    return out


def _rows_view(sharding, spec: ChunkSpec, data: bytes, b: "Blob") -> np.ndarray:
    return np.asarray(sharding.codecs.decode(data[b.offset:b.offset + b.nbytes], spec))


def _rows_2d(arr: np.ndarray) -> np.ndarray:
    """One row of comparable items per row: bytes for numbers (bitwise: NaN equals NaN, -0.0
    differs from 0.0), the objects themselves for strings."""
    width = int(np.prod(arr.shape[1:], dtype=np.int64))
    if arr.dtype == object:
        return arr.reshape(len(arr), width)
    return np.ascontiguousarray(arr).view(np.uint8).reshape(len(arr), width * arr.dtype.itemsize)


def reencodes(sharding, spec: ChunkSpec, data: bytes, old: "Blob", new: "Blob") -> bool:
    """Whether ``new``, a copy no index entry names, landing right after the latest copy ``old``
    of coordinate ``cur``, is a re-encoding of that coordinate rather than the next chunk.

    A re-encoding rewrites a partial chunk with more rows; the only other re-encoding the writer
    makes (a reopen or restart, ``ShardedAppender._settle``) keeps the committed rows and drops
    the rest.  Either way the two copies agree on a leading run of at least one row, past which
    one of them is all padding (the fill value).  The next chunk agrees with its predecessor on
    no such run, unless real rows repeat bitwise and the rest equal the fill value; identical
    copies are a re-encoding only when ``old`` can be partial (its last row is the fill value):
    a full chunk repeated by the next one (a constant column) is the next chunk.
    The one case this cannot tell (docs/reliability.md, "Rebuilding an index"): real rows
    equal to the fill value bit for bit exactly where the two readings differ.
    """
    if old.first_row != new.first_row:
        return False
    ra = _rows_view(sharding, spec, data, old)
    a = _rows_2d(ra)
    b = _rows_2d(_rows_view(sharding, spec, data, new))
    if a.shape != b.shape:
        return False
    same = (a == b).all(axis=1)
    if same.all():
        return padded_after(ra, len(ra) - 1, spec.fill_value)
    j = int(np.argmin(same))
    return padded_after(ra, j, spec.fill_value) or padded_after(_rows_view(sharding, spec, data, new), j,
                                                                    spec.fill_value)


def padded_after(chunk: np.ndarray, k: int, fill) -> bool:
    """Whether rows ``k`` onward of ``chunk`` are all the fill value, bitwise (how a partial
    chunk is padded)."""
    rows = _rows_2d(chunk[k:])
    pad = _rows_2d(np.full((1, *chunk.shape[1:]), fill, dtype=chunk.dtype))[0]
    return bool((rows == pad).all())


def holds_rows(chunk: np.ndarray, need: int, fill) -> bool:
    """Whether an inner chunk's first ``need`` rows can be real data: its row ``need - 1`` is not
    the fill value (re-encoding pads a partial chunk with fill, so real rows are a prefix)."""
    return need <= 0 or not padded_after(np.asarray(chunk)[:need], need - 1, fill)


def rebuild(sharding, grid, spec: ChunkSpec, data: bytes, entries: ShardIndex | None) -> tuple[ShardIndex, list[Blob]]:
    """The index the shard bytes ``data`` support (see the module doc), and the blobs found.

    ``index.degraded`` maps the coordinates whose chosen copy is older than one an entry
    names but that does not verify, to how far that older copy can be trusted
    (:func:`trusted_rows`): the newer copy may have held rows the older one lacks.
    """
    isize = sharding.index_size(grid)
    n = grid[0]
    hints = []
    anchors: dict[tuple[int, int], int] = {}
    beyond: dict[tuple[int, int], int] = {}       # entries naming copies wholly past the end of the file
    if entries is not None:
        for c in range(n):
            off, nb = int(entries.offsets[c].ravel()[0]), int(entries.nbytes[c].ravel()[0])
            if off < isize or nb < 4 or off == int(EMPTY) or nb == int(EMPTY):
                continue          # names no chunk (an unwritten sector of the index reads as zeros)
            if off >= len(data):
                beyond[(off, nb)] = c
            if off != int(EMPTY) and nb != int(EMPTY) and off < len(data):
                if (off, nb) in anchors:
                    # an appender gives every copy one coordinate for good, so no mix of an old and
                    # a new index names one copy twice: these entries were not torn, they were changed
                    raise Contradiction(f"shard index entries {[anchors[(off, nb)]]} and {[c]} both name bytes "
                                        f"{off}..{off + nb}", spec.where)
                hints.append(nb)
                anchors[(off, nb)] = c
    blobs = scan(sharding, spec, data, isize, hints)
    # a copy an entry names, past a gap the walk stopped at (an earlier copy torn, this one
    # whole), verifies on its own: take it, and walk on from its end
    seen = {(b.offset, b.nbytes) for b in blobs}
    for off, nb in sorted(anchors):
        reach = blobs[-1].offset + blobs[-1].nbytes if blobs else isize
        if (off, nb) in seen or off < reach:
            continue
        b = _exact(sharding, spec, data, off, nb)
        if b is not None:
            more = [b] + scan(sharding, spec, data, off + nb, hints)
            blobs += more
            seen.update((x.offset, x.nbytes) for x in more)
    latest: dict[int, Blob] = {}
    cur = -1
    prev_end = isize
    for b in blobs:
        coord = anchors.get((b.offset, b.nbytes))
        contiguous, prev_end = b.offset == prev_end, b.offset + b.nbytes
        if coord is not None and contiguous and coord > cur + 1:
            # chunks land in coordinate order, one after the other: an entry naming, for the copy
            # right after the previous one, a coordinate past the next is no torn rewrite
            raise Contradiction(f"shard index entry {[coord]} names bytes {b.offset}..{b.offset + b.nbytes}, "
                                f"which follow the chunk of coordinate {[cur]} in the file: chunks are "
                                "appended in coordinate order", spec.where)
        if coord is not None and coord <= cur and coord in latest and latest[coord].first_row != b.first_row:
            # a later copy of an earlier coordinate is a re-encoded partial chunk: it begins with the
            # rows of the copy before it
            raise Contradiction(f"shard index entry {[coord]} names bytes {b.offset}..{b.offset + b.nbytes}, "
                                f"a later copy that does not begin with the rows of the copy of "
                                f"coordinate {[coord]} before it", spec.where)
        if coord is None:
            # only the last coordinate is ever re-encoded (the writer's partial tail; a reopen
            # removes leftover copies first, mrec.zarr.array.ShardedAppender._settle)
            coord = cur if cur in latest and reencodes(sharding, spec, data, latest[cur], b) else cur + 1
        if coord >= n:
            break
        latest[coord] = b
        cur = coord
    index = ShardIndex.empty(grid)
    for c, b in latest.items():
        index.offsets[c] = b.offset
        index.nbytes[c] = b.nbytes
    verified = {(b.offset, b.nbytes) for b in blobs}
    named: dict[int, tuple[int, int]] = {}
    for (off, nb), c in (*anchors.items(), *beyond.items()):
        if (off, nb) not in verified and off > named.get(c, (-1, 0))[0]:
            named[c] = (off, nb)
    tail = (0,) * (len(grid) - 1)
    degraded = {}
    for c, (off, nb) in named.items():
        if c in latest and off >= latest[c].offset + latest[c].nbytes:    # a newer copy lands after it
            degraded[(c, *tail)] = _trust(sharding, spec, data, (latest[c].offset, latest[c].nbytes), (off, nb))
    return _Rebuilt(index.offsets, index.nbytes, degraded, spec.where), blobs


class Contradiction(CorruptionError):
    """A crc-failing shard index whose entries contradict the order the chunks were appended in:
    entries swapped, duplicated or changed, not a torn rewrite.  Never rebuilt from."""

    def __init__(self, why: str, where: str):
        super().__init__(f"its shard index fails its crc32c and its entries contradict the file ({why}): "
                         "not a torn rewrite, the entries were changed, so the index cannot be rebuilt "
                         "from them; `mrec repair` refuses it too (restore the file from a copy)",
                         path=where or None)


ALL = -1        # trusted_rows: every row of the older copy
PAST_END = -2   # as ALL: the newer copy lies wholly past the end of the file


def _trust(sharding, spec, data: bytes, old_at: tuple[int, int], new_at: tuple[int, int]) -> int | None:
    """How many leading rows of the older copy agree with the newer copy that failed.

    ``ALL`` when the newer copy never reached the disk (zeros: a power loss before its
    sectors were written — the commit that needed it was then not durable either);
    ``PAST_END`` (trusted as ``ALL``) when it lies wholly past the end of the file (a lost
    extending write, or a file cut exactly there: the two look alike).  For an uncompressed pipeline (bytes + crc32c) the bytes of
    both copies are compared, ignoring the newer copy's part of any 512-byte sector that is
    all zero (never written): the rows before the first real difference (a tear or a flipped bit)
    are trusted.  None when the copies cannot be compared (then only :func:`holds_rows`).

    A file ending strictly *inside* the newer copy (its entry gives its extent) is a cut, never a
    crash state (a crash leaves the sizes of whole writes): its bytes are real, zeros included, so
    none of the "never written" rules applies (issue 27: a copy beginning with zero bytes cut 1-30
    bytes in read as ``ALL``, its committed rows as fill).
    """
    (o_off, o_nb), (n_off, n_nb) = old_at, new_at
    newer = data[n_off:n_off + n_nb]
    if not newer:
        # wholly past the end of the file: a power loss before the copy's extending write, and then
        # the commit that needed it did not survive either (a surviving zarr.json carries the chunks
        # written before it), so the older copy holds every committed row.  A file cut exactly there
        # looks the same (docs/reliability.md): PAST_END lets validate --deep say so
        return PAST_END
    if len(newer) < n_nb:
        return _trust_cut(sharding, spec, data, old_at, new_at)
    if not any(newer):
        return ALL
    # the sector holding the newer copy's crc32c never written (its part of it all zero: a
    # crc of 0 has odds 2^-32), or, behind a compressor, its part of any sector (32 bytes or more) all zero
    # (compressed data has no run of 32 zero bytes): a power loss tore the copy before it landed
    last = (n_off + n_nb - 1) // SECTOR * SECTOR
    if not any(data[max(last, n_off):n_off + n_nb]):
        return ALL
    bb = sharding.codecs.bytes_bytes
    if len(bb) >= 2 and getattr(bb[-2], "name", "") in ("gzip", "zstd") and newer[0] == 0:
        # the copy is the compressor's output (then its crc32c): a gzip member begins 1f 8b, a zstd
        # frame 28 b5 2f fd (a skippable one 5? 2a 4d 18), so a written copy never begins with a
        # zero byte.  A zero there is the copy's part of its first sector never written: a copy
        # beginning inside the sector that ends the previous one whose in-place part a power loss
        # dropped, however few bytes that part is.
        return ALL
    if any(getattr(c, "name", "") in ("gzip", "zstd") for c in bb):
        for sec in range(n_off // SECTOR * SECTOR, n_off + n_nb, SECTOR):
            part = data[max(sec, n_off):min(sec + SECTOR, n_off + n_nb)]
            if len(part) >= 32 and not any(part):
                return ALL
    return _compare(sharding, spec, data, old_at, new_at, skip_unwritten=True)


def _trust_cut(sharding, spec, data: bytes, old_at, new_at) -> int | None:
    """:func:`_trust` for a newer copy the file ends inside (a cut): only a comparison of the bytes
    that are there vouches for rows (uncompressed pipelines); otherwise :func:`holds_rows`."""
    return _compare(sharding, spec, data, old_at, new_at, skip_unwritten=False)


def _compare(sharding, spec, data: bytes, old_at, new_at, skip_unwritten: bool) -> int | None:
    """The leading rows of the older copy that the newer copy's bytes agree with, for uncompressed
    pipelines (None for any other).  ``skip_unwritten``: differences in the newer copy's part of a
    512-byte sector that is all zero (never written) do not count (a whole copy torn by a power
    loss); a cut copy's bytes are all real."""
    (o_off, o_nb), (n_off, n_nb) = old_at, new_at
    ab = sharding.codecs.array_bytes
    if not sharding.codecs.array_array and isinstance(ab, VlenUtf8Codec) and len(sharding.codecs.bytes_bytes) == 1:
        return _trust_strings(data, old_at, new_at, int(np.prod(spec.shape[1:], dtype=np.int64)) or 1)
    if sharding.codecs.array_array or not isinstance(ab, BytesCodec) or len(sharding.codecs.bytes_bytes) != 1:
        return None
    row = int(np.prod(spec.shape[1:], dtype=np.int64)) * spec.dtype.numpy.itemsize
    if not row:
        return ALL
    old_body = np.frombuffer(data, np.uint8, max(0, o_nb - 4), o_off)
    new_body = np.frombuffer(data, np.uint8, max(0, min(n_nb - 4, len(data) - n_off)), n_off)
    k = min(len(old_body), len(new_body))
    diff = np.flatnonzero(old_body[:k] != new_body[:k])
    if skip_unwritten and len(diff):
        # the newer copy's part of each 512-byte sector it touches: a difference where it is all zero
        # (never written) does not count
        first = n_off // SECTOR
        bounds = np.arange(first, (n_off + n_nb - 1) // SECTOR + 2) * SECTOR
        bounds[0], bounds[-1] = n_off, n_off + n_nb
        written = np.logical_or.reduceat(np.frombuffer(data, np.uint8, n_nb, n_off) != 0, bounds[:-1] - n_off)
        diff = diff[written[(n_off + diff) // SECTOR - first]]
    if len(diff):
        return int(diff[0]) // row
    return len(new_body) // row if len(new_body) < len(old_body) else ALL


def trusted(index, coord, chunk, need: int, fill) -> bool:
    """Whether rows ``[0, need)`` of ``chunk``, read through ``index``, can be trusted."""
    how = getattr(index, "degraded", {}).get(tuple(coord), ALL)
    if how is None:
        return holds_rows(chunk, need, fill)
    if how == PAST_END and not holds_rows(chunk, need, fill):
        # the rows are read from the older copy, as a power loss leaves them; but a file cut at the
        # newest copy's start looks the same and then they are padding: never silently
        warnings.warn(StandInWarning(
            f"{getattr(index, 'where', '') or 'a shard'}: inner chunk {list(coord)}: its newest copy lies past "
            f"the end of the file, so rows 0..{need - 1} are read from the copy before it, whose last of them "
            "is the fill value: the rows as committed, if a power loss lost the newest copy's write, or "
            "padding, if the file was cut there (`mrec validate --deep` reports it as RT-6)"), stacklevel=3)
    # rows the comparison could not vouch for still count when the older copy (verified by its own
    # crc32c) holds them: real rows are a prefix, padding the fill value
    return how in (ALL, PAST_END) or need <= how or holds_rows(chunk, need, fill)


@dataclass(frozen=True)
class _Rebuilt(ShardIndex):
    degraded: dict = field(default_factory=dict)
    where: str = ""


def _vlen_spans(body: bytes, base: int) -> list[tuple[int, int, int]]:
    """(absolute start of the item's length prefix, start, end) of each item of a vlen-utf8
    body that parses, in order (a body that stops parsing yields the items before)."""
    out = []
    if len(body) < 4:
        return out
    count = int.from_bytes(body[:4], "little")
    pos = 4
    for _ in range(count):
        if pos + 4 > len(body):
            break
        ln = int.from_bytes(body[pos:pos + 4], "little")
        if pos + 4 + ln > len(body):
            break
        out.append((base + pos, base + pos + 4, base + pos + 4 + ln))
        pos += 4 + ln
    return out


def _trust_strings(data: bytes, old_at: tuple[int, int], new_at: tuple[int, int], per_row: int) -> int:
    """:func:`_trust` for uncompressed vlen-utf8 chunks: the leading items of the older copy
    that equal the newer copy's, where every sector the newer item lies in was written (not
    all zero: an empty string is four zero bytes, so an unwritten sector must never vouch for one)."""
    (o_off, o_nb), (n_off, n_nb) = old_at, new_at
    old = _vlen_spans(data[o_off:o_off + o_nb - 4], o_off)
    new = _vlen_spans(data[n_off:n_off + n_nb - 4], n_off)

    def written(lo: int, hi: int) -> bool:
        for sec in range(lo // SECTOR * SECTOR, max(hi, lo + 1), SECTOR):
            if not any(data[max(sec, n_off):min(sec + SECTOR, n_off + n_nb)]):
                return False
        return True

    n = 0
    for (_, os_, oe), (np_, ns, ne) in zip(old, new):
        if data[os_:oe] != data[ns:ne] or not written(np_, ne):
            break
        n += 1
    if old and n == len(old):
        return ALL
    return n // per_row
