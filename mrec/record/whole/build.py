"""New stores and new groups, built under a temporary name and moved into place.

:func:`_new_store` builds a whole store (a record, a bare frame store) under a temporary sibling,
fsyncs it and renames it into place; :func:`_add_node` adds a group to an existing directory store
the same way, in its parent group's directory.  Both run the recoverable replace of
:mod:`mrec.record.integrity.replace` when they overwrite, so a crash leaves the old or the new
content under the name, never half of one.  ``_refuse`` is the refusal every module of this package
raises.
"""
from __future__ import annotations

import os
import posixpath
from pathlib import Path

from ...errors import RefusalError, path_refusal
from ...fs import DEFAULT_FS, refuse_link
from ...zarr.array import read_node, write_group
from ...zarr.metadata import GroupMetadata
from ...zarr.stores.directory import DirectoryStore
from ..integrity.replace import Build, recover

__all__: list[str] = []      # the package's own helpers: _new_store, _add_node, _claim, _refuse


def _refuse(kind: str, message: str, path: str | None = None) -> RefusalError:
    return RefusalError(message, path=path, kind=kind)


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


def _unencodable_refusal(exc: UnicodeEncodeError, where: str) -> RefusalError:
    return _refuse("bad_string", f"text UTF-8 cannot encode (a lone surrogate) in what was being written: "
                                 f"{exc}; strings and names in a record are UTF-8 text", where)


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
