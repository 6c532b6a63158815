"""Layer 4: pack a closed record ``<stem>.mrec/`` into ``<stem>.mrec.zip`` and back.

The packing rules are those of chunking-and-packing.md ("At-rest form:
*.mrec.zip"): one stored entry per file, named relative to the record root,
``/`` separators, no ``..``, no directory entries, ZIP64 whenever needed.
mrec adds (see docs/packing.md):

* entry order: every ``zarr.json`` first (root first, then breadth-first by
  depth, sorted within a depth), then every other file sorted, so a reader
  streaming the head of the archive meets all metadata before any chunk;
* streaming copies in bounded pieces through :mod:`mrec.fs`;
* crash safety: the archive is written under a temporary name in its final
  directory, checked, fsynced, renamed into place, the directory fsynced,
  and only then is the source tree removed;
* one holder: pack takes the record's writer lock (mrec.record.integrity.lock) for its
  whole run, so a live writer, ``mrec repair`` or a second pack is refused
  (``live_writer``) and none can start meanwhile; the source is renamed aside
  before it is removed;
* refusals that modify nothing: not a record, a live writer, stray temp
  files, an existing target;
* unpack streams each entry into a temporary directory (CRC-32 checked)
  and renames the finished tree into place.
"""
from __future__ import annotations

import json
import os
import pathlib
import posixpath
import re
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Callable

from ..errors import CorruptionError, RefusalError, StoreError, ZipFormatError, path_refusal
from ..fs import DEFAULT_FS, FileSystem, refuse_link, remove_tree
from ..fs.urls import is_url, refuses_urls
from ..fs.posix import TEMP_MARK
from ..zarr.stores.zip_format import parent_keys
from ..zarr.stores.zip_read import ZipStore
from ..zarr.stores.zip_write import ZipWriter

#: Written by a live trajectory writer into the record root; holds its pid.
from ..record.integrity.lock import LOCK_NAME, announce, lock_store, parse_lock_pid, pid_alive  # noqa: F401  (re-exported)
from ..record.integrity.lock import _locker
from ..record.integrity.replace import Build, OwnedTemp, recover, sweep_siblings

RECORD_SUFFIX = ".mrec"
ARCHIVE_SUFFIX = ".zip"
ROOT_METADATA = "zarr.json"

Progress = Callable[[int, int], None]


# -- pure helpers ------------------------------------------------------------

def entry_order(keys: list[str]) -> list[str]:
    """Archive order: ``zarr.json`` files (root first, breadth-first, sorted), then the rest sorted."""
    metadata = [k for k in keys if posixpath.basename(k) == ROOT_METADATA]
    others = [k for k in keys if posixpath.basename(k) != ROOT_METADATA]
    metadata.sort(key=lambda k: (k.count("/"), k))
    return metadata + sorted(others)


def temp_sibling(path: str) -> str:
    """``<dir>/.<name>.mrec-tmp-XXXXXXXX``: a temporary name beside ``path``."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}{TEMP_MARK}{secrets.token_hex(4)}")


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


# -- file-system walks -----------------------------------------------------------

def walk_files(fs: FileSystem, root: str) -> list[str]:
    """Every file under ``root`` as a ``/``-separated key, sorted."""
    out: list[str] = []

    def walk(directory: str, prefix: str) -> None:
        for name in fs.list_dir(directory):
            child = os.path.join(directory, name)
            if fs.is_link(child):
                raise RefusalError("a record holds files, not symbolic links: the archive would not be the "
                                   "record (replace the link by the file)", path=child, kind="bad_layout")
            if fs.is_dir(child):
                walk(child, f"{prefix}{name}/")
            else:
                out.append(f"{prefix}{name}")

    walk(root, "")
    return sorted(out)


def _discard(temp: OwnedTemp) -> None:
    """Best-effort removal of this run's temporary file or tree after a failure."""
    try:
        temp.discard()
    except OSError:
        pass


class _Meter:
    """Counts bytes for a ``progress(done, total)`` callback."""

    def __init__(self, total: int, progress: Progress | None):
        self.total = total
        self.done = 0
        self.progress = progress
        self._report()

    def add(self, n: int) -> None:
        self.done += n
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total)


# -- pack -----------------------------------------------------------------------------

