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

This module holds :class:`Record`, the checks across its sections and the
write side; the read side is :mod:`mrec.record.whole.read`, a group or a
section added to a store :mod:`mrec.record.whole.add`.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ...errors import RefusalError
from ...fs import DEFAULT_FS
from ...fs.posix import TEMP_MARK
from ...fs.urls import refuses_urls
from ...zarr.array import meta_key, write_group
from ...zarr.stores.directory import DirectoryStore
from ..model.frame import Frame
from ..model.names import check_node_name, check_text
from ..sections.documents import check_meta, check_method, check_status
from ..sections.forcefield import ForceField, write_forcefield
from ..sections.frame_group import write_frame_group
from ..sections.metrics import Metrics
from ..sections.nodes import Group, write_group_tree
from ..sections.observables import Observable, check_observables, write_observables
from ..trajectory.layout import TRAJ
from ..trajectory.reader import TrajectoryReader
from .build import _claim, _new_store, _refuse

__all__ = ["Record", "write_record", "checked_record", "check_system_alignment", "KNOWN_SECTIONS", "SUBSTANTIVE_SECTIONS", "PIECE"]

#: Root sections mrec models, in the order they are written (``meta`` first).
KNOWN_SECTIONS = ("meta", "status", "method", "system", "frame", "forcefield", "observables", "metrics",
                  "trajectory")
#: A record holds ``meta`` plus at least one of these.
SUBSTANTIVE_SECTIONS = ("frame", "system", "trajectory", "forcefield", "status")
PIECE = 4 * 1024 * 1024


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
        from ..model.describe import record_repr
        return record_repr(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
    rec = checked_record(meta=meta, frame=frame, system=system, status=status, method=method,
                         observables=observables, metrics=metrics, forcefield=forcefield, sections=sections)
    return _write(path, rec, overwrite=overwrite, compression=compression, fs=fs)


def checked_record(*, meta: Mapping | None = None, frame: Any = None, system: Any = None,
                   status: Mapping | None = None, method: Mapping | None = None, observables: Mapping | None = None,
                   metrics: Any = None, forcefield: Any = None, sections: Mapping | None = None) -> Record:
    """The :class:`Record` :func:`write_record` writes, every input checked (nothing touches the disk)."""
    fr, sy = _frame(frame, "frame"), _frame(system, "system")
    frames = {k: v for k, v in (("frame", fr), ("system", sy)) if v is not None}
    for name, f in frames.items():
        try:
            f.check_references(frames)
        except RefusalError as exc:
            raise _refuse(exc.kind, f"{name}: {exc.detail}") from None
    return Record(
        meta=check_meta({} if meta is None else meta),
        status=None if status is None else check_status(status),
        method=None if method is None else check_method(method),
        frame=fr, system=sy,
        observables=None if observables is None else check_observables(observables),
        metrics=None if metrics is None else Metrics.from_any(metrics),
        forcefield=_forcefield(forcefield), groups=_groups(sections),
    )
