"""The force-field section ``forcefield/`` (mrec-notes §9.1; the spec's forcefield chapter).

``forcefield`` is frame-shaped::

    forcefield/                     attrs = the force-field document (plain JSON, no _meta_types):
                                    name, units, source?, special_bonds?, styles, producer keys
      <category>.<encoded style>/   one block (a "style table") per entry of styles
        name                        string[T], never null, unique
        itom jtom ktom ltom mtom    string[T], never null, the first <arity> of them ("" = wildcard)
        class element smarts ...    string[T], nullable annotations
        <param>                     f64[T] | f64[T, S...] | string[T]; canonical keys at their dtype
        _validity/<column>          absent parameters are nulls

:class:`ForceField` is the model (the document plus the tables as a
:class:`~mrec.record.model.frame.Frame` whose blocks are the tables);
:func:`write_forcefield` / :func:`read_forcefield` are the binding;
:func:`unresolved_links` lists the names a system uses that resolve to no
row (a SHOULD-level report, never a refusal).

Every rule is checked when a :class:`ForceField` is built, so it holds on
write (the model is built from the caller's input) and on read (the model
is built from the store).  Refusals are :class:`~mrec.errors.RefusalError`
with one of these kinds, and a message naming the style, table, row or key:

* ``missing_key`` -- ``name`` / ``styles`` / ``source.format`` absent;
* ``missing_units`` -- ``units`` absent, or stating neither a preset nor a quantity;
* ``bad_units`` -- an unknown preset, a quantity that is not a string, a
  quantity that does not agree with the preset beside it (``"angle":
  "radian"`` beside any preset);
* ``bad_forcefield`` -- the document's shape: ``name`` not a string,
  ``source`` / ``special_bonds`` / ``styles`` / a style entry malformed, a
  ``(category, style)`` pair twice, a ``one_four`` other than ``regular`` /
  ``epsilon14``, a non-finite number;
* ``reserved_meta_key`` -- a ``_meta_types`` key (the document is untyped);
* ``missing_table`` -- a declared style without its table;
* ``bad_name`` -- a table's ``name`` column missing, not string, null or repeated;
* ``bad_endpoint`` -- endpoints missing, beyond the category's arity, not
  string, null; a smirks-keyed table with endpoints or without ``smirks``; a
  class-keyed style whose atom tables lack ``class``;
* ``bad_annotation`` -- an annotation column that is not a string per row;
* ``bad_parameter`` -- a parameter that is not ``f64`` / ``string`` (canonical
  keys aside), trailing axes on a non-``f64`` column or of length 0, a
  non-finite value in a non-null row, a ``cmap`` grid not ``f64[T,N,N]`` with
  N >= 2, a gap in ``dihedral.nharmonic``'s ``a1..aN``;
* ``pair_conflict`` -- two rows of a pair table naming one unordered
  ``{itom, jtom}`` with different parameters;
* ``bad_precision`` -- a precision declared on a force-field column;
* ``structural_shape_mismatch`` -- a style table with a structural shape;
* the frame kinds (``canonical_dtype``, ``bad_validity``, ``row_count_mismatch``,
  ``unknown_dtype``, ``narrow_float``, ...) for the block rules every
  frame-shaped group shares.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import RefusalError
from .documents import _plain
from ..model.dtypes import canonical_dtype
from ..model.frame import Frame
from ..model.typed_json import json_dumps, to_plain

__all__ = [
    "SECTION", "CATEGORY_ARITY", "ENDPOINTS", "ANNOTATIONS", "PRESETS", "QUANTITIES", "PRESET_UNITS",
    "ForceField", "block_name", "encode_style", "decode_block_name", "check_forcefield_document",
    "check_units", "write_forcefield", "read_forcefield", "unresolved_links", "RELATION_BLOCKS",
]

SECTION = "forcefield"
#: Endpoint columns, in order; a table of arity A carries exactly the first A.
ENDPOINTS: tuple[str, ...] = ("itom", "jtom", "ktom", "ltom", "mtom")
#: The registered categories and their arity.  Any other ``^[a-z][a-z0-9_]*$`` category is legal:
#: its endpoint columns must then be a prefix of :data:`ENDPOINTS`.
CATEGORY_ARITY: dict[str, int] = {"atom": 0, "bond": 2, "angle": 3, "dihedral": 4, "improper": 4, "pair": 2,
                                  "constraint": 2, "virtual_site": 0, "drude": 2, "cmap": 5}
#: The system block a relation category links from (``type`` names a row of a table of the category).
RELATION_BLOCKS: dict[str, str] = {"bond": "bonds", "angle": "angles", "dihedral": "dihedrals",
                                   "improper": "impropers", "constraint": "constraints",
                                   "virtual_site": "virtual_sites", "drude": "drudes", "cmap": "cmaps"}
#: Nullable string annotation columns.
ANNOTATIONS: tuple[str, ...] = ("class", "element", "smarts", "smirks", "overrides", "desc", "doi")
ENDPOINT_KEYS: tuple[str, ...] = ("type", "class", "smirks")
PRESETS: tuple[str, ...] = ("real", "metal", "si", "cgs", "electron", "micro", "nano", "lj", "openmm")
QUANTITIES: tuple[str, ...] = ("length", "energy", "angle", "charge", "mass", "time")
#: Each preset's unit per quantity (the LAMMPS ``units`` command; every angle is the degree, E3+).
#: ``lj`` is reduced: only its angle has a unit.  ``openmm`` is the OpenMM unit system.
PRESET_UNITS: dict[str, dict[str, str]] = {
    "real": {"length": "angstrom", "energy": "kcal/mol", "angle": "degree", "charge": "e", "mass": "dalton",
             "time": "fs"},
    "metal": {"length": "angstrom", "energy": "eV", "angle": "degree", "charge": "e", "mass": "dalton",
              "time": "ps"},
    "si": {"length": "m", "energy": "J", "angle": "degree", "charge": "C", "mass": "kg", "time": "s"},
    "cgs": {"length": "cm", "energy": "erg", "angle": "degree", "charge": "statcoulomb", "mass": "g", "time": "s"},
    "electron": {"length": "bohr", "energy": "hartree", "angle": "degree", "charge": "e", "mass": "dalton",
                 "time": "fs"},
    "micro": {"length": "micrometer", "energy": "picogram*micrometer^2/microsecond^2", "angle": "degree",
              "charge": "picocoulomb", "mass": "picogram", "time": "microsecond"},
    "nano": {"length": "nm", "energy": "attogram*nm^2/ns^2", "angle": "degree", "charge": "e",
             "mass": "attogram", "time": "ns"},
    "lj": {"angle": "degree"},
    "openmm": {"length": "nm", "energy": "kJ/mol", "angle": "degree", "charge": "e", "mass": "dalton",
               "time": "ps"},
}
# Spellings taken as the same unit (pint names and common abbreviations).  mrec does not depend on
# pint: a quantity beside a preset must be one of these spellings of the preset's own unit.
_UNIT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "angstrom": ("angstrom", "angstroms", "Å", "Å", "ångström", "Angstrom"),
    "nm": ("nm", "nanometer", "nanometers", "nanometre", "nanometres"),
    "m": ("m", "meter", "meters", "metre", "metres"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "bohr": ("bohr", "a0", "a_0", "bohr_radius"),
    "micrometer": ("micrometer", "micrometers", "micrometre", "um", "µm", "μm", "micron"),
    "kcal/mol": ("kcal/mol", "kcal/mole", "kilocalorie/mole", "kilocalorie/mol", "kilocalories/mole",
                 "kilocalorie_per_mole", "kcal*mol^-1"),
    "kJ/mol": ("kJ/mol", "kJ/mole", "kilojoule/mole", "kilojoule/mol", "kilojoules/mole", "kilojoule_per_mole",
               "kJ*mol^-1"),
    "eV": ("eV", "electron_volt", "electronvolt"),
    "J": ("J", "joule", "joules"),
    "erg": ("erg", "ergs"),
    "hartree": ("hartree", "hartrees", "Eh", "E_h"),
    "picogram*micrometer^2/microsecond^2": ("picogram*micrometer^2/microsecond^2", "pg*um^2/us^2",
                                            "pg*µm^2/µs^2", "pg*μm^2/μs^2"),
    "attogram*nm^2/ns^2": ("attogram*nm^2/ns^2", "attogram*nanometer^2/nanosecond^2", "ag*nm^2/ns^2"),
    "degree": ("degree", "degrees", "deg", "°"),
    "e": ("e", "elementary_charge", "e0"),
    "C": ("C", "coulomb", "coulombs"),
    "statcoulomb": ("statcoulomb", "statC", "esu", "Fr", "franklin"),
    "picocoulomb": ("picocoulomb", "pC"),
    "dalton": ("dalton", "Da", "amu", "u", "unified_atomic_mass_unit", "g/mol", "g/mole", "gram/mole",
               "grams/mole"),
    "kg": ("kg", "kilogram", "kilograms"),
    "g": ("g", "gram", "grams"),
    "picogram": ("picogram", "picograms", "pg"),
    "attogram": ("attogram", "attograms", "ag"),
    "fs": ("fs", "femtosecond", "femtoseconds"),
    "ps": ("ps", "picosecond", "picoseconds"),
    "s": ("s", "second", "seconds", "sec"),
    "microsecond": ("microsecond", "microseconds", "us", "µs", "μs"),
    "ns": ("ns", "nanosecond", "nanoseconds"),
}
_CANONICAL_UNIT: dict[str, str] = {s: canon for canon, spellings in _UNIT_SPELLINGS.items() for s in spellings}
_CATEGORY = re.compile(r"[a-z][a-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_NHARMONIC = re.compile(r"a([0-9]+)")


def _refuse(kind: str, message: str, where: str | None = None) -> RefusalError:
    return RefusalError(message, path=where, kind=kind)


# ---------------------------------------------------------------------------
# Block names

def encode_style(style: str) -> str:
    """``style``'s UTF-8 bytes with every byte outside ``A-Z a-z 0-9 - _`` as ``%XX`` (uppercase hex)."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in style.encode("utf-8"))


