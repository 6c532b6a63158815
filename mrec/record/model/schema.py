"""The trajectory declaration: ``sequence_schema`` (mrec-notes §3.5, §3.6, §3.10, §3.13).

A :class:`SequenceSchema` pins, for a trajectory's lifetime, the blocks and
their columns (dtype, trailing shape, nullable, precision), each block's
``structural_shape`` / ``targets`` / ``aligned_with``, and the per-step meta
keys (tag and optional fill).  It is built incrementally
(:meth:`~SequenceSchema.declare_block`, :meth:`~SequenceSchema.declare_column`,
:meth:`~SequenceSchema.declare_meta`), derived from representative frames
(:meth:`~SequenceSchema.from_frames`) or read from its JSON form
(:meth:`~SequenceSchema.from_json`); :meth:`~SequenceSchema.check_frame`
validates a frame against it.

Every refusal happens at declaration (never at first write):

* reserved block names ``step time meta box`` -> ``reserved_block_name``;
  reserved column names ``offset step_index _validity`` -> ``reserved_column_name``;
* a dtype outside the 13 -> ``unknown_dtype`` (``narrow_float`` for f16/f32);
  a canonical key at another dtype -> ``canonical_dtype``;
* precision on non-f64 or out of ``[2^-1000, 2^1000]`` -> ``bad_precision``;
* a meta tag outside the 16, a fill not exactly of its tag, ``null`` fill on a
  non-``json`` key -> ``meta_tag_mismatch``;
* ``aligned_with`` not a string, naming itself, an undeclared block, or an
  aligned block (chain); an aligned block with ``structural_shape``; an
  aligned block sharing a column name with its target -> ``bad_alignment``;
* ``targets`` not matching ``^(?!/trajectory/)(/[^/]+/[^/]+|[^/]+)$``, naming
  an undeclared column, or a non-u64 column -> ``bad_reference``;
* a malformed ``structural_shape`` -> ``structural_shape_mismatch``;
* text UTF-8 cannot encode (a lone surrogate) in a block / column / meta-key
  name -> that name's kind; in a fill -> ``meta_tag_mismatch``; in ``targets``
  -> ``bad_reference``; in extra keys -> ``declaration_mismatch``;
* anything else malformed (not an object, duplicate declaration, bad
  ``trailing``/``nullable``) -> ``declaration_mismatch``.

JSON form (:meth:`~SequenceSchema.to_json`), exactly §3.6: ``trailing`` is
always written; ``nullable`` only when true; ``precision`` only when
declared; ``structural_shape``, ``targets`` and ``aligned_with`` only when
set; ``blocks`` always; ``meta`` only when at least one key is declared (the
schema does not require it and the published fixtures omit it); a meta
``fill`` only when declared, in the typed JSON form of its tag.  Unknown keys
at the top, block, column and meta-entry levels are preserved verbatim.
``frame_rows`` is a writer-side input (the chunk planner's representative
row count) and is not part of the JSON.

One column, block or meta-key declaration (its dataclass, JSON form and own
checks) is in declarations.py; this module holds the schema that gathers them
and the checks across them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .declarations import (ABSENT, BlockDecl, ColumnDecl, MetaDecl, _checked_column, _checked_meta,
                           _plain_extra, _refuse)
from .dtypes import dtype_name, row_bytes
from .frame import Frame
from .names import check_node_name, check_structural_shape, check_targets, check_text
from .typed_json import check_tag, coerce_meta_value, decode_typed, json_dumps

__all__ = [
    "TRAJECTORY_RESERVED_BLOCKS",
    "TRAJECTORY_RESERVED_COLUMNS",
    "SequenceSchema",
]

#: Children of ``trajectory/`` that are not blocks.
TRAJECTORY_RESERVED_BLOCKS: frozenset[str] = frozenset({"step", "time", "meta", "box"})
#: Children of a trajectory block group that are not columns.
TRAJECTORY_RESERVED_COLUMNS: frozenset[str] = frozenset({"offset", "step_index", "_validity"})

_DEFAULT_PATH = "sequence_schema"

#: Most bytes one frame of one column may take as declared (``rows`` x the row size): the chunk
#: planner sizes every inner chunk to at least one declared frame, and each landing pads a chunk
#: to its full size, so a declaration far beyond the frames would allocate that much per landing
#: (2^40 rows: 8 TiB for a 3-row frame).  4 GiB is 178 million rows of a 3 x f64 column.
MAX_FRAME_COLUMN_BYTES = 1 << 32


def _mapping(obj: Any, what: str, path: str | None, kind: str = "declaration_mismatch") -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise _refuse(f"{what} must be a JSON object, found {type(obj).__name__} {obj!r}", kind, path)
    return obj


def _declaration_order(aligned_with: Mapping[str, Any], path: str | None) -> list[str]:
    """Block names with every non-aligned block before the aligned ones.

    Refuses (``bad_alignment``) an ``aligned_with`` that is not a string and
    one naming a block that is itself aligned (a chain), whatever the order.
    """
    aligned = {n: t for n, t in aligned_with.items() if t is not None}
    for name, target in aligned.items():
        if not isinstance(target, str):
            raise _refuse(f"block {name!r}: aligned_with must name a block (a string), found {target!r}",
                          "bad_alignment", path)
        if target in aligned and target != name:
            raise _refuse(f"block {name!r}: aligned_with target {target!r} is itself aligned (no chains)",
                          "bad_alignment", path)
    return [n for n in aligned_with if n not in aligned] + [n for n in aligned_with if n in aligned]


# ---------------------------------------------------------------------------
# the schema

@dataclass(eq=False)
class SequenceSchema:
    """The pinned declaration of a trajectory (``trajectory`` attribute ``sequence_schema``).

    ``path`` only labels refusals (default ``"sequence_schema"``).  Equality
    compares the JSON forms and every block's ``frame_rows``.
    """

    blocks: dict[str, BlockDecl] = field(default_factory=dict)
    meta: dict[str, MetaDecl] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    path: str = field(default=_DEFAULT_PATH, repr=False)

    # -- incremental declaration ------------------------------------------------

    def declare_block(self, name: str, rows: int | None = None, structural_shape: Any = None,
                      aligned_with: str | None = None, targets: Mapping[str, str] | None = None,
                      extra: Mapping[str, Any] | None = None, fixed: bool = False) -> BlockDecl:
        """Declare block ``name`` (before its columns).

        ``fixed=True`` pins the row count to ``rows``: a frame presenting the block with another
        row count is refused at ``append`` (kind ``structural_shape_mismatch``).  It is stored as
        the one-axis ``structural_shape [rows]``, the format's own way to fix a block's rows, so
        every reader and a reopened writer keep it.

        ``rows`` is the representative row count (``frame_rows``); with a
        ``structural_shape`` it defaults to, and must equal, the product.
        ``aligned_with`` must name a block already declared that is not
        itself aligned.  ``targets`` columns are checked as they are
        declared (u64) and by :meth:`validate` (declared at all).
        """
        path = self.path
        if fixed:
            if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
                raise _refuse(f"block {name!r}: fixed=True needs rows, a non-negative integer (found {rows!r})",
                              "declaration_mismatch", path)
            if structural_shape is None:
                structural_shape = (rows,)
        check_node_name(name, "block", "reserved_block_name", path)
        check_text(name, "block name", path, "reserved_block_name")
        if name in TRAJECTORY_RESERVED_BLOCKS:
            raise _refuse(f"block {name!r} is reserved in a trajectory "
                          f"({', '.join(sorted(TRAJECTORY_RESERVED_BLOCKS))})", "reserved_block_name", path)
        if name in self.blocks:
            raise _refuse(f"block {name!r} is already declared", "declaration_mismatch", path)
        decl = BlockDecl(frame_rows=rows, structural_shape=structural_shape,
                         targets=targets,  # type: ignore[arg-type]  # checked by _checked_block
                         aligned_with=aligned_with, extra=dict(extra or {}))
        decl = self._checked_block(name, decl)
        self.blocks[name] = decl
        return decl

    def declare_column(self, block: str, column: str, dtype: str, trailing: Any = (), nullable: bool = False,
                       precision: float | None = None, extra: Mapping[str, Any] | None = None) -> ColumnDecl:
        """Declare ``column`` of an already declared ``block``."""
        path = self.path
        if block not in self.blocks:
            raise _refuse(f"block {block!r} is not declared; declare it before its column {column!r}",
                          "undeclared_block", path)
        decl = self.blocks[block]
        self._check_column_name(block, column)
        if column in decl.columns:
            raise _refuse(f"block {block!r} column {column!r} is already declared", "declaration_mismatch", path)
        col = _checked_column(block, column,
                              ColumnDecl(dtype, trailing, nullable, precision, dict(extra or {})), path)
        if decl.frame_rows and decl.frame_rows * row_bytes(col.dtype, col.trailing) > MAX_FRAME_COLUMN_BYTES:
            raise _refuse(f"block {block!r} column {column!r}: {decl.frame_rows} declared rows of "
                          f"{row_bytes(col.dtype, col.trailing)} bytes make one frame of "
                          f"{decl.frame_rows * row_bytes(col.dtype, col.trailing)} bytes, more than the "
                          f"{MAX_FRAME_COLUMN_BYTES} a chunk is planned for (declare the rows a frame has, or none: "
                          "the rows are only the chunk planner's hint)",
                          "declaration_mismatch", path)
        self._check_column_links(block, column, col)
        decl.columns[column] = col
        return col

    def declare_meta(self, key: str, tag: str, fill: Any = ABSENT,
                     extra: Mapping[str, Any] | None = None) -> MetaDecl:
        """Declare per-step meta key ``key`` with tag ``tag`` and an optional fill (native value)."""
        path = self.path
        check_node_name(key, "meta key", "reserved_meta_key", path)
        check_text(key, "meta key", path, "reserved_meta_key")
        if key in self.meta:
            raise _refuse(f"meta key {key!r} is already declared", "declaration_mismatch", path)
        decl = _checked_meta(key, MetaDecl(tag, fill, dict(extra or {})), path)
        self.meta[key] = decl
        return decl

    # -- checks -----------------------------------------------------------------

    def _check_column_name(self, block: str, column: str) -> None:
        check_node_name(column, f"block {block!r} column", "reserved_column_name", self.path)
        check_text(column, f"block {block!r} column name", self.path, "reserved_column_name")
        if column in TRAJECTORY_RESERVED_COLUMNS:
            raise _refuse(f"block {block!r} column {column!r} is reserved in a trajectory block "
                          f"({', '.join(sorted(TRAJECTORY_RESERVED_COLUMNS))})", "reserved_column_name", self.path)

    def _checked_block(self, name: str, decl: BlockDecl) -> BlockDecl:
        """Block-level checks of ``decl`` against the other declared blocks (not its columns)."""
        path = self.path
        what = f"block {name!r}"
        rows = decl.frame_rows
        if rows is not None and (isinstance(rows, (bool, np.bool_)) or not isinstance(rows, (int, np.integer))
                                 or int(rows) < 0):
            raise _refuse(f"{what}: rows must be a non-negative integer, found {rows!r}", "declaration_mismatch",
                          path)
        rows = None if rows is None else int(rows)
        shape = decl.structural_shape
        if shape is not None:
            shape = check_structural_shape(shape, what, path, rows)
            if rows is None:
                rows = math.prod(shape)
        targets = None if decl.targets is None else check_targets(decl.targets, what, path)
        check_text(targets, f"{what} targets", path, "bad_reference")
        target = decl.aligned_with
        if target is not None:
            if not isinstance(target, str):
                raise _refuse(f"{what}: aligned_with must name a block (a string), found {target!r}",
                              "bad_alignment", path)
            if target == name:
                raise _refuse(f"{what}: a block cannot be aligned with itself", "bad_alignment", path)
            if target not in self.blocks:
                raise _refuse(f"{what}: aligned_with target {target!r} is not a declared block",
                              "bad_alignment", path)
            if self.blocks[target].aligned_with is not None:
                raise _refuse(f"{what}: aligned_with target {target!r} is itself aligned (no chains)",
                              "bad_alignment", path)
            if shape is not None:
                raise _refuse(f"{what}: an aligned block declares no structural_shape", "bad_alignment", path)
        return BlockDecl(columns=decl.columns, frame_rows=rows, structural_shape=shape, targets=targets,
                         aligned_with=target, extra=_plain_extra(decl.extra, what, path))

    def _check_column_links(self, block: str, column: str, col: ColumnDecl) -> None:
        """Targets (u64) and aligned-block (no shared name) rules for one column."""
        path = self.path
        decl = self.blocks[block]
        if decl.targets and column in decl.targets and col.dtype != "u64":
            raise _refuse(f"block {block!r} column {column!r}: a row reference (targets) is u64, "
                          f"declared {col.dtype}", "bad_reference", path)
        if decl.aligned_with is not None and column in self.blocks[decl.aligned_with].columns:
            raise _refuse(f"block {block!r} column {column!r}: an aligned block shares no column name with "
                          f"its target {decl.aligned_with!r}", "bad_alignment", path)
        for other, odecl in self.blocks.items():
            if odecl.aligned_with == block and column in odecl.columns:
                raise _refuse(f"block {block!r} column {column!r}: block {other!r} is aligned with {block!r} "
                              "and already has that column", "bad_alignment", path)

    def validate(self) -> None:
        """Re-check the whole declaration (fields may have been edited directly).

        Every block, column and meta key goes through the same checks as the
        ``declare_*`` methods, plus: every ``targets`` column is declared.
        Normalised values (tuples, floats, coerced fills) are written back into
        the existing declaration objects, so references to them stay valid.
        """
        path = self.path
        if not isinstance(self.blocks, dict) or not isinstance(self.meta, dict):
            raise _refuse("blocks and meta must be dicts", "declaration_mismatch", path)
        for name, decl in self.blocks.items():
            if not isinstance(decl, BlockDecl) or not all(isinstance(c, ColumnDecl) for c in decl.columns.values()):
                raise _refuse(f"block {name!r}: not a BlockDecl of ColumnDecls", "declaration_mismatch", path)
        for key, m in self.meta.items():
            if not isinstance(m, MetaDecl):
                raise _refuse(f"meta key {key!r}: not a MetaDecl", "declaration_mismatch", path)
        probe = SequenceSchema(path=path)
        order = _declaration_order({n: d.aligned_with for n, d in self.blocks.items()}, path)
        for name in order:
            decl = self.blocks[name]
            probe.declare_block(name, rows=decl.frame_rows, structural_shape=decl.structural_shape,
                                aligned_with=decl.aligned_with, targets=decl.targets, extra=decl.extra)
            for column, col in decl.columns.items():
                probe.declare_column(name, column, col.dtype, col.trailing, col.nullable, col.precision, col.extra)
            for column in probe.blocks[name].targets or {}:
                if column not in probe.blocks[name].columns:
                    raise _refuse(f"block {name!r}: targets names column {column!r}, which is not declared",
                                  "bad_reference", path)
        for key, m in self.meta.items():
            probe.declare_meta(key, m.tag, m.fill, m.extra)
        extra = _plain_extra(self.extra, "sequence_schema", path)
        # write the normalised values back in place
        for name, decl in self.blocks.items():
            checked = probe.blocks[name]
            decl.frame_rows, decl.structural_shape = checked.frame_rows, checked.structural_shape
            decl.targets, decl.aligned_with, decl.extra = checked.targets, checked.aligned_with, checked.extra
            for column, col in decl.columns.items():
                cc = checked.columns[column]
                col.dtype, col.trailing, col.nullable, col.precision, col.extra = \
                    cc.dtype, cc.trailing, cc.nullable, cc.precision, cc.extra
        for key, m in self.meta.items():
            mc = probe.meta[key]
            m.tag, m.fill, m.extra = mc.tag, mc.fill, mc.extra
        self.extra = extra

    # -- JSON ---------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The ``sequence_schema`` attribute (see the module docstring for what is written when)."""
        self.validate()
        out: dict[str, Any] = {"blocks": {name: decl.to_json() for name, decl in self.blocks.items()}}
        if self.meta:
            out["meta"] = {key: decl.to_json() for key, decl in self.meta.items()}
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str = _DEFAULT_PATH) -> "SequenceSchema":
        """Parse a ``sequence_schema`` document, refusing malformed declarations (see module docstring).

        Absent optional keys take their defaults; ``null`` for
        ``structural_shape``/``targets``/``aligned_with``/``precision`` means
        unset; ``trailing`` absent means ``[]``.
        """
        doc = _mapping(obj, "sequence_schema", path)
        blocks = _mapping(doc.get("blocks", {}), "sequence_schema blocks", path)
        meta = _mapping(doc.get("meta", {}), "sequence_schema meta", path)
        schema = cls(extra=_plain_extra({k: v for k, v in doc.items() if k not in ("blocks", "meta")},
                                        "sequence_schema", path), path=path)
        entries = {name: _mapping(entry, f"block {name!r}", path) for name, entry in blocks.items()}
        order = _declaration_order({name: e.get("aligned_with") for name, e in entries.items()}, path)
        for name in order:
            entry = entries[name]
            known = ("columns", "structural_shape", "targets", "aligned_with")
            schema.declare_block(name, structural_shape=entry.get("structural_shape"),
                                 aligned_with=entry.get("aligned_with"), targets=entry.get("targets"),
                                 extra={k: v for k, v in entry.items() if k not in known})
            columns = _mapping(entry.get("columns", {}), f"block {name!r} columns", path)
            for column, centry in columns.items():
                what = f"block {name!r} column {column!r}"
                centry = _mapping(centry, what, path)
                if "dtype" not in centry:
                    raise _refuse(f"{what}: no dtype declared", "unknown_dtype", path)
                ckeys = ("dtype", "trailing", "nullable", "precision")
                schema.declare_column(name, column, centry["dtype"], centry.get("trailing", ()),
                                      centry.get("nullable", False), centry.get("precision"),
                                      extra={k: v for k, v in centry.items() if k not in ckeys})
        schema.blocks = {name: schema.blocks[name] for name in entries}
        for key, mentry in meta.items():
            mentry = _mapping(mentry, f"meta key {key!r}", path, "meta_tag_mismatch")
            if "dtype" not in mentry:
                raise _refuse(f"meta key {key!r}: no dtype (tag) declared", "meta_tag_mismatch", path)
            tag = check_tag(mentry["dtype"], key, path)
            fill = decode_typed(tag, mentry["fill"], key, path) if "fill" in mentry else ABSENT
            schema.declare_meta(key, tag, fill, extra={k: v for k, v in mentry.items() if k not in ("dtype", "fill")})
        schema.validate()
        return schema

    # -- derivation ---------------------------------------------------------------

    @classmethod
    def from_frame(cls, frame: Any) -> "SequenceSchema":
        """The declaration derived from one representative frame."""
        return cls.from_frames([frame])

    @classmethod
    def from_frames(cls, frames: Iterable[Any]) -> "SequenceSchema":
        """The declaration derived from representative frames (their union).

        Per block: ``frame_rows`` is the largest row count, ``structural_shape``
        and ``targets`` come from the frames' block attributes (they must
        agree), columns are the union (dtype and trailing shape must agree:
        ``declaration_mismatch``), ``nullable`` is true when any frame masks
        the column, the first stated precision wins.  ``aligned_with`` is never
        derived.  Meta keys take the frame's tag (stated or inferred), with no
        fill; frames disagreeing on a tag are refused (``declaration_mismatch``).
        """
        schema = cls()
        path = schema.path
        for raw in frames:
            frame = Frame.from_any(raw)
            for b, columns in frame.blocks.items():
                attrs = frame.block_attrs.get(b, {})
                rows = frame.counts[b]
                shape = attrs.get("structural_shape")
                targets = attrs.get("targets")
                if b not in schema.blocks:
                    schema.declare_block(b, rows=rows, structural_shape=shape, targets=targets)
                else:
                    decl = schema.blocks[b]
                    if shape is not None:
                        if decl.structural_shape is not None and decl.structural_shape != tuple(shape):
                            raise _refuse(f"block {b!r}: frames disagree on structural_shape "
                                          f"({list(decl.structural_shape)} vs {list(shape)})",
                                          "declaration_mismatch", path)
                        decl.structural_shape = tuple(shape)
                    if targets:
                        merged = dict(decl.targets or {})
                        for c, t in targets.items():
                            if merged.get(c, t) != t:
                                raise _refuse(f"block {b!r} column {c!r}: frames disagree on the target "
                                              f"({merged[c]!r} vs {t!r})", "declaration_mismatch", path)
                            merged[c] = t
                        decl.targets = merged
                    decl.frame_rows = max(decl.frame_rows or 0, rows)
                decl = schema.blocks[b]
                for c, a in columns.items():
                    dtype = dtype_name(a.dtype)
                    trailing = tuple(a.shape[1:])
                    nullable = frame.mask(b, c) is not None
                    p = frame.precision.get(b, {}).get(c)
                    if c not in decl.columns:
                        schema.declare_column(b, c, dtype, trailing, nullable, p)
                        continue
                    col = decl.columns[c]
                    if col.dtype != dtype or col.trailing != trailing:
                        raise _refuse(f"block {b!r} column {c!r}: frames disagree on the type "
                                      f"({col.dtype}{list(col.trailing)} vs {dtype}{list(trailing)})",
                                      "declaration_mismatch", path)
                    col.nullable = col.nullable or nullable
                    if col.precision is None and p is not None:
                        col.precision = p
            for key, tag in frame.meta_types.items():
                if key not in schema.meta:
                    schema.declare_meta(key, tag)
                elif schema.meta[key].tag != tag:
                    raise _refuse(f"meta key {key!r}: frames disagree on the tag "
                                  f"({schema.meta[key].tag} vs {tag}); declare it", "declaration_mismatch", path)
        schema.validate()
        return schema

    # -- frames -------------------------------------------------------------------

    def dtype_hints(self) -> dict[str, dict[str, str]]:
        """block -> column -> declared dtype, for :meth:`Frame.from_any` (``dtype_hints``)."""
        return {b: {c: col.dtype for c, col in d.columns.items()} for b, d in self.blocks.items()}

    def frame(self, obj: Any) -> Frame:
        """``obj`` as a Frame whose untyped integer lists take the declared dtypes (when exact)
        and whose meta values take their declared tags (so ``[1.0, inf, 0.0]`` is an ``f64x3``,
        not a json value inferred first and refused)."""
        if (isinstance(obj, Mapping) and "blocks" in obj and isinstance(obj.get("meta"), Mapping)
                and set(obj) <= {f.name for f in fields(Frame)}):
            types = {k: self.meta[k].tag for k in obj["meta"] if k in self.meta}
            types.update(obj.get("meta_types") or {})
            obj = {**obj, "meta_types": types}
        return Frame.from_any(obj, dtype_hints=self.dtype_hints())

    def check_frame(self, frame: Any, path: str | None = None) -> None:
        """Refuse a frame that breaks the declaration; returns nothing.

        A non-Frame ``frame`` is converted by :meth:`frame` (declared dtypes as hints).

        * a block or column outside the declaration: ``undeclared_block`` /
          ``undeclared_column``;
        * a presented block missing some declared column: ``declaration_mismatch``
          (a block presents all its declared columns together; a zero-row block
          presented without any column is accepted as the empty block);
        * a column of another dtype or trailing shape: ``declaration_mismatch``;
        * a mask on a column not declared nullable: ``undeclared_nullable``;
        * a column stating another precision than the pinned one (or one where
          none is pinned): ``precision_mismatch``;
        * a structural-shape block with another row count, or a frame stating
          another structural shape: ``structural_shape_mismatch``;
        * a frame stating other targets: ``declaration_mismatch``;
        * an aligned block and its target both presented with different row
          counts: ``aligned_count_mismatch`` (carry-forward is the writer's);
        * a same-frame reference out of range: ``bad_reference``;
        * an undeclared meta key: ``undeclared_meta_key``; a declared key
          omitted without fill: ``missing_meta_value``; a value not exactly of
          the declared tag: ``meta_tag_mismatch``.
        """
        path = path if path is not None else self.path
        frame = self.frame(frame)
        for b, columns in frame.blocks.items():
            if b not in self.blocks:
                raise _refuse(f"block {b!r} is not declared in the sequence_schema", "undeclared_block", path)
            decl = self.blocks[b]
            rows = frame.counts[b]
            for c in columns:
                if c not in decl.columns:
                    raise _refuse(f"block {b!r} column {c!r} is not declared in the sequence_schema",
                                  "undeclared_column", path)
            missing = [c for c in decl.columns if c not in columns]
            if missing and not (rows == 0 and not columns):
                raise _refuse(f"block {b!r} is presented without its declared columns {missing} "
                              "(a block presents all its columns together)", "declaration_mismatch", path)
            for c, a in columns.items():
                col = decl.columns[c]
                what = f"block {b!r} column {c!r}"
                dtype = dtype_name(a.dtype)
                if dtype != col.dtype or tuple(a.shape[1:]) != col.trailing:
                    raise _refuse(f"{what} is {dtype}{list(a.shape[1:])}, declared "
                                  f"{col.dtype}{list(col.trailing)}", "declaration_mismatch", path)
                if frame.mask(b, c) is not None and not col.nullable:
                    raise _refuse(f"{what} carries a mask but is not declared nullable", "undeclared_nullable",
                                  path)
                p = frame.precision.get(b, {}).get(c)
                if p is not None and p != col.precision:
                    raise _refuse(f"{what} states precision {p!r}, the declaration pins {col.precision!r}",
                                  "precision_mismatch", path)
            attrs = frame.block_attrs.get(b, {})
            if decl.structural_shape is not None and rows != math.prod(decl.structural_shape):
                raise _refuse(f"block {b!r} has {rows} rows, its structural_shape "
                              f"{list(decl.structural_shape)} fixes {math.prod(decl.structural_shape)}",
                              "structural_shape_mismatch", path)
            if "structural_shape" in attrs and tuple(attrs["structural_shape"]) != decl.structural_shape:
                raise _refuse(f"block {b!r} states structural_shape {list(attrs['structural_shape'])}, declared "
                              f"{None if decl.structural_shape is None else list(decl.structural_shape)}",
                              "structural_shape_mismatch", path)
            for c, t in attrs.get("targets", {}).items():
                if (decl.targets or {}).get(c) != t:
                    raise _refuse(f"block {b!r} column {c!r} states target {t!r}, declared "
                                  f"{(decl.targets or {}).get(c)!r}", "declaration_mismatch", path)
        for b in frame.blocks:
            decl = self.blocks[b]
            target = decl.aligned_with
            if target is not None and target in frame.blocks and frame.counts[target] != frame.counts[b]:
                raise _refuse(f"block {b!r} has {frame.counts[b]} rows but is aligned with {target!r}, "
                              f"which has {frame.counts[target]}", "aligned_count_mismatch", path)
            if frame.counts[b] == 0:
                continue
            for c, t in (decl.targets or {}).items():
                if t.startswith("/") or t not in frame.blocks or c not in frame.blocks[b]:
                    continue
                values = frame.blocks[b][c]
                m = frame.mask(b, c)
                if m is not None:
                    values = values[m]
                if values.size and int(values.max()) >= frame.counts[t]:
                    raise _refuse(f"block {b!r} column {c!r} references row {int(values.max())} of {t!r}, "
                                  f"which has {frame.counts[t]} rows", "bad_reference", path)
        self.meta_values(frame, path)

    def meta_values(self, frame: Any, path: str | None = None) -> dict[str, Any]:
        """Every declared meta key's native value for ``frame``: its value coerced to the declared tag,
        or the fill when omitted.  Refusals as in :meth:`check_frame` (meta part)."""
        path = path if path is not None else self.path
        frame = self.frame(frame)
        for key in frame.meta:
            if key not in self.meta:
                raise _refuse(f"meta key {key!r} is not declared in the sequence_schema", "undeclared_meta_key",
                              path)
        out: dict[str, Any] = {}
        for key, decl in self.meta.items():
            if key in frame.meta:
                out[key] = coerce_meta_value(decl.tag, frame.meta[key], key, path)
            elif decl.has_fill:
                out[key] = decl.fill
            else:
                raise _refuse(f"meta key {key!r} is omitted and declared without a fill", "missing_meta_value",
                              path)
        return out

    # -- comparison ---------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SequenceSchema):
            return NotImplemented
        rows = {b: d.frame_rows for b, d in self.blocks.items()}
        orows = {b: d.frame_rows for b, d in other.blocks.items()}
        return rows == orows and json_dumps(self.to_json(), sort_keys=True) == json_dumps(other.to_json(),
                                                                                         sort_keys=True)

    __hash__ = None  # type: ignore[assignment]
