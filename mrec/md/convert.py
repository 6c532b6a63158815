"""``mrec convert``: MD trajectories into mrec records and back.

Into mrec (``convert(src, "run.mrec" | "run.mrec.zip", top=...)``):

* through **MDAnalysis** for everything it reads (XTC, TRR, DCD, NetCDF, GRO, PDB, LAMMPS dump,
  ...), with an optional topology (PSF, TPR, PRMTOP, PDB, GRO, LAMMPS data, ...);
* through **ASE** for extended XYZ (``.extxyz``, ``.xyz``) and ASE ``.traj`` files, whose atom
  count may change from frame to frame.

What is written: ``system/atoms`` from the topology (every attribute MDAnalysis gives: ``element
name type res_name res_id chain mass charge seg_id ...`` at their canonical dtypes,
:mod:`mrec.md.topology`) and ``system/bonds`` / ``angles`` / ``dihedrals`` / ``impropers`` /
``cmaps`` (u64 row indices) when the topology has them; a trajectory with ``atoms`` ``x y z`` (plus
``vx vy vz`` / ``fx fy fz`` when the source has them), the cell, steps, times and per-frame
energies; the units in the system meta key ``units`` (MDAnalysis: Å, ps, kJ/mol; ASE: Å, ps,
eV).  Positions take ``precision`` (Å) when given; by default a lossy source keeps its own
resolution (an XTC of precision 1000 is stored at 0.01 Å) and anything else is stored exactly
(float32 values widen to f64 without loss).  Frames stream one at a time: memory stays bounded
by a frame and the writer's buffer.

Out of mrec (``convert("run.mrec.zip", "out.xtc" | ".dcd" | ".trr" | ".pdb" | ".extxyz" | ...)``):
extxyz / xyz / pdb are written by :mod:`mrec.md.text` (no extra); every other format through
MDAnalysis' writers.  A format that holds one atom count refuses a record whose count changes,
naming the first frame where it does.
"""
from __future__ import annotations

import os
import time as _time
from contextlib import contextmanager

import numpy as np

from ..errors import MrecError, RefusalError, StoreError
from . import require
from .columns import box_of_dimensions, schema_atoms, xyz_cols
from .foreign import check_xyz_headers, library_frames, reading
from .options import frame_slice, is_mrec_path, refuse_existing
from .result import ConvertResult, creator
from .topology import topology_system
from .units import ASE_UNITS, MDA_UNITS, record_units

__all__ = ["convert", "ASE_SUFFIXES", "TEXT_OUT", "write_ase_images"]

#: sources read through ASE (everything else goes through MDAnalysis)
ASE_SUFFIXES = (".extxyz", ".xyz", ".traj")
#: outputs written by mrec's own text writers
TEXT_OUT = (".extxyz", ".xyz", ".pdb")


def _partial(out: str):
    """A new empty file of this run's own beside ``out`` (``.<out>.mrec-tmp-<8 hex>.mrec-partial``,
    an :class:`~mrec.record.integrity.replace.OwnedTemp`: made exclusively under the parent's lock, never an
    existing file nor through a link, ``flock``-ed for the run's life), after removing the partials
    of ``out`` a killed export left (their lock free)."""
    from ..fs import DEFAULT_FS
    from ..record.integrity.replace import OwnedTemp
    owned = OwnedTemp(DEFAULT_FS, os.fspath(out), directory=False, suffix=".mrec-partial")
    owned.start()
    return owned


