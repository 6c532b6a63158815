"""Layer 4: ``mrec repack IN OUT`` — rewrite a closed record with extents sized to what it holds.

The chapter makes chunking a backend choice: "a conforming reader opens any
chunking" (chunking-and-packing.md).  The reference extents are made for a
live appender that does not know how long it will run: 16 KiB inner chunks
and a shard index with room for up to 4096 chunks, both paid in full by a
record of three frames.  A *closed* record knows its size, so repack writes a
new record whose every trajectory array is

* cut to its logical length (the reopen rule: an uncommitted tail is dropped),
* cut into inner chunks of several frames each — a frame never straddles a
  chunk of a frame-aligned column, so reading a random frame is still one
  chunk decode per column,
* sharded with an index sized to the chunks that exist (index at the start,
  the chunks back to back after it, exactly as an appender lands them),
* encoded with ``numcodecs.shuffle`` + ``zstd`` + ``crc32c`` — codecs of the
  must-decode set only,

and copies everything else (documents, frame-shaped sections, observables,
metrics, unknown content) byte for byte, with ``zarr.json`` documents
re-serialised without indentation.  Every value reads back bit for bit.

Repack is not a compaction of the live writer (the chapter has none): the
source must be closed (a live writer's lock is refused), it is read, never
modified, and the output is a new record.  ``OUT`` ending in ``.zip`` is
packed (``mrec pack``'s entry order: every ``zarr.json`` first).

Profiles: ``small`` (default) puts up to 1 MiB of raw rows in an inner chunk
(a short run becomes one chunk per column) with zstd level 9, shuffling only
the columns the source shuffled (the reference writer's precision columns),
so a record without them stays readable by oracles without
``numcodecs.shuffle`` (tensorstore); ``archive`` puts up to 4 MiB in a chunk
(at least 32 frames when the run has them) with shuffle + zstd level 19 on
every multi-byte column, the densest setting of the codec-only study in
docs/performance.md that keeps random access.

The trade, and its knob: a random frame decodes the whole inner chunk holding it, in each column it
reads, so its cost grows with the frames a chunk holds while the bytes shrink.  ``frames_per_chunk=N``
(``--frames-per-chunk N``) cuts chunks of the raw bytes of N frames of the widest per-frame array
instead of the profile's target (narrower arrays hold as many rows as fit those bytes), keeping the
profile's codecs.  adk (3341 atoms, 98 frames, exact): ``archive`` holds every frame in one chunk,
a random frame from a chunk not decoded yet costs ~25 x XTC's; N = 2 brings it to ~1.2 x for ~12 %
more bytes (docs/performance.md, issue 29).
"""
from __future__ import annotations

import json
import os
import pathlib
import posixpath
from dataclasses import dataclass, replace

import numpy as np

from ..errors import RefusalError
from ..fs import DEFAULT_FS
from ..fs.posix import TEMP_MARK
from ..zarr.array import Array, meta_key, read_node
from ..zarr.codecs.shuffle import ShuffleCodec
from ..zarr.codecs.zstd_ import ZstdCodec
from ..zarr.metadata import ArrayMetadata
from ..zarr.stores.directory import DirectoryStore

KiB, MiB = 1024, 1024 * 1024
MAX_CHUNK_BYTES = 16 * MiB      # a profile's frame floor never makes an inner chunk larger than this
SHARD_TARGET = 256 * MiB
MAX_CHUNKS_PER_SHARD = 4096


@dataclass(frozen=True)
class RepackProfile:
    """How a closed record's trajectory arrays are cut and encoded."""

    name: str
    chunk_bytes: int        # raw bytes of rows an inner chunk aims at (it never splits a frame)
    min_frames: int         # at least this many frames a chunk, when the run has them
    zstd_level: int
    shuffle_all: bool       # numcodecs.shuffle before zstd on every multi-byte column (False: where the
                            # source had it, i.e. the precision columns of the reference writer)


PROFILES = {
    "small": RepackProfile("small", 1 * MiB, 16, 9, False),
    "archive": RepackProfile("archive", 4 * MiB, 32, 19, True),
}


def _has_shuffle(pipeline) -> bool:
    for c in (*pipeline.array_array, pipeline.array_bytes, *pipeline.bytes_bytes):
        if isinstance(c, ShuffleCodec):
            return True
        inner = getattr(c, "codecs", None)
        if inner is not None and _has_shuffle(inner):
            return True
    return False


def _compact_json(raw: bytes) -> bytes:
    return json.dumps(json.loads(raw), separators=(",", ":"), allow_nan=False,
                      ensure_ascii=False).encode("utf-8")


