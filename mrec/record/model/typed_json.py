"""Typed JSON values and typed frame meta (``_meta_types``).

Three pieces (mrec-notes §1.5, §3.5, §7.4):

* the **16 meta tags** (``bool i32 i64 u32 u64 f64 string json bool3 i32x3
  i64x3 u32x3 u64x3 f64x3 f64x6 f64x9``) with their element dtype and
  trailing shape (:data:`META_TAGS`);
* **native values**: :func:`coerce_meta_value` turns a producer's Python /
  numpy value into the exact value its tag holds, refusing every inexact
  coercion (``meta_tag_mismatch``);
* the **typed JSON form** of a value whose dtype is known
  (:func:`encode_typed` / :func:`decode_typed`), for the 16 tags and for the
  13 column dtypes: f64 NaN/+-inf as ``"NaN"``/``"Infinity"``/``"-Infinity"``,
  integers beyond +-2^53 as decimal strings, ``c64``/``c128`` as
  ``[re, im]``, vectors as arrays, ``json`` as the (finite) document itself.

Native values: a scalar tag yields a numpy scalar of its element dtype
(``np.float64``, ``np.int32``, ``np.bool_``...), ``string`` a Python
``str``, a vector tag a 1-d numpy array, ``json`` a plain Python document
(dict/list/str/int/float/bool/None, numpy scalars converted).

Frame-shaped groups (``frame``, ``system``) store their meta document as the
group attributes plus ``_meta_types`` (:func:`encode_meta_document`,
:func:`decode_meta_document`).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import MetadataError, RefusalError
from ...zarr.metadata import MAX_JSON_DEPTH, json_depth_exceeds
from .dtypes import NUMPY_DTYPES

__all__ = [
    "MetaTag",
    "META_TAGS",
    "TAG_NAMES",
    "META_TYPES_KEY",
    "SAFE_INTEGER",
    "INTEGER_RANGE",
    "check_tag",
    "coerce_meta_value",
    "encode_typed",
    "decode_typed",
    "infer_tag",
    "check_json_document",
    "to_plain",
    "json_dumps",
    "coerce_meta_document",
    "encode_meta_document",
    "decode_meta_document",
]

_KIND = "meta_tag_mismatch"

#: The largest integer magnitude every JSON reader holds exactly.
SAFE_INTEGER = 2**53

#: Inclusive range of each integer dtype.
INTEGER_RANGE: dict[str, tuple[int, int]] = {
    **{f"i{b}": (-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)},
    **{f"u{b}": (0, 2**b - 1) for b in (8, 16, 32, 64)},
}

#: Reserved attribute of a frame-shaped group holding ``{key: tag}``.
META_TYPES_KEY = "_meta_types"

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_DECIMAL = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class MetaTag:
    """One per-step meta tag: its element (a column dtype, or ``json``) and trailing shape."""

    name: str
    element: str
    trailing: tuple[int, ...] = ()

    @property
    def stored_dtype(self) -> str:
        """The column dtype of the array holding this tag (``json`` is stored as ``string``)."""
        return "string" if self.element == "json" else self.element


def _tags() -> dict[str, MetaTag]:
    tags = {n: MetaTag(n, n) for n in ("bool", "i32", "i64", "u32", "u64", "f64", "string", "json")}
    tags["bool3"] = MetaTag("bool3", "bool", (3,))
    for e in ("i32", "i64", "u32", "u64", "f64"):
        tags[f"{e}x3"] = MetaTag(f"{e}x3", e, (3,))
    tags["f64x6"] = MetaTag("f64x6", "f64", (6,))
    tags["f64x9"] = MetaTag("f64x9", "f64", (9,))
    return tags


#: The closed set of 16 tags (mrec-notes §3.5).
META_TAGS: dict[str, MetaTag] = _tags()
TAG_NAMES: tuple[str, ...] = tuple(META_TAGS)

_ELEMENTS = frozenset(NUMPY_DTYPES) | {"json"}


def _where(key: Any) -> str:
    return f"meta key {key!r}" if key is not None else "value"


def _refuse(message: str, key: Any = None, path: str | None = None, kind: str = _KIND) -> RefusalError:
    return RefusalError(f"{_where(key)}: {message}", path=path, kind=kind)


def check_tag(tag: Any, key: Any = None, path: str | None = None) -> str:
    """``tag`` if it is one of the 16 meta tags, else ``meta_tag_mismatch``."""
    if isinstance(tag, str) and tag in META_TAGS:
        return tag
    raise _refuse(f"{tag!r} is not a meta tag (one of {', '.join(TAG_NAMES)})", key, path)


def _spec(tag_or_dtype: Any, key: Any, path: str | None) -> MetaTag:
    """A meta tag, or a column dtype seen as a scalar tag (for fill values)."""
    if isinstance(tag_or_dtype, str):
        if tag_or_dtype in META_TAGS:
            return META_TAGS[tag_or_dtype]
        if tag_or_dtype in NUMPY_DTYPES:
            return MetaTag(tag_or_dtype, tag_or_dtype)
    raise _refuse(f"{tag_or_dtype!r} is neither a meta tag nor a column dtype", key, path)


# ---------------------------------------------------------------------------
# plain JSON documents

def to_plain(value: Any) -> Any:
    """``value`` with numpy scalars/arrays and tuples turned into plain Python JSON values.

    Dict keys must be strings (JSON would silently stringify others); sets,
    bytes, other objects and a document nesting deeper than
    :data:`~mrec.zarr.metadata.MAX_JSON_DEPTH` levels (or cyclic) are refused (``TypeError``).
    """
    if json_depth_exceeds(value):
        raise TypeError(f"the document nests deeper than {MAX_JSON_DEPTH} levels (or is cyclic)")
    return _to_plain(value)


def _to_plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray):
        return _to_plain(value.tolist())
    if isinstance(value, np.generic):
        return _to_plain(value.item())
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"JSON object keys are strings, found {k!r}")
            out[k] = _to_plain(v)
        return out
    raise TypeError(f"{type(value).__name__} {value!r} is not a JSON value")


def _finite(doc: Any) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, list):
        return all(_finite(v) for v in doc)
    if isinstance(doc, dict):
        return all(_finite(v) for v in doc.values())
    return True


def check_json_document(value: Any, key: Any = None, path: str | None = None) -> Any:
    """A ``json`` value as a plain, finite JSON document (a fresh copy), else ``meta_tag_mismatch``."""
    try:
        doc = to_plain(value)
    except TypeError as exc:
        raise _refuse(f"not a JSON document ({exc})", key, path) from None
    if not _finite(doc):
        raise _refuse("a json value must be finite JSON (no NaN/Infinity inside)", key, path)
    return doc


def json_dumps(obj: Any, **kwargs: Any) -> str:
    """Serialize ``obj`` as JSON with NaN/Infinity forbidden and numpy scalars made plain.

    Extra keyword arguments go to :func:`json.dumps` (``indent``,
    ``sort_keys``...).  A non-finite number or a non-JSON object raises
    :class:`~mrec.errors.MetadataError`.
    """
    try:
        return json.dumps(to_plain(obj), allow_nan=False, **kwargs)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"not serializable as finite JSON: {exc}") from None


# ---------------------------------------------------------------------------
# native values

def _coerce_scalar(element: str, value: Any, key: Any, path: str | None) -> Any:
    """``value`` as the numpy scalar (or ``str``) of column dtype ``element``, exactly."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    is_bool = isinstance(value, (bool, np.bool_))
    if element == "bool":
        if not is_bool:
            raise _refuse(f"expected a bool, found {type(value).__name__} {value!r}", key, path)
        return np.bool_(bool(value))
    if element == "string":
        if not isinstance(value, str):
            raise _refuse(f"expected a string, found {type(value).__name__} {value!r}", key, path)
        return str(value)
    if is_bool:
        raise _refuse(f"a bool is not a number ({element}), found {value!r}", key, path)
    if element in INTEGER_RANGE:
        if not isinstance(value, (int, np.integer)):
            raise _refuse(f"{element} takes an integer; a {type(value).__name__} {value!r} is not rounded",
                          key, path)
        v = int(value)
        lo, hi = INTEGER_RANGE[element]
        if not lo <= v <= hi:
            raise _refuse(f"{v} is out of range for {element} [{lo}, {hi}]", key, path)
        return NUMPY_DTYPES[element].type(v)
    if element == "f64":
        if isinstance(value, (int, np.integer)):
            v = int(value)
            try:
                f = float(v)
            except OverflowError:
                f = math.inf
            if not math.isfinite(f) or int(f) != v:
                raise _refuse(f"integer {v} is not exactly representable as f64", key, path)
            return np.float64(f)
        if isinstance(value, (float, np.floating)):
            f = float(value)
            if not (f == value or (math.isnan(f) and np.isnan(value))):
                raise _refuse(f"{value!r} is not exactly representable as f64", key, path)
            return np.float64(f)
        raise _refuse(f"f64 takes a real number, found {type(value).__name__} {value!r}", key, path)
    if element in ("c64", "c128"):
        if isinstance(value, (int, np.integer, float, np.floating)):
            re_part = _coerce_scalar("f64", value, key, path)
            c = complex(float(re_part), 0.0)
        elif isinstance(value, (complex, np.complexfloating)):
            c = complex(value)
            if isinstance(value, np.complexfloating) and value.dtype.itemsize > 16:
                if complex(c) != value:
                    raise _refuse(f"{value!r} is not exactly representable as c128", key, path)
        else:
            raise _refuse(f"{element} takes a complex number, found {type(value).__name__} {value!r}", key, path)
        out = NUMPY_DTYPES[element].type(c)
        if element == "c64":
            for part, got in ((c.real, float(out.real)), (c.imag, float(out.imag))):
                if not (part == got or (math.isnan(part) and math.isnan(got))):
                    raise _refuse(f"{value!r} is not exactly representable as c64", key, path)
        return out
    raise _refuse(f"no element dtype {element!r}", key, path)


