"""The closed set of 13 column dtypes and how they map to numpy and Zarr V3.

mrec-notes §1.6: every column is one of ``f64 i8 i16 i32 i64 u8 u16 u32 u64
bool string c64 c128``; the mapping to a Zarr V3 ``data_type`` is total and
exact both ways.  Nothing is ever widened or narrowed silently: a
``float16``/``float32`` array is refused (``narrow_float``) unless its column's
declared or canonical dtype is f64 (then it is widened, which is exact), fixed-length
strings and raw bytes are refused (``unknown_dtype``), and so is anything
else outside the set.

In memory a column is a numpy array whose dtype is the little-endian numpy
twin of its mrec dtype; a ``string`` column is an ``object`` array of Python
``str`` (numpy ``U``/``T`` input is accepted and converted).

§7.1 (conventions) pins one dtype and the shape ``[N]`` for the canonical
column names; :func:`check_canonical` enforces it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import RefusalError

__all__ = [
    "DTYPES",
    "NUMPY_DTYPES",
    "ZARR_DATA_TYPES",
    "STRING_ROW_BYTES",
    "CANONICAL_DTYPES",
    "EXACT_U64_COLUMNS",
    "check_dtype_name",
    "check_trailing",
    "numpy_dtype",
    "zarr_data_type",
    "dtype_from_zarr",
    "dtype_name",
    "dtype_of_array",
    "as_column_array",
    "row_bytes",
    "canonical_dtype",
    "check_canonical",
]

#: The closed set of column dtypes, in the order of the specification.
DTYPES: tuple[str, ...] = (
    "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "string", "c64", "c128",
)

#: mrec dtype -> numpy dtype (little-endian; ``string`` is ``object`` of ``str``).
NUMPY_DTYPES: dict[str, np.dtype] = {
    "f64": np.dtype("<f8"),
    "i8": np.dtype("i1"),
    "i16": np.dtype("<i2"),
    "i32": np.dtype("<i4"),
    "i64": np.dtype("<i8"),
    "u8": np.dtype("u1"),
    "u16": np.dtype("<u2"),
    "u32": np.dtype("<u4"),
    "u64": np.dtype("<u8"),
    "bool": np.dtype("bool"),
    "string": np.dtype(object),
    "c64": np.dtype("<c8"),
    "c128": np.dtype("<c16"),
}

#: mrec dtype -> Zarr V3 ``data_type`` name.
ZARR_DATA_TYPES: dict[str, str] = {
    "f64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "bool": "bool",
    "string": "string",
    "c64": "complex64",
    "c128": "complex128",
}
_FROM_ZARR: dict[str, str] = {v: k for k, v in ZARR_DATA_TYPES.items()}

#: The estimated width of one ``string`` element (chunking chapter).
STRING_ROW_BYTES = 16

# Declared names that are real types narrower than binary64.
_NARROW_FLOAT_NAMES = frozenset({"f16", "f32", "float16", "float32", "bfloat16", "half", "single"})

_BY_KIND_SIZE: dict[tuple[str, int], str] = {
    ("f", 8): "f64",
    ("i", 1): "i8",
    ("i", 2): "i16",
    ("i", 4): "i32",
    ("i", 8): "i64",
    ("u", 1): "u8",
    ("u", 2): "u16",
    ("u", 4): "u32",
    ("u", 8): "u64",
    ("b", 1): "bool",
    ("c", 8): "c64",
    ("c", 16): "c128",
}

_INT_RANGE: dict[str, tuple[int, int]] = {
    **{f"i{b}": (-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)},
    **{f"u{b}": (0, 2**b - 1) for b in (8, 16, 32, 64)},
}


def _refuse(message: str, kind: str, where: str | None) -> RefusalError:
    return RefusalError(message, path=where, kind=kind)


def check_dtype_name(name: Any, where: str | None = None, what: str = "dtype") -> str:
    """``name`` if it is one of the 13 column dtypes, else a refusal.

    ``f16``/``f32``/``float32``... are ``narrow_float``; anything else
    (``float``, ``int``, ``json``, ``f32x3``, a non-string) is
    ``unknown_dtype``.  ``what`` names the thing in the message
    (``"block 'atoms' column 'x'"``).
    """
    if isinstance(name, str) and name in NUMPY_DTYPES:
        return name
    if isinstance(name, str) and name.lower() in _NARROW_FLOAT_NAMES:
        raise _refuse(f"{what}: {name!r} is a narrow float; f64 is the only real dtype", "narrow_float", where)
    raise _refuse(
        f"{what}: {name!r} is not a column dtype (one of {', '.join(DTYPES)}; widths are explicit)",
        "unknown_dtype",
        where,
    )


def check_trailing(trailing: Any, where: str | None = None, what: str = "trailing",
                   kind: str = "declaration_mismatch") -> tuple[int, ...]:
    """``trailing`` as a tuple of non-negative ints (lists, tuples, numpy ints accepted)."""
    if isinstance(trailing, (str, bytes)) or not isinstance(trailing, (list, tuple)):
        raise _refuse(f"{what}: trailing shape must be a list of integers, found {trailing!r}", kind, where)
    out: list[int] = []
    for n in trailing:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or int(n) < 0:
            raise _refuse(f"{what}: trailing shape must hold non-negative integers, found {trailing!r}",
                          kind, where)
        out.append(int(n))
    return tuple(out)


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of mrec dtype ``dtype`` (refused when not one of the 13)."""
    return NUMPY_DTYPES[check_dtype_name(dtype)]