def block_name(category: str, style: str) -> str:
    """The block of a style's table: ``<category>.<encoded style>`` (``pair.lj%2Fcut``)."""
    return f"{category}.{encode_style(style)}"


def decode_block_name(name: str) -> tuple[str, str] | None:
    """``(category, style)`` of a block name (split at the first ``.``, percent-decode the rest),
    or None when ``name`` is no such name (no ``.``, a broken ``%`` escape, bytes that are not UTF-8)."""
    category, dot, rest = name.partition(".")
    if not dot:
        return None
    raw = bytearray()
    i = 0
    while i < len(rest):
        ch = rest[i]
        if ch == "%":
            hexd = rest[i + 1:i + 3]
            if len(hexd) != 2 or not all(c in "0123456789ABCDEFabcdef" for c in hexd):
                return None
            raw.append(int(hexd, 16))
            i += 3
        else:
            raw += ch.encode("utf-8")
            i += 1
    try:
        return category, raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


# ---------------------------------------------------------------------------
# The document

def _normal_unit(u: str) -> str:
    return re.sub(r"\s+", "", u).replace("**", "^").replace("·", "*")


def check_units(units: Any, where: str | None = None) -> dict:
    """``units`` checked: a preset and/or quantity strings, agreeing with each other.

    A bare string is taken as ``{"preset": <string>}`` (the spelling frame meta
    allows).  Keys beyond ``preset`` and the quantities are kept unchecked; a
    ``null`` value means the key is unset.
    """
    if units is None:
        raise _refuse("missing_units", "forcefield: units is required (a preset and/or the unit of each "
                                       "quantity)", where)
    if isinstance(units, str):
        units = {"preset": units}
    if not isinstance(units, Mapping):
        raise _refuse("bad_units", f"forcefield units: an object of preset / quantities, found {units!r}", where)
    preset = units.get("preset")
    stated = {q: units[q] for q in QUANTITIES if units.get(q) is not None}
    if preset is None and not stated:
        raise _refuse("missing_units", "forcefield units states neither a preset nor any quantity (length, energy, "
                                       "angle, charge, mass, time)", where)
    if preset is not None and preset not in PRESETS:
        raise _refuse("bad_units", f"forcefield units.preset {preset!r} is not one of {', '.join(PRESETS)}", where)
    for q, u in stated.items():
        if not isinstance(u, str) or not u.strip():
            raise _refuse("bad_units", f"forcefield units.{q} must be a unit string, found {u!r}", where)
        if preset is None:
            continue
        want = PRESET_UNITS[preset].get(q)
        got = _CANONICAL_UNIT.get(_normal_unit(u))
        if want is None:
            raise _refuse("bad_units", f"forcefield units.{q} is {u!r} beside preset {preset!r}, which gives "
                                       f"{q} no unit (reduced units)", where)
        if got != want:
            extra = " (every preset's angle is the degree; force constants are per radian whatever it says)" \
                if q == "angle" else ""
            raise _refuse("bad_units", f"forcefield units.{q} is {u!r} beside preset {preset!r}, whose {q} is "
                                       f"{want!r}: a quantity stated beside a preset must agree with it{extra}",
                          where)
    return dict(units)


