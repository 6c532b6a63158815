"""Records written live by a running simulation: what the OpenMM reporter and the ASE MD writer share.

A :class:`LiveTrajectory` owns one ``<stem>.mrec`` directory and its
:class:`~mrec.record.trajectory.writer.TrajectoryWriter`, started by the engine's first report:

* a new record: ``system/`` (the topology and the units) is written whole first, then the
  trajectory is created with the engine's schema;
* ``append=True`` on a record that has a trajectory: the writer reopens it with
  ``truncate_after_step=S``, S being the step the run resumes from (its checkpoint's), so the
  frames a crashed run wrote after S are dropped and the new run's follow with no duplicate step
  (``docs/reliability.md``, "Restarts: truncating after a step"); ``append=True`` on no record
  starts a new one;
* frames go through ``append``: the writer's automatic flush every K frames (not fsynced),
  ``flush()`` and ``close()`` durable, a crash leaves the last commit (``append``'s guarantees);
* the writer is closed by ``close()``, at the end of a ``with`` block, when the owner is garbage
  collected, or at interpreter exit (``weakref.finalize``): an engine's reporter has no close hook.

A ``*.mrec.zip`` is never written live (an archive is not appended to): pack the directory when
the run is done (``mrec pack``).
"""
from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import MrecError, RefusalError

__all__ = ["LiveTrajectory", "LiveControls", "LIVE_COMPRESSION", "ENERGY_META", "md_schema", "xyz_columns",
           "unit_cell"]

#: the float compressor of live records unless one is given (exact columns zstd-compressed)
LIVE_COMPRESSION = "zstd"
#: the per-step meta keys (f64) of an engine's frames
ENERGY_META = ("potential_energy", "kinetic_energy", "temperature")


def md_schema(n: int, *, precision: float | None, velocities: bool, forces: bool, meta=ENERGY_META):
    """A trajectory of ``n`` atoms (a fixed row count): ``x y z`` (``precision`` or exact), then
    ``vx vy vz`` / ``fx fy fz`` when asked for, and f64 per-step ``meta`` keys."""
    from ..record.model.schema import SequenceSchema
    s = SequenceSchema()
    s.declare_block("atoms", rows=n, fixed=True)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=precision)
    for prefix in ("v" if velocities else "") + ("f" if forces else ""):
        for c in "xyz":
            s.declare_column("atoms", prefix + c, "f64")
    for k in meta:
        s.declare_meta(k, "f64")
    return s


def xyz_columns(prefix: str, a) -> dict[str, np.ndarray]:
    """``{prefix}x``, ``{prefix}y``, ``{prefix}z`` of an (N, 3) array: one transposing copy."""
    lanes = np.ascontiguousarray(np.asarray(a, dtype=np.float64).T)
    return {f"{prefix}x": lanes[0], f"{prefix}y": lanes[1], f"{prefix}z": lanes[2]}


def unit_cell(rows, boundary) -> Any:
    """A :class:`~mrec.record.model.box.Box` of lattice vectors given as rows, or None for no cell."""
    from ..record.model.box import Box
    rows = np.asarray(rows, dtype=np.float64)
    if not rows.any() or abs(np.linalg.det(rows)) == 0:
        return None
    return Box.from_rows(rows, boundary=np.asarray(boundary, dtype=bool))


def _check_path(path: str, what: str) -> str:
    from ..fs.urls import is_url, refuse_remote_write
    if is_url(path):
        raise refuse_remote_write(path, "write a live record to")
    if path.rstrip("/").endswith(".mrec.zip"):
        raise MrecError(f"{what} writes a live <stem>.mrec directory (an archive is not appended to): "
                        "pack it when the run is done (mrec pack)", path=path)
    if not path.rstrip("/").endswith(".mrec"):
        raise MrecError(f"{what} writes a <stem>.mrec directory", path=path)
    return path


def _clear(path: str, overwrite: bool) -> None:
    """A new record at ``path``: an existing one is refused, or replaced with ``overwrite``
    (only a record is ever removed)."""
    if not os.path.lexists(path):
        return
    if not overwrite:
        raise RefusalError(f"{path} already exists (pass append=True to continue it, or overwrite=True "
                           "to replace it)", path=path, kind="exists")
    if os.path.islink(path) or not os.path.isfile(os.path.join(path, "zarr.json")):
        raise MrecError("exists and is not an mrec record: not replaced", path=path)
    shutil.rmtree(path)


def _close_writer(holder: list) -> None:
    w, holder[0] = holder[0], None
    if w is not None:
        w.close()