def zarr_data_type(dtype: str) -> str:
    """The Zarr V3 ``data_type`` of mrec dtype ``dtype``."""
    return ZARR_DATA_TYPES[check_dtype_name(dtype)]


def dtype_from_zarr(data_type: Any, where: str | None = None) -> str:
    """The mrec dtype of a Zarr V3 ``data_type`` (a name, or ``{"name": ...}``).

    ``float16``/``float32``/``bfloat16`` are refused as ``narrow_float``;
    fixed-length strings (``fixed_length_utf32``), raw bytes (``bytes``,
    ``r*``) and every other type as ``unknown_dtype``.  An object form is
    accepted only for one of the 13 names with an empty (or absent)
    ``configuration``.
    """
    name = data_type
    if isinstance(data_type, Mapping):
        name = data_type.get("name")
        config = data_type.get("configuration")
        if name in _FROM_ZARR and config not in (None, {}):
            raise _refuse(f"data_type {data_type!r}: unexpected configuration", "unknown_dtype", where)
    if isinstance(name, str) and name in _FROM_ZARR:
        return _FROM_ZARR[name]
    if isinstance(name, str) and name in ("float16", "float32", "bfloat16"):
        raise _refuse(f"data_type {name!r} is a narrow float; mrec refuses it rather than widening",
                      "narrow_float", where)
    raise _refuse(f"data_type {data_type!r} is not an mrec column dtype", "unknown_dtype", where)


def dtype_name(dt: Any, where: str | None = None, what: str = "column") -> str:
    """The mrec dtype of numpy dtype ``dt`` (``U``/``T``/``O`` -> ``string``, no element check).

    Same refusals as :func:`dtype_of_array`; use this on arrays already
    normalised by :func:`as_column_array`.
    """
    return _dtype_name(np.dtype(dt), where, what)


def _dtype_name(dt: np.dtype, where: str | None, what: str) -> str:
    """Classify a numpy dtype (``U``/``T``/``O`` -> ``string``; no element check)."""
    kind = dt.kind
    if kind in ("U", "T", "O"):
        return "string"
    if kind == "f" and dt.itemsize < 8:
        raise _refuse(f"{what}: {dt} is a narrow float; f64 is the only real dtype (a column declared f64, "
                      "or a canonical f64 name, takes it widened exactly)", "narrow_float", where)
    if kind == "S":
        raise _refuse(f"{what}: fixed-length bytes ({dt}) are not a column dtype; use string",
                      "unknown_dtype", where)
    name = _BY_KIND_SIZE.get((kind, dt.itemsize))
    if name is None or dt.fields is not None or dt.subdtype is not None:
        raise _refuse(f"{what}: numpy dtype {dt} is not a column dtype", "unknown_dtype", where)
    return name


