"""MDAnalysis support for mrec records: a Reader, a topology parser and a Writer (format ``MREC``).

Importing this module registers them with MDAnalysis (its readers and parsers register on
class creation); MDAnalysis itself is the optional extra ``mrec[mdanalysis]``::

    import MDAnalysis as mda
    import mrec.mdanalysis                        # registers the MREC format

    u = mda.Universe("run.mrec.zip")              # topology from system/, trajectory from trajectory/
    u = mda.Universe("top.psf", "run.mrec.zip")   # or any topology MDAnalysis reads
    u = mda.Universe("top.psf", ["a.mrec.zip", "b.mrec"])      # ChainReader
    with mda.Writer("out.mrec", u.atoms.n_atoms) as w:        # "out.mrec.zip", format="MREC": packed on close
        for ts in u.trajectory:
            w.write(u.atoms)

Both ``<stem>.mrec`` directories and ``<stem>.mrec.zip`` archives are recognised by name (the
format hint claims the double extension ``.mrec.zip``).  The reader gives random access,
``n_frames``, ``dt``, ``time`` (ps), ``dimensions`` (Å, degrees, from the mrec cell whose
lattice vectors are columns), ``data["step"]``, velocities and forces when the record has
``vx vy vz`` / ``fx fy fz``; lengths are converted to Å, velocities to Å/ps and forces to
kJ/(mol·Å) (MDAnalysis' units) from the record's stated ``units`` (:mod:`mrec.md.units`: an
OpenMM record's kJ/(mol·nm), an ASE record's eV/Å).  A record at a URL takes ``storage_options``
(``mda.Universe(url, storage_options=...)``: the parser and the reader get them).
It pickles (the record is reopened by name).  MDAnalysis holds one atom count: a record whose
``atoms`` row count changes is refused, naming the first frame where it changes.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

from ..errors import MrecError, RefusalError
from . import require
from .options import is_mrec_path
from .units import record_units
from .units import motion_factors, stated_units

mda = require("MDAnalysis")

from MDAnalysis.coordinates.base import ReaderBase, WriterBase  # noqa: E402
from MDAnalysis.coordinates.timestep import Timestep  # noqa: E402
from MDAnalysis.core.topology import Topology  # noqa: E402
from MDAnalysis.core.topologyattrs import (Angles, Atomids, Atomnames, Bonds, CMaps, Dihedrals,  # noqa: E402
                                           Impropers, Resids, Resnums, Segids)
from MDAnalysis.lib.util import store_init_arguments  # noqa: E402
from MDAnalysis.topology.base import TopologyReaderBase  # noqa: E402

__all__ = ["MRECReader", "MRECParser", "MRECWriter", "RecordRefusal"]


class RecordRefusal(MrecError):
    """A record MDAnalysis cannot open (truncated, damaged, refused), from the Reader or the
    topology parser.

    MDAnalysis rewraps a ``ValueError`` raised while it builds a Universe's topology (``Failed to
    construct topology ...``) or a ChainReader's part (a ``TypeError`` without the message), and a
    :class:`~mrec.errors.RefusalError` is a ``ValueError``: the Reader and the parser raise this
    instead, an :class:`MrecError` and nothing else, which MDAnalysis lets through.  Its ``kind``,
    ``path`` and message are the original's, which is its ``__cause__``."""


@contextmanager
def _passed_through():
    """Raise an MrecError MDAnalysis would rewrap (a ValueError, OSError ...) as a RecordRefusal."""
    try:
        yield
    except MrecError as exc:
        if isinstance(exc, (ValueError, OSError, NotImplementedError)):
            raise RecordRefusal(exc.detail, path=exc.path, kind=exc.kind) from exc
        raise


def _hint(thing) -> bool:
    return isinstance(thing, (str, os.PathLike)) and is_mrec_path(os.fspath(thing))


def _open(filename, storage_options=None):
    from ..record.whole import read_record
    return read_record(os.fspath(filename), storage_options=storage_options)