def convert(src, out, *, top=None, frames=None, select: str | None = None, precision: float | None = None,
            profile: str = "reference", compression="auto", fmt: str | None = None, overwrite: bool = False,
            progress=None, type_map=None) -> ConvertResult:
    """Convert ``src`` to ``out``; one of them is an mrec record (``*.mrec`` / ``*.mrec.zip``).

    ``src`` -- a path, or a list of trajectory files read one after the other into one record
    (MDAnalysis sources; steps continue: :mod:`mrec.md.parts`); ``frames`` -- a slice or
    ``"START:STOP[:STEP]"``; ``select`` -- an MDAnalysis selection string (only those atoms, with
    their topology); ``precision`` -- positions' absolute precision in Å (into mrec); ``profile``
    -- the trajectory writer's; ``compression`` -- ``"auto"`` (mrec chooses: exact floats
    shuffled and zstd-compressed, :mod:`mrec.md.sizing`), ``None`` / ``"none"``, or the writer's
    knob; ``fmt`` -- the source's MDAnalysis format name when its extension does not tell
    (``LAMMPSDUMP`` ...); ``progress`` -- True (a bar on stderr), False / None (none), or a
    :class:`~mrec.md.progress.FrameBar`; ``type_map`` -- the element of each LAMMPS atom type,
    ``{"1": "C", "2": "O"}`` or ``"1=C,2=O"`` (into mrec: the ``element`` column; out to extxyz / xyz:
    the species), by default from the types' masses when the dump or topology gives them.
    """
    from .parts import source_list
    srcs, out = source_list(src), os.fspath(out)
    from ..fs.urls import is_url, refuse_remote_write
    if is_url(out):
        raise refuse_remote_write(out, "convert into")
    for s in srcs:
        if not is_url(s) and not os.path.exists(s):
            raise MrecError("no such file or directory", path=s)
    sel = frame_slice(frames)
    t0 = _time.monotonic()
    with _progress_bar(progress) as bar:
        if is_mrec_path(srcs[0]) and not is_mrec_path(out):
            if len(srcs) > 1 or select is not None:
                raise RefusalError("out of mrec, convert takes one record and no --select", kind="bad_argument")
            res = _export(srcs[0], out, sel, overwrite=overwrite, progress=bar, type_map=type_map)
        elif is_mrec_path(out):
            res = _into_mrec(srcs, out, top=top, sel=sel, select=select, precision=precision, profile=profile,
                             compression=compression, fmt=fmt, overwrite=overwrite, progress=bar,
                             type_map=type_map)
        else:
            raise MrecError(f"one side of a conversion is an mrec record (*.mrec or *.mrec.zip): "
                            f"{' '.join(srcs)} -> {out}")
    res.seconds = _time.monotonic() - t0
    return res


@contextmanager
def _progress_bar(progress):
    """``progress`` as a bar or None: True draws one on stderr (closed at the end), False / None none."""
    if progress is True:
        from .progress import FrameBar
        with FrameBar("convert", None, enabled=True) as bar:
            yield bar
    else:
        yield None if progress is False else progress


def _into_mrec(srcs: list[str], out: str, *, top, sel, select, precision, profile, compression, fmt, overwrite,
               progress, type_map=None) -> ConvertResult:
    from .lammps import import_dump, is_dump
    from .sizing import finish_record, md_compression
    if precision is not None and not (isinstance(precision, (int, float)) and precision > 0):
        raise MrecError(f"--precision {precision!r} is not a positive number (Å)")
    src = srcs[0]
    low = src.lower()
    for c in (".gz", ".bz2", ".xz"):
        if low.endswith(c):
            low = low[: -len(c)]
    ase = fmt is None and low.endswith(ASE_SUFFIXES)
    dump = not ase and is_dump(src, fmt)
    if (ase or dump) and (len(srcs) > 1 or select is not None):
        raise RefusalError("several inputs and --select are for MDAnalysis sources (an extxyz / ASE .traj / "
                           "LAMMPS dump is converted alone, whole)", path=src, kind="bad_argument")
    compression = md_compression(compression, profile)
    refuse_existing(out, overwrite)
    # written in a temporary sibling of this run's own, moved or packed into place when complete:
    # a failed or interrupted conversion leaves no half record and keeps what --overwrite replaces
    from ..archive.pack import NewRecord
    target = NewRecord(out, overwrite=overwrite)
    live = target.start()
    try:
        if ase:
            res = _import_ase(src, live, sel, precision, profile, compression, progress)
        elif dump:
            res = import_dump(src, live, top=top, sel=sel, precision=precision, profile=profile,
                              compression=compression, progress=progress, type_map=type_map)
        else:
            res = _import_mda(srcs, live, top, sel, precision, profile, compression, fmt, progress, select=select)
    except BaseException:
        target.abort()
        raise
    finish_record(target, live)
    res.output = out
    return res


# -- into mrec ------------------------------------------------------------------------------------


def _xtc_resolution(reader) -> float | None:
    """The grid of an XTC in Å (10 / precision, MDAnalysis converts nm to Å), or None."""
    try:
        from MDAnalysis.coordinates.XTC import XTCReader
        from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    except ImportError:
        return None
    if not isinstance(reader, XTCReader):
        return None
    with XTCFile(reader.filename) as f:
        prec = float(f.read().prec)
    return 10.0 / prec if prec > 0 else None