def _check_str_elements(a: np.ndarray, where: str | None, what: str) -> None:
    for x in a.flat:
        if not isinstance(x, str):
            raise _refuse(f"{what}: a string column holds only str, found {type(x).__name__} {x!r}",
                          "unknown_dtype", where)


def dtype_of_array(a: np.ndarray, where: str | None = None, what: str = "column") -> str:
    """The mrec dtype of numpy array ``a``.

    Byte order is irrelevant (both endiannesses classify alike).  ``U``/``T``
    arrays classify as ``string``; an ``object`` array must hold only ``str``.
    Refusals: ``narrow_float`` (float16/float32), ``unknown_dtype``
    (fixed-length bytes, float128, datetime, structured, mixed objects ...).
    """
    a = np.asarray(a)
    name = _dtype_name(a.dtype, where, what)
    if a.dtype.kind == "O":
        _check_str_elements(a, where, what)
    return name


def _leaf_types(obj: np.ndarray) -> set[type]:
    return {type(x) for x in obj.flat}


def _int_fits(values: Iterable[int], dtype: str) -> bool:
    """Whether every Python int in ``values`` is exactly a value of ``dtype``."""
    if dtype == "f64":
        for v in values:
            if abs(v) > 2**53:
                try:
                    if int(float(v)) != v:
                        return False
                except OverflowError:
                    return False
        return True
    lo, hi = _INT_RANGE[dtype]
    return all(lo <= v <= hi for v in values)


def _from_sequence(values: Sequence[Any], canonical: str | None, where: str | None,
                   what: str) -> np.ndarray:
    """Convert an untyped (nested) Python sequence to a column array."""
    try:
        obj = np.array(values, dtype=object)
    except ValueError as exc:  # ragged nesting
        raise _refuse(f"{what}: values are not a regular array ({exc})", "unknown_dtype", where) from None
    if obj.ndim == 0:
        raise _refuse(f"{what}: a column needs a leading (row) axis", "row_count_mismatch", where)
    # np.array(list-of-lists, dtype=object) nests as far as the lists are regular
    kinds = _leaf_types(obj)
    if any(issubclass(t, (list, tuple)) for t in kinds):
        raise _refuse(f"{what}: values are not a regular array", "unknown_dtype", where)
    if obj.size == 0:
        target = canonical or "f64"
        return np.zeros(obj.shape, dtype=NUMPY_DTYPES[target])
    is_bool = {t for t in kinds if issubclass(t, (bool, np.bool_))}
    is_str = {t for t in kinds if issubclass(t, str)}
    is_int = {t for t in kinds if issubclass(t, (int, np.integer)) and not issubclass(t, (bool, np.bool_))}
    is_float = {t for t in kinds if issubclass(t, (float, np.floating))}
    is_complex = {t for t in kinds if issubclass(t, (complex, np.complexfloating))}
    other = kinds - is_bool - is_str - is_int - is_float - is_complex
    if other:
        names = ", ".join(sorted(t.__name__ for t in other))
        raise _refuse(f"{what}: values of type {names} cannot be a column (nulls are masks)",
                      "unknown_dtype", where)
    if is_str:
        if kinds != is_str:
            raise _refuse(f"{what}: a string column holds only strings", "unknown_dtype", where)
        out = np.empty(obj.shape, dtype=object)
        out[...] = obj
        return out
    if is_bool:
        if kinds != is_bool:
            raise _refuse(f"{what}: values mix bools and numbers", "unknown_dtype", where)
        return obj.astype(bool)
    if is_int and not is_float and not is_complex and all(issubclass(t, int) for t in is_int):
        # Python ints only: they carry no width; a canonical name gives them theirs
        ints = [int(x) for x in obj.flat]
        targets = [canonical] if canonical in _INT_RANGE or canonical == "f64" else []
        for target in targets + ["i64", "u64"]:
            if _int_fits(ints, target):
                return obj.astype(NUMPY_DTYPES[target])
        raise _refuse(f"{what}: integers beyond 64 bits", "unknown_dtype", where)
    # numpy scalars and floats: let numpy promote, then check int exactness for f64
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and is_int:
        py_ints = [int(x) for x in obj.flat if type(x) in is_int]
        if not _int_fits(py_ints, "f64"):
            raise _refuse(f"{what}: an integer is not exactly representable as f64", "unknown_dtype", where)
    return arr