@dataclass(frozen=True)
class PackPlan:
    """What :func:`pack` will do, decided before anything is written."""

    root: str
    target: str
    entries: list[tuple[str, int]]            # (key, size) in archive order
    skipped: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.entries)


def _refuse(kind: str, path: str, message: str) -> RefusalError:
    return RefusalError(message, path=path, kind=kind)


def _check_target_dir(fs: FileSystem, target: str) -> None:
    """The directory a pack or unpack target goes in must exist (and be a directory)."""
    parent = _parent(target)
    if not fs.is_dir(parent):
        what = "is not a directory" if fs.exists(parent) else "does not exist (or a component is a regular file)"
        raise _refuse("bad_target", target, f"the target's directory {parent} {what}")


def _check_record_dir(fs: FileSystem, root: str) -> None:
    if not root.endswith(RECORD_SUFFIX):
        raise _refuse("not_a_record", root, f"not a record directory (name must end in {RECORD_SUFFIX!r})")
    if not fs.is_dir(root):
        raise _refuse("not_a_record", root, "not a record directory (no such directory)")
    meta = os.path.join(root, ROOT_METADATA)
    if not fs.exists(meta) or fs.is_dir(meta):
        raise _refuse("not_a_record", root, f"not a record directory (no root {ROOT_METADATA})")


class _ReadOnly:
    """No lock on a record pack cannot write to: only its lock file's pid is checked (as before)."""

    created = False

    def write(self, data: bytes) -> None:
        pass

    def release(self, *, remove: bool = True) -> None:
        pass


def _lock(fs: FileSystem, root: str, keep: bool = True):
    """The record's writer lock for pack (a live writer, repair or another pack: ``live_writer``),
    the lock file left as found until :func:`announce`.  A read-only record (no lock file can be
    made, so no mrec writer of this user holds it) is packed with ``keep`` by the lock file's pid."""
    try:
        return lock_store(fs, root, "pack", write=False)
    except StoreError:
        if not keep:
            raise
    lock = os.path.join(root, LOCK_NAME)
    try:
        pid = parse_lock_pid(fs.read(lock))
    except (FileNotFoundError, NotADirectoryError):
        pid = None
    if pid is not None and pid_alive(pid):
        raise _refuse("live_writer", lock, f"record is open by a live writer (pid {pid}); close it before packing")
    return _ReadOnly()


def _plan(fs: FileSystem, root: str, out, overwrite: bool) -> PackPlan:
    """The refusals and the plan, with the writer lock held."""
    _check_record_dir(fs, root)          # again: the record may have changed before the lock was ours
    target = os.fspath(out) if out is not None else root + ARCHIVE_SUFFIX
    refuse_link(fs, target, "pack into")            # never replaced, nor anything it leads to
    if os.path.abspath(target).startswith(os.path.abspath(root) + os.sep):
        raise _refuse("bad_target", target, "archive cannot be written inside the record it packs")
    if fs.is_dir(target):
        raise _refuse("exists", target, "target is a directory")
    if fs.exists(target) and not overwrite:
        raise _refuse("exists", target, "archive already exists (pass overwrite=True to replace it)")
    keys = walk_files(fs, root)
    stray = [k for k in keys if any(part.startswith(TEMP_MARK) for part in k.split("/"))]
    if stray:
        shown = ", ".join(stray[:5]) + (" ..." if len(stray) > 5 else "")
        raise _refuse("stray_temp_files", root, f"{len(stray)} stray temporary file(s) left by an "
                                                f"interrupted write (or one in progress): {shown} (`mrec "
                                                "repair` removes those an atomic replace left and finishes "
                                                "an interrupted overwrite)")
    skipped = [LOCK_NAME] if LOCK_NAME in keys else []       # the lock: pack's own, or a leftover
    keys = [k for k in keys if k not in skipped]
    entries = [(k, fs.size(os.path.join(root, *k.split("/")))) for k in entry_order(keys)]
    return PackPlan(root, target, entries, skipped)


