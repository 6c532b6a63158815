"""Zarr V3 data types admitted by mrec, and their fill values.

The format never widens: only the 13 types of the column set are read
(bool, int8–int64, uint8–uint64, float64, complex64, complex128, string);
float16/float32, fixed-length strings and raw bytes are refused by name.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedError, MetadataError


@dataclass(frozen=True)
class DataType:
    name: str             # Zarr V3 data_type
    numpy: np.dtype       # in-memory dtype (native byte order; strings: object)
    itemsize: int         # bytes per element on disk for fixed-size types; 0 for string

    @property
    def is_string(self) -> bool:
        return self.name == "string"

    @property
    def is_float(self) -> bool:
        return self.numpy.kind in "fc"


_FIXED = {
    "bool": "?", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8",
    "float64": "f8", "complex64": "c8", "complex128": "c16",
}

DATA_TYPES: dict[str, DataType] = {
    name: DataType(name, np.dtype(code), np.dtype(code).itemsize) for name, code in _FIXED.items()
}
DATA_TYPES["string"] = DataType("string", np.dtype(object), 0)

_REFUSED = {
    "float16": "narrow_float", "float32": "narrow_float", "bfloat16": "narrow_float",
    "fixed_length_utf32": "unknown_dtype", "bytes": "unknown_dtype", "variable_length_bytes": "unknown_dtype",
}


def parse_data_type(value, where: str) -> DataType:
    """The :class:`DataType` of a ``data_type`` field, refusing anything outside the set."""
    if isinstance(value, str) and value in DATA_TYPES:
        return DATA_TYPES[value]
    if isinstance(value, str):
        kind = _REFUSED.get(value, "narrow_float" if value.startswith("float") else "unknown_dtype")
        if value.startswith("r") and value[1:].isdigit():
            kind = "unknown_dtype"
        raise UnsupportedError(
            f"data_type {value!r} is not one of the format's types "
            f"({', '.join(sorted(DATA_TYPES))}); the format never widens", path=where, kind=kind)
    name = value.get("name") if isinstance(value, dict) else value
    kind = "unknown_dtype"
    if isinstance(name, str):
        kind = _REFUSED.get(name, "narrow_float" if name.startswith("float") else "unknown_dtype")
    if isinstance(value, dict) and name in DATA_TYPES:
        # Zarr V3 core, data_type: "If the data type is defined in this specification, then the value
        # must be the data type identifier provided as a string"; the object form is for extensions
        raise MetadataError(f"data_type {value!r} is the object form of a core data type; Zarr V3 names "
                            f"a core data type by its string ({name!r})", path=where)
    if isinstance(value, dict):
        raise UnsupportedError(f"data_type {value!r}: the extension data type {name!r} is not one of the "
                               f"format's types ({', '.join(sorted(DATA_TYPES))})", path=where, kind=kind)
    raise UnsupportedError(f"data_type {value!r} is not a data type name (a string)", path=where, kind=kind)


def data_type_of(dtype: np.dtype) -> DataType:
    """Zarr data type for a numpy dtype (strings: object / U / T)."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "U", "T"):
        return DATA_TYPES["string"]
    for dt in DATA_TYPES.values():
        if dt.name != "string" and dt.numpy == dtype.newbyteorder("="):
            return dt
    raise UnsupportedError(f"numpy dtype {dtype} has no Zarr data type in the format",
                           kind="narrow_float" if dtype.kind == "f" else "unknown_dtype")


# -- fill values -------------------------------------------------------------

_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _hex_bytes(v: str, where: str) -> bytes:
    """The big-endian bytes of a ``"0x..."`` fill value (IEEE 754 bits)."""
    try:
        return bytes.fromhex(v[2:])
    except ValueError:
        raise MetadataError(f"fill_value {v!r} is not a hex-encoded float", path=where) from None


