"""Linking a system to a force field by name: :func:`unresolved_links` reports the names that
resolve to no row (the validator's warnings; never a refusal)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...model.frame import Frame
from .vocabulary import CATEGORY_ARITY, RELATION_BLOCKS, block_name

if TYPE_CHECKING:
    from .model import ForceField

__all__ = ["unresolved_links"]


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
