"""MDAnalysis topology attributes <-> the per-atom columns of ``system/atoms``.

Every per-atom, per-residue and per-segment attribute an MDAnalysis Universe has is written as one
per-atom column (a residue's or segment's value on each of its atoms):

=================  ===============  =================  ===============
MDAnalysis         column           MDAnalysis         column
=================  ===============  =================  ===============
ids                id (u64)         segids             seg_id
names              name             masses (amu)       mass
types              type             charges (e)        charge
elements           element          occupancies        occupancy
resnames           res_name         tempfactors        b_factor
resids             res_id (u64)     formalcharges      formal_charge (i64)
resnums            res_num (i64)    record_types       record_type
chainIDs           chain            moltypes           mol_type
icodes             icode            molnums            mol_num (i64)
altLocs            altloc           any other          its singular name
=================  ===============  =================  ===============

(canonical names and dtypes where mrec-notes §7.1 has one; ``radii`` -> ``radius``,
``type_indices`` -> ``type_index`` ...).  Residues are read back as runs of atoms with equal
residue values (``res_id res_num res_name icode chain mol_type mol_num seg_id``) and segments as
the atoms sharing a ``seg_id``; when that would not give the Universe's own residues or segments
(two adjacent residues alike, a residue split in two, two segments of one name) the columns
``res_index`` / ``seg_index`` (u64, numbered in order of appearance) are written too, so the
partition always reads back as it was.  A value no column can hold (a negative ``resid`` for the
u64 ``res_id``, an attribute of objects) is reported in the conversion's ``skipped`` list.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["atom_columns", "topology_attrs", "topology_system", "ATTR_COLUMNS"]

#: MDAnalysis attribute name -> column name (the rest take the attribute's singular name)
ATTR_COLUMNS = {"ids": "id", "names": "name", "types": "type", "elements": "element", "resnames": "res_name",
                "resids": "res_id", "resnums": "res_num", "chainIDs": "chain", "icodes": "icode",
                "altLocs": "altloc", "segids": "seg_id", "masses": "mass", "charges": "charge",
                "occupancies": "occupancy", "tempfactors": "b_factor", "formalcharges": "formal_charge",
                "record_types": "record_type", "moltypes": "mol_type", "molnums": "mol_num"}
_COLUMN_ATTRS = {c: a for a, c in ATTR_COLUMNS.items()}
#: attributes that are not per-atom values (indices, connectivity) or aliases of one that is
_NOT_COLUMNS = frozenset(("indices", "resindices", "segindices", "bonds", "angles", "dihedrals", "impropers",
                          "ureybradleys", "cmaps", "bfactors"))
#: the residue-level columns whose runs delimit residues
_RESIDUE_KEYS = ("res_id", "res_num", "res_name", "icode", "chain", "mol_type", "mol_num", "seg_id")
#: the canonical dtypes of the columns above that are not plain strings / reals
_DTYPES = {"id": np.uint64, "res_id": np.uint64, "res_num": np.int64, "formal_charge": np.int64,
           "mol_num": np.int64}


def _values(name: str, raw) -> np.ndarray | None:
    """A per-atom attribute as a column array (strings as ``object`` str), or None when none holds it."""
    a = np.asarray(raw)
    want = _DTYPES.get(name)
    if want is not None:
        if a.dtype.kind not in "iu" or (want is np.uint64 and a.size and int(a.min()) < 0):
            return None
        return a.astype(want)
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    if a.dtype.kind in "iub":
        return a
    if a.dtype.kind in "OU":
        return _str_values(a)
    return None


def _str_values(a: np.ndarray) -> np.ndarray | None:
    """A 1-D ``a`` as an ``object`` array of Python ``str`` (a ``str`` subclass such as ``np.str_``
    made a plain ``str``), or None when it holds anything else.  The element types are looked at
    once each, not per element: a topology's string attribute is one type over many atoms."""
    if a.ndim != 1:
        return None
    items = a.tolist()
    types = set(map(type, items))
    if not all(issubclass(t, str) for t in types):
        return None
    if types <= {str}:
        return a.astype(object)             # a copy holding the same str objects
    return np.array([str(v) for v in items], dtype=object)


