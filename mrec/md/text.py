"""Text forms of mrec frames: extended XYZ, plain XYZ and PDB (``mrec cat``, ``mrec convert``).

No optional dependency.  Each writer takes an :class:`~mrec.md.atoms.AtomsView` (plus the
frame's step and time) and writes one frame; several frames are simply concatenated (PDB
frames as ``MODEL`` / ``ENDMDL``).

* **extxyz** -- ``Lattice`` (the lattice vectors as rows: a, then b, then c), ``pbc`` from the
  cell's boundary, ``Properties=species:S:1:pos:R:3`` plus ``velo:R:3`` / ``forces:R:3`` when
  the frame has them and every other per-atom column ASE can read (``charge`` as
  ``initial_charges``, ``mass`` as ``masses``, ``tag`` as ``tags``, ``magmom`` as
  ``initial_magmoms``, ``free`` as ``move_mask``, any other under its own name), every per-step
  meta value but a JSON document as ``key=value`` (``energy`` is what ASE takes as the potential
  energy; strings quoted, vectors as quoted numbers), with ``step`` and ``time``.  Reals are
  written in their shortest exact form: ASE reads back the same bits.
* **xyz** -- count, a comment (step, time), ``species x y z``.
* **pdb** -- ``CRYST1`` from the cell's (a, b, c, alpha, beta, gamma), ``ATOM`` records with
  name, res_name, res_id, chain, occupancy, b_factor, element where the topology has them.
"""
from __future__ import annotations

import math
import re
from typing import IO

import numpy as np

from .atoms import AtomsView, energy_keys, species_column

__all__ = ["write_extxyz", "write_xyz", "write_pdb", "FORMATS"]

FORMATS = ("json", "extxyz", "xyz", "pdb")