def _coerce(spec: MetaTag, value: Any, key: Any, path: str | None) -> Any:
    if spec.element == "json":
        return check_json_document(value, key, path)
    if not spec.trailing:
        return _coerce_scalar(spec.element, value, key, path)
    (width,) = spec.trailing
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise _refuse(f"{spec.name} takes a flat vector of {width}, found shape {value.shape}", key, path)
        items = list(value.tolist())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise _refuse(f"{spec.name} takes a vector of {width}, found {type(value).__name__} {value!r}", key, path)
    if len(items) != width:
        raise _refuse(f"{spec.name} takes exactly {width} elements, found {len(items)}", key, path)
    return np.array([_coerce_scalar(spec.element, v, key, path) for v in items],
                    dtype=NUMPY_DTYPES[spec.element])


def coerce_meta_value(tag: str, value: Any, key: Any = None, path: str | None = None) -> Any:
    """``value`` as the exact native value of meta tag ``tag``; ``meta_tag_mismatch`` otherwise.

    Only exact coercions: an int becomes an ``f64`` when exactly
    representable (any ``|v| <= 2^53``, larger ones when exact); a real for
    an integer tag, an out-of-range integer, a bool for a number, a number for
    a bool, a wrong vector width and a non-finite ``json`` document are
    refused.  Non-finite ``f64`` values are legal (they are typed JSON strings).
    """
    return _coerce(META_TAGS[check_tag(tag, key, path)], value, key, path)


