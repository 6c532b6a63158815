"""The style tables of a force field, checked by :func:`check_tables`: every style has its table;
names unique and never null; endpoints by the category's arity; string annotations; parameters
(f64 or string, finite, cmap grids, contiguous ``nharmonic`` terms); pair restatements that agree;
no precision."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...model.dtypes import canonical_dtype
from ...model.frame import Frame
from .document import _style_label
from .vocabulary import ANNOTATIONS, CATEGORY_ARITY, ENDPOINTS, _refuse, block_name

__all__ = ["check_tables"]

_NHARMONIC = re.compile(r"a([0-9]+)")


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
