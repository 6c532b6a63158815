"""Whole records: the root, its documents and sections (mrec-notes §1.1, §1.2, §3.1, §6).

A record is one Zarr root holding ``meta`` (always), and any of ``status``,
``method`` (documents), ``frame``, ``system`` (frame-shaped), ``observables``,
``metrics`` and ``trajectory``.  :func:`write_record` writes everything but
the trajectory (a trajectory is streamed by
:class:`~mrec.record.trajectory_write.TrajectoryWriter`, into a record made
here or into a new one); :func:`read_record` reads a ``*.mrec`` directory or a
``*.mrec.zip`` archive (by range reads, no extraction).

What mrec decides where the spec is silent (docs/user-guide.md):

* :func:`write_record` builds the record under a temporary sibling name,
  fsyncs it, and renames it into place: a crash never leaves a half record
  under the final name.  An existing path is refused unless
  ``overwrite=True`` (then the old tree is replaced, atomically for readers
  that open by name).
* Everything mrec does not model -- unknown root sections (``forcefield``
  included), unknown nodes inside known sections, the metrics WAL -- is kept
  as raw bytes per key and written back verbatim by :meth:`Record.write`;
  the trajectory is copied key by key, verbatim, too.
* The system/trajectory 1:1 rule (mrec-notes §3.1) is checked on read
  (row counts) and enforced by the trajectory writer on append (row counts
  and equal ``id`` columns).
"""
from __future__ import annotations

import os
import posixpath
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import RefusalError
from ..fs import DEFAULT_FS, remove_tree
from ..fs.posix import TEMP_MARK
from ..zarr.array import meta_key, read_node, write_group
from ..zarr.metadata import GroupMetadata
from ..zarr.store import DirectoryStore
from .documents import check_meta, check_method, check_status
from .frame_group import read_frame_group, write_frame_group
from .lock import LOCK_NAME
from .metrics import Metrics
from .model import Frame
from .observables import Observable, check_observables, read_observables, write_observables
from .trajectory_read import TRAJ, TrajectoryReader, open_store

__all__ = ["Record", "write_record", "read_record", "read_frame", "sections", "check_system_alignment",
           "KNOWN_SECTIONS", "SUBSTANTIVE_SECTIONS", "PIECE"]

#: Root sections mrec models, in the order they are written (``meta`` first).
KNOWN_SECTIONS = ("meta", "status", "method", "system", "frame", "observables", "metrics", "trajectory")
#: A record holds ``meta`` plus at least one of these.
SUBSTANTIVE_SECTIONS = ("frame", "system", "trajectory", "forcefield", "status")
PIECE = 4 * 1024 * 1024


def _refuse(kind: str, message: str, path: str | None = None) -> RefusalError:
    return RefusalError(message, path=path, kind=kind)


