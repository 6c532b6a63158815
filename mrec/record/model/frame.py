"""In-memory model of a frame: named blocks of columns, masks, typed meta, a box.

mrec-notes §1.4 (frame-shaped group), §2.1-§2.6 (frame chapter).

* :class:`Frame` -- ``blocks`` (block -> column -> numpy array), ``box``,
  ``meta`` (typed by ``meta_types``), ``masks`` (validity masks), plus
  ``counts`` (row count of a block, needed for a block without columns),
  ``precision`` (declared precision of ``f64`` columns) and ``block_attrs``
  (``structural_shape``, ``targets`` and producer attributes of a block).

A Frame normalises and validates on construction, so a constructed model holds
what a writer stores and what a reader hands back; every refusal is a
:class:`~mrec.errors.RefusalError` with a spec ``kind``.  Nothing here
rounds to a precision implicitly (a reader must keep stored bytes); see
:meth:`Frame.rounded` for what a writer stores.

The cell is :class:`~mrec.record.model.box.Box` (box.py); node names, structural shapes and
targets are checked by names.py.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field, fields
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from ...errors import RefusalError
from .box import Box
from .dtypes import as_column_array, check_canonical
from .names import (ENDPOINT_COLUMNS, FRAME_RESERVED_BLOCKS, FRAME_RESERVED_COLUMNS, _is_int, check_node_name,
                    check_structural_shape, check_targets)
from .precision import check_precision, round_to_precision
from .typed_json import coerce_meta_document, encode_meta_document, json_dumps, to_plain
from .equality import EqualByValue

__all__ = ["check_row_references", "Frame"]


def _mapping(value: Any, what: str, kind: str) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RefusalError(f"{what} must be a mapping, found {type(value).__name__}", kind=kind)
    return value


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "O":
        return a.tolist() == b.tolist()
    return a.tobytes() == b.tobytes()


@dataclass(eq=False)
class Frame(EqualByValue):
    """One frame: named blocks of columns, validity masks, a typed meta document, a cell.

    Fields (all optional):

    * ``blocks`` -- block -> column -> array; the arrays of a block share one
      leading length.  Lists are converted (strings to ``object`` arrays),
      numpy arrays kept as given when already canonical.
    * ``box`` -- a :class:`Box` or anything :meth:`Box.from_any` accepts; None = open system.
    * ``meta`` -- the meta document; every value is coerced to its tag.
    * ``masks`` -- block -> column -> bool[rows] (True = has a value).  An
      all-True mask is dropped (it equals no mask).
    * ``meta_types`` -- key -> tag for keys whose tag is stated; after
      construction it holds the tag of **every** key (inferred ones included)
      and no stale entry.
    * ``counts`` -- block -> row count; required only for a block without
      columns (default 0), checked against the columns otherwise.
    * ``precision`` -- block -> column -> declared precision (``f64`` only).
    * ``block_attrs`` -- block -> ``structural_shape`` / ``targets`` /
      producer attributes (plain JSON, preserved).  A ``count`` entry is
      checked against the rows and moved to ``counts``.

    ``dtype_hints`` (init-only, block -> column -> mrec dtype) gives untyped
    Python lists of ints the dtype they should take when every value fits it
    exactly (e.g. the declared dtypes of a ``sequence_schema``); columns named
    in ``targets`` are hinted ``u64`` and canonical names their canonical
    dtype.  numpy arrays are converted to that same target only when the
    conversion is exact (float32 -> f64, integers that fit; see
    :func:`~mrec.record.model.dtypes.as_column_array`), a lossy one is refused.

    Refusals: a block named ``box`` (``reserved_block_name``), a column named
    ``_validity`` (``reserved_column_name``), invalid node names (same kinds),
    unequal leading lengths (``row_count_mismatch``), a mask not bool, not of
    length rows, or naming no column (``bad_validity``), dtypes outside the 13
    (``unknown_dtype``/``narrow_float``), canonical keys at another dtype
    (``canonical_dtype``), precision on non-f64 or out of bounds
    (``bad_precision``), meta (``reserved_meta_key``/``meta_tag_mismatch``),
    structural shape (``structural_shape_mismatch``), targets
    (``bad_reference``), cell (``bad_box``).
    """

    blocks: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    box: Box | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    masks: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    meta_types: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    precision: dict[str, dict[str, float]] = field(default_factory=dict)
    block_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)
    dtype_hints: InitVar[Mapping[str, Mapping[str, str]] | None] = None

    # -- construction -------------------------------------------------------

    def __post_init__(self, dtype_hints: Mapping[str, Mapping[str, str]] | None) -> None:
        raw_blocks = _mapping(self.blocks, "blocks", "row_count_mismatch")
        raw_attrs = _mapping(self.block_attrs, "block_attrs", "declaration_mismatch")
        hints: dict[str, dict[str, str]] = {b: dict(h) for b, h in (dtype_hints or {}).items()}
        for b, attrs in raw_attrs.items():  # a row reference is u64
            if isinstance(attrs, Mapping) and isinstance(attrs.get("targets"), Mapping):
                for c in attrs["targets"]:
                    hints.setdefault(b, {}).setdefault(c, "u64")
        blocks: dict[str, dict[str, np.ndarray]] = {}
        for b, columns in raw_blocks.items():
            check_node_name(b, "block", "reserved_block_name")
            if b in FRAME_RESERVED_BLOCKS:
                raise RefusalError(f"block {b!r} is reserved in a frame-shaped group (it is the cell)",
                                   kind="reserved_block_name")
            columns = _mapping(columns, f"block {b!r}", "row_count_mismatch")
            out: dict[str, np.ndarray] = {}
            for c, values in columns.items():
                what = f"block {b!r} column {c!r}"
                check_node_name(c, f"block {b!r} column", "reserved_column_name")
                if c in FRAME_RESERVED_COLUMNS:
                    raise RefusalError(f"{what}: the name is reserved for the validity masks",
                                       kind="reserved_column_name")
                arr, dtype = as_column_array(values, column=c, hint=hints.get(b, {}).get(c), what=what)
                check_canonical(b, c, dtype, arr.shape[1:])
                out[c] = arr
            blocks[b] = out
        self.blocks = blocks

        # row counts
        raw_counts = dict(_mapping(self.counts, "counts", "row_count_mismatch"))
        for b, attrs in raw_attrs.items():
            if isinstance(attrs, Mapping) and "count" in attrs:
                if b in raw_counts and raw_counts[b] != attrs["count"]:
                    raise RefusalError(f"block {b!r}: count {attrs['count']!r} disagrees with {raw_counts[b]!r}",
                                       kind="row_count_mismatch")
                raw_counts[b] = attrs["count"]
        for b in raw_counts:
            if b not in blocks:
                raise RefusalError(f"counts name block {b!r}, which the frame does not have",
                                   kind="row_count_mismatch")
        counts: dict[str, int] = {}
        for b, columns in blocks.items():
            lengths = {c: a.shape[0] for c, a in columns.items()}
            distinct = set(lengths.values())
            if len(distinct) > 1:
                detail = ", ".join(f"{c}={n}" for c, n in lengths.items())
                raise RefusalError(f"block {b!r}: columns disagree on the row count ({detail})",
                                   kind="row_count_mismatch")
            if b in raw_counts:
                n = raw_counts[b]
                if not _is_int(n) or int(n) < 0:
                    raise RefusalError(f"block {b!r}: count must be a non-negative integer, found {n!r}",
                                       kind="row_count_mismatch")
                if distinct and int(n) != next(iter(distinct)):
                    raise RefusalError(f"block {b!r}: count {int(n)} but its columns have "
                                       f"{next(iter(distinct))} rows", kind="row_count_mismatch")
                counts[b] = int(n)
            else:
                counts[b] = next(iter(distinct)) if distinct else 0
        self.counts = counts

        # block attributes
        block_attrs: dict[str, dict[str, Any]] = {}
        for b, attrs in raw_attrs.items():
            if b not in blocks:
                raise RefusalError(f"block_attrs name block {b!r}, which the frame does not have",
                                   kind="declaration_mismatch")
            attrs = _mapping(attrs, f"block {b!r} attributes", "declaration_mismatch")
            out_attrs: dict[str, Any] = {}
            for k, v in attrs.items():
                if k == "count":
                    continue
                if k == "structural_shape":
                    if v is not None:
                        out_attrs[k] = check_structural_shape(v, f"block {b!r}", rows=counts[b])
                elif k == "targets":
                    if v is not None:
                        targets = check_targets(v, f"block {b!r}")
                        for c in targets:
                            if c not in blocks[b]:
                                raise RefusalError(f"block {b!r}: targets names column {c!r}, "
                                                   "which the block does not have", kind="bad_reference")
                            if blocks[b][c].dtype != np.dtype("<u8"):
                                raise RefusalError(f"block {b!r} column {c!r}: a row reference is u64, "
                                                   f"found {blocks[b][c].dtype}", kind="bad_reference")
                        out_attrs[k] = targets
                else:
                    try:
                        out_attrs[k] = to_plain(v)
                    except TypeError as exc:
                        raise RefusalError(f"block {b!r} attribute {k!r} is not JSON ({exc})",
                                           kind="declaration_mismatch") from None
            if out_attrs:
                block_attrs[b] = out_attrs
        self.block_attrs = block_attrs

        # masks
        masks: dict[str, dict[str, np.ndarray]] = {}
        for b, cols in _mapping(self.masks, "masks", "bad_validity").items():
            if b not in blocks:
                raise RefusalError(f"mask for block {b!r}, which the frame does not have", kind="bad_validity")
            kept: dict[str, np.ndarray] = {}
            for c, mask in _mapping(cols, f"masks of block {b!r}", "bad_validity").items():
                if c not in blocks[b]:
                    raise RefusalError(f"block {b!r}: mask {c!r} names no column of the block",
                                       kind="bad_validity")
                m = np.asarray(mask)
                if m.dtype.kind != "b":
                    raise RefusalError(f"block {b!r} column {c!r}: mask must be bool, found {m.dtype}",
                                       kind="bad_validity")
                if m.shape != (counts[b],):
                    raise RefusalError(f"block {b!r} column {c!r}: mask shape {list(m.shape)} "
                                       f"is not [{counts[b]}] (one flag per row)", kind="bad_validity")
                if not m.all():
                    kept[c] = m
            if kept:
                masks[b] = kept
        self.masks = masks

        # precision
        precision: dict[str, dict[str, float]] = {}
        for b, cols in _mapping(self.precision, "precision", "bad_precision").items():
            if b not in blocks:
                raise RefusalError(f"precision for block {b!r}, which the frame does not have",
                                   kind="bad_precision")
            kept_p: dict[str, float] = {}
            for c, p in _mapping(cols, f"precision of block {b!r}", "bad_precision").items():
                what = f"block {b!r} column {c!r}"
                if c not in blocks[b]:
                    raise RefusalError(f"{what}: precision for a column the block does not have",
                                       kind="bad_precision")
                if p is None:
                    continue
                if blocks[b][c].dtype != np.dtype("<f8"):
                    raise RefusalError(f"{what}: precision is declared on f64 columns only, found "
                                       f"{blocks[b][c].dtype}", kind="bad_precision")
                kept_p[c] = check_precision(p, what=f"{what} precision")
            if kept_p:
                precision[b] = kept_p
        self.precision = precision

        # meta and box
        self.meta, self.meta_types = coerce_meta_document(
            _mapping(self.meta, "meta", "meta_tag_mismatch"),
            _mapping(self.meta_types, "meta_types", "meta_tag_mismatch"),
        )
        if self.box is not None:
            self.box = Box.from_any(self.box)

    @classmethod
    def _trusted(cls, blocks: dict[str, dict[str, np.ndarray]], box: "Box | None", meta: dict[str, Any],
                 masks: dict[str, dict[str, np.ndarray]], meta_types: dict[str, str]) -> "Frame":
        """A Frame from parts its caller has already validated: nothing is re-checked or converted.

        For :class:`~mrec.record.trajectory.reader.TrajectoryReader` only, which calls it when the
        layout it checked on open guarantees what ``__post_init__`` would check: names that are
        valid and not reserved, canonical in-memory dtypes (never ``string``), one row count per
        block (the count of a column-less block is 0, as the plain constructor makes it), masks
        bool[rows] and never all True, ``meta`` and ``meta_types`` already coerced, ``box`` a Box
        or None.  The public constructor keeps validating.
        """
        self = object.__new__(cls)
        self.blocks = blocks
        self.box = box
        self.meta = meta
        self.masks = masks
        self.meta_types = meta_types
        self.counts = {b: (len(next(iter(cols.values()))) if cols else 0) for b, cols in blocks.items()}
        self.precision = {}
        self.block_attrs = {}
        return self

    @classmethod
    def _trusted_blocks(cls, blocks: dict[str, dict[str, np.ndarray]]) -> "Frame":
        """``_trusted(blocks, None, {}, {}, {})`` for a reader's batch of many small frames: the same
        frame, with ``counts`` and the empty fields (meta, masks, meta_types, precision,
        block_attrs) made on first access (see :meth:`__getattr__`) instead of for every frame."""
        self = object.__new__(cls)
        self.__dict__ = {"blocks": blocks, "box": None}
        return self

    @classmethod
    def _trusted_rows(cls, name: str, keys: tuple, rows):
        """``_trusted_blocks({name: dict(zip(keys, r))})`` for each ``r`` of ``rows`` (one tuple of
        column values a frame), made as they are taken: a reader's batch of small frames of one
        block, where the per-frame Python is most of the read."""
        new = object.__new__
        if len(keys) == 3:                     # x, y, z: a dict display instead of dict(zip(...))
            k0, k1, k2 = keys
            for a, b, c in rows:
                self = new(cls)
                self.__dict__ = {"blocks": {name: {k0: a, k1: b, k2: c}}, "box": None}
                yield self
            return
        for r in rows:
            self = new(cls)
            self.__dict__ = {"blocks": {name: dict(zip(keys, r))}, "box": None}
            yield self

    def __getattr__(self, name: str):
        # reached only for a field a _trusted_blocks frame has not made yet (every other Frame
        # has them all from __init__): made now, once, as _trusted makes it
        if name in _LAZY_FIELDS:
            if name == "counts":
                blocks = self.__dict__["blocks"]
                value: Any = {b: (len(next(iter(cols.values()))) if cols else 0) for b, cols in blocks.items()}
            else:
                value = {}
            self.__dict__[name] = value
            return value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def from_any(cls, obj: Any, dtype_hints: Mapping[str, Mapping[str, str]] | None = None) -> "Frame":
        """A Frame from a Frame (returned as is), a mapping of Frame fields, or a mapping of blocks.

        A mapping is read as Frame fields when it has a ``blocks`` key and
        every key is a field name (``blocks box meta masks meta_types counts
        precision block_attrs``); otherwise it is the blocks themselves.
        ``None`` values of fields mean "empty".  ``dtype_hints`` as in the
        class docstring (unused for a Frame).
        """
        if isinstance(obj, Frame):
            return obj
        if isinstance(obj, Mapping):
            if "blocks" in obj and set(obj) <= set(_FRAME_FIELDS):
                return cls(**{k: v for k, v in obj.items() if v is not None}, dtype_hints=dtype_hints)
            return cls(blocks=cast("dict[str, dict[str, np.ndarray]]", obj), dtype_hints=dtype_hints)
        raise TypeError(f"cannot make a Frame from {type(obj).__name__}")

    # -- queries ----------------------------------------------------------------

    def _xyz(self, prefix: str, block: str = "atoms") -> np.ndarray | None:
        cols = self.blocks.get(block)
        names = [f"{prefix}{a}" for a in "xyz"]
        if cols is None or not all(n in cols for n in names):
            return None
        return np.stack([cols[n] for n in names], axis=1)

    @property
    def positions(self) -> np.ndarray | None:
        """``atoms`` columns ``x y z`` as one (N, 3) f64 array (a copy); None without them."""
        return self._xyz("")

    @property
    def velocities(self) -> np.ndarray | None:
        """``atoms`` columns ``vx vy vz`` as (N, 3); None without them."""
        return self._xyz("v")

    @property
    def forces(self) -> np.ndarray | None:
        """``atoms`` columns ``fx fy fz`` as (N, 3); None without them."""
        return self._xyz("f")

    def __repr__(self) -> str:
        from .describe import frame_repr
        return frame_repr(self)

    def rows(self, block: str) -> int:
        """The row count of ``block``."""
        return self.counts[block]

    def mask(self, block: str, column: str) -> np.ndarray | None:
        """The validity mask of a column, or None when every row is valid."""
        return self.masks.get(block, {}).get(column)

    def rounded(self) -> "Frame":
        """This frame with every precision column rounded to its grid (what a writer stores).

        Returns ``self`` when nothing changes.
        """
        changed = False
        blocks = {b: dict(cols) for b, cols in self.blocks.items()}
        for b, cols in self.precision.items():
            for c, p in cols.items():
                r = round_to_precision(blocks[b][c], p, what=f"block {b!r} column {c!r}")
                if r is not blocks[b][c]:
                    blocks[b][c] = r
                    changed = True
        if not changed:
            return self
        return Frame(blocks=blocks, box=self.box, meta=self.meta, masks=self.masks, meta_types=self.meta_types,
                     counts=self.counts, precision=self.precision, block_attrs=self.block_attrs)

    def check_references(self, sections: Mapping[str, Any] | None = None, *, conventional: bool = False,
                         path: str | None = None) -> None:
        """Refuse (``bad_reference``) row references that point at nothing (§2.6).

        Declared ``targets`` of every block are checked: a same-container
        target must exist wherever the referencing block has rows, and every
        non-null value must be below the target's row count.  An absolute
        target ``/<section>/<block>`` is checked only when ``sections`` holds
        that section (a Frame or anything :meth:`from_any` accepts).  With
        ``conventional=True`` undeclared ``atomi``..``atomm`` columns are
        checked against ``atoms`` too (a SHOULD in the spec).
        """
        refs: dict[str, dict[str, str]] = {}
        for b, columns in self.blocks.items():
            refs[b] = dict(self.block_attrs.get(b, {}).get("targets", {}))
            if conventional:
                for c in ENDPOINT_COLUMNS:
                    if c in columns and c not in refs[b]:
                        refs[b][c] = "atoms"
        check_row_references(self, refs, sections, path=path)

    # -- comparison -------------------------------------------------------------

    def equals(self, other: Any) -> bool:
        """Bitwise model equality.

        Same blocks (order-insensitive), counts, columns (dtype, shape, bytes:
        NaN equals NaN, ``-0.0`` differs from ``0.0``), masks (an all-True
        mask is no mask), cell, meta (same tags and typed-JSON text),
        precision and block attributes.
        """
        if not isinstance(other, Frame):
            other = Frame.from_any(other)
        if self.counts != other.counts or set(self.blocks) != set(other.blocks):
            return False
        for b, cols in self.blocks.items():
            ocols = other.blocks[b]
            if set(cols) != set(ocols) or not all(_same_array(cols[c], ocols[c]) for c in cols):
                return False
        if set(self.masks) != set(other.masks):
            return False
        for b, ms in self.masks.items():
            oms = other.masks[b]
            if set(ms) != set(oms) or not all(_same_array(ms[c], oms[c]) for c in ms):
                return False
        if (self.box is None) != (other.box is None) or (self.box is not None and self.box != other.box):
            return False
        if self.precision != other.precision:
            return False
        if json_dumps(self.block_attrs, sort_keys=True) != json_dumps(other.block_attrs, sort_keys=True):
            return False
        mine = encode_meta_document(self.meta, self.meta_types)[0]
        theirs = encode_meta_document(other.meta, other.meta_types)[0]
        return json_dumps(mine, sort_keys=True) == json_dumps(theirs, sort_keys=True)


def check_row_references(frame: Frame, refs: Mapping[str, Mapping[str, str]],
                         sections: Mapping[str, Any] | None = None, *, path: str | None = None,
                         where: str = "") -> None:
    """The row-reference rule (§2.6), the one checker of every reader and of
    :meth:`Frame.check_references`: for each block of ``frame`` with rows and each ``column ->
    target`` of ``refs[block]``, the target block must exist (in ``frame``, or for
    ``/<section>/<block>`` in ``sections[section]`` when it is there) and every non-null value be
    below its row count; ``bad_reference`` otherwise (``where`` prefixes the message, e.g. the
    trajectory frame)."""
    for b, targets in refs.items():
        columns = frame.blocks.get(b)
        if not targets or columns is None or frame.counts[b] == 0:
            continue
        for c, target in targets.items():
            if c not in columns:
                continue
            if target.startswith("/"):
                section, target_block = target[1:].split("/", 1)
                if sections is None or section not in sections:
                    continue
                container = Frame.from_any(sections[section])
            else:
                container, target_block = frame, target
            if target_block not in container.blocks:
                raise RefusalError(f"{where}block {b!r} column {c!r} references {target!r}, which does not exist",
                                   path=path, kind="bad_reference")
            n = container.counts[target_block]
            values = columns[c]
            m = frame.mask(b, c)
            if m is not None:
                values = values[m]
            if values.size and int(values.max()) >= n:
                raise RefusalError(f"{where}block {b!r} column {c!r} references row {int(values.max())} of "
                                   f"{target!r}, which has {n} rows", path=path, kind="bad_reference")


_FRAME_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Frame))
#: the fields a Frame._trusted_blocks frame makes on first access
_LAZY_FIELDS = frozenset(("meta", "masks", "meta_types", "counts", "precision", "block_attrs"))