class LiveTrajectory:
    """One live record of a running simulation (see the module docstring).

    ``writer_options``: the writer's ``flush_every``, ``durable``, ``compression``, ``pipeline``
    and, for a new record, ``profile`` and ``expected_frames``."""

    def __init__(self, path, *, what: str, append: bool = False, overwrite: bool = False, **writer_options):
        self.path = _check_path(os.fspath(path), what)
        self.what = what
        self.append_mode = bool(append)
        if not append:
            _clear(self.path, overwrite)
        writer_options.setdefault("compression", LIVE_COMPRESSION)
        self._options = writer_options
        self._holder: list = [None]
        self._finalizer = weakref.finalize(self, _close_writer, self._holder)
        #: the step a restart truncated the record after (None: the record was created)
        self.resumed_after: int | None = None

    @property
    def writer(self):
        """The trajectory writer (None before the first report and after close)."""
        return self._holder[0]

    @property
    def started(self) -> bool:
        return self._holder[0] is not None

    def start(self, system: Callable[[], dict], schema: Callable[[], Any], resume_after: int) -> None:
        """Create the record (``system()`` and ``schema()`` are only called then) or, with
        ``append``, reopen an existing trajectory truncated after step ``resume_after``."""
        from ..record.whole import write_record
        from ..record.trajectory.writer import TrajectoryWriter
        if not self._finalizer.alive:
            raise MrecError(f"{self.what} is closed", path=self.path)
        opts = dict(self._options)
        create_only = {k: opts.pop(k) for k in ("profile", "expected_frames") if k in opts}
        if self.append_mode and os.path.isfile(os.path.join(self.path, "trajectory", "zarr.json")):
            self._check_same(schema())               # before the reopen truncates anything
            self._holder[0] = TrajectoryWriter.open(self.path, truncate_after_step=int(resume_after), **opts)
            self.resumed_after = int(resume_after)
            return
        if not os.path.isfile(os.path.join(self.path, "zarr.json")):
            write_record(self.path, meta=self._creator(), system=system())
        self._holder[0] = TrajectoryWriter.create(self.path, schema(), **create_only, **opts)

    def _check_same(self, mine) -> None:
        """An appended record declares what this writer writes, or it is refused (untouched)."""
        from ..record.trajectory.reader import TrajectoryReader
        with TrajectoryReader(self.path) as r:
            stored = r.schema
        if stored.to_json() == mine.to_json():
            return

        def fields(s) -> str:
            cols = [f"{c}" + (f" (precision {d.precision:g})" if d.precision is not None else "")
                    for c, d in s.blocks["atoms"].columns.items()] if "atoms" in s.blocks else []
            return f"columns {', '.join(cols) or 'none'}; meta {', '.join(s.meta) or 'none'}"
        raise RefusalError(f"the record holds {fields(stored)}, {self.what} writes {fields(mine)}: continue it "
                           "with the options it was written with (velocities, forces, energies, precision)",
                           path=self.path, kind="declaration_mismatch")

    def _creator(self) -> dict:
        from ..version import __version__
        return {"creator": {"name": f"mrec ({self.what})", "version": __version__}}

    def append(self, frame: dict, step: int, time: float | None) -> None:
        w = self._holder[0]
        if w is None:
            raise MrecError(f"{self.what} is not writing (closed, or not started)", path=self.path)
        w.append(frame, step=step, time=time)

    def flush(self) -> None:
        """Commit every frame given so far, durably (unless made with ``durable=False``)."""
        if self._holder[0] is not None:
            self._holder[0].flush()

    def close(self) -> None:
        """Commit and release the record (idempotent; later reports are refused)."""
        self._finalizer()

    @property
    def committed(self) -> int:
        w = self._holder[0]
        return 0 if w is None else w.committed


class LiveControls:
    """``path``, ``resumed_after``, ``flush``, ``close`` and ``with`` of an engine writer holding a
    :class:`LiveTrajectory` as ``_live`` (a mixin)."""

    _live: LiveTrajectory

    @property
    def path(self) -> str:
        return self._live.path

    @property
    def resumed_after(self) -> int | None:
        """The step a restart truncated the record after (None: the writer created it)."""
        return self._live.resumed_after

    def flush(self) -> None:
        """Commit every frame written so far, durably (unless made with ``durable=False``)."""
        self._live.flush()

    def close(self) -> None:
        """Commit and release the record (also done at garbage collection and at exit)."""
        self._live.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
