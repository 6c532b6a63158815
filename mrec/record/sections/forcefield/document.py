"""The force-field document (the group's attributes): name, units, source, special_bonds and the
ordered styles, checked by :func:`check_forcefield_document`."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ....errors import RefusalError
from ..documents import _plain
from .units import check_units
from .vocabulary import ENDPOINT_KEYS, _refuse

__all__ = ["check_forcefield_document"]

_CATEGORY = re.compile(r"[a-z][a-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
