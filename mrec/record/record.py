"""Whole records: the root, its documents and sections (mrec-notes §1.1, §1.2, §3.1, §6).

A record is one Zarr root holding ``meta`` (always), and any of ``status``,
``method`` (documents), ``frame``, ``system`` (frame-shaped), ``observables``,
``metrics``, ``forcefield`` and ``trajectory``, plus sections it does not
model.  :func:`write_record` writes everything but
the trajectory (a trajectory is streamed by
:class:`~mrec.record.trajectory.writer.TrajectoryWriter`, into a record made
here or into a new one); :func:`read_record` reads a ``*.mrec`` directory or a
``*.mrec.zip`` archive (by range reads, no extraction).

What mrec decides where the spec is silent (docs/user-guide.md):

* :func:`write_record` builds the record under a temporary sibling name,
  fsyncs it, and renames it into place: a crash never leaves a half record
  under the final name.  An existing path is refused unless
  ``overwrite=True``: then the complete new record is first committed under
  ``.mrec-tmp-new-<name>`` and swapped in; a crash anywhere leaves the old or
  the new record under the name, or the new one under that sibling, from
  which the next write / read / writer open / ``mrec repair`` of the name
  rolls forward (:mod:`mrec.record.integrity.replace`).  A group replaced inside a
  record (:func:`write_section`, :func:`write_frame` with ``group``) runs the
  same protocol in its parent group's directory, and every read and write of
  the record recovers such a replace first.
* Everything mrec does not model -- unknown root sections, unknown nodes
  inside known sections, the metrics WAL -- is kept as raw bytes per key and written back verbatim by :meth:`Record.write`;
  the trajectory is copied key by key, verbatim, too.
* The system/trajectory 1:1 rule (mrec-notes §3.1) is checked on read
  (row counts) and enforced by the trajectory writer on append (row counts
  and equal ``id`` columns).
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import RefusalError, path_refusal
from ..fs import DEFAULT_FS, refuse_link
from ..fs.remote import refuses_urls
from ..fs.posix import TEMP_MARK
from ..zarr.array import meta_key, read_node, write_group
from ..zarr.metadata import GroupMetadata
from ..zarr.stores.directory import DirectoryStore
from .sections.documents import check_meta, check_method, check_status
from .sections.forcefield import ForceField, read_forcefield, write_forcefield
from .sections.frame_group import read_frame_group, write_frame_group
from .integrity.lock import LOCK_NAME
from .sections.metrics import Metrics
from .model.frame import Frame, check_node_name
from .sections.nodes import Group, read_group_tree, write_group_tree
from .sections.observables import Observable, check_observables, read_observables, write_observables
from .integrity.replace import Build, recover
from .model.schema import check_text
from .trajectory.reader import TRAJ, TrajectoryReader, open_store

__all__ = ["Record", "write_record", "read_record", "read_frame", "sections", "check_system_alignment",
           "KNOWN_SECTIONS", "SUBSTANTIVE_SECTIONS", "PIECE", "write_frame", "write_section", "read_group"]

#: Root sections mrec models, in the order they are written (``meta`` first).
KNOWN_SECTIONS = ("meta", "status", "method", "system", "frame", "forcefield", "observables", "metrics",
                  "trajectory")
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
    ``system`` :class:`~mrec.record.model.frame.Frame`, ``forcefield`` a
    :class:`~mrec.record.sections.forcefield.ForceField`, ``observables`` a dict of
    :class:`~mrec.record.sections.observables.Observable`, ``metrics`` a
    :class:`~mrec.record.sections.metrics.Metrics`, ``trajectory`` a
    :class:`~mrec.record.trajectory.reader.TrajectoryReader` or None.
    ``root_attrs`` are the root group's attributes; ``unknown`` maps every
    store key mrec does not model to its bytes; ``groups`` are sections
    mrec does not model given as :class:`~mrec.record.sections.nodes.Group` trees (to
    create them: once written they read back as ``unknown`` bytes, and
    :func:`read_group` reads one as a tree).
    """

    meta: dict = field(default_factory=dict)
    status: dict | None = None
    method: dict | None = None
    frame: Frame | None = None
    system: Frame | None = None
    forcefield: ForceField | None = None
    observables: dict[str, Observable] | None = None
    metrics: Metrics | None = None
    trajectory: TrajectoryReader | None = None
    root_attrs: dict = field(default_factory=dict)
    unknown: dict[str, bytes] = field(default_factory=dict)
    observables_attrs: dict = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    path: str | None = None
    store: Any = None

    def sections(self) -> list[str]:
        """Names of the root sections present, known ones in write order, then unknown ones sorted."""
        present = [s for s in KNOWN_SECTIONS if s == "meta" or getattr(self, s) is not None]
        extra = sorted(({k.split("/", 1)[0] for k in self.unknown if "/" in k} | set(self.groups)) - set(present))
        return present + extra

    def write(self, path, *, overwrite: bool = False, compression=None, fs=None) -> Path:
        """Write this record (trajectory and unknown content verbatim) as a new ``*.mrec`` directory."""
        return _write(path, self, overwrite=overwrite, compression=compression, fs=fs)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def __repr__(self) -> str:
        from .model.describe import record_repr
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
    if rec.frame is not None or rec.system is not None or rec.status is not None or rec.trajectory is not None \
            or rec.forcefield is not None:
        return True
    return any(k.startswith(("forcefield/", "trajectory/")) for k in rec.unknown)


