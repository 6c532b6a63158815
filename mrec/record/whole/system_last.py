"""A record whose trajectory is written before its system: what the MD surfaces import.

``mrec convert`` and the MDAnalysis writer write a topology (``system/``) and then stream a
trajectory beside it.  :meth:`TrajectoryWriter.create` reads back a ``system/`` it finds (its row
counts and ``id`` columns, for the 1:1 rule of mrec-notes §3.1), and that read decodes every column
of the topology: for adk's 47,681 atoms seven string columns, 0.4-0.5 s of vlen-utf8 decoding and
element checks -- as long as the rest of the import.  :func:`begin_record` checks the system and
the meta document exactly as :func:`~.record.write_record` does and writes the root and ``meta/``;
the writer then finds no system to read, and :meth:`PendingSystem.write` adds ``system/`` once the
writer is closed, after checking the trajectory's row counts against it (the same check
:func:`~.record.write_record` runs on a record with both).

The record is the same, array for array and byte for byte: only the order the groups are written in
differs.  It is meant for a record built under a temporary name and moved into place when complete
(:class:`~mrec.archive.pack.NewRecord`): a record left between the two steps has no ``system/``.  A
trajectory block sharing its name with a system block may not carry an ``id`` column (the writer
compares it with the system's frame by frame, which it cannot do before the system exists).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from ...fs import DEFAULT_FS
from ...fs.urls import refuses_urls
from ...zarr.array import meta_key, write_group
from ...zarr.stores.directory import DirectoryStore
from ..model.frame import Frame
from ..sections.frame_group import write_frame_group
from ..trajectory.layout import TRAJ
from ..trajectory.reader import TrajectoryReader
from .build import _claim, _fsync_tree, _new_store, _refuse
from .record import _check_record_text, check_system_alignment, checked_record

__all__ = ["begin_record", "PendingSystem"]


class PendingSystem:
    """The checked ``system/`` of a record begun by :func:`begin_record`, written by :meth:`write`."""

    def __init__(self, path: Path, system: Frame, compression, fs):
        self.path, self.system, self.compression, self.fs = path, system, compression, fs

    def write(self, documents: Callable[[str], object] | None = None) -> None:
        """Add ``system/`` to the record, its trajectory closed: the row counts checked (kind
        ``row_count_mismatch``), the group written and fsynced.  ``documents(directory)`` runs on the
        written group before the fsyncs: the MD surfaces rewrite its ``zarr.json`` documents compact
        there (:func:`mrec.md.sizing.finish_record` would rewrite them later), so each file is fsynced
        once, as it stays (an fsync costs 1.5-4 ms here; the system of adk has 27 documents)."""
        store = DirectoryStore(str(self.path), fs=self.fs)
        if store.exists(meta_key(TRAJ)):
            with TrajectoryReader(str(self.path), fs=self.fs) as reader:
                check_system_alignment(self.system, reader, str(self.path))
        keys = write_frame_group(store, "system", self.system, compression=self.compression)
        if documents is not None:
            documents(os.path.join(str(self.path), "system"))
        _fsync_tree(store, keys)


def _refuse_ids(schema, system: Frame, where: str) -> None:
    """Refuse (``bad_argument``) a trajectory block sharing its name with a system block when both hold
    an ``id`` column: the writer compares them frame by frame, which it cannot before the system exists."""
    for name, decl in schema.blocks.items():
        if "id" in decl.columns and "id" in system.blocks.get(name, {}):
            raise _refuse("bad_argument", f"trajectory block {name!r} has an id column like the system's: "
                                          "write the system first (write_record) so the writer compares them",
                          where)


@refuses_urls(path="write a record to")
def begin_record(path, *, meta: Mapping | None, system: Any, schema, compression=None, fs=None) -> PendingSystem:
    """Check ``meta`` and ``system`` as :func:`~.record.write_record` does, write the new record
    directory ``path`` with its root and ``meta/``, and return the system to add after the trajectory
    of ``schema`` (a :class:`~mrec.record.model.schema.SequenceSchema`) is written and closed."""
    rec = checked_record(meta=meta, system=system)
    fs = fs or DEFAULT_FS
    final = _claim(fs, path, False)
    if rec.system is None:
        raise _refuse("bad_argument", "begin_record writes a record with a system", final)
    _refuse_ids(schema, rec.system, final)
    _check_record_text(rec, final)

    def build(store) -> list[str]:
        write_group(store, "", rec.root_attrs)
        write_group(store, "meta", rec.meta)
        return [meta_key(""), meta_key("meta")]

    return PendingSystem(_new_store(final, build, overwrite=False, fs=fs), rec.system, compression, fs)
