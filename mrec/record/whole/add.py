"""Adding to a store: :func:`write_frame` (a frame-shaped group at any path: a bare frame store,
or a group added to a store) and :func:`write_section` (one root section added to a record
directory, checked against the rest of the record first).  Each appears complete or not at all
(:mod:`mrec.record.whole.build`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import RefusalError
from ...fs import DEFAULT_FS
from ...fs.urls import refuses_urls
from ...zarr.array import meta_key, write_group
from ..integrity.replace import recover
from ..model.names import check_node_name
from ..sections.documents import check_meta, check_method, check_status
from ..sections.forcefield import ForceField, write_forcefield
from ..sections.frame_group import write_frame_group
from ..sections.metrics import Metrics
from ..sections.nodes import Group, write_group_tree
from ..sections.observables import check_observables, write_observables
from ..trajectory.layout import TRAJ
from .build import _add_node, _new_store, _refuse
from .read import _group_path, read_record
from .record import _frame, check_system_alignment

__all__ = ["write_frame", "write_section"]


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
