"""An mrec record as an MDTraj ``Trajectory`` (``mrec.mdtraj.load``).

``load("run.mrec.zip")`` gives ``md.Trajectory(xyz, topology, time, unitcell_lengths,
unitcell_angles)`` in MDTraj's units (nm, ps, degrees; ``xyz`` float32 as MDTraj holds it), the
lengths converted from the record's stated ``units``:

* ``xyz`` -- the trajectory's ``atoms`` ``x y z`` (a regular block: MDTraj holds one atom count;
  a record whose count changes is refused, kind ``row_count_mismatch``);
* ``time`` -- the record's times (ps), or MDTraj's default (the frame indices) when it has none;
* the unit cell -- from the mrec cell of each frame (lengths and angles), none when the record has
  no cell;
* the topology -- from ``system/atoms`` (or the first frame's per-atom columns): chains from
  ``chain``, residues from runs of equal (``res_id``, ``res_name``, ``chain``), atom names
  (``name``, else ``type``), elements (``element``, else ``atomic_number``, else the element whose
  mass is nearest ``mass`` within 0.1 Da -- a massless particle is a virtual site --, else the
  name's first letter, both letters for an ion named as its residue), bonds from ``system/bonds``.

MDTraj is the optional extra ``mrec[mdtraj]``.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import MrecError, RefusalError
from . import require
from .atoms import atoms_view
from .units import record_units

md = require("mdtraj")

__all__ = ["load"]


def load(path, frames: slice | None = None):
    """The record at ``path`` (``*.mrec`` or ``*.mrec.zip``; frames ``frames``, a slice, default
    all) as an ``mdtraj.Trajectory``."""
    from ..record.whole import read_record
    path = os.fspath(path)
    sel = frames if frames is not None else slice(None)
    if not isinstance(sel, slice):
        raise MrecError(f"frames {frames!r} is not a slice", path=path)
    with read_record(path) as rec:
        r = rec.trajectory
        if r is None or len(r) == 0:
            raise MrecError("the record has no trajectory frames", path=path)
        block = r.layout.blocks.get("atoms")
        if block is None or not all(c in block.decl.columns for c in "xyz"):
            raise RefusalError("the trajectory has no atoms block with x, y, z columns", path=path,
                               kind="declaration_mismatch")
        if not block.regular:
            raise RefusalError("the atom count changes from frame to frame: an MDTraj trajectory holds one",
                               path=path, kind="row_count_mismatch")
        lf, tf = record_units(rec)
        xyz = _nm(r.positions(sel), lf)
        idx = np.arange(len(r))[sel]
        time = None if r.times is None else r.times[sel] * tf
        lengths, angles = _cells(r, idx, lf)
        view = atoms_view(r[int(idx[0])] if len(idx) else r[0], rec.system)
        bonds = rec.system.blocks.get("bonds") if rec.system is not None else None
        top = topology(view.columns, view.n, bonds)
    return md.Trajectory(xyz, top, time=time, unitcell_lengths=lengths, unitcell_angles=angles)


def _nm(a: np.ndarray, lf: float) -> np.ndarray:
    """Lengths in the record's unit (``lf`` Å each) as float32 nm, converted as MDTraj's own
    loaders convert Å (float32 values times its factor: ``mdtraj.utils.in_units_of``)."""
    a32 = np.asarray(a).astype(np.float32)
    if lf == 10.0:
        return a32
    if lf == 1.0:
        return md.utils.in_units_of(a32, "angstroms", "nanometers", inplace=True)
    return (np.asarray(a) * (lf / 10.0)).astype(np.float32)


def _cells(r, idx: np.ndarray, lf: float) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(lengths in nm, angles in degrees) of frames ``idx``, or (None, None) without a cell."""
    if r.layout.box.n_updates == 0 or not len(idx):
        return None, None
    dims: dict[int | None, np.ndarray | None] = {}
    out = np.empty((len(idx), 6), dtype=np.float64)
    for k, i in enumerate(idx):
        j = r.layout.box.update_at(int(i))
        if j not in dims:
            box = r.box_at(int(i))
            dims[j] = box.dimensions if box is not None and box.defined else None
        if dims[j] is None:
            return None, None
        out[k] = dims[j]
    return _nm(out[:, :3], lf), out[:, 3:].astype(np.float32)