def _exact_to(a: np.ndarray, target: str, whose: str, where: str | None, what: str) -> np.ndarray:
    """``a`` converted to the mrec dtype ``target`` when the conversion is exact, else a refusal.

    An array already of ``target`` (either byte order), or of another kind (integers for a real
    column, reals for an integer one, bools, strings: a column keeps its kind), is returned
    unchanged for the usual checks.  Exact conversions within a kind: float16/float32 -> f64
    (always exact), c64 -> c128, an integer array into an integer dtype whose range holds every
    value.  A lossy one is left as it is, for the check that
    follows to refuse with its kind (``declaration_mismatch`` against a declared dtype,
    ``bad_reference`` for a row reference); an integer array that does not fit its canonical
    dtype (a negative ``res_id``) is refused here, ``canonical_dtype``, naming the value.
    """
    if target not in NUMPY_DTYPES or target == "string":
        return a
    dt = NUMPY_DTYPES[target]
    src = a.dtype
    if src.kind not in "fiuc" or (src.kind == dt.kind and src.itemsize == dt.itemsize):
        return a
    if target == "f64" and src.kind == "f" and src.itemsize < 8:
        return a.astype(dt)
    if target == "c128" and src.kind == "c" and src.itemsize == 8:
        return a.astype(dt)
    if src.kind in "iu" and dt.kind in "iu":
        if a.size == 0:
            return a.astype(dt)
        lo, hi = int(a.min()), int(a.max())
        tlo, thi = _INT_RANGE[target]
        if tlo <= lo and hi <= thi:
            return a.astype(dt)
        if whose == "canonical":
            bad = lo if lo < tlo else hi
            raise _refuse(f"{what}: {src} values convert to the canonical dtype {target} only when exact: "
                          f"{bad} is not in {tlo}..{thi}", "canonical_dtype", where)
    return a        # another kind, or not exact: the declared / canonical / reference checks refuse it


def as_column_array(values: Any, *, column: str | None = None, hint: str | None = None,
                    where: str | None = None, what: str = "column") -> tuple[np.ndarray, str]:
    """``values`` as a canonical in-memory column plus its mrec dtype.

    * A numpy array keeps its dtype (converted to little-endian if needed;
      ``U``/``T`` strings become ``object`` arrays of ``str``); an array
      already in canonical form is returned as is (no copy).
    * An untyped Python sequence (nested lists allowed) is converted: str ->
      ``string``, bool -> ``bool``, int -> ``i64`` (``u64`` when beyond
      ``i64``), float -> ``f64``, complex -> ``c128``.  When ``column`` is a
      canonical name (§7.1) Python ints take the canonical dtype if every
      value fits it exactly -- a list has no width of its own, so this is not
      a widening.  ``hint`` (an mrec dtype, e.g. the declared one) plays the
      same role for any column and takes precedence over the canonical name.
    * A numpy array whose dtype differs from its target -- ``hint``, else the canonical dtype of
      ``column`` -- is converted when the conversion is exact (float32 -> f64; i32/i64/u32 ->
      u64 when every value is non-negative and fits; see :func:`_exact_to`) and refused when it
      is lossy; another kind (an integer array for an f64 column) is never converted.  Without a
      target an array is never converted (float32 stays ``narrow_float``).
    * 0-d input is refused (a column has a leading axis).
    """
    if isinstance(values, np.ndarray):
        a = values
        if hint is not None:
            a = _exact_to(a, hint, "declared", where, what)
        elif column is not None and column in CANONICAL_DTYPES:
            a = _exact_to(a, CANONICAL_DTYPES[column], "canonical", where, what)
    elif isinstance(values, (list, tuple)):
        target = hint if hint is not None else (CANONICAL_DTYPES.get(column) if column else None)
        a = _from_sequence(values, target, where, what)
    else:
        raise _refuse(f"{what}: expected an array or a list of rows, found {type(values).__name__}",
                      "row_count_mismatch", where)
    if a.ndim == 0:
        raise _refuse(f"{what}: a column needs a leading (row) axis", "row_count_mismatch", where)
    name = _dtype_name(a.dtype, where, what)
    if a.dtype.kind in ("U", "T"):
        a = a.astype(object)
        # numpy hands back Python str for U/T -> object
    elif a.dtype.kind == "O":
        _check_str_elements(a, where, what)
    elif a.dtype != NUMPY_DTYPES[name]:
        a = a.astype(NUMPY_DTYPES[name])  # byte order only: value-preserving
    return a, name