def _check_source(source: Any, where: str | None) -> None:
    if source is None:
        return
    if not isinstance(source, Mapping):
        raise _refuse("bad_forcefield", f"forcefield source is an object, found {source!r}", where)
    if "format" not in source or source["format"] is None:
        raise _refuse("missing_key", "forcefield source.format is required when source is given", where)
    if not isinstance(source["format"], str):
        raise _refuse("bad_forcefield", f"forcefield source.format is a string, found {source['format']!r}", where)
    uri = source.get("uri")
    if uri is not None and not isinstance(uri, str):
        raise _refuse("bad_forcefield", f"forcefield source.uri is a string, found {uri!r}", where)
    sha = source.get("sha256")
    if sha is not None and (not isinstance(sha, str) or not _SHA256.fullmatch(sha)):
        raise _refuse("bad_forcefield", f"forcefield source.sha256 is 64 lowercase hex digits, found {sha!r}", where)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_special_bonds(sb: Any, where: str | None) -> None:
    if sb is None:
        return
    if not isinstance(sb, Mapping):
        raise _refuse("bad_forcefield", f"forcefield special_bonds is an object {{lj, coul}}, found {sb!r}", where)
    extra = sorted(set(sb) - {"lj", "coul"})
    if extra:
        raise _refuse("bad_forcefield", f"forcefield special_bonds has only lj and coul, found {extra}", where)
    for k in ("lj", "coul"):
        if k not in sb:
            raise _refuse("missing_key", f"forcefield special_bonds.{k} is required ([w12, w13, w14])", where)
        v = sb[k]
        if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_number(x) for x in v):
            raise _refuse("bad_forcefield", f"forcefield special_bonds.{k} is 3 finite numbers [w12, w13, w14], "
                                            f"found {v!r}", where)


def _style_label(i: int, entry: Mapping) -> str:
    return f"forcefield style {i} ({entry.get('category')!r} {entry.get('style')!r})"