def _check_forcefield_version(rec: Record, where: str | None) -> None:
    """A version-1 record (``meta.molrec_version == 1``) holds its force-field numbers by the pre-LAMMPS
    definitions; mrec does not convert them, so it refuses (mrec-notes §1.3: convert exactly or refuse)."""
    if rec.forcefield is not None and rec.meta.get("molrec_version") == 1:
        raise _refuse("bad_version", "meta.molrec_version 1 with a force field: version-1 force-field numbers "
                                     "(pre-LAMMPS definitions) are not converted by mrec, so the record is refused",
                      where)


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


def _claim(fs, path, overwrite: bool) -> str:
    """The absolute path a new store is written at, once checked: not a symbolic link (kind
    ``bad_target``: nothing it leads to is replaced), an interrupted overwrite of it recovered, and
    free unless ``overwrite``."""
    final = os.path.abspath(os.fspath(path))
    refuse_link(fs, final, "overwrite" if overwrite else "write a record at")
    recover(fs, final, within=False)               # an overwrite a crash interrupted, first
    if fs.exists(final) and not overwrite:
        raise _refuse("exists", "the path exists (pass overwrite=True to replace it)", final)
    return final


def _refuse_links_on(fs, root: str, node: str) -> None:
    """The record directory and every group directory down to ``node``: none may be a link (a group
    is built and replaced in its parent's directory; through a link that would be outside the record)."""
    path = root
    refuse_link(fs, path, "add to")
    for part in node.split("/"):
        path = os.path.join(path, part)
        refuse_link(fs, path, "replace or build in")


@refuses_urls(path="write a record to")
def _write(path, rec: Record, *, overwrite: bool, compression, fs) -> Path:
    fs = fs or DEFAULT_FS
    final = _claim(fs, path, overwrite)
    check_system_alignment(rec.system, rec.trajectory, final)
    _check_forcefield_version(rec, final)
    if not _substantive(rec):
        raise _refuse("empty_record", "a record holds meta plus at least one of frame, system, trajectory, "
                                      "forcefield or status", final)

    _check_record_text(rec, final)

    def build(store) -> list[str]:
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
        if rec.forcefield is not None:
            keys += write_forcefield(store, rec.forcefield, compression=compression)
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
        for name, g in rec.groups.items():
            keys += write_group_tree(store, name, g, compression=compression)
        written = set(keys)
        for key, raw in sorted(rec.unknown.items()):
            if key not in written:
                store.set(key, raw)
                keys.append(key)
        return keys

    return _new_store(final, build, overwrite=overwrite, fs=fs)


def _check_record_text(rec: Record, final: str) -> None:
    """Refuse (``bad_string``) a lone surrogate anywhere in the record's documents, frames and force
    field before anything is written, naming where (issue 17.12: never a UnicodeEncodeError)."""
    for doc in ("root_attrs", "meta", "status", "method"):
        check_text(getattr(rec, doc), doc if doc != "root_attrs" else "root attributes", final)
    for section in ("system", "frame"):
        f = getattr(rec, section)
        if f is not None:
            check_text(f.blocks, f"{section}: blocks", final)
            check_text(f.meta, f"{section}: meta", final)
    if rec.forcefield is not None:
        check_text(vars(rec.forcefield), "forcefield", final)


