"""Text forms of mrec frames: extended XYZ, plain XYZ and PDB (``mrec cat``, ``mrec convert``).

No optional dependency.  Each writer takes an :class:`~mrec.md.atoms.AtomsView` (plus the
frame's step and time) and writes one frame; several frames are simply concatenated (PDB
frames as ``MODEL`` / ``ENDMDL``).

* **extxyz** -- ``Lattice`` (the lattice vectors as rows: a, then b, then c), ``pbc`` from the
  cell's boundary, ``Properties=species:S:1:pos:R:3`` plus ``velo:R:3`` / ``forces:R:3`` when
  the frame has them, and every finite scalar per-step meta value as ``key=value``
  (``energy`` is what ASE takes as the potential energy), with ``step`` and ``time``.
* **xyz** -- count, a comment (step, time), ``species x y z``.
* **pdb** -- ``CRYST1`` from the cell's (a, b, c, alpha, beta, gamma), ``ATOM`` records with
  name, res_name, res_id, chain, occupancy, b_factor, element where the topology has them.
"""
from __future__ import annotations

import math
from typing import IO

import numpy as np

from .atoms import AtomsView, energy_keys

__all__ = ["write_extxyz", "write_xyz", "write_pdb", "FORMATS"]

FORMATS = ("json", "extxyz", "xyz", "pdb")


def _num(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))


def _scalar_meta(meta: dict) -> dict[str, float | int]:
    out = {}
    for k, v in meta.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            continue
        if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
            continue
        if k.replace("_", "a").isalnum() and not k[0].isdigit():
            out[k] = v
    return out


def _need_positions(view: AtomsView) -> np.ndarray:
    if view.positions is None:
        from ..errors import MrecError
        raise MrecError("the frame has no atoms block with x, y, z columns")
    return view.positions


def write_extxyz(out: IO[str], view: AtomsView, *, step: int | None = None, time: float | None = None) -> None:
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
    header.append(f"Properties={props}")
    if box is not None:
        header.append('pbc="' + " ".join("T" if b else "F" for b in box.boundary) + '"')
    meta = _scalar_meta(view.meta)
    ek = energy_keys(meta)
    if ek is not None and ek != "energy":
        header.append(f"energy={_num(meta[ek])}")
    for k, v in meta.items():
        if k in ("step", "time", "Lattice", "Properties", "pbc"):
            continue
        header.append(f"{k}={_num(v) if isinstance(v, (float, np.floating)) else int(v)}")
    if step is not None:
        header.append(f"step={int(step)}")
    if time is not None:
        header.append(f"time={_num(time)}")
    species = view.species
    data = np.concatenate(cols, axis=1) if len(cols) > 1 else pos
    lines = [str(view.n), " ".join(header)]
    for s, row in zip(species, data):
        lines.append(s + " " + " ".join(f"{v:.10f}" for v in row))
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