# ---------------------------------------------------------------------------
# typed JSON

def _encode_f64(f: float) -> Any:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def _encode_scalar(element: str, v: Any) -> Any:
    if element == "f64":
        return _encode_f64(float(v))
    if element in ("c64", "c128"):
        return [_encode_f64(float(v.real)), _encode_f64(float(v.imag))]
    if element in INTEGER_RANGE:
        i = int(v)
        return i if abs(i) <= SAFE_INTEGER else str(i)
    if element == "bool":
        return bool(v)
    return str(v)


def encode_typed(tag_or_dtype: str, value: Any, key: Any = None, path: str | None = None) -> Any:
    """The typed JSON form of ``value`` under a meta tag or a column dtype (§7.4).

    The value is first coerced exactly (:func:`coerce_meta_value` rules);
    the result holds only plain Python JSON values and is finite.
    """
    spec = _spec(tag_or_dtype, key, path)
    native = _coerce(spec, value, key, path)
    if spec.element == "json":
        return native
    if spec.trailing:
        return [_encode_scalar(spec.element, v) for v in native]
    return _encode_scalar(spec.element, native)


def _decode_f64(raw: Any, key: Any, path: str | None) -> float:
    if isinstance(raw, str):
        if raw not in _NONFINITE:
            raise _refuse(f"{raw!r} is not an f64 (non-finite values are \"NaN\", \"Infinity\", \"-Infinity\")",
                          key, path)
        return _NONFINITE[raw]
    if raw is None:
        raise _refuse("null where a number is declared (null is not NaN)", key, path)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise _refuse(f"expected an f64, found {type(raw).__name__} {raw!r}", key, path)
    if isinstance(raw, float) and not math.isfinite(raw):
        raise _refuse(f"non-finite JSON number {raw!r}: typed JSON writes it as a string", key, path)
    return float(_coerce_scalar("f64", raw, key, path))