def _check_style(i: int, entry: Any, where: str | None) -> dict:
    if not isinstance(entry, Mapping):
        raise _refuse("bad_forcefield", f"forcefield style {i} is an object {{category, style, ...}}, found "
                                        f"{entry!r}", where)
    at = _style_label(i, entry)
    for k in ("category", "style"):
        if k not in entry:
            raise _refuse("missing_key", f"{at}: {k} is required", where)
    cat, style = entry["category"], entry["style"]
    if not isinstance(cat, str) or not _CATEGORY.fullmatch(cat):
        raise _refuse("bad_forcefield", f"{at}: category must match ^[a-z][a-z0-9_]*$, found {cat!r}", where)
    if not isinstance(style, str) or not style:
        raise _refuse("bad_forcefield", f"{at}: style is a non-empty string, found {style!r}", where)
    params = entry.get("params")
    if params is not None:
        if not isinstance(params, Mapping):
            raise _refuse("bad_forcefield", f"{at}: params is an object name -> number | string, found {params!r}",
                          where)
        for k, v in params.items():
            if not (isinstance(v, str) or _is_number(v)):
                raise _refuse("bad_forcefield", f"{at}: params.{k} is a finite number or a string, found {v!r}",
                              where)
        if cat == "pair" and style == "lj/charmm" and "one_four" in params \
                and params["one_four"] not in ("regular", "epsilon14"):
            raise _refuse("bad_forcefield", f"{at}: params.one_four is 'regular' or 'epsilon14', found "
                                            f"{params['one_four']!r}", where)
    expr = entry.get("expression")
    if expr is not None and not isinstance(expr, str):
        raise _refuse("bad_forcefield", f"{at}: expression is a string, found {expr!r}", where)
    key = entry.get("endpoint_key", "type")
    if key not in ENDPOINT_KEYS:
        raise _refuse("bad_forcefield", f"{at}: endpoint_key is one of {', '.join(ENDPOINT_KEYS)}, found {key!r}",
                      where)
    return dict(entry)


def check_forcefield_document(doc: Any, where: str | None = None) -> dict:
    """The force-field document (the group's attribute map) checked; returned as a plain dict.

    Unknown keys are kept verbatim.  The document is plain finite JSON (no
    ``_meta_types``).
    """
    if not isinstance(doc, Mapping):
        raise _refuse("bad_forcefield", f"the forcefield document is a JSON object, found {type(doc).__name__}",
                      where)
    try:
        _plain(doc, where, "forcefield")
    except RefusalError as exc:
        raise _refuse("bad_forcefield", exc.detail, where) from None
    if "_meta_types" in doc:
        raise _refuse("reserved_meta_key", "forcefield: the document is untyped plain JSON; _meta_types is "
                                           "reserved for typed frame meta", where)
    out = dict(doc)
    if "name" not in doc:
        raise _refuse("missing_key", "forcefield: name is required", where)
    if not isinstance(doc["name"], str):
        raise _refuse("bad_forcefield", f"forcefield: name is a string, found {doc['name']!r}", where)
    out["units"] = check_units(doc.get("units"), where)
    _check_source(doc.get("source"), where)
    _check_special_bonds(doc.get("special_bonds"), where)
    if "styles" not in doc:
        raise _refuse("missing_key", "forcefield: styles is required (an ordered list, possibly empty)", where)
    styles = doc["styles"]
    if not isinstance(styles, (list, tuple)):
        raise _refuse("bad_forcefield", f"forcefield: styles is a list, found {styles!r}", where)
    seen: dict[tuple[str, str], int] = {}
    checked = []
    for i, entry in enumerate(styles):
        e = _check_style(i, entry, where)
        pair = (e["category"], e["style"])
        if pair in seen:
            raise _refuse("bad_forcefield", f"{_style_label(i, e)}: the (category, style) pair repeats style "
                                            f"{seen[pair]}; each appears at most once", where)
        seen[pair] = i
        checked.append(e)
    out["styles"] = checked
    return out


# ---------------------------------------------------------------------------
# Tables

def _table_at(b: str, row: int | None = None, column: str | None = None) -> str:
    s = f"forcefield table {b!r}"
    if column is not None:
        s += f" column {column!r}"
    if row is not None:
        s += f" row {row}"
    return s


def _null_rows(f: Frame, b: str, c: str) -> np.ndarray | None:
    m = f.mask(b, c)
    return None if m is None else ~m


def _check_string_column(f: Frame, b: str, c: str, kind: str, *, nullable: bool, where: str | None,
                         what: str) -> None:
    a = f.blocks[b][c]
    if a.dtype != np.dtype(object) or a.ndim != 1:
        dt = "string" if a.dtype == np.dtype(object) else str(a.dtype)
        raise _refuse(kind, f"{_table_at(b, column=c)}: {what} is string[T], found {dt}{list(a.shape[1:]) or ''}",
                      where)
    if not nullable and f.mask(b, c) is not None:
        row = int(np.flatnonzero(~f.mask(b, c))[0])
        raise _refuse(kind, f"{_table_at(b, row, c)}: {what} is never null", where)