def _scalar(v) -> float | None:
    """A real number, or a one-element numeric array (TRZ's energies), as a float; else None."""
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (float, int, np.floating, np.integer)):
        return float(v)
    if isinstance(v, np.ndarray) and v.size == 1 and v.dtype.kind in "iuf":
        return float(v.reshape(-1)[0])
    return None


def _energy_keys(data: dict) -> list[str]:
    """The timestep data keys holding one energy per frame (``*energ*``)."""
    return [k for k, v in data.items() if "energ" in k.lower() and _scalar(v) is not None]


def _mda_universe(src: str, top, fmt):
    mda = require("MDAnalysis")
    import warnings
    kwargs = {"format": fmt} if fmt else {}
    with warnings.catch_warnings(), reading(src, "MDAnalysis cannot read it"):
        warnings.simplefilter("ignore")
        u = mda.Universe(top, src, **kwargs) if top else mda.Universe(src, **kwargs)
        if not hasattr(u, "trajectory"):
            raise MrecError("MDAnalysis reads a topology but no coordinates from it: give the trajectory as IN "
                            "and the topology with --top", path=src)
        u.trajectory.n_frames         # noqa: B018 - an XTC / TRR builds its frame offsets here
    return u


def _import_mda(src, live, top, sel, precision, profile, compression, fmt, progress, select=None) -> ConvertResult:
    from ..record.whole.system_last import begin_record
    from ..record.trajectory.writer import TrajectoryWriter
    from .parts import chained_frames, select_atoms, source_list
    from .sizing import compact_unsynced, frames_hint
    import warnings
    parts = source_list(src)
    src = parts[0]
    u = _mda_universe(src, top, fmt)
    traj = u.trajectory
    res = ConvertResult(" + ".join(parts), live, reader=f"MDAnalysis {type(traj).__name__}")
    if precision is None:
        with reading(src, "MDAnalysis cannot read it"):
            precision = _xtc_resolution(traj)
    res.precision = precision
    ag = select_atoms(u, select, src)
    system, topo_cols = topology_system(u if select is None else ag, res.skipped)
    system["meta"] = {"units": MDA_UNITS}
    ts0 = traj.ts
    vel, frc = bool(ts0.has_velocities), bool(ts0.has_forces)
    energies = _energy_keys(ts0.data)
    schema = schema_atoms(len(ag), precision, vel, frc)
    for k in energies:
        schema.declare_meta(k, "f64")
    res.fields = ["x y z"] + (["vx vy vz"] if vel else []) + (["fx fy fz"] if frc else []) + \
        ["box", "step", "time"] + energies + [f"system/atoms/{c}" for c in topo_cols] + \
        [f"system/{b}" for b in system["blocks"] if b != "atoms"]
    names = [os.path.basename(p) for p in parts]
    meta = {**creator(), "converted_from": {"path": names[0] if len(names) == 1 else names,
                                             "format": type(traj).format if isinstance(type(traj).format, str)
                                             else str(type(traj).format),
                                             "topology": os.path.basename(top) if top else None,
                                             **({"select": select} if select is not None else {})}}
    # the system is written after the trajectory (mrec.record.whole.system_last): the writer then does
    # not decode the topology's string columns back
    pending = begin_record(live, meta=meta, system=system, schema=schema, compression=compression)
    frames = chained_frames(u, parts, sel, fmt)
    total = next(frames)
    if progress is not None:
        progress.total = total
    n = 0
    with TrajectoryWriter.create(live, schema, compression=compression, profile=profile,
                                 expected_frames=frames_hint(total)) as w:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for ts, step, time in frames:
                cols = xyz_cols("", ag.positions)
                if vel:
                    cols.update(xyz_cols("v", ag.velocities))
                if frc:
                    cols.update(xyz_cols("f", ag.forces))
                frame: dict = {"blocks": {"atoms": cols}}
                box = box_of_dimensions(ts.dimensions)
                if box is not None:
                    frame["box"] = box
                if energies:
                    frame["meta"] = {k: (_scalar(ts.data.get(k)) if _scalar(ts.data.get(k)) is not None else np.nan)
                                     for k in energies}
                w.append(frame, step=step, time=time)
                n += 1
                if progress is not None:
                    progress.update(n)
    pending.write(documents=compact_unsynced)
    res.frames = n
    res.atoms = len(ag)
    return res