def _num(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: keys mrec writes in an extxyz header itself (``step`` and ``time`` when the frame has them)
_OWN_KEYS = frozenset(("Lattice", "Properties", "pbc"))
#: 3x3 keys ASE reads from 9 numbers in Fortran order
_SPECIAL_3_3 = frozenset(("virial", "stress"))
#: mrec column -> the extxyz property ASE reads into its own field
ASE_PROPERTY = {"charge": "initial_charges", "mass": "masses", "tag": "tags", "magmom": "initial_magmoms"}
_TAKEN = frozenset(("species", "pos", "Z", "velo", "forces", "move_mask", "element"))


def _token(v) -> str:
    """One value as extxyz text: floats in their shortest exact form, bools as T/F."""
    if isinstance(v, (bool, np.bool_)):
        return "T" if v else "F"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return _num(float(v))


def _quoted(text: str) -> str:
    if text and not any(c in text for c in " \t\"'{}[]="):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _header_value(key: str, v) -> str | None:
    """``v`` as an extxyz header value, or None when extxyz cannot hold it (a JSON document)."""
    if isinstance(v, str):
        return _quoted(v)
    if isinstance(v, (bool, np.bool_, int, np.integer, float, np.floating)):
        return _token(v)
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "biuf":
        if key in _SPECIAL_3_3:
            m = _full_3x3(v)
            if m is None:
                return None
            v = m.ravel(order="F")
        return '"' + " ".join(_token(x) for x in v.tolist()) + '"'
    return None


def _full_3x3(v: np.ndarray) -> np.ndarray | None:
    if v.size == 9:
        return v.reshape(3, 3)
    if v.size == 6:                                         # Voigt: xx yy zz yz xz xy
        xx, yy, zz, yz, xz, xy = v.tolist()
        return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    return None


def _header_meta(meta: dict, skipped: set[str] | None, own: frozenset[str]) -> list[str]:
    out = []
    ek = energy_keys(meta)
    if ek is not None and ek != "energy" and isinstance(meta[ek], (int, float, np.integer, np.floating)):
        out.append(f"energy={_token(meta[ek])}")
    for k, v in meta.items():
        if k in own:
            continue
        text = _header_value(k, v) if _NAME.match(k) else None
        if text is None:
            if skipped is not None:
                skipped.add(f"meta {k}")
            continue
        out.append(f"{k}={text}")
    return out


def _property(name: str, v: np.ndarray) -> tuple[str, list[str]] | None:
    """(``name:T:n``, one text per row) of a per-atom column, or None when extxyz cannot hold it."""
    a = np.asarray(v)
    if a.ndim > 2 or not _NAME.match(name) or name in _TAKEN:
        return None
    kind = a.dtype.kind
    letter = {"f": "R", "i": "I", "u": "I", "b": "L", "O": "S"}.get(kind)
    if letter is None:
        return None
    if kind == "O":
        rows = [str(x) for x in a.tolist()]
        if any(not t or t.split() != [t] for t in rows):       # an empty or spaced string breaks the line
            return None
        return f"{name}:S:1", rows
    cols = 1 if a.ndim == 1 else a.shape[1]
    rows = [_token(x) for x in a.tolist()] if a.ndim == 1 else [" ".join(map(_token, r)) for r in a.tolist()]
    return f"{name}:{letter}:{cols}", rows


def _per_atom(view: AtomsView, species_from: str | None, skipped: set[str] | None) -> list[tuple[str, list[str]]]:
    out = []
    for c, v in {**view.columns, **view.extra}.items():
        if c == species_from or (c == "free" and np.all(v)):     # all free: no constraint to write
            continue
        prop = _property(ASE_PROPERTY.get(c, c), v) if c != "free" else (
            "move_mask:L:1", ["T" if x else "F" for x in np.asarray(v).tolist()])
        if prop is None:
            if skipped is not None:
                skipped.add(f"atoms/{c}")
            continue
        out.append(prop)
    return out


def _need_positions(view: AtomsView) -> np.ndarray:
    if view.positions is None:
        from ..errors import MrecError
        raise MrecError("the frame has no atoms block with x, y, z columns")
    return view.positions


def write_extxyz(out: IO[str], view: AtomsView, *, step: int | None = None, time: float | None = None,
                 skipped: set[str] | None = None) -> None:
    """One extxyz frame: every per-step meta value and per-atom column ASE can read back; the names of
    those extxyz cannot hold (a JSON document, a spaced string, a complex column) are added to
    ``skipped``."""
    pos = _need_positions(view)
    header = []
    box = view.box
    if box is not None and box.defined:
        header.append('Lattice="' + " ".join(_num(v) for v in box.rows.ravel()) + '"')
    props = "species:S:1:pos:R:3"
    cols = [pos]
    if view.velocities is not None:
        props += ":velo:R:3"
        cols.append(view.velocities)
    if view.forces is not None:
        props += ":forces:R:3"
        cols.append(view.forces)
    extra = _per_atom(view, species_column(view.columns, view.n), skipped)
    props += "".join(":" + p for p, _ in extra)
    header.append(f"Properties={props}")
    if box is not None:
        header.append('pbc="' + " ".join("T" if b else "F" for b in box.boundary) + '"')
    own = _OWN_KEYS | {k for k, v in (("step", step), ("time", time)) if v is not None}
    header.extend(_header_meta(view.meta, skipped, own))
    if step is not None:
        header.append(f"step={int(step)}")
    if time is not None:
        header.append(f"time={_num(time)}")
    data = np.concatenate(cols, axis=1) if len(cols) > 1 else pos
    lines = [str(view.n), " ".join(header)]
    texts = [rows for _, rows in extra]
    for k, (s, row) in enumerate(zip(view.species, data.tolist())):
        lines.append(" ".join([s, *map(_num, row), *(t[k] for t in texts)]))
    out.write("\n".join(lines) + "\n")


def write_xyz(out: IO[str], view: AtomsView, *, step: int | None = None, time: float | None = None) -> None:
    pos = _need_positions(view)
    comment = " ".join(x for x in (f"step={step}" if step is not None else "",
                                   f"time={_num(time)}" if time is not None else "") if x)
    lines = [str(view.n), comment or "mrec frame"]
    for s, (x, y, z) in zip(view.species, pos):
        lines.append(f"{s} {x:.8f} {y:.8f} {z:.8f}")
    out.write("\n".join(lines) + "\n")


def _pdb_name(name: str, element: str) -> str:
    name = name[:4]
    if len(name) == 4 or len(element) == 2:
        return f"{name:<4s}"
    return f" {name:<3s}"


def write_pdb(out: IO[str], view: AtomsView, *, model: int | None = None, step: int | None = None,
              time: float | None = None) -> None:
    pos = _need_positions(view)
    lines = []
    if model is not None:                  # each model carries its own cell (it may change)
        lines.append(f"MODEL     {model:>4d}")
    if step is not None:
        lines.append(f"REMARK     mrec step {step}" + (f" time {_num(time)}" if time is not None else ""))
    if view.box is not None and view.box.defined:
        a, b, c, al, be, ga = view.box.dimensions
        lines.append(f"CRYST1{a:9.3f}{b:9.3f}{c:9.3f}{al:7.2f}{be:7.2f}{ga:7.2f} P 1           1")
    g = view.get
    n = view.n
    elements = g("element")
    names = g("name")
    species = view.species
    res_names = g("res_name")
    res_ids = g("res_id")
    chains = g("chain")
    occ = g("occupancy")
    bfac = g("b_factor")
    for k in range(n):
        el = str(elements[k]) if elements is not None else ""
        name = str(names[k]) if names is not None else species[k]
        resn = (str(res_names[k]) if res_names is not None else "UNK")[:4]
        resi = int(res_ids[k]) % 10000 if res_ids is not None else 1
        ch = (str(chains[k]) if chains is not None else "")[:1] or " "
        o = float(occ[k]) if occ is not None else 1.0
        bf = float(bfac[k]) if bfac is not None else 0.0
        x, y, z = pos[k]
        lines.append(f"ATOM  {(k + 1) % 100000:5d} {_pdb_name(name, el)} {resn:<4s}{ch}{resi:4d}    "
                     f"{x:8.3f}{y:8.3f}{z:8.3f}{o:6.2f}{bf:6.2f}          {el[:2].upper():>2s}")
    if model is not None:
        lines.append("ENDMDL")
    out.write("\n".join(lines) + "\n")