@refuses_urls(path="pack from", out="pack into")
def plan_pack(path: str | os.PathLike, *, fs: FileSystem | None = None, out: str | os.PathLike | None = None,
              overwrite: bool = False) -> PackPlan:
    """Check every refusal of :func:`pack` and return the plan; modifies nothing.

    The record's writer lock is taken while checking (and let go), so a live writer is
    refused whatever its lock file says.
    """
    fs = fs if fs is not None else DEFAULT_FS
    root = os.fspath(path).rstrip("/") or os.fspath(path)
    _check_record_dir(fs, root)
    held = _lock(fs, root)
    try:
        return _plan(fs, root, out, overwrite)
    finally:
        held.release(remove=held.created)


def _write_archive(fs: FileSystem, plan: PackPlan, writer: ZipWriter, meter: _Meter) -> None:
    try:
        for key, _size in plan.entries:
            writer.add_file_streaming(key, os.path.join(plan.root, *key.split("/")), fs, on_bytes=meter.add)
        writer.close()
    except BaseException:
        writer.abort()
        raise


def _verify_archive(fs: FileSystem, plan: PackPlan, tmp: str) -> None:
    """Re-open the written archive and compare its entries with the plan."""
    store = ZipStore(tmp, fs=fs)
    got = [(e.name, e.size) for e in store.entries]
    if got != plan.entries:
        raise CorruptionError("written archive does not match the record (was it modified while packing?)",
                              path=plan.root)


@refuses_urls(path="pack from")
def pack(path: str | os.PathLike, *, keep: bool = False, fs: FileSystem | None = None,
         out: str | os.PathLike | None = None, overwrite: bool = False,
         progress: Progress | None = None, zip64_threshold: int = 0xFFFFFFFF,
         storage_options: dict | None = None) -> pathlib.Path | str:
    """Pack the closed record ``<stem>.mrec/`` into ``<stem>.mrec.zip`` (or ``out``).

    Refuses with :class:`RefusalError` (kinds ``not_a_record``,
    ``live_writer``, ``stray_temp_files``, ``exists``, ``bad_target``)
    before anything is modified.  ``out`` may be a URL (``s3://bucket/run.mrec.zip``, with
    ``storage_options``): the archive is then streamed up with no temporary file (mrec.archive.upload)
    and the URL returned.  A lock left by a dead writer is not
    packed.  The source tree is removed after the archive is durable unless
    ``keep``.  ``progress(done_bytes, total_bytes)`` is called as bytes are
    copied.
    """
    fs = fs if fs is not None else DEFAULT_FS
    root = os.fspath(path).rstrip("/") or os.fspath(path)
    if not keep:                         # the source tree is removed afterwards: never through a link
        refuse_link(fs, root, "pack and then remove")
    if root.endswith(RECORD_SUFFIX):     # an overwrite a crash interrupted, of the record or a group in it
        recover(fs, os.path.abspath(root))
    _check_record_dir(fs, root)
    sweep_siblings(fs, root, directory=True)   # sources killed packs left renamed aside (_remove_source)
    held = _lock(fs, root, keep)         # held until the source is gone: one pack, no writer meanwhile
    if is_url(out):                      # stream the archive up (mrec.archive.upload); returns the URL
        from ..fs.urls import resolve_options
        from .upload import pack_to_url
        try:
            plan = _plan(fs, root, None, True)        # the local checks; the target is the URL
            announce(held, "pack")
            return pack_to_url(plan, out, keep=keep, meter=_Meter(plan.total_bytes, progress), fs=fs,
                               storage_options=resolve_options(out, storage_options),
                               zip64_threshold=zip64_threshold)
        finally:
            held.release()
    try:
        plan = _plan(fs, root, out, overwrite)
        _check_target_dir(fs, plan.target)
    except BaseException:
        held.release(remove=held.created)
        raise
    try:
        announce(held, "pack")
        meter = _Meter(plan.total_bytes, progress)
        temp = OwnedTemp(fs, plan.target, directory=False)     # a killed pack's is removed by the next
        try:
            writer = temp.start(lambda tmp: ZipWriter(tmp, fs, zip64_threshold))
            _write_archive(fs, plan, writer, meter)
            _verify_archive(fs, plan, temp.path)
            fs.fsync(temp.path)
            fs.rename(temp.path, plan.target)
            temp.release()
        except BaseException as exc:
            _discard(temp)
            refusal = path_refusal(exc, plan.target)
            if refusal is exc:
                raise
            raise refusal from None
        fs.fsync_dir(_parent(plan.target))
        if not keep:
            _remove_source(fs, plan.root)
    finally:
        held.release()
    return pathlib.Path(plan.target)