def _check_name(f: Frame, b: str, where: str | None) -> None:
    if "name" not in f.blocks[b]:
        if f.counts[b] == 0:
            return
        raise _refuse("bad_name", f"{_table_at(b)}: the name column is required (one label per row)", where)
    _check_string_column(f, b, "name", "bad_name", nullable=False, where=where, what="name")
    first: dict[str, int] = {}
    for i, n in enumerate(f.blocks[b]["name"]):
        if n in first:
            raise _refuse("bad_name", f"{_table_at(b, i, 'name')}: name {n!r} repeats row {first[n]} (names are "
                                      "unique within a table)", where)
        first[n] = i


def _check_endpoints(f: Frame, b: str, entry: Mapping, where: str | None) -> None:
    cols = f.blocks[b]
    cat = entry["category"]
    key = entry.get("endpoint_key", "type")
    present = [e for e in ENDPOINTS if e in cols]
    if key == "smirks":
        if present:
            raise _refuse("bad_endpoint", f"{_table_at(b)}: a smirks-keyed table carries no endpoint columns, "
                                          f"found {present}", where)
        if "smirks" not in cols:
            if f.counts[b]:
                raise _refuse("bad_endpoint", f"{_table_at(b)}: a smirks-keyed table requires the smirks column",
                              where)
            return
        _check_string_column(f, b, "smirks", "bad_endpoint", nullable=False, where=where, what="smirks")
        return
    arity = CATEGORY_ARITY.get(cat)
    if arity is None:                                  # a category outside the registry: a prefix
        arity = len(present)
        if present != list(ENDPOINTS[:arity]):
            raise _refuse("bad_endpoint", f"{_table_at(b)}: the endpoint columns of category {cat!r} must be a "
                                          f"prefix of {', '.join(ENDPOINTS)}, found {present}", where)
    extra = [e for e in present if e not in ENDPOINTS[:arity]]
    if extra:
        raise _refuse("bad_endpoint", f"{_table_at(b)}: category {cat!r} has arity {arity}: endpoints "
                                      f"{list(ENDPOINTS[:arity])} and no others, found {extra}", where)
    for e in ENDPOINTS[:arity]:
        if e not in cols:
            if f.counts[b] == 0:
                continue
            raise _refuse("bad_endpoint", f"{_table_at(b)}: category {cat!r} has arity {arity}: the endpoint column "
                                          f"{e!r} is required", where)
        _check_string_column(f, b, e, "bad_endpoint", nullable=False, where=where, what="an endpoint")


def _check_parameters(f: Frame, b: str, entry: Mapping, where: str | None) -> None:
    cat, style = entry["category"], entry["style"]
    for c, a in f.blocks[b].items():
        if c == "name" or c in ENDPOINTS:
            continue
        if c in ANNOTATIONS:
            if c == "smirks" and entry.get("endpoint_key") == "smirks":
                continue
            _check_string_column(f, b, c, "bad_annotation", nullable=True, where=where, what="an annotation")
            continue
        if canonical_dtype(c) is not None:
            continue                                   # the canonical dtype and shape, checked by Frame
        if a.dtype == np.dtype(object):
            if a.ndim != 1:
                raise _refuse("bad_parameter", f"{_table_at(b, column=c)}: a string parameter is one value per row "
                                               f"(string[T]), found trailing axes {list(a.shape[1:])}", where)
            continue
        if a.dtype != np.dtype("<f8"):
            raise _refuse("bad_parameter", f"{_table_at(b, column=c)}: a parameter is f64 or string (an integer-"
                                           f"valued one is f64), found {a.dtype}", where)
        if any(n == 0 for n in a.shape[1:]):
            raise _refuse("bad_parameter", f"{_table_at(b, column=c)}: every trailing axis of an array parameter "
                                           f"is at least 1 long, found f64{list(a.shape)}", where)
        bad = ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1) if a.shape[0] else np.zeros(0, bool)
        nulls = _null_rows(f, b, c)
        if nulls is not None:
            bad &= ~nulls
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise _refuse("bad_parameter", f"{_table_at(b, row, c)}: a non-finite value in a non-null row (an "
                                           "absent parameter is a null, never a NaN sentinel)", where)
        if cat == "cmap" and c == "grid":
            t = a.shape[1:]
            if len(t) != 2 or t[0] != t[1] or t[0] < 2:
                raise _refuse("bad_parameter", f"{_table_at(b, column=c)}: a cmap grid is f64[T,N,N] with N >= 2 "
                                               f"(phi-major), found f64{list(a.shape)}", where)
    if cat == "cmap" and "grid" in f.blocks[b] and f.blocks[b]["grid"].dtype != np.dtype("<f8"):
        raise _refuse("bad_parameter", f"{_table_at(b, column='grid')}: a cmap grid is f64[T,N,N], found "
                                       f"{f.blocks[b]['grid'].dtype}", where)
    if cat == "dihedral" and style == "nharmonic":
        ks = sorted(int(m.group(1)) for c in f.blocks[b] if (m := _NHARMONIC.fullmatch(c)))
        if ks and ks != list(range(1, len(ks) + 1)):
            raise _refuse("bad_parameter", f"{_table_at(b)}: dihedral.nharmonic's a1..aN are contiguous from a1, "
                                           f"found a{ks}", where)


