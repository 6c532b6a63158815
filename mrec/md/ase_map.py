"""ASE ``Atoms`` <-> mrec frames: everything an image holds, typed, or a refusal naming what cannot be stored.

Into a frame (:func:`image_frame`):

* ``positions`` -> ``x y z``; ``numbers`` -> ``element``; momenta -> ``vx vy vz`` (Å/ps);
  ``masses`` -> ``mass``; ``initial_charges`` -> ``charge``; ``tags`` -> ``tag``;
  ``initial_magmoms`` -> ``magmom``; a ``FixAtoms`` constraint -> ``free`` (False where fixed);
* every other per-atom array -> a column of the same name, its dtype kept (float16/float32 widen
  exactly to f64; a canonical name such as ``ix`` takes its canonical dtype when that is exact),
  its trailing axes kept (``(N, 3)`` is one column);
* ``atoms.info`` -> per-step meta, one key each, typed: bool, int (i64, u64 past 2**63), float
  (f64), str, a numpy vector of 3 (f64x3 / i64x3 / i32x3 / u64x3 / u32x3 / bool3), 6 floats
  (f64x6), a 3x3 float matrix (f64x9), any other numeric array or a JSON document (a dict with
  string keys, a list, None: ``json``; an array's dtype is remembered in ``meta.modules.ase``).
  ``info["step"]`` is also the record's step;
* the calculator's results: ``energy``, ``free_energy``, ``stress`` (Voigt), ``magmom``,
  ``dipole`` ... -> per-step meta; ``forces`` -> ``fx fy fz``; ``charges``, ``magmoms``,
  ``energies``, ``stresses`` ... -> per-atom columns of those names.  Which keys are results is
  written to the record's ``meta.modules.ase.results``;
* the cell -> the box (rows, ``pbc`` as its boundary, ``celldisp`` as its origin).

What cannot be stored exactly -- an object, a tuple, a dict with non-string keys or numpy values,
an object array, a constraint other than ``FixAtoms``, a name used twice -- is refused
(:class:`~mrec.errors.RefusalError` kind ``bad_input``) naming the image and the key.

Out of a frame (:func:`atoms_of`): the inverse, plus every column of the frame's ``atoms`` block
(and of ``system/atoms``) that has no ASE meaning as ``atoms.arrays[name]``, and every per-step
meta key that is not a result as ``atoms.info[key]`` (numpy scalars come back as Python scalars).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MrecError, RefusalError

__all__ = ["Image", "image_frame", "atoms_of", "MODULE"]

#: the key of ``meta.modules`` this mapping writes
MODULE = "ase"
#: ASE arrays with an mrec column of their own (positions and numbers aside)
_ARRAY_COLUMNS = {"masses": "mass", "initial_charges": "charge", "tags": "tag", "initial_magmoms": "magmom"}
#: columns this mapping writes for ASE's own fields: a custom array may not take these names
_OWN = frozenset("x y z vx vy vz fx fy fz element mass charge tag magmom free".split())
#: the exact numpy dtypes each vector tag reads back as
_VECTOR_TAGS = {("f", 8, (3,)): "f64x3", ("i", 8, (3,)): "i64x3", ("i", 4, (3,)): "i32x3",
                ("u", 8, (3,)): "u64x3", ("u", 4, (3,)): "u32x3", ("b", 1, (3,)): "bool3",
                ("f", 8, (6,)): "f64x6", ("f", 8, (3, 3)): "f64x9"}


def _refuse(k: int, what: str) -> RefusalError:
    return RefusalError(f"image {k}: {what}", kind="bad_input")


@dataclass
class Image:
    """One ASE image as a frame, with what the trajectory must declare for it."""

    n: int
    frame: dict
    step: int | None
    meta_tags: dict[str, str] = field(default_factory=dict)
    results: list[str] = field(default_factory=list)
    info_arrays: dict[str, str] = field(default_factory=dict)

    @property
    def columns(self) -> dict[str, np.ndarray]:
        return self.frame["blocks"]["atoms"]


# -- per-atom arrays ----------------------------------------------------------------------------

def _column(name: str, values, n: int, k: int) -> np.ndarray:
    """A per-atom array as a column: strings as ``object`` str, float16/float32 widened, or refused."""
    a = np.asarray(values)
    if a.ndim == 0 or a.shape[0] != n:
        raise _refuse(k, f"per-atom array {name!r} has shape {list(a.shape)}, not [{n}, ...]")
    kind = a.dtype.kind
    if kind == "f" and a.dtype.itemsize < 8:
        return a.astype(np.float64)
    if kind in "biuf" or (kind == "c" and a.dtype.itemsize in (8, 16)):
        return a
    if kind == "U" or (kind == "O" and all(isinstance(v, str) for v in a.ravel())):
        if a.ndim != 1:
            raise _refuse(k, f"per-atom array {name!r}: strings with trailing axes cannot be stored")
        return np.array([str(v) for v in a], dtype=object)
    raise _refuse(k, f"per-atom array {name!r} of dtype {a.dtype} cannot be stored (numbers, bools or "
                     "strings only)")


def _custom_arrays(atoms, k: int) -> dict[str, np.ndarray]:
    out = {}
    for name, values in atoms.arrays.items():
        if name in ("positions", "numbers", "momenta") or name in _ARRAY_COLUMNS:
            continue
        if name in _OWN:
            raise _refuse(k, f"per-atom array {name!r} has the name of a column mrec writes for ASE's own "
                             "fields: rename it")
        out[name] = _column(name, values, len(atoms), k)
    return out


def _free(atoms, k: int) -> np.ndarray | None:
    from ase.constraints import FixAtoms
    if not atoms.constraints:
        return None
    free = np.ones(len(atoms), dtype=bool)
    for c in atoms.constraints:
        if not isinstance(c, FixAtoms):
            raise _refuse(k, f"constraint {type(c).__name__} cannot be stored (FixAtoms only, as the per-atom "
                             "column free)")
        free[c.get_indices()] = False
    return free


# -- per-step values ----------------------------------------------------------------------------

def _json_same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_json_same(a[x], b[x]) for x in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_json_same(x, y) for x, y in zip(a, b))
    return a == b


def _json_exact(v) -> bool:
    """True when ``v`` reads back from its JSON text as the same Python values and types."""
    try:
        text = json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return _json_same(json.loads(text), v)


def meta_value(key: str, v, k: int) -> tuple[str, Any, str | None]:
    """(tag, value to store, numpy dtype to restore an array stored as ``json``) of an info value."""
    if isinstance(v, (bool, np.bool_)):
        return "bool", bool(v), None
    if isinstance(v, (int, np.integer)):
        return ("u64" if int(v) >= 2**63 else "i64"), int(v), None
    if isinstance(v, (float, np.floating)):
        return "f64", float(v), None
    if isinstance(v, str):
        return "string", v, None
    if isinstance(v, np.ndarray):
        tag = _VECTOR_TAGS.get((v.dtype.kind, v.dtype.itemsize, v.shape))
        if tag is not None:
            return tag, v.reshape(-1), None
        if v.dtype.kind in "biuf" and v.size and (v.dtype.kind != "f" or np.isfinite(v).all()):
            return "json", v.tolist(), v.dtype.str
        raise _refuse(k, f"info[{key!r}]: an array of dtype {v.dtype} and shape {list(v.shape)} cannot be stored "
                         "(finite numbers or bools only)")
    if (v is None or isinstance(v, (dict, list))) and _json_exact(v):
        return "json", v, None
    raise _refuse(k, f"info[{key!r}]: a {type(v).__name__} cannot be stored (a bool, int, float, str, numpy "
                     "array, or a JSON document of dicts with string keys, lists, str, numbers, bools, None)")


def _vector_back(tag: str, v):
    return np.asarray(v).reshape(3, 3) if tag == "f64x9" else np.asarray(v)


# -- into a frame -------------------------------------------------------------------------------

def image_frame(atoms, ase_units, k: int = 0) -> Image:
    """The frame of ASE image ``k`` and its declarations, or a refusal naming what cannot be stored."""
    from ase import Atoms
    from ase.io.extxyz import per_atom_properties
    from ..record.model.box import Box
    from .columns import xyz_cols
    if not isinstance(atoms, Atoms):
        raise RefusalError(f"image {k} is a {type(atoms).__name__}, not an ase.Atoms", kind="bad_frame")
    n = len(atoms)
    cols = xyz_cols("", atoms.get_positions())
    cols["element"] = np.array(atoms.get_chemical_symbols(), dtype=object)
    if atoms.has("momenta"):
        cols.update(xyz_cols("v", atoms.get_velocities() * (1000.0 * ase_units.fs)))   # Å/ASE time -> Å/ps
    for array, col in _ARRAY_COLUMNS.items():
        if atoms.has(array):
            cols[col] = _column(array, atoms.arrays[array], n, k)
    free = _free(atoms, k)
    if free is not None:
        cols["free"] = free
    cols.update(_custom_arrays(atoms, k))
    img = Image(n, {"blocks": {"atoms": cols}}, None)
    meta: dict[str, Any] = {}
    calc = atoms.calc
    for key, v in (getattr(calc, "results", {}) if calc is not None else {}).items():
        img.results.append(key)
        if key == "forces":
            cols.update(xyz_cols("f", v))
        elif key in per_atom_properties:
            if key in cols:
                raise _refuse(k, f"the result {key!r} and a per-atom array of that name: rename the array")
            cols[key] = _column(key, v, n, k)
        else:
            if key == "stress":
                v = _voigt(v)
            img.meta_tags[key], meta[key], dt = meta_value(key, v, k)
            if dt is not None:
                img.info_arrays[key] = dt
    for key, v in atoms.info.items():
        if key in meta:
            raise _refuse(k, f"info[{key!r}] and the calculator result {key!r}: one name for two values")
        img.meta_tags[key], meta[key], dt = meta_value(key, v, k)
        if dt is not None:
            img.info_arrays[key] = dt
    if "step" in atoms.info:
        if img.meta_tags["step"] not in ("i64", "u64"):
            raise _refuse(k, f"info['step'] = {atoms.info['step']!r} is not an integer (it is the record's step)")
        img.step = int(atoms.info["step"])
    pbc = np.asarray(atoms.get_pbc(), dtype=bool)
    cell = np.asarray(atoms.get_cell()[:], dtype=np.float64)
    if cell.any() and abs(np.linalg.det(cell)) > 0:
        disp = np.asarray(atoms.get_celldisp(), dtype=np.float64).reshape(3)
        img.frame["box"] = Box.from_rows(cell, origin=disp if disp.any() else None, boundary=pbc)
    elif pbc.any():
        raise MrecError(f"an ASE frame with periodic axes {pbc.tolist()} but no full cell cannot be stored")
    if meta:
        img.frame["meta"] = meta
    return img


def _voigt(v) -> np.ndarray:
    st = np.asarray(v, dtype=np.float64).ravel()
    if st.size == 9:
        m = st.reshape(3, 3)
        st = np.array([m[0, 0], m[1, 1], m[2, 2], m[1, 2], m[0, 2], m[0, 1]])
    return st


def declare(schema, img: Image, precision: float | None) -> None:
    """Declare the ``atoms`` columns and per-step meta keys of the first image ``img``."""
    from ..record.model.dtypes import as_column_array, canonical_dtype
    schema.declare_block("atoms", rows=img.n)
    for c, v in img.columns.items():
        dt = canonical_dtype(c) or as_column_array(v, where=None, what=f"per-atom array {c!r}")[1]
        schema.declare_column("atoms", c, dt, trailing=v.shape[1:], precision=precision if c in "xyz" else None)
    for key, tag in img.meta_tags.items():
        schema.declare_meta(key, tag)


def check_like(img: Image, first: Image, k: int, label: str) -> None:
    """Refuse image ``k`` when its fields differ from the first image's (naming them); a first image's
    ``free`` column absent later means every atom is free."""
    if "free" in first.columns and "free" not in img.columns:
        img.columns["free"] = np.ones(img.n, dtype=bool)
    for what, got, want in (("per-atom fields", set(img.columns), set(first.columns)),
                            ("info keys and results", set(img.meta_tags), set(first.meta_tags))):
        if got != want:
            diff = sorted(got ^ want)
            raise MrecError(f"frame {k}: {what} {sorted(got)} differ from the first frame's {sorted(want)} "
                            f"(differing: {', '.join(diff)})", path=label)
    if (img.step is None) != (first.step is None):
        raise MrecError(f"frame {k}: info['step'] is {'absent' if img.step is None else 'present'} unlike in the "
                        "first frame", path=label)


def module_doc(first: Image) -> dict:
    """``meta.modules.ase``: which meta keys and columns are calculator results, and the numpy dtypes of
    info arrays stored as JSON."""
    doc: dict[str, Any] = {"results": sorted(first.results)}
    if first.info_arrays:
        doc["info_arrays"] = dict(first.info_arrays)
    return doc


# -- out of a frame -----------------------------------------------------------------------------

_STANDARD_COLUMNS = frozenset("x y z vx vy vz fx fy fz element atomic_number mass charge tag magmom free".split())


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


def _array_back(v) -> np.ndarray:
    a = np.asarray(v)
    return np.array([str(s) for s in a], dtype=str) if a.dtype == object else a


def atoms_of(f, system, rec_meta: dict, *, lf: float, tf: float, ef: float, ase_units, label: str):
    """The ASE Atoms of frame ``f`` of a record (``system`` its system section or None, ``rec_meta`` its
    meta document; ``lf`` / ``tf`` / ``ef`` the length, time and energy factors to Å, ps and eV)."""
    import ase
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.constraints import FixAtoms
    from ase.io.extxyz import per_atom_properties
    from .atoms import atoms_view, energy_keys
    view = atoms_view(f, system)
    if view.positions is None:
        raise MrecError("an image needs an atoms block with x, y, z columns", path=label)
    cols = view.columns
    if "atomic_number" in cols and "element" not in cols:
        numbers = np.asarray(cols["atomic_number"], dtype=np.int64)
    else:
        numbers = _numbers(view.species)
    atoms = ase.Atoms(positions=view.positions * lf, numbers=numbers)
    box = view.box
    if box is not None and box.defined:
        atoms.set_cell(box.rows * lf)
        atoms.set_pbc(box.boundary)
        if box.origin.any():
            atoms.set_celldisp(box.origin * lf)
    atom_cols = dict(f.blocks.get("atoms", {}))
    if system is not None and system.counts.get("atoms") == view.n:
        atom_cols = {**system.blocks.get("atoms", {}), **atom_cols}
    if "mass" in cols:                    # before the velocities: ASE stores momenta
        atoms.set_masses(np.asarray(cols["mass"], dtype=np.float64))
    if view.velocities is not None:
        atoms.set_velocities(view.velocities * (lf / tf) / (1000.0 * ase_units.fs))
    if "tag" in atom_cols:
        atoms.set_tags(np.asarray(atom_cols["tag"], dtype=np.int64))
    if "charge" in cols:
        atoms.set_initial_charges(np.asarray(cols["charge"], dtype=np.float64))
    if "magmom" in atom_cols:
        atoms.set_initial_magnetic_moments(np.asarray(atom_cols["magmom"]))
    if "free" in atom_cols and not np.all(atom_cols["free"]):
        atoms.set_constraint(FixAtoms(mask=~np.asarray(atom_cols["free"], dtype=bool)))
    doc = (rec_meta.get("modules") or {}).get(MODULE)
    doc = doc if isinstance(doc, dict) else None
    results: dict[str, Any] = {}
    meta = dict(f.meta)
    if doc is not None:
        names = set(doc.get("results", ()))
        arrays = doc.get("info_arrays", {})
    else:                                 # a record from elsewhere: its potential energy, free energy, stress
        ek = energy_keys(meta)
        names = {"free_energy", "stress"} | ({"forces"} if view.forces is not None else set())
        if ek is not None:
            results["energy"] = float(meta.pop(ek)) * ef
        arrays = {}
    for key in names:
        if key == "forces":
            if view.forces is not None:
                results["forces"] = view.forces * (ef / lf)
        elif key in per_atom_properties and key in atom_cols:
            results[key] = np.asarray(atom_cols.pop(key))
        elif key in meta:
            results[key] = _result(key, meta.pop(key), f, ef, lf)
    for c, v in atom_cols.items():
        if c not in _STANDARD_COLUMNS:
            atoms.arrays[c] = _array_back(v)
    for key, v in meta.items():
        if key in arrays:
            atoms.info[key] = np.array(v, dtype=np.dtype(arrays[key]))
        elif isinstance(v, np.ndarray):
            atoms.info[key] = _vector_back(_tag(f, key), v)
        else:
            atoms.info[key] = _py(v)
    if results:
        atoms.calc = SinglePointCalculator(atoms, **results)
    return atoms


def _tag(f, key: str) -> str:
    v = np.asarray(f.meta[key])
    return "f64x9" if v.dtype.kind == "f" and v.shape == (9,) else ""


def _result(key: str, v, f, ef: float, lf: float):
    if key in ("energy", "free_energy"):
        return float(v) * ef
    if key == "stress":
        return np.asarray(v, dtype=np.float64) * (ef / lf ** 3)
    return _vector_back(_tag(f, key), v) if isinstance(v, np.ndarray) else _py(v)


def _numbers(symbols) -> np.ndarray:
    """Atomic numbers of chemical symbols; 0 (ASE's ``X``) for a label that is none (a virtual site)."""
    from ase.data import atomic_numbers
    out = np.zeros(len(symbols), dtype=np.int64)
    cache: dict[str, int] = {}
    for k, sym in enumerate(symbols):
        z = cache.get(sym)
        if z is None:
            z = cache[sym] = atomic_numbers.get(sym, atomic_numbers.get(sym[:1].upper() + sym[1:].lower(), 0))
        out[k] = z
    return out