def _minimal_json(raw: bytes) -> bytes:
    """``raw`` compact, without the members Zarr V3 makes optional when they hold their default: an
    empty ``attributes``, the ``default`` chunk key encoding's ``{"separator": "/"}``; and without a
    sequence schema column's ``"trailing": []`` (absent means ``[]``, mrec-notes §3.6)."""
    doc = json.loads(raw)
    if doc.get("attributes") == {}:
        del doc["attributes"]
    for block in (doc.get("attributes") or {}).get("sequence_schema", {}).get("blocks", {}).values():
        for col in block.get("columns", {}).values():
            if col.get("trailing") == []:
                del col["trailing"]
    if doc.get("chunk_key_encoding") == {"name": "default", "configuration": {"separator": "/"}}:
        doc["chunk_key_encoding"] = {"name": "default"}
    return json.dumps(doc, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode("utf-8")


def compact_documents(path, *, fsync: bool = True, minimal: bool = False) -> int:
    """Rewrite every ``zarr.json`` of the closed record directory ``path`` without indentation (the
    same documents; each an atomic replace; ``minimal``: also without the optional members that
    hold their defaults); the bytes saved.  A small record's documents are most of its bytes: the MD
    surfaces call this on the record they built before moving or packing it."""
    store = DirectoryStore(os.fspath(path))
    saved = 0
    for key in store.list():
        if key.rsplit("/", 1)[-1] != "zarr.json":
            continue
        raw = store.get(key)
        small = (_minimal_json if minimal else _compact_json)(raw)
        if len(small) < len(raw):
            store.set(key, small, fsync=fsync)
            saved += len(raw) - len(small)
    return saved


def inner_rows(n: int, row_bytes: int, frame_rows: int | None, profile: RepackProfile) -> int:
    """Rows of one inner chunk: a whole number of frames, within the profile's byte target, at most n
    (rounded up to a frame), never 0."""
    rb = max(1, row_bytes)
    f = frame_rows if frame_rows else 1
    frames_fit = max(1, profile.chunk_bytes // (rb * f))
    frames = frames_fit
    if frame_rows and frames_fit < profile.min_frames:
        frames = max(frames_fit, min(profile.min_frames, MAX_CHUNK_BYTES // (rb * f)))
    rows = frames * f
    if n > 0:
        rows = min(rows, -(-n // f) * f)
    return max(1, rows)


def array_meta(src: ArrayMetadata, n: int, rows: int, profile: RepackProfile) -> ArrayMetadata:
    """``src``'s data type, fill value, attributes and trailing axes; ``n`` rows; the profile's codecs;
    one shard index sized to the chunks that exist (split only past 256 MiB or 4096 chunks)."""
    from ..record.extents import inner_pipeline, sharded   # the index codecs: bytes little + crc32c
    dt = src.data_type
    trailing = tuple(src.shape[1:])
    chunk_trailing = tuple(max(1, t) for t in trailing)
    itemsize = dt.numpy.itemsize if dt.name != "string" else 0
    bb: list = []
    if itemsize > 1 and (profile.shuffle_all or _has_shuffle(src.codecs)):
        bb.append(ShuffleCodec(itemsize))
    bb.append(ZstdCodec(profile.zstd_level, False))
    inner = inner_pipeline("string" if dt.name == "string" else "f64", bb)
    chunk_bytes = rows * max(1, itemsize or 16) * int(np.prod(chunk_trailing, dtype=np.int64))
    nchunks = max(1, -(-n // rows))
    cps = max(1, min(nchunks, MAX_CHUNKS_PER_SHARD, SHARD_TARGET // max(1, chunk_bytes)))
    codecs = sharded((rows, *chunk_trailing), inner, "start")
    return ArrayMetadata.create((n, *trailing), dt, (rows * cps, *chunk_trailing), codecs,
                                fill_value=src.fill_value, attributes=src.attributes,
                                dimension_names=src.dimension_names)


def with_frames_per_chunk(prof: RepackProfile, frames: int | None, frame_bytes: int) -> RepackProfile:
    """``prof`` cutting chunks of the raw bytes of ``frames`` frames of ``frame_bytes`` each (the widest
    per-frame array's; at most ``MAX_CHUNK_BYTES``, never less than one frame), its codecs kept:
    a random frame then decodes at most that much per column.  ``frames`` None: ``prof`` itself."""
    if frames is None:
        return prof
    fb = max(1, frame_bytes)
    return replace(prof, chunk_bytes=max(fb, min(frames * fb, MAX_CHUNK_BYTES)), min_frames=1)


def _check_frames_per_chunk(frames) -> None:
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 1):
        raise RefusalError(f"frames_per_chunk {frames!r} is not a positive integer", kind="bad_argument")


def _row_bytes(arr: Array) -> int:
    """Raw bytes of one row of ``arr`` (a string counts 16)."""
    dt = arr.meta.data_type
    return (16 if dt.name == "string" else dt.numpy.itemsize) * int(np.prod(arr.shape[1:], dtype=np.int64))


def _frame_rows(layout, path: str) -> int | None:
    """Rows of one frame for a block column or mask (regular blocks: exact; ragged: the declared one)."""
    parts = path.split("/")
    if len(parts) < 3 or parts[1] not in layout.blocks:
        return None
    if parts[2] in ("offset", "step_index"):
        return None
    b = layout.blocks[parts[1]]
    if b.regular:
        return b.uniform_rows
    return b.decl.frame_rows or None


def _check_closed(store, root: str) -> None:
    from ..record.integrity.lock import LOCK_NAME, parse_lock_pid, pid_alive
    raw = store.get(LOCK_NAME)
    if raw is None:
        return
    pid = parse_lock_pid(raw)
    if pid is None or pid_alive(pid):
        raise RefusalError("record is open by a live writer; repack rewrites closed records only (close the "
                           "writer first: there is no compaction of a live store)", path=store.describe(LOCK_NAME),
                           kind="live_writer")


def repack(src, out, *, profile: str = "small", overwrite: bool = False, storage_options=None,
           frames_per_chunk: int | None = None) -> pathlib.Path:
    """Rewrite the closed record ``src`` (directory, ``*.mrec.zip`` or URL) into ``out``.

    ``out`` is a new ``*.mrec`` directory, or a ``*.mrec.zip`` archive when it ends in ``.zip``.
    The source is only read.  ``frames_per_chunk``: chunks of that many frames of the widest
    per-frame array instead of the profile's size (see the module's docstring: the random-access
    knob).  Refuses (kind) ``bad_profile``, ``bad_argument`` (``frames_per_chunk``), ``exists``,
    ``live_writer``, ``bad_target``, and a URL target (``remote_read_only``).
    """
    from ..fs.urls import is_url, refuse_remote_write
    from .pack import NewRecord
    from ..record.trajectory.layout import TRAJ, load_layout, logical_lengths
    from ..record.trajectory.store import open_store
    prof = PROFILES.get(profile)
    if prof is None:
        raise RefusalError(f"profile {profile!r} is not one of {', '.join(PROFILES)}", kind="bad_profile")
    _check_frames_per_chunk(frames_per_chunk)
    out = os.fspath(out)
    if is_url(out):
        raise refuse_remote_write(out, "repack into")
    fs = DEFAULT_FS
    target = NewRecord(out, overwrite=overwrite, fs=fs, what="repack target")   # a link: refused
    src_s = os.fspath(src)
    if not is_url(src_s) and os.path.abspath(src_s) == os.path.abspath(out):
        raise RefusalError("repack writes a new record; the target is the source", path=out, kind="bad_target")
    if not is_url(src_s) and not src_s.endswith(".zip"):    # an overwrite a crash interrupted (record.replace)
        from ..record.integrity.replace import recover
        recover(fs, os.path.abspath(src_s), builds=False)
    store = open_store(src, storage_options=storage_options)
    try:
        _check_closed(store, src_s)
        root = read_node(store, "")
        if root is None or isinstance(root, ArrayMetadata):
            raise RefusalError("no group zarr.json at the top: not a record", path=store.describe(""),
                               kind="not_a_record")
        logical: dict[str, int] = {}
        layout = None
        if read_node(store, TRAJ) is not None:
            layout = load_layout(store)
            logical = logical_lengths(layout)

        try:
            tmp_dir = target.start()                  # a killed repack's leftovers are removed here
            fs.makedirs(tmp_dir)
            _copy(store, DirectoryStore(tmp_dir, fs=fs), logical, layout, prof, frames_per_chunk)
            _fsync_dirs(fs, tmp_dir)
        except BaseException:
            target.abort()
            raise
        return target.finish()
    finally:
        store.close()


def _fsync_dirs(fs, root: str) -> None:
    """Every directory of the new tree, deepest first (its files were written fsynced)."""
    for name in fs.list_dir(root):
        child = os.path.join(root, name)
        if fs.is_dir(child):
            _fsync_dirs(fs, child)
    fs.fsync_dir(root)


def _copy(store, dst: DirectoryStore, logical: dict[str, int], layout, prof: RepackProfile,
          frames_per_chunk: int | None = None) -> None:
    from ..record.integrity.lock import LOCK_NAME
    keys = store.list("")
    rewritten: list[str] = []
    for key in keys:
        if posixpath.basename(key) != "zarr.json":
            continue
        p = posixpath.dirname(key)
        if p in logical:
            node = read_node(store, p)
            if isinstance(node, ArrayMetadata) and node.ndim >= 1:
                rewritten.append(p)
    prefixes = tuple(p + "/" for p in rewritten)
    for key in keys:
        if key == LOCK_NAME or key.startswith(prefixes) or any(p.startswith(TEMP_MARK) for p in key.split("/")):
            continue
        raw = store.get(key)
        if raw is None:
            continue
        if posixpath.basename(key) == "zarr.json":
            raw = _compact_json(raw)
        dst.set(key, raw, fsync=True)
    arrays = {p: Array.open(store, p, appended=True) for p in rewritten}
    frame_rows = {p: _frame_rows(layout, p) if layout is not None else None for p in rewritten}
    if frames_per_chunk is not None:
        widest = max((_row_bytes(a) * (frame_rows[p] or 1) for p, a in arrays.items()), default=1)
        prof = with_frames_per_chunk(prof, frames_per_chunk, widest)
    for p, src_arr in arrays.items():
        n = min(src_arr.shape[0], logical[p])
        rows = inner_rows(n, _row_bytes(src_arr), frame_rows[p], prof)
        meta = array_meta(src_arr.meta, n, rows, prof)
        arr = Array(dst, p, meta)
        dst.set(meta_key(p), _compact_json(arr.metadata_json()), fsync=True)
        _write_shards(src_arr, arr, n)


def _write_shards(src: Array, dst: Array, n: int) -> None:
    """Shard after shard (memory bounded by one shard): read its rows, encode it whole, store it."""
    m = dst.meta
    step = m.chunk_shape[0]
    for s, lo in enumerate(range(0, n, step)):
        hi = min(n, lo + step)
        shard = np.full(m.chunk_shape, m.fill_value, dtype=object if m.data_type.name == "string" else m.data_type.numpy)
        shard[(slice(0, hi - lo), *(slice(0, t) for t in m.shape[1:]))] = src.read(slice(lo, hi))   # a 0-wide axis
        key = dst.chunk_key((s,) + (0,) * (m.ndim - 1))
        dst.store.set(key, m.codecs.encode(shard, dst.chunk_spec(key)), fsync=True)


__all__ = ["repack", "PROFILES", "RepackProfile", "inner_rows", "array_meta", "with_frames_per_chunk"]


def _run(args) -> int:
    out = repack(args.path, args.out, profile=args.profile, overwrite=args.overwrite,
                 frames_per_chunk=args.frames_per_chunk)
    before = _size_of(args.path)
    after = _size_of(os.fspath(out))
    how = args.profile + (f", {args.frames_per_chunk} frames a chunk" if args.frames_per_chunk else "")
    print(f"{out}  ({before} -> {after} bytes, profile {how})" if before is not None else f"{out}")
    return 0


def _size_of(path: str) -> int | None:
    from ..fs.urls import is_url
    if is_url(path):
        return None
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else None


def add_repack_command(subparsers):
    """Register ``repack IN OUT [--profile small|archive] [--frames-per-chunk N] [--overwrite]`` (for
    ``mrec.cli``)."""
    p = subparsers.add_parser("repack", help="rewrite a closed record with extents sized to what it holds "
                              "(small shard indexes, several frames a chunk, zstd; the same values bit for bit)",
                              description="Rewrite a closed record (a *.mrec directory, a *.mrec.zip or a URL, "
                              "only read) into a new one whose trajectory arrays are cut to what they hold: "
                              "several frames an inner chunk (a random frame is still one chunk decode per "
                              "column), one shard index sized to the chunks, shuffle + zstd. Every value reads "
                              "back bit for bit; everything else is copied. OUT ending in .zip is packed.")
    p.add_argument("path", help="a closed *.mrec directory, *.mrec.zip or URL (only read)")
    p.add_argument("out", help="the new record: a *.mrec directory, or a *.mrec.zip (packed)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="small",
                   help="small (default): up to 1 MiB a chunk, zstd 9; archive: up to 4 MiB, >= 32 frames, zstd 19")
    p.add_argument("--frames-per-chunk", type=int, default=None, metavar="N",
                   help="chunks of N frames (of the widest per-frame array; narrower arrays the same bytes; at "
                   "most 16 MiB) instead of the profile's size, its codecs kept: the trade between bytes and "
                   "random access. A random frame decodes its whole chunk in each column, so many frames a chunk "
                   "are the fewest bytes and a few the fastest random frame. adk (3341 atoms x 98 frames, one "
                   "chunk a column in archive), a frame from a chunk not decoded yet: archive ~25x XTC's random "
                   "frame; --frames-per-chunk 4 ~2x for +7%% bytes (+12%% at 1e-3 nm), 2 ~1.2x for +12%% "
                   "(+21%%), 1 ~0.8x for +15%% (+29%%)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.set_defaults(func=_run)
    return p