def _unencodable_refusal(exc: UnicodeEncodeError, where: str) -> RefusalError:
    return _refuse("bad_string", f"text UTF-8 cannot encode (a lone surrogate) in what was being written: "
                                 f"{exc}; strings and names in a record are UTF-8 text", where)


def _groups(sections: Mapping | None) -> dict[str, Group]:
    out: dict[str, Group] = {}
    for name, g in dict(sections or {}).items():
        check_node_name(name, "section", "bad_layout")
        if name in KNOWN_SECTIONS:
            raise _refuse("bad_layout", f"section {name!r} is one mrec models: pass it by its own argument")
        try:
            out[name] = Group.from_any(g)
        except RefusalError as exc:
            raise _refuse(exc.kind, f"section {name!r}: {exc.detail}") from None
    return out


def _forcefield(value: Any) -> ForceField | None:
    return None if value is None else ForceField.from_any(value)


@refuses_urls(path="write a record to")
def write_record(path, *, meta: Mapping | None = None, frame: Any = None, system: Any = None,
                 status: Mapping | None = None, method: Mapping | None = None, observables: Mapping | None = None,
                 metrics: Any = None, forcefield: Any = None, sections: Mapping | None = None, compression=None,
                 overwrite: bool = False, fs=None) -> Path:
    """Write a new record directory ``path`` (``<stem>.mrec``) and return its path.

    ``meta`` / ``status`` / ``method`` are JSON documents (checked: required
    keys, timestamps, ``molrec_version``); ``frame`` and ``system`` are
    :class:`Frame` (or anything :meth:`Frame.from_any` takes); ``observables``
    maps names to :class:`Observable` (or ``{"data": ..., "kind": ...,
    "description": ..., "time_dependent": ...}``); ``metrics`` is a
    :class:`Metrics`, a list of events or ``{key: values}``; ``forcefield`` a
    :class:`ForceField` (or its mapping form); ``sections`` maps the names of
    other root sections to :class:`Group` trees.  Every input is
    checked before anything touches the disk; the record appears under
    ``path`` only once complete and fsynced.  ``compression`` is the float
    knob (``None``, ``"gzip[:N]"``, ``"zstd[:N]"``).
    """
    fr, sy = _frame(frame, "frame"), _frame(system, "system")
    frames = {k: v for k, v in (("frame", fr), ("system", sy)) if v is not None}
    for name, f in frames.items():
        try:
            f.check_references(frames)
        except RefusalError as exc:
            raise _refuse(exc.kind, f"{name}: {exc.detail}") from None
    rec = Record(
        meta=check_meta({} if meta is None else meta),
        status=None if status is None else check_status(status),
        method=None if method is None else check_method(method),
        frame=fr, system=sy,
        observables=None if observables is None else check_observables(observables),
        metrics=None if metrics is None else Metrics.from_any(metrics),
        forcefield=_forcefield(forcefield), groups=_groups(sections),
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
    return sorted(n for n in store.list_dir("") if not n.startswith(TEMP_MARK) and read_node(store, n) is not None)


def read_record(path, *, fs=None, storage_options=None) -> Record:
    """Read a record (``*.mrec`` directory or ``*.mrec.zip``) into a :class:`Record`.

    The trajectory is opened (its committed frames readable through
    ``record.trajectory``), everything else is read.  Close the record (or
    use ``with``) to release a zip archive.
    """
    _recover_for_reading(path, fs)
    store = open_store(path, fs=fs, storage_options=storage_options)
    try:
        rec = _read(store, os.fspath(path))
        if rec.trajectory is not None:
            rec.trajectory.storage_options = storage_options
        return rec
    except BaseException:
        store.close()
        raise


def _recover_for_reading(path, fs, node: str = "") -> None:
    """Before a read of a local record directory: finish or undo an overwrite a crash interrupted, of
    the record or of a group inside it (with ``node``, of those the group ``node`` depends on:
    :mod:`mrec.record.integrity.replace`; abandoned builds are left to writers: nothing reads them)."""
    name = os.fspath(path)
    if not name.endswith(".zip") and "://" not in name:
        recover(fs or DEFAULT_FS, os.path.abspath(name), builds=False, node=node)


def _temporary(key: str) -> bool:
    """A key inside (or naming) a ``.mrec-tmp-`` file or directory: protocol state, never content."""
    return any(part.startswith(TEMP_MARK) for part in key.split("/"))


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
    if "forcefield" in names:
        rec.forcefield, extra = read_forcefield(store)
        unknown += extra
    if TRAJ in names:
        rec.trajectory = TrajectoryReader(path, store=store)
    modelled = {"system", "frame", "forcefield", "observables", "metrics", TRAJ}
    for key in store.list(""):
        top = key.split("/", 1)[0]
        base = posixpath.basename(key)
        if key in consumed or top in modelled or base == LOCK_NAME or _temporary(key):
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
        _check_references(store, name, f, sections_)
    check_system_alignment(rec.system, rec.trajectory, store.describe(TRAJ))
    _check_forcefield_version(rec, store.describe("forcefield"))
    return rec


def _check_references(store, node: str, f: Frame, sections_: dict[str, Frame] | None = None) -> None:
    """The row references of the frame-shaped group ``node`` (:func:`~mrec.record.model.frame.check_row_references`,
    through :meth:`Frame.check_references`): the one check of every reader of a frame-shaped group.
    ``sections_`` holds the sections read already; one an absolute target names (``/system/atoms``)
    is read from ``store`` when it is there, as ``read_record`` has it."""
    known = dict(sections_ or {})
    for targets in (attrs.get("targets", {}) for attrs in f.block_attrs.values()):
        for target in targets.values():
            section = target[1:].split("/", 1)[0] if target.startswith("/") else None
            if section in ("frame", "system") and section not in known and section != node \
                    and isinstance(read_node(store, section), GroupMetadata):
                known[section] = read_frame_group(store, section).frame
    known.setdefault(node, f)
    try:
        f.check_references(known)
    except RefusalError as exc:
        raise _refuse(exc.kind, exc.detail, store.describe(node)) from None


def read_frame(path, index: int | None = None, *, group: str | None = None, fs=None,
               storage_options=None) -> Frame:
    """The record's ``frame/`` section; with ``index`` the resolved trajectory frame ``index``; with
    ``group`` the frame-shaped group at that path of any Zarr store (``""``: the store's root, a
    bare frame store as other tools write one)."""
    node = _group_path(group) if group is not None else TRAJ if index is not None else "frame"
    _recover_for_reading(path, fs, node)
    store = open_store(path, fs=fs, storage_options=storage_options)
    try:
        if group is not None:
            if index is not None:
                raise _refuse("bad_argument", "pass either a trajectory frame index or a group path, not both",
                              store.describe(""))
            node = _group_path(group)
            f = read_frame_group(store, node).frame
            _check_references(store, node, f)
            return f
        if index is not None:
            if read_node(store, TRAJ) is None:
                raise _refuse("missing_section", "the record has no trajectory", store.describe(TRAJ))
            return TrajectoryReader(os.fspath(path), store=store)[index]
        if read_node(store, "frame") is None:
            hint = " (it has a trajectory: pass a frame index)" if read_node(store, TRAJ) is not None else \
                " (a bare frame store? pass group='' for a frame-shaped root)"
            raise _refuse("missing_section", f"the record has no frame section{hint}", store.describe("frame"))
        f = read_frame_group(store, "frame").frame
        _check_references(store, "frame", f)
        return f
    finally:
        store.close()


def _group_path(group: Any) -> str:
    """A group path ``a/b`` (``""`` = the root) with every part a valid node name."""
    if not isinstance(group, str):
        raise _refuse("bad_argument", f"a group path is a string ('' for the root), found {group!r}")
    path = group.strip("/")
    for part in path.split("/") if path else ():
        check_node_name(part, f"group path {group!r}: part", "bad_argument")
    return path


def read_group(path, group: str, *, fs=None) -> Group:
    """The node tree (attributes, arrays, child groups) at ``group`` of the store at ``path``: how a
    section mrec does not model (kept as ``Record.unknown`` bytes) reads as data."""
    _recover_for_reading(path, fs, _group_path(group))
    store = open_store(path, fs=fs)
    try:
        return read_group_tree(store, _group_path(group))
    finally:
        store.close()


# -- frame groups anywhere and sections added to a record --------------------------------

def _new_store(path, write, *, overwrite: bool, fs) -> Path:
    """Build a new store at ``path`` under a temporary sibling (``write(store)`` returns its keys), fsync
    it and move it into place; an existing path is refused unless ``overwrite``, and then the complete
    new store is committed under ``.mrec-tmp-new-<name>`` before the old one moves, so a crash leaves a
    complete store under the name or one the next open recovers (:mod:`mrec.record.integrity.replace`)."""
    fs = fs or DEFAULT_FS
    final = _claim(fs, path, overwrite)
    parent, name = os.path.split(final)
    try:
        fs.makedirs(parent)
    except (OSError, ValueError) as exc:
        raise path_refusal(exc, parent) from None
    build = Build(fs, final)                       # .mrec-tmp-<name>.<hex>, locked while built
    tmp = build.start()
    store = DirectoryStore(tmp, fs=fs)
    try:
        store.makedirs("")
        try:
            keys = write(store)
        except UnicodeEncodeError as exc:
            raise _unencodable_refusal(exc, final) from None
        _fsync_tree(store, keys)
        build.commit(overwrite=overwrite, refuse_exists=lambda: _refuse(
            "exists", "the path exists (pass overwrite=True to replace it)", final))
    except BaseException:
        build.abort()
        raise
    return Path(final)


def _add_node(root, node: str, write, *, overwrite: bool, fs) -> Path:
    """Add the group ``node`` (written by ``write(store, path)``) to the existing directory store ``root``.

    Missing parent groups get an empty ``zarr.json``.  The group is built under a build name in its
    parent group's directory, fsynced and moved under its name by the protocol of whole records
    (:class:`~mrec.record.integrity.replace.Build`): replacing an existing group, the complete new one is
    first committed under ``.mrec-tmp-new-<name>``, so a crash leaves the old group or the new one,
    which the next read or write of the record recovers."""
    fs = fs or DEFAULT_FS
    final_root = os.path.abspath(os.fspath(root))
    _refuse_links_on(fs, final_root, node)
    if not fs.is_dir(final_root):
        raise _refuse("not_a_record", "sections are added to a directory store (*.mrec), not to a packed "
                                      "archive: unpack it first", final_root)
    recover(fs, final_root)                        # overwrites a crash interrupted (of any group), first
    store = DirectoryStore(final_root, fs=fs)
    if not isinstance(read_node(store, ""), GroupMetadata):
        raise _refuse("not_a_record", "no Zarr group at the top of the store", store.describe(""))
    parent_node, _, name = node.rpartition("/")
    if read_node(store, node) is not None and not overwrite:
        raise _refuse("exists", f"{node!r} exists (pass overwrite=True to replace it)", store.describe(node))
    parts = parent_node.split("/") if parent_node else []
    for i in range(1, len(parts) + 1):
        p = "/".join(parts[:i])
        got = read_node(store, p)
        if got is None:
            write_group(store, p, {}, fsync=True)
            store.fsync_dir(posixpath.dirname(p))
        elif not isinstance(got, GroupMetadata):
            raise _refuse("bad_layout", f"{p!r} is an array, not a group", store.describe(p))
    build = Build(fs, os.path.join(final_root, *node.split("/")))    # .mrec-tmp-<name>.<hex>, locked
    tmp_name = os.path.basename(build.start())
    tmp = posixpath.join(parent_node, tmp_name) if parent_node else tmp_name
    try:
        try:
            keys = write(store, tmp)
        except UnicodeEncodeError as exc:
            raise _unencodable_refusal(exc, store.describe(node)) from None
        _fsync_tree(store, keys)
        build.commit(overwrite=overwrite, refuse_exists=lambda: _refuse(
            "exists", f"{node!r} exists (pass overwrite=True to replace it)", store.describe(node)))
    except BaseException:
        build.abort()
        raise
    return Path(final_root)


@refuses_urls(path="write a frame to")
def write_frame(path, frame: Any, *, group: str = "", overwrite: bool = False, compression=None,
                fs=None) -> Path:
    """Write ``frame`` as the frame-shaped group ``group`` of a Zarr store at ``path``.

    ``group=""`` makes a new store whose root *is* the frame (a bare frame
    store); another path (``"frames/0"``) is added to the store at ``path``
    when it exists (its missing parent groups created), or to a new store
    whose root is an empty group.  The group appears complete or not at all
    (built under a temporary name, fsynced, renamed).  An existing path /
    group is refused (kind ``exists``) unless ``overwrite=True``.
    """
    f = _frame(frame, "frame") if frame is not None else None
    if f is None:
        raise _refuse("bad_argument", "write_frame needs a frame")
    try:
        f.check_references({})
    except RefusalError as exc:
        raise _refuse(exc.kind, f"frame: {exc.detail}") from None
    node = _group_path(group)
    if node == "":
        return _new_store(path, lambda store: write_frame_group(store, "", f, compression=compression),
                          overwrite=overwrite, fs=fs)
    final = os.path.abspath(os.fspath(path))
    recover(fs or DEFAULT_FS, final, within=False)     # the record a crashed whole-record overwrite committed
    if not (fs or DEFAULT_FS).exists(final):
        def build(store):
            write_group(store, "", {})
            keys = [meta_key("")]
            parts = node.split("/")
            for i in range(1, len(parts)):
                write_group(store, "/".join(parts[:i]), {})
                keys.append(meta_key("/".join(parts[:i])))
            return keys + write_frame_group(store, node, f, compression=compression)
        return _new_store(path, build, overwrite=False, fs=fs)
    return _add_node(path, node, lambda store, p: write_frame_group(store, p, f, compression=compression),
                     overwrite=overwrite, fs=fs)


_DOCUMENT_CHECKS = {"meta": check_meta, "status": check_status, "method": check_method}


@refuses_urls(path="add a section to")
def write_section(path, name: str, value: Any, *, overwrite: bool = False, compression=None, fs=None) -> Path:
    """Add the root section ``name`` to the existing record directory ``path``.

    ``value`` is what :func:`write_record` takes for that section: a document
    for ``meta`` / ``status`` / ``method``, a :class:`Frame` for ``frame`` /
    ``system``, a :class:`ForceField` for ``forcefield``, observables,
    :class:`Metrics` (or events) for ``metrics``, and a :class:`Group` tree for
    any other name.  The section is checked against the rest of the record
    (targets across ``frame`` / ``system``, the system 1:1 rule) before anything
    is written, then appears complete or not at all.  An existing section is
    refused (kind ``exists``) unless ``overwrite=True``; ``trajectory`` is
    written by :class:`TrajectoryWriter`.
    """
    check_node_name(name, "section", "bad_layout")
    if name == TRAJ:
        raise _refuse("bad_layout", "the trajectory is written by TrajectoryWriter (create / open)")
    if name in _DOCUMENT_CHECKS:
        doc = _DOCUMENT_CHECKS[name](value)
        write = lambda store, p: [meta_key(p)] if write_group(store, p, doc) is not None else []  # noqa: E731
    elif name in ("frame", "system"):
        f = _frame(value, name)
        with read_record(path, fs=fs) as rec:
            sections_ = {k: v for k, v in (("frame", rec.frame), ("system", rec.system)) if v is not None}
            sections_[name] = f
            for n, fr in sections_.items():
                try:
                    fr.check_references(sections_)
                except RefusalError as exc:
                    raise _refuse(exc.kind, f"{n}: {exc.detail}") from None
            if name == "system":
                check_system_alignment(f, rec.trajectory)
        write = lambda store, p: write_frame_group(store, p, f, compression=compression)  # noqa: E731
    elif name == "forcefield":
        ff = ForceField.from_any(value)
        write = lambda store, p: write_forcefield(store, ff, path=p, compression=compression)  # noqa: E731
    elif name == "observables":
        obs = check_observables(value)
        write = lambda store, p: write_observables(store, obs, compression=compression, path=p)  # noqa: E731
    elif name == "metrics":
        m = Metrics.from_any(value)
        write = lambda store, p: m.write(store, p)  # noqa: E731
    else:
        g = Group.from_any(value)
        write = lambda store, p: write_group_tree(store, p, g, compression=compression)  # noqa: E731
    return _add_node(path, name, write, overwrite=overwrite, fs=fs)


def sections(path, *, fs=None, storage_options=None) -> list[str]:
    """Names of the root sections of a record, ``meta`` first (present even when only implied)."""
    _recover_for_reading(path, fs)
    store = open_store(path, fs=fs, storage_options=storage_options)
    try:
        root = read_node(store, "")
        if not isinstance(root, GroupMetadata):
            raise _refuse("not_a_record", "no group zarr.json at the top: not a record", store.describe(""))
        names = _section_names(store)
        known = [s for s in KNOWN_SECTIONS if s == "meta" or s in names]
        return known + [n for n in names if n not in KNOWN_SECTIONS]
    finally:
        store.close()