def _groups(keys) -> np.ndarray:
    """Group number of each element, groups numbered in order of first appearance."""
    _, first, inverse = np.unique(np.asarray(keys), return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def residue_runs(cols: dict, n: int) -> np.ndarray:
    """Residue index per atom from runs of equal residue columns (``res_index`` when stored)."""
    if "res_index" in cols:
        return _groups(cols["res_index"])
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for k in _RESIDUE_KEYS:
        v = cols.get(k)
        if v is not None and n > 1:
            v = np.asarray(v)
            change[1:] |= v[1:] != v[:-1]
    return (np.cumsum(change) - 1).astype(np.int64) if n else np.zeros(0, dtype=np.int64)


def segment_groups(cols: dict, n: int) -> np.ndarray:
    """Segment index per atom: ``seg_index`` when stored, else the atoms sharing a ``seg_id``."""
    for key in ("seg_index", "seg_id"):
        if key in cols:
            return _groups(cols[key])
    return np.zeros(n, dtype=np.int64)


def atom_columns(atoms, skipped: list) -> dict[str, Any]:
    """``system/atoms`` columns of an MDAnalysis AtomGroup: every topology attribute it has."""
    u = atoms.universe
    cols: dict[str, Any] = {}
    for attr in u._topology.attrs:
        name = attr.attrname
        if name in _NOT_COLUMNS:
            continue
        col = ATTR_COLUMNS.get(name, getattr(attr, "singular", name))
        try:
            raw = getattr(atoms, name)
        except Exception:   # noqa: BLE001 - an attribute MDAnalysis cannot give per atom
            skipped.append(f"{name} (not per atom)")
            continue
        v = _values(col, raw)
        if v is None or v.shape[:1] != (len(atoms),):
            skipped.append(f"{name} ({'negative' if col == 'res_id' else 'no column holds its'} values)")
            continue
        cols[col] = v
    n = len(atoms)
    if not np.array_equal(residue_runs(cols, n), _groups(atoms.resindices)):
        cols["res_index"] = _groups(atoms.resindices).astype(np.uint64)
    if "seg_id" in cols and not np.array_equal(segment_groups(cols, n), _groups(atoms.segindices)):
        cols["seg_index"] = _groups(atoms.segindices).astype(np.uint64)
    return cols


def topology_attrs(cols: dict, n: int):
    """(MDAnalysis topology attributes, atom -> residue index, residue -> segment index, residue
    count, segment count) of ``system/atoms`` columns read back."""
    from MDAnalysis.core.topologyattrs import _TOPOLOGY_ATTRS, ResidueAttr, SegmentAttr
    resindex = residue_runs(cols, n)
    first_res = np.unique(resindex, return_index=True)[1]            # the first atom of each residue
    n_res = len(first_res)
    seg_of = _groups(segment_groups(cols, n)[first_res]) if n_res else np.zeros(0, dtype=np.int64)
    first_seg = first_res[np.unique(seg_of, return_index=True)[1]]   # the first atom of each segment
    n_seg = max(len(first_seg), 1)
    attrs, seen = [], set()
    for col in sorted(cols, key=lambda c: c not in _COLUMN_ATTRS):     # mrec's own names first
        cls = _TOPOLOGY_ATTRS.get(_COLUMN_ATTRS.get(col, col))
        if cls is None or cls.attrname in _NOT_COLUMNS or cls in seen:
            continue
        seen.add(cls)
        v = cols[col]
        a = np.asarray(v)
        if a.dtype == object:
            a = np.array([str(s) for s in a.tolist()], dtype=object)
        if col in ("id", "res_id"):
            a = a.astype(np.int64)
        if issubclass(cls, SegmentAttr):
            a = a[first_seg]
        elif issubclass(cls, ResidueAttr):
            a = a[first_res]
        attrs.append(cls(a))
    return attrs, resindex, seg_of, n_res, n_seg


def _relation_rows(atoms, attr: str) -> np.ndarray | None:
    """The rows of the Universe's ``attr`` (``bonds``, ``angles`` ...) lying wholly inside ``atoms``,
    renumbered to it (u64), in the order of ``atoms.<attr>.indices``; None when the Universe has none.

    MDAnalysis builds that TopologyGroup through a Python dict of every atom's relations (a quarter
    second for adk's 25,533 bonds); its rows are the distinct (row, type, guessed, order) entries
    sorted, which for distinct rows is the rows sorted: taken here from the raw values with numpy,
    MDAnalysis' own group only when two entries share a row."""
    from .parts import local_relations
    values = getattr(getattr(atoms.universe._topology, attr, None), "values", None)
    if isinstance(values, list) and not values:
        return None
    if isinstance(values, list):
        rows = np.asarray(values, dtype=np.int64)
        if rows.ndim == 2:
            rows = rows[np.lexsort(rows.T[::-1])]
            if not (rows[1:] == rows[:-1]).all(axis=1).any():
                return local_relations(atoms, rows)
    try:
        group = getattr(atoms, attr)
    except (AttributeError, Exception):   # noqa: BLE001 - MDAnalysis raises NoDataError when absent
        return None
    return local_relations(atoms, group.indices) if len(group) else None


def topology_system(u, skipped: list, relations: bool = True) -> tuple[dict, list[str]]:
    """system blocks from the topology attributes of an MDAnalysis Universe or AtomGroup (with
    ``relations``, the bonds, angles and dihedrals lying wholly inside it, renumbered to it)."""
    atoms = u.atoms
    cols = atom_columns(atoms, skipped)
    blocks = {"atoms": cols} if cols else {}
    counts = {"atoms": len(atoms)}
    for attr, name, ends in (("bonds", "bonds", "ij"), ("angles", "angles", "ijk"), ("dihedrals", "dihedrals", "ijkl"),
                             ("impropers", "impropers", "ijkl"), ("cmaps", "cmaps", "ijklm")):
        if not relations:
            break
        idx = _relation_rows(atoms, attr)
        if idx is None or len(idx) == 0:
            continue
        blocks[name] = {f"atom{e}": idx[:, k] for k, e in enumerate(ends)}
        counts[name] = len(idx)
    if not blocks:
        blocks = {"atoms": {}}
    return {"blocks": blocks, "counts": counts}, sorted(c for c in cols)