def _atom_count_check(r, path: str) -> int:
    """The one atom count of the record's ``atoms`` block, or a refusal naming where it changes."""
    b = r.layout.blocks.get("atoms")
    if b is None or not all(c in b.decl.columns for c in "xyz"):
        raise RefusalError("the trajectory has no atoms block with x, y, z columns", path=path,
                           kind="declaration_mismatch")
    if b.n_updates == 0:
        raise RefusalError("the atoms block is absent in every frame", path=path, kind="row_count_mismatch")
    ords = b.ordinals()
    if int(ords[0]) != 0:
        raise RefusalError(f"the atoms block is absent at frame 0 (first present at frame {int(ords[0])})",
                           path=path, kind="row_count_mismatch")
    counts = b.counts()
    if b.regular:
        return int(b.uniform_rows)
    changed = np.flatnonzero(counts != counts[0])
    if changed.size:
        j = int(changed[0])
        raise RefusalError(f"the atom count changes at frame {int(ords[j])} ({int(counts[0])} -> {int(counts[j])} "
                           "atoms): an MDAnalysis trajectory holds one atom count", path=path,
                           kind="row_count_mismatch")
    return int(counts[0])


class MRECReader(ReaderBase):
    """Reads the trajectory of an mrec record (``*.mrec`` directory or ``*.mrec.zip``)."""

    format = "MREC"
    units = {"time": "ps", "length": "Angstrom", "velocity": "Angstrom/ps", "force": "kJ/(mol*Angstrom)"}
    _Timestep = Timestep

    @staticmethod
    def _format_hint(thing):
        """A ``*.mrec`` / ``*.mrec.zip`` path (the double extension is claimed here)."""
        return _hint(thing)

    @store_init_arguments
    def __init__(self, filename, convert_units=True, storage_options=None, **kwargs):
        self._storage_options = storage_options      # a record at a URL (mda.Universe(url, storage_options=...))
        super().__init__(filename, convert_units=convert_units, **kwargs)
        with _passed_through():
            try:
                self._open()
            except BaseException:
                self.close()
                raise

    def _open(self) -> None:
        self._setup()
        cols = self._rec.trajectory.schema.blocks["atoms"].columns
        self.has_velocities = all(c in cols for c in ("vx", "vy", "vz"))
        self.has_forces = all(c in cols for c in ("fx", "fy", "fz"))
        self.ts = self._Timestep(self.n_atoms, velocities=self.has_velocities, forces=self.has_forces,
                                 reader=self, **self._ts_kwargs)
        self._frame = -1
        self._read_frame(0)

    def _setup(self) -> None:
        self._rec = _open(self.filename, self._storage_options)
        r = self._rec.trajectory
        if r is None:
            self._rec.close()
            raise MrecError("the record has no trajectory", path=str(self.filename))
        if len(r) == 0:
            self._rec.close()
            raise MrecError("the trajectory has no frames", path=str(self.filename))
        self.n_atoms = _atom_count_check(r, str(self.filename))
        self._lf, self._tf = record_units(self._rec)
        self._vf, self._ff = motion_factors(stated_units(self._rec))     # to Å/ps, kJ/(mol·Å) (issue 28)
        self._steps = r.steps
        self._times = None if r.times is None else r.times * self._tf

    @property
    def n_frames(self) -> int:
        return len(self._steps)

    def _get_dt(self):
        if self._times is None or len(self._times) < 2:
            raise AttributeError("no times")          # MDAnalysis then uses its default
        return float(self._times[1] - self._times[0])

    def _read_frame(self, frame):
        if self._rec is None:
            raise IOError("the reader is closed")
        if frame < 0 or frame >= self.n_frames:
            raise IndexError(f"frame {frame} out of range for {self.n_frames} frames")
        r = self._rec.trajectory
        ts = self.ts
        names = ["x", "y", "z"] + (["vx", "vy", "vz"] if self.has_velocities else []) + \
            (["fx", "fy", "fz"] if self.has_forces else [])
        cols = r.read_columns(frame, [("atoms", c) for c in names])
        lf = self._lf
        ts.positions = np.stack([cols[("atoms", c)] for c in "xyz"], axis=1) * lf
        if self.has_velocities:
            ts.velocities = np.stack([cols[("atoms", c)] for c in ("vx", "vy", "vz")], axis=1) * self._vf
        if self.has_forces:
            ts.forces = np.stack([cols[("atoms", c)] for c in ("fx", "fy", "fz")], axis=1) * self._ff
        box = r.box_at(frame) if r.layout.box.n_updates else None
        ts.dimensions = None if box is None or not box.defined else box.dimensions * np.array([lf, lf, lf, 1, 1, 1])
        ts.frame = frame
        ts.data["step"] = int(self._steps[frame])
        if self._times is not None:
            ts.time = float(self._times[frame])
        self._frame = frame
        return ts

    def _read_next_timestep(self, ts=None):
        if self._frame + 1 >= self.n_frames:
            raise IOError("no more frames")
        return self._read_frame(self._frame + 1)

    def _reopen(self):
        self._frame = -1

    def close(self):
        rec = getattr(self, "_rec", None)
        if rec is not None:
            rec.close()
            self._rec = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_rec"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._rec = _open(self.filename, self._storage_options)