def _param_columns(f: Frame, b: str) -> list[str]:
    return sorted(c for c in f.blocks[b] if c != "name" and c not in ENDPOINTS and c not in ANNOTATIONS)


def _row_key(f: Frame, b: str, c: str, i: int) -> Any:
    m = f.mask(b, c)
    if m is not None and not m[i]:
        return None
    v = f.blocks[b][c][i]
    return v if isinstance(v, str) else np.asarray(v).tobytes()


def _check_pair_restatements(f: Frame, b: str, where: str | None) -> None:
    cols = f.blocks[b]
    if "itom" not in cols or "jtom" not in cols:
        return
    params = _param_columns(f, b)
    first: dict[frozenset, int] = {}
    for i, (a, c) in enumerate(zip(cols["itom"], cols["jtom"])):
        key = frozenset((a, c))
        if key not in first:
            first[key] = i
            continue
        j = first[key]
        for p in params:
            if _row_key(f, b, p, i) != _row_key(f, b, p, j):
                raise _refuse("pair_conflict", f"{_table_at(b, i)}: restates the pair {{{a!r}, {c!r}}} of row {j} "
                                               f"with a different {p!r} (rows restating a pair must agree in every "
                                               "parameter)", where)


def check_tables(styles: list[dict], tables: Frame, where: str | None = None) -> None:
    """Every style has its table, and every style table keeps the table rules."""
    for b in tables.blocks:
        if tables.precision.get(b):
            c = next(iter(tables.precision[b]))
            raise _refuse("bad_precision", f"{_table_at(b, column=c)}: force-field parameters are stored exactly; "
                                           "a column declares no precision", where)
    atom_tables = []
    for i, entry in enumerate(styles):
        b = block_name(entry["category"], entry["style"])
        if b not in tables.blocks:
            raise _refuse("missing_table", f"{_style_label(i, entry)}: its table {b!r} is missing (every style "
                                           "has one, possibly with 0 rows)", where)
        if "structural_shape" in tables.block_attrs.get(b, {}):
            raise _refuse("structural_shape_mismatch", f"{_table_at(b)}: a style table carries no structural "
                                                       "shape (one row per type)", where)
        _check_name(tables, b, where)
        _check_endpoints(tables, b, entry, where)
        _check_parameters(tables, b, entry, where)
        if entry["category"] == "pair":
            _check_pair_restatements(tables, b, where)
        if entry["category"] == "atom":
            atom_tables.append(b)
    for i, entry in enumerate(styles):
        if entry.get("endpoint_key") == "class":
            for b in atom_tables:
                if "class" not in tables.blocks[b]:
                    raise _refuse("bad_endpoint", f"{_style_label(i, entry)} is class-keyed: every atom table "
                                                  f"carries class, {b!r} does not", where)


# ---------------------------------------------------------------------------
# The model

_DOC_KEYS = ("name", "units", "source", "special_bonds", "styles")


def _with_nulls(values: Any) -> tuple[Any, np.ndarray | None]:
    """A column given as a list whose rows may be None: (rows with a fill in place of None, mask or None)."""
    if not isinstance(values, (list, tuple)) or not any(v is None for v in values):
        return values, None
    mask = np.array([v is not None for v in values], dtype=bool)
    sample = next((v for v in values if v is not None), None)
    if isinstance(sample, str):
        fill: Any = ""
    elif sample is None:
        fill = 0.0
    else:
        fill = np.zeros_like(np.asarray(sample, dtype=float)).tolist()
    return [fill if v is None else v for v in values], mask


def _tables_frame(tables: Any, masks: Any) -> Frame:
    if isinstance(tables, Frame):
        return tables
    if tables is None:
        tables = {}
    if not isinstance(tables, Mapping):
        raise _refuse("bad_forcefield", f"forcefield tables map a block name (or (category, style)) to columns, "
                                        f"found {type(tables).__name__}")
    blocks: dict[str, dict] = {}
    hints: dict[str, dict[str, str]] = {}
    all_masks: dict[str, dict] = {}
    counts: dict[str, int] = {}
    for key, cols in tables.items():
        b = block_name(*key) if isinstance(key, tuple) else key
        if b in blocks:
            raise _refuse("bad_forcefield", f"forcefield tables: {key!r} names table {b!r} twice")
        if not isinstance(cols, Mapping):
            raise _refuse("bad_forcefield", f"forcefield table {b!r}: columns are a mapping name -> values, found "
                                            f"{type(cols).__name__}")
        cols = dict(cols)
        if "count" in cols and not isinstance(cols["count"], (list, tuple, np.ndarray)):
            counts[b] = cols.pop("count")
        out = {}
        for c, v in cols.items():
            v, m = _with_nulls(v)
            out[c] = v
            if isinstance(v, (list, tuple)) and (c in ENDPOINTS or c in ANNOTATIONS):
                hints.setdefault(b, {})[c] = "string"     # an empty list of labels is still string[0]
            elif isinstance(v, (list, tuple)) and canonical_dtype(c) is None:
                hints.setdefault(b, {})[c] = "f64"        # a list of ints has no width: a parameter is f64
            if m is not None:
                all_masks.setdefault(b, {})[c] = m
        blocks[b] = out
    for key, ms in dict(masks or {}).items():
        b = block_name(*key) if isinstance(key, tuple) else key
        all_masks.setdefault(b, {}).update(ms)
    return Frame(blocks=blocks, masks=all_masks, counts=counts, dtype_hints=hints)