def _import_ase(src, live, sel, precision, profile, compression, progress) -> ConvertResult:
    ase_io = require("ase.io")
    res = ConvertResult(src, live, reader="ASE", precision=precision)
    if not src.lower().endswith(".traj"):             # ASE reads (ext)xyz: bound its loops first
        walked = check_xyz_headers(src, sel.stop + 1 if sel.stop is not None and sel.stop >= 0 else None)
    else:
        walked = _traj_length(src)
    expected = len(range(*sel.indices(walked))) if walked is not None else None
    it = library_frames(ase_io.iread(src, index=sel), src, "ASE")
    try:
        first = next(it)
    except StopIteration:
        raise MrecError("no frames selected", path=src) from None

    def images():
        yield first
        yield from it

    meta = {**creator(), "converted_from": {"path": os.path.basename(src), "format": "ASE"}}
    counts, res.fields = write_ase_images(live, images(), precision=precision, profile=profile,
                                          compression=compression, progress=progress, meta=meta, label=src,
                                          expected_frames=expected)
    res.frames = len(counts)
    res.atoms = counts[0] if len(set(counts)) == 1 else sorted(set(counts))
    return res


def _traj_length(src: str) -> int | None:
    """The number of images of an ASE ``.traj`` file (None when ASE cannot tell)."""
    from ase.io.trajectory import Trajectory
    try:
        with Trajectory(src) as t:
            return len(t)
    except Exception:   # noqa: BLE001 - a damaged file is refused by the read that follows
        return None


def write_ase_images(live: str, images, *, precision=None, profile="reference", compression=None, progress=None,
                     meta: dict | None = None, label: str | None = None,
                     expected_frames: int | None = None) -> tuple[list[int], list[str]]:
    """Stream ASE ``Atoms`` into a new trajectory at ``live`` (a ``*.mrec`` directory).

    The first image fixes the per-atom fields, info keys and results every image must have (what
    each becomes: :mod:`mrec.md.ase_map`); the atom count may change.  Steps are ``info["step"]``
    when the images have it, else the image ordinals.  ``expected_frames`` -- the writer's size hint
    (default: ``len(images)`` when it has one).  Returns (atom counts, fields written)."""
    ase_units = require("ase.units")
    from ..record.model.schema import SequenceSchema
    from ..record.trajectory.writer import TrajectoryWriter
    from .ase_map import MODULE, check_like, declare, image_frame, module_doc
    from .sizing import frames_hint
    label = label or live
    if expected_frames is None and hasattr(images, "__len__"):
        expected_frames = frames_hint(len(images))
    it = iter(images)
    try:
        first = next(it)
    except StopIteration:
        raise MrecError("no images to write", path=live) from None
    img0 = image_frame(first, ase_units)
    s = SequenceSchema()
    declare(s, img0, precision)
    fields = sorted(img0.columns) + sorted(img0.meta_tags) + (["box"] if "box" in img0.frame else [])
    meta = dict(meta or creator())
    meta["modules"] = {**meta.get("modules", {}), MODULE: module_doc(img0)}
    counts: list[int] = []
    last_step: list[int] = []
    with TrajectoryWriter.create(live, s, compression=compression, profile=profile, meta=meta,
                                 expected_frames=expected_frames) as w:
        def put(img, k):
            step = k if img.step is None else img.step
            if last_step and step <= last_step[0]:
                raise MrecError(f"frame {k}: info['step'] {step} does not increase (the previous frame's is "
                                f"{last_step[0]}); steps of an mrec trajectory strictly increase", path=label)
            w.append(img.frame, step=step, time=None)
            last_step[:] = [step]
            counts.append(img.n)
            if progress is not None:
                progress.update(len(counts))
        put(img0, 0)
        boxed = "box" in img0.frame
        for k, atoms in enumerate(it, start=1):
            img = image_frame(atoms, ase_units, k)
            check_like(img, img0, k, label)
            if "box" in img.frame:
                boxed = True
            elif boxed:           # no cell after a cell: omitting it would carry the last one forward
                raise MrecError(f"frame {k} has no cell after frames with one (an mrec trajectory's cell is "
                                "defined in every frame or in none)", path=label)
            put(img, k)
    # the atom count may change, so there is no system section: the units live in the meta document
    _set_root_units(live, ASE_UNITS)
    return counts, fields