def _remove_source(fs: FileSystem, root: str) -> None:
    """Remove the packed source: locked (so no later run takes it for a killed pack's), renamed aside
    (``.<name>.mrec-tmp-<8 hex>/``: killed here, the next pack or unpack of that name removes it, the
    archive being durable) so nothing reaches it by its name, then removed."""
    try:
        owned = _locker(fs)(root, directory=True, blocking=True)
    except OSError:                      # no locks here: removed all the same, unmarked
        owned = None
    try:
        aside = temp_sibling(root)
        fs.rename(root, aside)
        fs.fsync_dir(_parent(root))
        remove_tree(fs, aside)
        fs.fsync_dir(_parent(root))
    finally:
        if owned is not None:
            owned.release()


# -- a new record written aside, then moved or packed into place ---------------------------------

class NewRecord:
    """A new record for ``out`` -- a ``*.mrec`` directory, or a ``*.zip`` archive -- written at the
    absent :attr:`path` that :meth:`start` returns (the caller makes it: a copy, ``write_record``,
    ``TrajectoryWriter.create``) inside a locked temporary sibling of ``out``
    (:class:`~mrec.record.integrity.replace.OwnedTemp`, ``.<name>.mrec-tmp-<8 hex>/``), then moved in by the
    recoverable overwrite protocol (:class:`~mrec.record.integrity.replace.Build`) or packed into ``out`` by
    :meth:`finish`.  Nothing but ``out`` is replaced, never through a link (refused, kind
    ``bad_target``), an existing one only with ``overwrite`` and once the new record is complete;
    what a killed run left is removed by the next one into ``out``, and nothing else."""

    @refuses_urls(out="write a record to")
    def __init__(self, out, *, overwrite: bool, fs: FileSystem | None = None, what: str = "the target"):
        self.fs = fs if fs is not None else DEFAULT_FS
        self.out, self.overwrite, self.what = os.fspath(out), overwrite, what
        refuse_link(self.fs, self.out, "overwrite" if overwrite else "write a record at")
        if self.fs.exists(self.out) and not overwrite:
            raise self._taken()
        self.temp = OwnedTemp(self.fs, self.out, directory=True)
        self.path = ""

    def _taken(self) -> RefusalError:
        return _refuse("exists", self.out, f"{self.what} already exists (pass overwrite=True to replace it)")

    def start(self) -> str:
        self.temp.start()
        name = os.path.basename(self.out)
        if name.endswith(ARCHIVE_SUFFIX):               # pack wants a <stem>.mrec
            name = name[: -len(ARCHIVE_SUFFIX)]
            name += "" if name.endswith(RECORD_SUFFIX) else RECORD_SUFFIX
        self.path = os.path.join(self.temp.path, name)
        return self.path

    def finish(self) -> pathlib.Path:
        """Move or pack the complete record into ``out``; the temporary sibling is removed."""
        try:
            if self.out.endswith(ARCHIVE_SUFFIX):
                return pathlib.Path(pack(self.path, out=self.out, overwrite=self.overwrite, keep=True,
                                         fs=self.fs))
            Build(self.fs, os.path.abspath(self.out), self.path).commit(overwrite=self.overwrite,
                                                                       refuse_exists=self._taken)
            return pathlib.Path(self.out)
        finally:
            self.temp.discard()

    def abort(self) -> None:
        """Remove what was written (a failure before :meth:`finish`)."""
        self.temp.discard()


# -- unpack -------------------------------------------------------------------------------

def _unpack_target(zip_path: str, out: str | os.PathLike | None) -> str:
    if out is not None:
        return os.fspath(out).rstrip("/") or os.fspath(out)
    if not zip_path.endswith(RECORD_SUFFIX + ARCHIVE_SUFFIX):
        raise _refuse("not_a_record", zip_path, f"not a packed record (name must end in "
                                                f"{RECORD_SUFFIX + ARCHIVE_SUFFIX!r}; pass out=)")
    return zip_path[: -len(ARCHIVE_SUFFIX)]