def _fill_empty_tables(styles: list[dict], tables: Frame) -> Frame:
    """A 0-row style table given without its required columns gets them (empty): name and endpoints."""
    add: dict[str, dict[str, np.ndarray]] = {}
    for entry in styles:
        b = block_name(entry["category"], entry["style"])
        if b not in tables.blocks or tables.counts[b] != 0:
            continue
        arity = 0 if entry.get("endpoint_key") == "smirks" else CATEGORY_ARITY.get(entry["category"], 0)
        need = ["name", *ENDPOINTS[:arity]] + (["smirks"] if entry.get("endpoint_key") == "smirks" else [])
        missing = [c for c in need if c not in tables.blocks[b]]
        if missing:
            add[b] = {c: np.empty(0, dtype=object) for c in missing}
    if not add:
        return tables
    blocks = {b: {**cols, **add.get(b, {})} for b, cols in tables.blocks.items()}
    return Frame(blocks=blocks, masks=tables.masks, counts=tables.counts, precision=tables.precision,
                 block_attrs=tables.block_attrs)


@dataclass(eq=False)
class ForceField:
    """A force field: the document and its style tables.

    * ``name`` -- required string; ``units`` -- required (``{"preset": "real"}``,
      ``{"length": "nm", "energy": "kJ/mol"}``, or a preset name);
    * ``styles`` -- list of ``{"category", "style", "params"?, "expression"?,
      "endpoint_key"?}`` (other keys kept);
    * ``tables`` -- block name or ``(category, style)`` -> columns (``None``
      rows of a list are nulls), or a :class:`Frame` whose blocks are the tables;
      ``masks`` as in a Frame; tables no style names are kept as they are;
    * ``source``, ``special_bonds`` -- optional; ``extra`` -- other document keys,
      kept verbatim.

    Construction checks every rule (refusals carry a ``kind``, see the module).
    """

    name: Any = None
    units: Any = None
    styles: Any = None
    tables: Any = None
    masks: Any = None
    source: Any = None
    special_bonds: Any = None
    extra: dict = field(default_factory=dict)
    where: str | None = field(default=None, repr=False)
    _nulls: tuple = field(default=(), repr=False)

    def __post_init__(self) -> None:
        where = self.where
        doc = {k: v for k, v in (("name", self.name), ("units", self.units), ("source", self.source),
                                 ("special_bonds", self.special_bonds), ("styles", self.styles))
               if v is not None or k in self._nulls}
        for k, v in dict(self.extra or {}).items():
            if k in _DOC_KEYS or k == "tables":
                raise _refuse("bad_forcefield", f"forcefield extra key {k!r} is a field of ForceField", where)
            doc[k] = v
        if self.styles is None and "styles" not in doc:
            doc["styles"] = []
        try:
            doc = to_plain(doc)
        except TypeError as exc:
            raise _refuse("bad_forcefield", f"forcefield: the document is not JSON ({exc})", where) from None
        doc = check_forcefield_document(doc, where)
        try:
            tables = _tables_frame(self.tables, self.masks)
        except RefusalError as exc:
            raise _refuse(exc.kind, f"forcefield tables: {exc.detail}", where) from None
        tables = _fill_empty_tables(doc["styles"], tables)
        check_tables(doc["styles"], tables, where)
        self.name, self.units, self.styles = doc["name"], doc["units"], doc["styles"]
        self.source, self.special_bonds = doc.get("source"), doc.get("special_bonds")
        self.extra = {k: v for k, v in doc.items() if k not in _DOC_KEYS}
        self._order = list(doc)
        self.tables = tables
        self.masks = tables.masks

    # -- queries ------------------------------------------------------------------
    def document(self) -> dict:
        """The group's attribute map: the document's keys in their original order."""
        vals = {"name": self.name, "units": self.units, "source": self.source, "special_bonds": self.special_bonds,
                "styles": self.styles, **self.extra}
        return {k: vals[k] for k in self._order}

    def table(self, category: str, style: str) -> dict[str, np.ndarray]:
        """The columns of the table of style ``(category, style)``."""
        return self.tables.blocks[block_name(category, style)]

    def mask(self, category: str, style: str, column: str) -> np.ndarray | None:
        """The validity mask of a column of a style's table (True = has a value), or None when no row is null."""
        return self.tables.mask(block_name(category, style), column)

    def style_tables(self) -> dict[tuple[str, str], str]:
        """``(category, style)`` -> block name, for every declared style."""
        return {(s["category"], s["style"]): block_name(s["category"], s["style"]) for s in self.styles}

    def unnamed_tables(self) -> list[str]:
        """Blocks no style names (kept as they are)."""
        named = set(self.style_tables().values())
        return sorted(b for b in self.tables.blocks if b not in named)

    @classmethod
    def from_any(cls, obj: Any) -> "ForceField":
        """A ForceField from a ForceField, or a mapping of the document's keys plus ``tables`` (and ``masks``)."""
        if isinstance(obj, ForceField):
            return obj
        if not isinstance(obj, Mapping):
            raise _refuse("bad_forcefield", f"cannot make a force field from {type(obj).__name__}")
        d = dict(obj)
        kw = {k: d.pop(k) for k in ("name", "units", "styles", "tables", "masks", "source", "special_bonds")
              if k in d}
        return cls(**kw, extra=d)

    @classmethod
    def from_document(cls, doc: Mapping, tables: Frame, where: str | None = None) -> "ForceField":
        """The model of a stored section: the attribute map verbatim and the tables read."""
        if not isinstance(doc, Mapping):
            raise _refuse("bad_forcefield", "the forcefield document is a JSON object", where)
        if "styles" not in doc:
            raise _refuse("missing_key", "forcefield: styles is required (an ordered list, possibly empty)", where)
        d = dict(doc)
        kw = {k: d.pop(k) for k in ("name", "units", "styles", "source", "special_bonds") if k in d}
        nulls = tuple(k for k, v in kw.items() if v is None)      # a stored null is kept as a null
        ff = cls(**kw, tables=tables, extra=d, where=where, _nulls=nulls)
        ff._order = [k for k in doc if k in ff._order]
        return ff

    def equals(self, other: Any) -> bool:
        other = ForceField.from_any(other)
        return (json_dumps(self.document(), sort_keys=True) == json_dumps(other.document(), sort_keys=True)
                and self.tables == other.tables)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ForceField):
            return NotImplemented
        return self.equals(other)

    __hash__ = None  # type: ignore[assignment]

    def unresolved(self, system: Any) -> list[str]:
        """Names ``system`` uses that resolve to no row (see :func:`unresolved_links`)."""
        return unresolved_links(system, self)