def _decode_scalar(element: str, raw: Any, key: Any, path: str | None) -> Any:
    if element == "f64":
        return np.float64(_decode_f64(raw, key, path))
    if element in ("c64", "c128"):
        if not isinstance(raw, list) or len(raw) != 2:
            raise _refuse(f"{element} is [re, im] in JSON, found {raw!r}", key, path)
        c = complex(_decode_f64(raw[0], key, path), _decode_f64(raw[1], key, path))
        return _coerce_scalar(element, c, key, path)
    if element in INTEGER_RANGE:
        if isinstance(raw, str):
            if not _DECIMAL.fullmatch(raw):
                raise _refuse(f"{raw!r} is not a decimal integer for {element}", key, path)
            raw = int(raw)
        elif raw is None:
            raise _refuse(f"null where an integer ({element}) is declared", key, path)
        elif isinstance(raw, float):
            raise _refuse(f"{element} takes an integer; the real {raw!r} is not rounded", key, path)
        return _coerce_scalar(element, raw, key, path)
    if element == "bool":
        if not isinstance(raw, bool):
            raise _refuse(f"expected a JSON bool, found {raw!r}", key, path)
        return np.bool_(raw)
    if element == "string":
        if not isinstance(raw, str):
            raise _refuse(f"expected a JSON string, found {raw!r}", key, path)
        return raw
    raise _refuse(f"no element dtype {element!r}", key, path)


def decode_typed(tag_or_dtype: str, json_value: Any, key: Any = None, path: str | None = None) -> Any:
    """The native value of typed JSON ``json_value`` under a meta tag or column dtype.

    Accepts exactly the forms :func:`encode_typed` writes, plus an exact JSON
    integer beyond 2^53 (and, like the reference reader, a decimal string for
    any integer).  Refuses (``meta_tag_mismatch``) everything else: ``null``
    where a number is declared, a real where an integer is declared (``1.5``
    and ``2.0`` alike), an out-of-range integer, a wrong width, a bare
    non-finite number.
    """
    spec = _spec(tag_or_dtype, key, path)
    if spec.element == "json":
        return check_json_document(json_value, key, path)
    if not spec.trailing:
        return _decode_scalar(spec.element, json_value, key, path)
    (width,) = spec.trailing
    if not isinstance(json_value, list) or len(json_value) != width:
        raise _refuse(f"{spec.name} is a JSON array of {width} elements, found {json_value!r}", key, path)
    return np.array([_decode_scalar(spec.element, v, key, path) for v in json_value],
                    dtype=NUMPY_DTYPES[spec.element])


_NUMPY_SCALAR_TAGS = {
    np.dtype("bool"): "bool",
    np.dtype("int32"): "i32",
    np.dtype("int64"): "i64",
    np.dtype("uint32"): "u32",
    np.dtype("uint64"): "u64",
    np.dtype("float64"): "f64",
}
_NUMPY_VECTOR_TAGS = {
    ("bool", 3): "bool3",
    ("i32", 3): "i32x3",
    ("i64", 3): "i64x3",
    ("u32", 3): "u32x3",
    ("u64", 3): "u64x3",
    ("f64", 3): "f64x3",
    ("f64", 6): "f64x6",
    ("f64", 9): "f64x9",
}


def infer_tag(value: Any, key: Any = None, path: str | None = None) -> str:
    """The tag an untagged meta value reads back as (§1.5).

    JSON values: bool -> ``bool``; an int in [-2^63, 2^63) -> ``i64``, in
    [2^63, 2^64) -> ``u64``; any other number (a float such as ``2.0``, or an
    int beyond 64 bits) -> ``f64``; str -> ``string`` (``"NaN"`` included);
    list, dict, None -> ``json``.  Python's json module parses ``2`` as int
    and ``2.0`` as float, which is exactly the distinction needed.

    Native numpy values are typed by their dtype: a numpy bool/int32/int64/
    uint32/uint64/float64 scalar gets that tag, a 1-d array of 3 (6, 9 for
    f64) the matching vector tag.  A numpy value no tag holds (int8,
    float32, a 2-d array...) is refused (``meta_tag_mismatch``) rather than
    silently widened -- declare its tag explicitly.
    """
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return infer_tag(value[()], key, path)
        name = _NUMPY_SCALAR_TAGS.get(value.dtype.newbyteorder("="))
        tag = _NUMPY_VECTOR_TAGS.get((name, value.shape[0])) if value.ndim == 1 and name else None
        if tag is None:
            raise _refuse(f"no meta tag holds a {value.dtype} array of shape {value.shape}; declare one",
                          key, path)
        return tag
    if isinstance(value, np.generic):
        tag = _NUMPY_SCALAR_TAGS.get(value.dtype.newbyteorder("="))
        if tag is None:
            raise _refuse(f"no meta tag holds a numpy {value.dtype} value; declare its tag", key, path)
        return tag
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return "i64"
        if 2**63 <= value < 2**64:
            return "u64"
        return "f64"
    if isinstance(value, float):
        return "f64"
    if isinstance(value, str):
        return "string"
    if value is None or isinstance(value, (list, tuple, Mapping)):
        return "json"
    raise _refuse(f"no meta tag for a {type(value).__name__} value", key, path)