def _float_from_json(v, where: str, nbytes: int) -> float:
    if isinstance(v, bool):
        raise MetadataError(f"fill_value {v!r} is not a number", path=where)
    if isinstance(v, (int, float)):
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):     # non-finite fills are spelled "Infinity" / "NaN", never as numbers
            raise MetadataError(f"fill_value {v!r} overflows float64", path=where)
        return f
    if isinstance(v, str):
        if v in _SPECIAL:
            return _SPECIAL[v]
        if v.startswith("0x"):
            raw = _hex_bytes(v, where)
            # the hex form spells the IEEE 754 bits of exactly the (component) type: 8 hex digits
            # for float32 / a complex64 component, 16 for float64 / a complex128 component
            if len(raw) != nbytes:
                raise MetadataError(f"fill_value {v!r} is {len(raw)} hex-encoded bytes; a "
                                    f"{'complex64' if nbytes == 4 else 'complex128'} component takes {nbytes}",
                                    path=where)
            if nbytes == 8:
                return struct.unpack(">d", raw)[0]
            return float(np.frombuffer(raw, ">f4")[0])
        raise MetadataError(f"fill_value {v!r} is not a float form", path=where)
    raise MetadataError(f"fill_value {v!r} is not a number", path=where)


def parse_fill_value(value, dt: DataType, where: str):
    """Decode a ``fill_value`` of ``zarr.json`` into a numpy scalar (or str)."""
    name = dt.name
    if value is None:
        raise MetadataError("fill_value null is not allowed in Zarr V3", path=where)
    if name == "bool":
        if not isinstance(value, bool):
            raise MetadataError(f"fill_value {value!r} is not a bool", path=where)
        return np.bool_(value)
    if name.startswith("int") or name.startswith("uint"):
        # "a JSON number with no fraction or exponent part": json gives a float for 1.0 and 1e2
        if isinstance(value, bool) or not isinstance(value, int):
            raise MetadataError(f"fill_value {value!r} is not an integer ({name} takes a JSON number with no "
                                "fraction or exponent part)", path=where)
        info = np.iinfo(dt.numpy)
        if not info.min <= int(value) <= info.max:
            raise MetadataError(f"fill_value {value!r} out of range for {name}", path=where)
        return dt.numpy.type(int(value))
    if name == "float64":
        if isinstance(value, str) and value.startswith("0x"):
            raw = _hex_bytes(value, where)
            if len(raw) != 8:
                raise MetadataError(f"fill_value {value!r} is not 8 hex-encoded bytes for float64", path=where)
            return np.frombuffer(raw, ">f8")[0].astype("f8")
        return np.float64(_float_from_json(value, where, 8))
    if name in ("complex64", "complex128"):
        if not (isinstance(value, list) and len(value) == 2):
            raise MetadataError(f"fill_value {value!r} is not a [re, im] pair", path=where)
        half = 4 if name == "complex64" else 8
        re, im = (_float_from_json(v, where, half) for v in value)
        return dt.numpy.type(complex(re, im))
    if name == "string":
        if not isinstance(value, str):
            raise MetadataError(f"fill_value {value!r} is not a string", path=where)
        return value
    raise MetadataError(f"no fill value rule for {name}", path=where)


def _float_to_json(x, nbytes: int = 8):
    """A float fill value (or complex component) as JSON: a number, "NaN",
    "Infinity", "-Infinity", or — for a NaN other than the canonical quiet
    NaN — its IEEE 754 bits as ``"0x"`` + big-endian hex of ``nbytes`` bytes."""
    code = ">f4" if nbytes == 4 else ">f8"
    bits = np.asarray(x, dtype=code).tobytes()
    x = float(x)
    if math.isnan(x):
        canonical = np.asarray(np.nan, dtype=code).tobytes()
        return "NaN" if bits == canonical else "0x" + bits.hex()
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def fill_value_to_json(value, dt: DataType):
    name = dt.name
    if name == "bool":
        return bool(value)
    if name.startswith("int") or name.startswith("uint"):
        return int(value)
    if name == "float64":
        return _float_to_json(value)
    if name in ("complex64", "complex128"):
        half = 4 if name == "complex64" else 8
        v = dt.numpy.type(value)
        return [_float_to_json(v.real, half), _float_to_json(v.imag, half)]
    if name == "string":
        return str(value)
    raise MetadataError(f"no fill value rule for {name}")


def default_fill(dt: DataType):
    """zarr-python's default: 0 / false / empty string."""
    if dt.is_string:
        return ""
    return dt.numpy.type(0)