def row_bytes(dtype: str, trailing: Sequence[int] = ()) -> int:
    """Bytes of one row: element size times the product of ``trailing``.

    A ``string`` element is estimated at :data:`STRING_ROW_BYTES` (16).  A
    trailing axis of length 0 gives 0; callers sizing chunks must guard it.
    """
    size = STRING_ROW_BYTES if check_dtype_name(dtype) == "string" else NUMPY_DTYPES[dtype].itemsize
    return size * math.prod(check_trailing(tuple(trailing)))


# ---------------------------------------------------------------------------
# canonical vocabulary (§7.1, schema/core/vocabulary.json)

def _table(dtype: str, names: str) -> dict[str, str]:
    return {n: dtype for n in names.split()}


#: Canonical column name -> its one dtype (shape always ``[N]``).
CANONICAL_DTYPES: dict[str, str] = {
    **_table("f64", "x y z vx vy vz fx fy fz charge mass"),
    **_table("f64", "quatw quati quatj quatk mux muy muz axis_x axis_y axis_z occupancy b_factor"),
    **_table("u64", "id atomic_number type_id mol_id res_id atom_map"),
    **_table("u64", "atomi atomj atomk atoml atomm ibead bond_type bond_number"),
    **_table("i64", "formal_charge"),
    **_table("i32", "ix iy iz"),
    **_table("bool", "free is_14 exclude_14"),
    **_table("string", "element type name res_name bead_type chain icode altloc style"),
}

#: Identifiers and endpoints a reader MUST refuse at any width/signedness but u64.
EXACT_U64_COLUMNS: frozenset[str] = frozenset(
    "id atomic_number type_id mol_id res_id atomi atomj atomk atoml atomm ibead bond_type bond_number".split()
)


def canonical_dtype(column: str) -> str | None:
    """The canonical dtype of ``column``, or None if the name is not canonical."""
    return CANONICAL_DTYPES.get(column)


def check_canonical(block: str, column: str, dtype: str, trailing: Sequence[int] = (),
                    where: str | None = None) -> None:
    """Refuse (``canonical_dtype``) a canonical key stored at another dtype or shape.

    The exactly-u64 identifiers/endpoints are a MUST; the other canonical keys a
    SHOULD -- both are refused alike.  Trailing axes are refused too: the
    canonical shape is ``[N]``.
    """
    canon = CANONICAL_DTYPES.get(column)
    if canon is None:
        return
    trailing = tuple(trailing)
    if dtype != canon or trailing != ():
        shape = "[N]" + "".join(f"[{n}]" for n in trailing)
        rule = " (exactly u64: no other width or signedness)" if column in EXACT_U64_COLUMNS else ""
        raise _refuse(
            f"block {block!r} column {column!r} is {dtype}{shape}, but the canonical key "
            f"{column!r} is {canon}[N]{rule}",
            "canonical_dtype",
            where,
        )
