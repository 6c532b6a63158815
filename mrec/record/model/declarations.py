"""One declaration of a ``sequence_schema``: a column (:class:`ColumnDecl`), a block
(:class:`BlockDecl`) or a per-step meta key (:class:`MetaDecl`, :data:`ABSENT` = no fill), each
with its JSON form (mrec-notes §3.6) and the checks one declaration needs on its own
(``_checked_column``, ``_checked_meta``); the checks across declarations are the schema's
(:class:`~mrec.record.model.schema.SequenceSchema`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import RefusalError
from .dtypes import check_canonical, check_dtype_name, check_trailing
from .names import check_text
from .precision import check_precision
from .typed_json import check_tag, coerce_meta_value, encode_typed, json_dumps, to_plain

__all__ = ["ABSENT", "ColumnDecl", "BlockDecl", "MetaDecl"]


class _Absent:
    """Type of :data:`ABSENT`: "no fill declared" (distinct from a ``None`` fill)."""

    _instance: "_Absent | None" = None

    def __new__(cls) -> "_Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


#: Sentinel: a meta key declared without a fill.  ``fill=None`` is the JSON ``null`` fill.
ABSENT: Any = _Absent()


def _refuse(message: str, kind: str, path: str | None) -> RefusalError:
    return RefusalError(message, path=path, kind=kind)


def _plain_extra(extra: Any, what: str, path: str | None) -> dict[str, Any]:
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise _refuse(f"{what}: extra keys must be a mapping", "declaration_mismatch", path)
    try:
        out = {str(k): to_plain(v) for k, v in extra.items()}
    except TypeError as exc:
        raise _refuse(f"{what}: extra keys are not JSON ({exc})", "declaration_mismatch", path) from None
    check_text(out, f"{what}: extra keys", path, "declaration_mismatch")
    return out


@dataclass
class ColumnDecl:
    """One column of a declared block: dtype, trailing shape, nullable, precision (+ unknown keys)."""

    dtype: str
    trailing: tuple[int, ...] = ()
    nullable: bool = False
    precision: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"dtype", "trailing", "nullable"? (true only), "precision"? (declared only), **extra}``."""
        out: dict[str, Any] = {"dtype": self.dtype, "trailing": list(self.trailing)}
        if self.nullable:
            out["nullable"] = True
        if self.precision is not None:
            out["precision"] = float(self.precision)
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out


@dataclass
class BlockDecl:
    """One declared block.

    ``frame_rows`` is the representative row count used to size chunks (the
    largest when derived from several frames); it is not written to JSON.
    """

    columns: dict[str, ColumnDecl] = field(default_factory=dict)
    frame_rows: int | None = None
    structural_shape: tuple[int, ...] | None = None
    targets: dict[str, str] | None = None
    aligned_with: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The block's ``sequence_schema`` entry (optional keys only when set)."""
        out: dict[str, Any] = {"columns": {c: d.to_json() for c, d in self.columns.items()}}
        if self.structural_shape is not None:
            out["structural_shape"] = list(self.structural_shape)
        if self.targets is not None:
            out["targets"] = dict(self.targets)
        if self.aligned_with is not None:
            out["aligned_with"] = self.aligned_with
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out


@dataclass(eq=False)
class MetaDecl:
    """One per-step meta key: its tag and optional fill (a native value; :data:`ABSENT` = none)."""

    tag: str
    fill: Any = ABSENT
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def has_fill(self) -> bool:
        """Whether a fill is declared (a ``None`` fill on a ``json`` key is one)."""
        return self.fill is not ABSENT

    def to_json(self) -> dict[str, Any]:
        """``{"dtype": tag, "fill"?: typed JSON, **extra}``."""
        out: dict[str, Any] = {"dtype": self.tag}
        if self.has_fill:
            out["fill"] = encode_typed(self.tag, self.fill)
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetaDecl):
            return NotImplemented
        return json_dumps(self.to_json(), sort_keys=True) == json_dumps(other.to_json(), sort_keys=True)

    __hash__ = None  # type: ignore[assignment]


def _checked_column(block: str, column: str, decl: ColumnDecl, path: str | None) -> ColumnDecl:
    """``decl`` validated and normalised (names are checked by the caller)."""
    what = f"block {block!r} column {column!r}"
    dtype = check_dtype_name(decl.dtype, path, what)
    trailing = check_trailing(decl.trailing, path, what)
    nullable = decl.nullable
    if isinstance(nullable, np.bool_):
        nullable = bool(nullable)
    if not isinstance(nullable, bool):
        raise _refuse(f"{what}: nullable must be a bool, found {nullable!r}", "declaration_mismatch", path)
    precision = decl.precision
    if precision is not None:
        if dtype != "f64":
            raise _refuse(f"{what}: precision is declared on f64 columns only, this one is {dtype}",
                          "bad_precision", path)
        precision = check_precision(precision, path, f"{what} precision")
    check_canonical(block, column, dtype, trailing, path)
    return ColumnDecl(dtype, trailing, nullable, precision, _plain_extra(decl.extra, what, path))


def _checked_meta(key: str, decl: MetaDecl, path: str | None) -> MetaDecl:
    """``decl`` validated, its fill coerced exactly to its tag."""
    tag = check_tag(decl.tag, key, path)
    fill = decl.fill
    if fill is None:
        if tag != "json":
            raise _refuse(f"meta key {key!r}: a null fill is legal only for json keys, this one is {tag}",
                          "meta_tag_mismatch", path)
    elif fill is not ABSENT:
        fill = coerce_meta_value(tag, fill, key, path)
        check_text(fill, f"meta key {key!r}: fill", path, "meta_tag_mismatch")
    return MetaDecl(tag, fill, _plain_extra(decl.extra, f"meta key {key!r}", path))