# ---------------------------------------------------------------------------
# Binding

def write_forcefield(store, ff: Any, *, path: str = SECTION, compression=None) -> list[str]:
    """Write ``ff`` (a :class:`ForceField` or what :meth:`ForceField.from_any` takes) at ``path``."""
    from .frame_group import write_frame_group
    ff = ForceField.from_any(ff)
    return write_frame_group(store, path, ff.tables, compression=compression, attributes=ff.document())


def read_forcefield(store, path: str = SECTION) -> tuple[ForceField, list[str]]:
    """(the force field at ``path``, keys not consumed); every rule checked, refusals name the group."""
    from .frame_group import read_frame_group
    where = store.describe(path)
    g = read_frame_group(store, path, typed_meta=False, cell=False)
    return ForceField.from_document(g.attributes, g.frame, where), g.unknown


# ---------------------------------------------------------------------------
# Linking a system (by name; unresolved names are reported, never refused)

def _names(ff: ForceField, category: str, style: str | None = None) -> set[str]:
    out: set[str] = set()
    for s in ff.styles:
        if s["category"] != category or (style is not None and s["style"] != style):
            continue
        cols = ff.tables.blocks[block_name(s["category"], s["style"])]
        if "name" in cols:
            out.update(cols["name"].tolist())
    return out


def _relation_blocks(ff: ForceField) -> dict[str, str]:
    out = dict(RELATION_BLOCKS)
    for s in ff.styles:
        c = s["category"]
        if c not in CATEGORY_ARITY:
            out[c] = f"{c}s"
    return out


def unresolved_links(system: Any, ff: ForceField) -> list[str]:
    """Every name of ``system`` that resolves to no row of ``ff``, one message each (first row named).

    ``atoms.type`` names a row of an atom table (of a pair table when every
    style is smirks-keyed and there is no atom table); a relation block's
    ``type`` (``bonds`` -> ``bond`` ...) names a row of a table of its
    category -- of ``<category>.<style>`` when the block has a ``style`` column.
    Null rows name nothing.
    """
    if system is None:
        return []
    f = Frame.from_any(system)
    out: list[str] = []

    def scan(block: str, names_of) -> None:
        cols = f.blocks.get(block, {})
        types = cols.get("type")
        if types is None or types.dtype != np.dtype(object):
            return
        styles = cols.get("style") if cols.get("style") is not None and cols["style"].dtype == np.dtype(object) \
            else None
        tm, sm = f.mask(block, "type"), f.mask(block, "style")
        seen: set[tuple] = set()
        for i, t in enumerate(types):
            if tm is not None and not tm[i]:
                continue
            st = None if styles is None or (sm is not None and not sm[i]) else styles[i]
            if (t, st) in seen:
                continue
            seen.add((t, st))
            if t not in names_of(st):
                where = f" in table {block_name(cat, st)!r}" if st is not None else ""
                out.append(f"system {block}.type row {i}: {t!r} names no row of the force field's {cat} "
                           f"tables{where}")

    cat = "atom"
    atom_names = _names(ff, "atom")
    if not any(s["category"] == "atom" for s in ff.styles) and ff.styles \
            and all(s.get("endpoint_key") == "smirks" for s in ff.styles):
        atom_names = _names(ff, "pair")
        cat = "pair"
    scan("atoms", lambda st: atom_names)
    for cat, block in _relation_blocks(ff).items():
        scan(block, lambda st, c=cat: _names(ff, c, st))
    return out