@dataclass(eq=False)
class Record:
    """A record in memory (the trajectory stays on disk behind a reader).

    ``meta`` / ``status`` / ``method`` are the documents (dicts, ``None`` when
    absent; ``meta`` is ``{}`` when the record has none), ``frame`` /
    ``system`` :class:`~mrec.record.model.Frame`, ``observables`` a dict of
    :class:`~mrec.record.observables.Observable`, ``metrics`` a
    :class:`~mrec.record.metrics.Metrics`, ``trajectory`` a
    :class:`~mrec.record.trajectory_read.TrajectoryReader` or None.
    ``root_attrs`` are the root group's attributes; ``unknown`` maps every
    store key mrec does not model to its bytes.
    """

    meta: dict = field(default_factory=dict)
    status: dict | None = None
    method: dict | None = None
    frame: Frame | None = None
    system: Frame | None = None
    observables: dict[str, Observable] | None = None
    metrics: Metrics | None = None
    trajectory: TrajectoryReader | None = None
    root_attrs: dict = field(default_factory=dict)
    unknown: dict[str, bytes] = field(default_factory=dict)
    observables_attrs: dict = field(default_factory=dict)
    path: str | None = None
    store: Any = None

    def sections(self) -> list[str]:
        """Names of the root sections present, known ones in write order, then unknown ones sorted."""
        present = [s for s in KNOWN_SECTIONS if s == "meta" or getattr(self, s) is not None]
        extra = sorted({k.split("/", 1)[0] for k in self.unknown if "/" in k} - set(present))
        return present + extra

    def write(self, path, *, overwrite: bool = False, compression=None, fs=None) -> Path:
        """Write this record (trajectory and unknown content verbatim) as a new ``*.mrec`` directory."""
        return _write(path, self, overwrite=overwrite, compression=compression, fs=fs)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def __repr__(self) -> str:
        from .describe import record_repr
        return record_repr(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- checks ------------------------------------------------------------------------

def _frame(value: Any, name: str) -> Frame | None:
    if value is None:
        return None
    try:
        return Frame.from_any(value)
    except RefusalError as exc:
        raise _refuse(exc.kind, f"{name}: {exc.detail}") from None
    except TypeError as exc:
        raise _refuse("bad_layout", f"{name}: {exc}") from None


def check_system_alignment(system: Frame | None, trajectory: TrajectoryReader | None,
                           where: str | None = None) -> None:
    """Refuse (``row_count_mismatch``) a trajectory block sharing a name with a system block
    whose updates do not all have exactly the system block's row count (mrec-notes §3.1)."""
    if system is None or trajectory is None:
        return
    for name, bl in trajectory.layout.blocks.items():
        if name not in system.blocks:
            continue
        n = system.counts[name]
        if bl.n_updates == 0:
            continue
        counts = bl.counts()
        bad = [int(c) for c in counts if int(c) != n]
        if bad:
            raise _refuse("row_count_mismatch",
                          f"trajectory block {name!r} shares its name with a system block of {n} rows, so it is "
                          f"aligned 1:1 by row order, but an update has {bad[0]} rows (a ragged block may not "
                          "share a name with a system block)", where)


def _substantive(rec: Record) -> bool:
    if rec.frame is not None or rec.system is not None or rec.status is not None or rec.trajectory is not None:
        return True
    return any(k.startswith(("forcefield/", "trajectory/")) for k in rec.unknown)


# -- write -------------------------------------------------------------------------

def _copy_key(src, dst: DirectoryStore, key: str) -> None:
    size = src.size(key)
    if size is None:
        return
    if size <= PIECE:
        dst.set(key, src.get(key))
        return
    done = 0
    while done < size:
        n = min(PIECE, size - done)
        dst.write_at(key, done, src.get_range(key, done, n))
        done += n


def _fsync_tree(store: DirectoryStore, keys: list[str]) -> None:
    dirs = set()
    for k in keys:
        store.fsync(k)
        dirs.add(posixpath.dirname(k))
    for d in sorted(dirs, key=lambda d: -d.count("/")):
        store.fsync_dir(d)
    store.fsync_dir("")


def _write(path, rec: Record, *, overwrite: bool, compression, fs) -> Path:
    fs = fs or DEFAULT_FS
    final = os.path.abspath(os.fspath(path))
    if fs.exists(final) and not overwrite:
        raise _refuse("exists", "the path exists (pass overwrite=True to replace it)", final)
    check_system_alignment(rec.system, rec.trajectory, final)
    if not _substantive(rec):
        raise _refuse("empty_record", "a record holds meta plus at least one of frame, system, trajectory, "
                                      "forcefield or status", final)
    parent, name = os.path.split(final)
    fs.makedirs(parent)
    tmp = os.path.join(parent, f"{TEMP_MARK}{name}.{secrets.token_hex(4)}")
    store = DirectoryStore(tmp, fs=fs)
    try:
        store.makedirs("")
        write_group(store, "", rec.root_attrs)                 # the root first,
        keys = [meta_key("")]
        write_group(store, "meta", rec.meta)                   # then meta/,
        keys.append(meta_key("meta"))
        for doc in ("status", "method"):
            if getattr(rec, doc) is not None:
                write_group(store, doc, getattr(rec, doc))
                keys.append(meta_key(doc))
        for section in ("system", "frame"):
            if getattr(rec, section) is not None:
                keys += write_frame_group(store, section, getattr(rec, section), compression=compression)
        if rec.observables is not None:
            keys += write_observables(store, rec.observables, compression=compression,
                                      attributes=rec.observables_attrs)
        if rec.metrics is not None:
            keys += rec.metrics.write(store)
        if rec.trajectory is not None:
            src = rec.trajectory.store
            for key in src.list(TRAJ):
                if not posixpath.basename(key).startswith(TEMP_MARK):
                    _copy_key(src, store, key)
                    keys.append(key)
        written = set(keys)
        for key, raw in sorted(rec.unknown.items()):
            if key not in written:
                store.set(key, raw)
                keys.append(key)
        _fsync_tree(store, keys)
        if fs.exists(final):
            old = os.path.join(parent, f"{TEMP_MARK}old-{name}.{secrets.token_hex(4)}")
            fs.rename(final, old)
            fs.rename(tmp, final)
            fs.fsync_dir(parent)
            remove_tree(fs, old) if fs.is_dir(old) else fs.remove(old)
        else:
            fs.rename(tmp, final)
            fs.fsync_dir(parent)
    except BaseException:
        if fs.exists(tmp):
            remove_tree(fs, tmp)
        raise
    return Path(final)


def write_record(path, *, meta: Mapping | None = None, frame: Any = None, system: Any = None,
                 status: Mapping | None = None, method: Mapping | None = None, observables: Mapping | None = None,
                 metrics: Any = None, compression=None, overwrite: bool = False, fs=None) -> Path:
    """Write a new record directory ``path`` (``<stem>.mrec``) and return its path.

    ``meta`` / ``status`` / ``method`` are JSON documents (checked: required
    keys, timestamps, ``molrec_version``); ``frame`` and ``system`` are
    :class:`Frame` (or anything :meth:`Frame.from_any` takes); ``observables``
    maps names to :class:`Observable` (or ``{"data": ..., "kind": ...,
    "description": ..., "time_dependent": ...}``); ``metrics`` is a
    :class:`Metrics`, a list of events or ``{key: values}``.  Every input is
    checked before anything touches the disk; the record appears under
    ``path`` only once complete and fsynced.  ``compression`` is the float
    knob (``None``, ``"gzip[:N]"``, ``"zstd[:N]"``).
    """
    fr, sy = _frame(frame, "frame"), _frame(system, "system")
    sections = {k: v for k, v in (("frame", fr), ("system", sy)) if v is not None}
    for name, f in sections.items():
        try:
            f.check_references(sections)
        except RefusalError as exc:
            raise _refuse(exc.kind, f"{name}: {exc.detail}") from None
    rec = Record(
        meta=check_meta({} if meta is None else meta),
        status=None if status is None else check_status(status),
        method=None if method is None else check_method(method),
        frame=fr, system=sy,
        observables=None if observables is None else check_observables(observables),
        metrics=None if metrics is None else Metrics.from_any(metrics),
    )
    return _write(path, rec, overwrite=overwrite, compression=compression, fs=fs)


# -- read --------------------------------------------------------------------------

def _document(store, name: str, check) -> dict | None:
    node = read_node(store, name)
    if node is None:
        return None
    where = store.describe(meta_key(name))
    if not isinstance(node, GroupMetadata):
        raise _refuse("bad_layout", f"the {name} section is a group holding a document, found an array", where)
    return check(node.attributes, where)


def _section_names(store) -> list[str]:
    return sorted(n for n in store.list_dir("") if read_node(store, n) is not None)


def read_record(path, *, fs=None) -> Record:
    """Read a record (``*.mrec`` directory or ``*.mrec.zip``) into a :class:`Record`.

    The trajectory is opened (its committed frames readable through
    ``record.trajectory``), everything else is read.  Close the record (or
    use ``with``) to release a zip archive.
    """
    store = open_store(path, fs=fs)
    try:
        return _read(store, os.fspath(path))
    except BaseException:
        store.close()
        raise


def _read(store, path: str) -> Record:
    root = read_node(store, "")
    if root is None:
        raise _refuse("not_a_record", "no zarr.json at the top: not a record", store.describe(""))
    if not isinstance(root, GroupMetadata):
        raise _refuse("not_a_record", "the record root is an array, not a group", store.describe("zarr.json"))
    rec = Record(root_attrs=dict(root.attributes), path=path, store=store)
    rec.meta = _document(store, "meta", check_meta) or {}
    rec.status = _document(store, "status", check_status)
    rec.method = _document(store, "method", check_method)
    consumed: set[str] = {meta_key(""), meta_key("meta"), meta_key("status"), meta_key("method")}
    unknown: list[str] = []
    names = _section_names(store)
    for section in ("system", "frame"):
        if section in names:
            g = read_frame_group(store, section)
            setattr(rec, section, g.frame)
            unknown += g.unknown
    if "observables" in names:
        rec.observables, rec.observables_attrs, extra = read_observables(store)
        unknown += extra
    if "metrics" in names:
        rec.metrics, extra = Metrics.read(store)
        unknown += extra
    if TRAJ in names:
        rec.trajectory = TrajectoryReader(path, store=store)
    modelled = {"system", "frame", "observables", "metrics", TRAJ}
    for key in store.list(""):
        top = key.split("/", 1)[0]
        base = posixpath.basename(key)
        if key in consumed or top in modelled or base == LOCK_NAME or base.startswith(TEMP_MARK):
            continue
        unknown.append(key)
    if "metrics" in names:
        unknown = [k for k in unknown if k != "metrics/metrics.jsonl"]
    for key in sorted(set(unknown)):
        raw = store.get(key)
        if raw is not None:
            rec.unknown[key] = raw
    sections_ = {k: v for k, v in (("frame", rec.frame), ("system", rec.system)) if v is not None}
    for name, f in sections_.items():
        try:
            f.check_references(sections_)
        except RefusalError as exc:
            raise _refuse(exc.kind, exc.detail, store.describe(name)) from None
    check_system_alignment(rec.system, rec.trajectory, store.describe(TRAJ))
    return rec


def read_frame(path, index: int | None = None, *, fs=None) -> Frame:
    """The record's ``frame/`` section, or with ``index`` the resolved trajectory frame ``index``."""
    store = open_store(path, fs=fs)
    try:
        if index is not None:
            if read_node(store, TRAJ) is None:
                raise _refuse("missing_section", "the record has no trajectory", store.describe(TRAJ))
            return TrajectoryReader(os.fspath(path), store=store)[index]
        if read_node(store, "frame") is None:
            hint = " (it has a trajectory: pass a frame index)" if read_node(store, TRAJ) is not None else ""
            raise _refuse("missing_section", f"the record has no frame section{hint}", store.describe("frame"))
        return read_frame_group(store, "frame").frame
    finally:
        store.close()


def sections(path, *, fs=None) -> list[str]:
    """Names of the root sections of a record, ``meta`` first (present even when only implied)."""
    store = open_store(path, fs=fs)
    try:
        root = read_node(store, "")
        if not isinstance(root, GroupMetadata):
            raise _refuse("not_a_record", "no group zarr.json at the top: not a record", store.describe(""))
        names = _section_names(store)
        known = [s for s in KNOWN_SECTIONS if s == "meta" or s in names]
        return known + [n for n in names if n not in KNOWN_SECTIONS]
    finally:
        store.close()

