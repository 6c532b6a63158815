"""The force-field model: :class:`ForceField`, the document and its style tables as a
:class:`~mrec.record.model.frame.Frame` whose blocks are the tables.  Its constructor checks every
rule (document.py, tables.py), so the same checks run on the caller's input and on what is read."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ....errors import RefusalError
from ...model.dtypes import canonical_dtype
from ...model.frame import Frame
from ...model.typed_json import json_dumps, to_plain
from .document import check_forcefield_document
from .links import unresolved_links
from .tables import check_tables
from .vocabulary import ANNOTATIONS, CATEGORY_ARITY, ENDPOINTS, _refuse, block_name
from ...model.equality import EqualByValue

__all__ = ["ForceField"]

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
class ForceField(EqualByValue):
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


    def unresolved(self, system: Any) -> list[str]:
        """Names ``system`` uses that resolve to no row (see :func:`unresolved_links`)."""
        return unresolved_links(system, self)