class MRECParser(TopologyReaderBase):
    """The topology of an mrec record: ``system/atoms`` (every MDAnalysis attribute it has a column
    for: names, types, elements, masses, charges, residues, segments, chain ids ...,
    :mod:`mrec.md.topology`) and its bonds / angles / dihedrals / impropers / cmaps (without a
    system section: the per-atom columns of the trajectory's first frame)."""

    format = "MREC"

    @staticmethod
    def _format_hint(thing):
        return _hint(thing)

    def parse(self, storage_options=None, **kwargs):
        with _passed_through():
            return self._parse(storage_options)

    def _parse(self, storage_options=None):
        with _open(self.filename, storage_options) as rec:
            system = rec.system
            if system is not None and "atoms" in system.blocks:
                cols = system.blocks["atoms"]
                n = system.counts["atoms"]
                rel = {b: system.blocks[b] for b in ("bonds", "angles", "dihedrals", "impropers", "cmaps")
                       if b in system.blocks}
            elif rec.trajectory is not None and len(rec.trajectory):
                f = rec.trajectory[0]
                cols = f.blocks.get("atoms", {})
                n = f.counts.get("atoms", 0)
                rel = {}
            else:
                raise MrecError("the record has neither system/atoms nor a trajectory", path=str(self.filename))
        from .topology import topology_attrs
        attrs, resindex, res_seg, n_res, n_seg = topology_attrs(cols, n)
        have = {type(a) for a in attrs}
        if Atomnames not in have:
            label = cols.get("element")
            attrs.append(Atomnames(np.array([str(s) for s in label] if label is not None else ["X"] * n, dtype=object)))
        if Atomids not in have:
            attrs.append(Atomids(np.arange(1, n + 1)))
        resids = next((a.values for a in attrs if isinstance(a, Resids)), None)
        if resids is None:
            resids = np.arange(1, n_res + 1)
            attrs.append(Resids(resids))
        if Resnums not in have:
            attrs.append(Resnums(np.asarray(resids).copy()))
        if Segids not in have:
            attrs.append(Segids(np.array(["SYSTEM"] * n_seg, dtype=object)))
        for block, cls, ends in (("bonds", Bonds, "ij"), ("angles", Angles, "ijk"), ("dihedrals", Dihedrals, "ijkl"),
                                 ("impropers", Impropers, "ijkl"), ("cmaps", CMaps, "ijklm")):
            b = rel.get(block)
            if b is not None and all(f"atom{e}" in b for e in ends):
                idx = np.stack([np.asarray(b[f"atom{e}"], dtype=np.int64) for e in ends], axis=1)
                attrs.append(cls([tuple(row) for row in idx.tolist()]))
        return Topology(n, n_res, n_seg, attrs=attrs, atom_resindex=resindex, residue_segindex=res_seg)