# ---------------------------------------------------------------------------
# typed meta documents of frame-shaped groups

def _tag_of(key: str, value: Any, types: Mapping[str, Any] | None, path: str | None) -> str:
    """The tag of meta ``key``: its declared one (checked) when ``types`` names it, else inferred."""
    if types is not None and key in types:
        return check_tag(types[key], key, path)
    return infer_tag(value, key, path)


def coerce_meta_document(meta: Mapping[str, Any], types: Mapping[str, str] | None = None,
                         path: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The meta document with every value coerced to its tag, plus the full tag map.

    Every key gets a tag: the one in ``types`` when given, else
    :func:`infer_tag`; tags for keys absent from ``meta`` are stale and
    ignored.  Refusals: a ``_meta_types`` key in ``meta`` or a non-string key
    (``reserved_meta_key``), a tag outside the 16 or a value not exactly of
    its tag (``meta_tag_mismatch``).
    """
    if not isinstance(meta, Mapping):
        raise RefusalError(f"a meta document is a mapping, found {type(meta).__name__}", path=path, kind=_KIND)
    if types is not None and not isinstance(types, Mapping):
        raise RefusalError(f"meta types are a mapping, found {type(types).__name__}", path=path, kind=_KIND)
    values: dict[str, Any] = {}
    tags: dict[str, str] = {}
    for key, value in meta.items():
        if not isinstance(key, str):
            raise RefusalError(f"meta key {key!r} is not a string", path=path, kind="reserved_meta_key")
        if key == META_TYPES_KEY:
            raise RefusalError(f"meta key {key!r} is reserved (it holds the meta tags)", path=path,
                               kind="reserved_meta_key")
        tag = _tag_of(key, value, types, path)
        values[key] = coerce_meta_value(tag, value, key, path)
        tags[key] = tag
    return values, tags


def encode_meta_document(meta: Mapping[str, Any], types: Mapping[str, str] | None = None,
                         path: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The group attributes of a frame-shaped group's meta document, plus its full tag map.

    Tags and refusals as :func:`coerce_meta_document`.  Values are written in
    typed JSON.  The returned ``attrs`` holds every key plus ``_meta_types``
    (omitted when the document is empty); the second item is that tag map.
    """
    values, tags = coerce_meta_document(meta, types, path)
    attrs: dict[str, Any] = {key: encode_typed(tags[key], v, key, path) for key, v in values.items()}
    if tags:
        attrs[META_TYPES_KEY] = dict(tags)
    return attrs, tags


def decode_meta_document(attrs: Mapping[str, Any], path: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The meta document (native values) and full tag map of a frame-shaped group's attributes.

    A tagged key is decoded strictly under its tag; an untagged key's tag is
    inferred from its JSON value (:func:`infer_tag`).  A ``_meta_types``
    entry for an absent key is stale and ignored.  A malformed
    ``_meta_types`` (not an object), a tag outside the 16 for a present key,
    a value not in its tag's typed form: ``meta_tag_mismatch``.
    """
    if not isinstance(attrs, Mapping):
        raise RefusalError(f"group attributes are a mapping, found {type(attrs).__name__}", path=path, kind=_KIND)
    raw_types = attrs.get(META_TYPES_KEY, {})
    if not isinstance(raw_types, Mapping):
        raise RefusalError(f"{META_TYPES_KEY} must be an object of tags, found {raw_types!r}", path=path,
                           kind=_KIND)
    meta: dict[str, Any] = {}
    tags: dict[str, str] = {}
    for key, raw in attrs.items():
        if key == META_TYPES_KEY:
            continue
        tag = _tag_of(key, raw, raw_types, path)
        meta[key] = decode_typed(tag, raw, key, path)
        tags[key] = tag
    return meta, tags