def _strings(cols: dict, name: str, n: int) -> list[str] | None:
    v = cols.get(name)
    return None if v is None or len(v) != n else [str(s) for s in v]


def _element_of(symbol: str):
    try:
        return md.element.get_by_symbol(symbol[:1].upper() + symbol[1:].lower())
    except KeyError:
        return None


def _by_name(name: str, res_name: str):
    """An element from a PDB-style atom name: its first letter, or both letters for a one-atom
    residue named as its atom (ions: ``NA``, ``CL``)."""
    letters = "".join(ch for ch in name if ch.isalpha())
    if letters and letters.upper() == res_name.strip().upper():
        return _element_of(letters[:2]) or _element_of(letters[:1])
    return _element_of(letters[:1]) if letters else None


def _by_mass(masses: np.ndarray) -> list | None:
    """The element of each mass (nearest within 0.1 Da; a massless particle is a virtual site),
    or None when one is not near any."""
    table = [e for e in vars(md.element).values() if isinstance(e, md.element.Element) and e.atomic_number > 0]
    ref = np.array([e.mass for e in table])
    near = np.abs(masses[:, None] - ref[None, :]).argmin(axis=1)
    massless = masses <= 0
    if not np.all(massless | (np.abs(ref[near] - masses) <= 0.1)):
        return None
    return [md.element.virtual if v else table[k] for k, v in zip(near.tolist(), massless.tolist())]


def _elements(cols: dict, names: list[str], res_names: list[str], n: int) -> list:
    """One MDTraj element per atom (see the module docstring for the order of the sources)."""
    symbols = _strings(cols, "element", n)
    if symbols is not None:
        return [_element_of(s) or md.element.virtual for s in symbols]
    if "atomic_number" in cols:
        return [md.element.Element.getByAtomicNumber(int(z)) if int(z) > 0 else md.element.virtual
                for z in cols["atomic_number"]]
    if "mass" in cols and len(cols["mass"]) == n:
        got = _by_mass(np.asarray(cols["mass"], dtype=np.float64))
        if got is not None:
            return got
    return [_by_name(nm, rn) or md.element.virtual for nm, rn in zip(names, res_names)]


def topology(cols: dict, n: int, bonds: dict | None = None):
    """An ``mdtraj.Topology`` of ``n`` atoms from mrec per-atom columns (and ``bonds`` atomi/atomj)."""
    names = _strings(cols, "name", n) or _strings(cols, "type", n) or [""] * n
    res_names = _strings(cols, "res_name", n) or ["UNK"] * n
    elements = _elements(cols, names, res_names, n)
    chains = _strings(cols, "chain", n) or [""] * n
    res_ids = cols.get("res_id")
    res_ids = [int(v) for v in res_ids] if res_ids is not None and len(res_ids) == n else [None] * n
    top = md.Topology()
    chain = residue = None
    last_chain = last_res = None
    for k in range(n):
        if chain is None or chains[k] != last_chain:
            chain, last_chain, last_res = top.add_chain(chain_id=chains[k] or None), chains[k], None
        key = (res_ids[k], res_names[k])
        if residue is None or key != last_res:
            residue, last_res = top.add_residue(res_names[k], chain, resSeq=res_ids[k]), key
        top.add_atom(names[k], elements[k], residue)
    if bonds is not None and "atomi" in bonds and "atomj" in bonds:
        atoms = list(top.atoms)
        for i, j in zip(np.asarray(bonds["atomi"], dtype=np.int64).tolist(),
                        np.asarray(bonds["atomj"], dtype=np.int64).tolist()):
            top.add_bond(atoms[i], atoms[j])
    return top