class MRECWriter(WriterBase):
    """Writes frames of an AtomGroup / Universe to a new ``*.mrec`` (or ``*.mrec.zip``, packed on close).

    ``precision`` -- positions' absolute precision in Å (default: exact).  The topology of the
    written atoms goes to ``system/`` (with the bonds / angles / dihedrals lying inside them);
    velocities and forces when the timestep has them; steps from ``ts.data["step"]`` when they
    increase (else the frame count), times from ``ts.time`` (ps).  Right-sized by default
    (:mod:`mrec.md.sizing`): ``compression="auto"`` stores exact floats byte-shuffled and
    zstd-compressed (``None`` / ``"none"``: uncompressed), and ``expected_frames`` (default: the
    frame count of the first written Universe's trajectory) sizes chunks and indexes.

    Found by name: ``mda.Writer("out.mrec", n)`` (format ``MREC``) and ``mda.Writer("out.mrec.zip",
    n)`` (MDAnalysis takes the last extension, ``ZIP``, as the format key: this writer claims it).
    """

    format = ["MREC", "ZIP"]
    multiframe = True
    units = {"time": "ps", "length": "Angstrom", "velocity": "Angstrom/ps", "force": "kJ/(mol*Angstrom)"}

    def __init__(self, filename, n_atoms, precision: float | None = None, profile: str = "reference",
                 compression="auto", overwrite: bool = False, expected_frames: int | None = None, **kwargs):
        self.filename = os.fspath(filename)
        if not is_mrec_path(self.filename):
            raise MrecError("an mrec Writer writes <stem>.mrec or <stem>.mrec.zip", path=self.filename)
        self.n_atoms = n_atoms
        from .sizing import md_compression
        self.precision, self.profile = precision, profile
        self.compression, self.expected_frames = md_compression(compression, profile), expected_frames
        from .options import refuse_existing
        from ..archive.pack import NewRecord
        refuse_existing(self.filename, overwrite)
        # written in a temporary sibling of its own, moved or packed into place on close (an existing
        # record replaced only then; no other name touched, a link at the name refused)
        self._target = NewRecord(self.filename, overwrite=overwrite)
        self._live = ""
        self._w = None
        self._last_step = None
        self._count = 0

    def _start(self, ag, ts) -> None:
        from .columns import schema_atoms
        from .result import creator
        from .topology import topology_system
        from .units import MDA_UNITS
        from ..record.whole.system_last import begin_record
        from ..record.trajectory.writer import TrajectoryWriter
        from .sizing import frames_hint
        skipped: list = []
        system, _ = topology_system(ag, skipped)
        system["meta"] = {"units": MDA_UNITS}
        self._live = self._target.start()
        try:
            self._vel, self._frc = bool(ts.has_velocities), bool(ts.has_forces)
            schema = schema_atoms(len(ag), self.precision, self._vel, self._frc)
            # the system is written after the trajectory (mrec.record.whole.system_last): the writer
            # then does not decode the topology's string columns back
            self._system = begin_record(self._live, meta=creator(), system=system, schema=schema,
                                        compression=self.compression)
            hint = self.expected_frames if self.expected_frames is not None else \
                frames_hint(getattr(ag.universe.trajectory, "n_frames", None))
            self._w = TrajectoryWriter.create(self._live, schema, profile=self.profile, compression=self.compression,
                                              expected_frames=hint)
        except BaseException:
            self._target.abort()
            raise

    def _write_next_frame(self, obj):
        from .columns import box_of_dimensions, xyz_cols
        ag = obj.atoms
        ts = ag.universe.trajectory.ts
        if len(ag) != self.n_atoms:
            raise MrecError(f"{len(ag)} atoms given, the Writer was made for {self.n_atoms}", path=self.filename)
        if self._w is None:
            self._start(ag, ts)
        cols = xyz_cols("", ag.positions)
        if self._vel:
            cols.update(xyz_cols("v", ag.velocities))
        if self._frc:
            cols.update(xyz_cols("f", ag.forces))
        frame: dict = {"blocks": {"atoms": cols}}
        box = box_of_dimensions(ts.dimensions)
        if box is not None:
            frame["box"] = box
        step = ts.data.get("step")
        step = int(step) if step is not None else int(ts.frame)
        if self._last_step is not None and step <= self._last_step:
            step = self._last_step + 1
        self._last_step = step
        self._w.append(frame, step=step, time=float(ts.time))
        self._count += 1

    def close(self):
        w = getattr(self, "_w", None)
        if w is not None:
            w.close()
            self._w = None
            from .sizing import compact_unsynced, finish_record
            self._system.write(documents=compact_unsynced)
            finish_record(self._target, self._live)