def _set_root_units(live: str, units: dict) -> None:
    """Add ``units`` to the record's meta document (written by the trajectory writer)."""
    from ..zarr.array import read_node, write_group
    from ..zarr.stores.directory import DirectoryStore
    st = DirectoryStore(live)
    node = read_node(st, "meta")
    attrs = dict(node.attributes) if node is not None else {}
    attrs["units"] = units
    write_group(st, "meta", attrs, fsync=True)


# -- out of mrec ------------------------------------------------------------------------------------


def _export(src, out, sel, *, overwrite, progress, type_map=None) -> ConvertResult:
    from ..record.whole import read_record
    from .atoms import atoms_view
    from .lammps import named_species, parse_type_map
    type_map = parse_type_map(type_map)
    refuse_existing(out, overwrite)
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise StoreError("cannot create it: the folder it goes in does not exist", path=out)
    res = ConvertResult(src, out)
    low = out.lower()
    with read_record(src) as rec:
        r = rec.trajectory
        if r is None:
            raise MrecError("the record has no trajectory to convert", path=src)
        lf, tf = record_units(rec)
        idx = range(*sel.indices(len(r)))
        if progress is not None:
            progress.total = len(idx)
        steps = r.steps
        times = r.times
        counts: list[int] = []
        if os.path.isdir(out):
            raise RefusalError(f"{out} is a directory: not replaced by a file", path=out, kind="exists")
        owned = _partial(out)
        tmp = owned.path
        try:
            if low.endswith(TEXT_OUT):
                from .text import write_extxyz, write_pdb, write_xyz
                res.reader = "mrec text writer"
                skipped: set[str] = set()
                with open(tmp, "w") as fh:
                    for k, i in enumerate(idx):
                        view = _scaled(atoms_view(r[i], rec.system), lf)
                        if not low.endswith(".pdb"):      # ASE reads extxyz / xyz species as elements
                            named_species(view, type_map, f"frame {i}")
                        t = None if times is None else float(times[i]) * tf
                        if low.endswith(".extxyz"):
                            write_extxyz(fh, view, step=int(steps[i]), time=t, skipped=skipped)
                        elif low.endswith(".xyz"):
                            write_xyz(fh, view, step=int(steps[i]), time=t)
                        else:
                            write_pdb(fh, view, model=k + 1, step=int(steps[i]), time=t)
                        counts.append(view.n)
                        if progress is not None:
                            progress.update(len(counts))
                res.skipped.extend(f"{name} (extxyz cannot hold it)" for name in sorted(skipped))
            else:
                counts = _export_mda(src, idx, tmp, out, progress, res)
            os.replace(tmp, out)
        except BaseException:
            owned.discard()
            raise
        finally:
            owned.release()
    res.frames = len(counts)
    res.atoms = counts[0] if counts and len(set(counts)) == 1 else sorted(set(counts))
    return res


def _scaled(view, lf: float):
    if lf != 1.0:
        for name in ("positions", "velocities", "forces"):
            if name != "forces" and getattr(view, name) is not None:
                setattr(view, name, getattr(view, name) * lf)
    return view


def _export_mda(src, idx, tmp, out, progress, res) -> list[int]:
    """Write frames ``idx`` of the record through an MDAnalysis writer, reading the record with
    :mod:`mrec.mdanalysis` (so PDB, GRO, ... writers get the topology: names, residues, elements)."""
    mda = require("MDAnalysis")
    import warnings
    from . import mdanalysis as _registers_mrec  # noqa: F401
    res.reader = "MDAnalysis writer"
    if not len(idx):
        raise MrecError("no frames selected")
    ext = os.path.splitext(out)[1].lstrip(".").upper()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with reading(src, "MDAnalysis cannot read it"):
                u = mda.Universe(src, src, format="MREC", topology_format="MREC")
        except MrecError as exc:
            if exc.kind == "row_count_mismatch":
                raise MrecError(f"{exc.detail} -- {ext} holds one atom count: "
                                "write .extxyz, or select frames before the change with --frames", path=src) from None
            raise
        n = u.atoms.n_atoms
        counts: list[int] = []
        with reading(out, f"MDAnalysis cannot write {ext}"), mda.Writer(tmp, n_atoms=n, format=ext) as W:
            for _ts in u.trajectory[np.asarray(idx, dtype=np.int64)]:
                W.write(u.atoms)
                counts.append(n)
                if progress is not None:
                    progress.update(len(counts))
        u.trajectory.close()
    return counts