def _open_for_unpack(fs: FileSystem, zip_path: str) -> ZipStore:
    store = ZipStore(zip_path, fs=fs)
    if store.compressed_entries:
        names = ", ".join(repr(n) for n in store.compressed_entries[:5])
        raise ZipFormatError(f"entry {names}: compressed or encrypted entries; a packed record stores "
                             "every entry (method 0)", path=zip_path)
    if store.entry(ROOT_METADATA) is None:
        raise _refuse("not_a_record", zip_path, f"archive has no root {ROOT_METADATA}")
    return store


def _extract_entry(fs: FileSystem, store: ZipStore, key: str, dest: str, meter: _Meter) -> None:
    """Stream one entry to ``dest`` in bounded pieces, checking its CRC-32, then fsync it."""
    fs.write_at(dest, 0, b"")
    crc = 0
    offset = 0
    for piece in store.iter_pieces(key):
        fs.write_at(dest, offset, piece)
        crc = zlib.crc32(piece, crc)
        offset += len(piece)
        meter.add(len(piece))
    entry = store.entry(key)
    if entry is None or crc != entry.crc32:
        raise CorruptionError(f"entry {key!r}: CRC-32 mismatch", path=store.root)
    fs.fsync(dest)


def _leftover_entry(key: str) -> bool:
    """A writer lock or a temporary file: protocol state, never record content (unpack skips it)."""
    base = posixpath.basename(key)
    return base == LOCK_NAME or base.startswith(TEMP_MARK)


def _dirs_deepest_first(keys: list[str]) -> list[str]:
    dirs = {""}
    for key in keys:
        dirs.update(parent_keys(key))
    return sorted(dirs, key=lambda d: (-(d.count("/") + 1 if d else 0), d))


@refuses_urls(out="unpack into", zip_path="unpack in place at")
def unpack(zip_path: str | os.PathLike, *, out: str | os.PathLike | None = None, keep: bool = True,
           fs: FileSystem | None = None, progress: Progress | None = None) -> pathlib.Path:
    """Rebuild ``<stem>.mrec/`` from ``<stem>.mrec.zip`` (or into ``out``).

    Refuses whatever :class:`~mrec.zarr.stores.zip_read.ZipStore` refuses, plus
    compressed entries, an archive without a root ``zarr.json`` and an
    existing target.  A writer lock (``.mrec-writer.lock``) or temporary
    (``.mrec-tmp-*``) entry — what another tool's archive of a live or crashed
    store may carry — is skipped: protocol state, not record content, and a
    store holding it would be refused by pack.  Entries stream into a temporary sibling directory
    which is renamed into place only when complete, so a crash never leaves
    a half-unpacked directory under the final name.  ``keep=False`` removes
    the archive afterwards.
    """
    fs = fs if fs is not None else DEFAULT_FS
    archive = os.fspath(zip_path)
    target = _unpack_target(archive, out)
    refuse_link(fs, target, "unpack into")
    if not keep:
        refuse_link(fs, archive, "unpack and then remove")
    if fs.exists(target):
        raise _refuse("exists", target, "unpack target already exists")
    _check_target_dir(fs, target)
    store = _open_for_unpack(fs, archive)
    keys = [k for k in store.list() if not _leftover_entry(k)]
    meter = _Meter(sum(store.size(k) or 0 for k in keys), progress)
    temp = OwnedTemp(fs, target, directory=True)       # a killed unpack's is removed by the next
    try:
        temp.start()
        tmp = temp.path
        for key in keys:
            dest = os.path.join(tmp, *key.split("/"))
            fs.makedirs(os.path.dirname(dest))
            _extract_entry(fs, store, key, dest, meter)
        for d in _dirs_deepest_first(keys):
            fs.fsync_dir(os.path.join(tmp, *d.split("/")) if d else tmp)
        fs.rename(tmp, target)
        temp.release()
    except BaseException as exc:
        _discard(temp)
        refusal = path_refusal(exc, target)
        if refusal is exc:
            raise
        raise refusal from None
    fs.fsync_dir(_parent(target))
    if not keep:
        fs.remove(archive)
        fs.fsync_dir(_parent(archive))
    return pathlib.Path(target)


__all__ = [
    "pack",
    "unpack",
    "plan_pack",
    "PackPlan",
    "entry_order",
    "parse_lock_pid",
    "pid_alive",
    "walk_files",
    "remove_tree",
    "LOCK_NAME",
]
