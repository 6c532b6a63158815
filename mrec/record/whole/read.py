"""Reading a record: :func:`read_record` (a ``*.mrec`` directory or a ``*.mrec.zip``, by range
reads), :func:`read_frame` (the ``frame`` section, a trajectory frame, or the frame-shaped group at
any path of a store), :func:`read_group` (a node tree mrec does not model) and :func:`sections`.
Every read of a local directory first recovers an overwrite a crash interrupted."""
from __future__ import annotations

import os
import posixpath
from typing import Any

from ...errors import RefusalError
from ...fs import DEFAULT_FS
from ...fs.posix import TEMP_MARK
from ...zarr.array import meta_key, read_node
from ...zarr.metadata import GroupMetadata
from ..integrity.lock import LOCK_NAME
from ..integrity.replace import recover
from ..model.frame import Frame
from ..model.names import check_node_name
from ..sections.documents import check_meta, check_method, check_status
from ..sections.forcefield import read_forcefield
from ..sections.frame_group import read_frame_group
from ..sections.metrics import Metrics
from ..sections.nodes import Group, read_group_tree
from ..sections.observables import read_observables
from ..trajectory.layout import TRAJ
from ..trajectory.reader import TrajectoryReader
from ..trajectory.store import open_store
from .build import _refuse
from .record import KNOWN_SECTIONS, Record, _check_forcefield_version, check_system_alignment

__all__ = ["read_record", "read_frame", "read_group", "sections"]


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
