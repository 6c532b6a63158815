"""ASE io plugin: ``ase.io.read("run.mrec.zip", index=":")``, ``ase.io.write("run.mrec", images)``.

Registered through ASE's external io-format entry point (``ase.ioformats``: ``mrec =
mrec.ase_io:mrec_format`` in mrec's package metadata), so an installed mrec is found by ASE
with no import.  Names ``*.mrec.zip`` and ``*.mrec`` select it; ASE takes an existing
*directory* for its own bundle format, so reading a live ``*.mrec`` directory needs
``format="mrec"``.

Per image: ``positions``, ``numbers`` / symbols (the ``element`` column, or ``atomic_number``),
``cell`` (the mrec cell's lattice vectors as rows) and ``pbc`` (its boundary), velocities
(``vx vy vz``, stored in Å/ps), ``tags`` (column ``tag``), initial charges (``charge``),
masses (``mass``) and the calculator results ``energy``, ``free_energy``, ``forces``
(``fx fy fz``) and ``stress`` (meta ``stress``, Voigt order) as a SinglePointCalculator; and
nothing else is dropped: ``atoms.info`` (typed per-step meta; ``info["step"]`` is the record's
step), every other per-atom array, ``FixAtoms`` (column ``free``) and every calculator result
round-trip, and what cannot be stored is refused naming it (:mod:`mrec.md.ase_map`).  The
atom count may change from image to image.  Energies and forces convert from a record's
stated units (``eV`` as ASE writes them; ``kJ/mol`` / ``kcal/mol`` from MD engines).
"""
from __future__ import annotations

import os

from ..errors import MrecError, RefusalError
from . import require

__all__ = ["mrec_format", "read_mrec", "write_mrec"]


def _external_format():
    try:
        from ase.utils.plugins import ExternalIOFormat
    except ImportError:           # ASE absent: the entry point is only ever loaded by ASE itself
        return None
    return ExternalIOFormat(desc="mrec molecular record (Zarr V3)", code="+S", module="mrec.ase_io",
                            glob=["*.mrec.zip", "*.mrec"])


#: the object ASE's entry point loads
mrec_format = _external_format()

_ENERGY_EV = {"ev": 1.0}


def _energy_factor(units: dict | None) -> float:
    """eV per the record's energy unit (1 when none is stated)."""
    ase_units = require("ase.units")
    if not isinstance(units, dict) or "energy" not in units:
        return 1.0
    e = str(units["energy"]).replace(" ", "").lower()
    table = {"ev": 1.0, "kj/mol": ase_units.kJ / ase_units.mol, "kcal/mol": ase_units.kcal / ase_units.mol,
             "hartree": ase_units.Hartree, "ry": ase_units.Rydberg}
    if e not in table:
        raise MrecError(f"energy unit {units['energy']!r} is not one ASE's reader converts ({sorted(table)})")
    return table[e]


def _units(rec) -> dict | None:
    u = rec.system.meta.get("units") if rec.system is not None else None
    return u if u is not None else rec.meta.get("units")


def _selection(index, n: int):
    """The image ordinals ``index`` selects of ``n`` (ASE's index: None, N, "START:STOP[:STEP]",
    a slice); a malformed one is a ``bad_frames`` refusal."""
    from .options import is_index, valid_slice
    if index is None:
        return [n - 1] if n else []
    shown = index
    if isinstance(index, str):
        from ase.io.formats import string2index
        try:
            index = string2index(index)
        except ValueError:
            raise RefusalError(f"index {shown!r} is not N or START:STOP[:STEP]", kind="bad_frames") from None
    if isinstance(index, slice):
        return list(range(*valid_slice(index, shown).indices(n)))
    if not is_index(index):
        raise RefusalError(f"index {shown!r} is not an integer, a slice or START:STOP[:STEP]", kind="bad_frames")
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"image {i} out of range for {n} images")
    return [i % n]


def read_mrec(filename, index=None):
    """Yield the selected images of the record's trajectory (or its frame section) as ASE Atoms."""
    require("ase")
    ase_units = require("ase.units")
    from .ase_map import atoms_of
    from .units import record_units
    from ..record.whole import read_record
    with read_record(os.fspath(filename)) as rec:
        lf, tf = record_units(rec)
        ef = _energy_factor(_units(rec))
        r = rec.trajectory
        if r is not None:
            frames = ((i, r[i]) for i in _selection(index, len(r)))
        elif rec.frame is not None:
            frames = iter([(0, rec.frame)] if _selection(index, 1) else [])
        else:
            raise MrecError("the record has neither a trajectory nor a frame section", path=os.fspath(filename))
        for _i, f in frames:
            yield atoms_of(f, rec.system, rec.meta, lf=lf, tf=tf, ef=ef, ase_units=ase_units,
                           label=os.fspath(filename))


def _foreign(path: str) -> bool:
    """Something at ``path`` that is not a record: a directory without a root ``zarr.json``, or a
    file where a ``*.mrec`` directory goes."""
    if os.path.isdir(path):
        return not os.path.isfile(os.path.join(path, "zarr.json"))
    return os.path.lexists(path) and not path.endswith(".zip")


def write_mrec(filename, images, precision: float | None = None, profile: str = "reference", compression="auto"):
    """Write ASE images to a new ``*.mrec`` directory, or ``*.mrec.zip`` (written live, then packed).

    An existing record under that name is replaced (as ASE's writers replace their files);
    anything else there is refused.  ``precision`` -- positions' absolute precision in Å.
    Right-sized (:mod:`mrec.md.sizing`): exact floats shuffled and zstd-compressed unless
    ``compression`` says otherwise (``None`` / ``"none"``: uncompressed), the number of images as the
    size hint."""
    from ase import Atoms
    from .convert import write_ase_images
    from .options import is_mrec_path
    from .result import creator
    from .sizing import finish_record, md_compression
    from ..archive.pack import NewRecord
    path = os.fspath(filename)
    if not is_mrec_path(path):
        raise MrecError("the mrec format writes <stem>.mrec or <stem>.mrec.zip", path=path)
    # written in a temporary sibling of its own, moved or packed into place when complete (a link at
    # the name refused, kind bad_target; no other name touched)
    target = NewRecord(path, overwrite=True)
    if _foreign(path):
        raise MrecError("exists and is not an mrec record: not replaced", path=path)
    if isinstance(images, Atoms):
        images = [images]
    live = target.start()
    try:
        write_ase_images(live, images, precision=precision, profile=profile,
                         compression=md_compression(compression, profile), meta=creator())
    except BaseException:
        target.abort()
        raise
    finish_record(target, live)
