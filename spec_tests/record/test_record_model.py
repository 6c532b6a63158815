"""Record model: dtypes, precision, typed JSON, Box/Frame, SequenceSchema.

Spec: mrec-notes §1.4-§1.6, §2.2-§2.4, §3, §7.1, §7.4, §8.2.  Every refusal
is checked for its type (RefusalError), its ``kind`` and that the message
names the block / column / key concerned.
"""
from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrec.errors import MetadataError, RefusalError
from mrec.record.model.dtypes import (CANONICAL_DTYPES, DTYPES, EXACT_U64_COLUMNS, NUMPY_DTYPES,
                                      ZARR_DATA_TYPES, as_column_array, check_canonical, check_dtype_name,
                                      dtype_from_zarr, dtype_name, dtype_of_array, numpy_dtype, row_bytes,
                                      zarr_data_type)
from mrec.record.model.box import Box
from mrec.record.model.frame import Frame
from mrec.record.model.precision import (P_MAX, P_MIN, check_precision, is_on_grid, off_grid, quantum,
                                         round_to_precision)
from mrec.record.model.declarations import ABSENT, BlockDecl, ColumnDecl, MetaDecl
from mrec.record.model.schema import SequenceSchema
from mrec.record.model.typed_json import (META_TAGS, TAG_NAMES, coerce_meta_value, decode_meta_document,
                                          decode_typed, encode_meta_document, encode_typed, infer_tag,
                                          json_dumps)

SPEC = Path(__file__).resolve().parents[2].parent / "shared" / "spec"


@contextlib.contextmanager
def refused(kind: str, *names: str) -> Iterator[None]:
    """Expect a RefusalError of ``kind`` whose message names every one of ``names``."""
    with pytest.raises(RefusalError) as info:
        yield
    assert info.value.kind == kind, f"kind {info.value.kind!r} != {kind!r}: {info.value}"
    for name in names:
        assert name in str(info.value), f"{name!r} not named in {info.value}"


def bits(a: Any) -> bytes:
    return np.asarray(a, dtype="<f8").tobytes()


# ===========================================================================
# dtypes


class TestDtypes:
    def test_closed_set_of_13(self) -> None:
        assert DTYPES == ("f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "string",
                          "c64", "c128")
        assert set(NUMPY_DTYPES) == set(DTYPES) == set(ZARR_DATA_TYPES)

    @pytest.mark.parametrize("name,zarr,np_dtype", [
        ("f64", "float64", "<f8"), ("i8", "int8", "i1"), ("i16", "int16", "<i2"), ("i32", "int32", "<i4"),
        ("i64", "int64", "<i8"), ("u8", "uint8", "u1"), ("u16", "uint16", "<u2"), ("u32", "uint32", "<u4"),
        ("u64", "uint64", "<u8"), ("bool", "bool", "bool"), ("string", "string", "O"),
        ("c64", "complex64", "<c8"), ("c128", "complex128", "<c16"),
    ])
    def test_mapping_is_total_and_exact_both_ways(self, name: str, zarr: str, np_dtype: str) -> None:
        assert zarr_data_type(name) == zarr
        assert dtype_from_zarr(zarr) == name
        assert dtype_from_zarr({"name": zarr}) == name
        assert numpy_dtype(name) == np.dtype(np_dtype)
        if name != "string":
            assert numpy_dtype(name).byteorder in ("<", "|", "=")
            assert dtype_of_array(np.zeros(2, dtype=np_dtype)) == name
            assert dtype_of_array(np.zeros(2, dtype=np.dtype(np_dtype).newbyteorder(">"))) == name

    @pytest.mark.parametrize("data_type,kind", [
        ("float32", "narrow_float"), ("float16", "narrow_float"), ("bfloat16", "narrow_float"),
        ("fixed_length_utf32", "unknown_dtype"), ("bytes", "unknown_dtype"), ("r16", "unknown_dtype"),
        ("datetime64", "unknown_dtype"), ({"name": "fixed_length_utf32", "configuration": {"length_bytes": 4}},
                                          "unknown_dtype"),
        ({"name": "float64", "configuration": {"x": 1}}, "unknown_dtype"), (None, "unknown_dtype"),
    ])
    def test_zarr_refusals(self, data_type: Any, kind: str) -> None:
        with refused(kind):
            dtype_from_zarr(data_type, where="frame/atoms/x")

    @pytest.mark.parametrize("name,kind", [
        ("float", "unknown_dtype"), ("int", "unknown_dtype"), ("uint", "unknown_dtype"),
        ("json", "unknown_dtype"), ("f32", "narrow_float"), ("f16", "narrow_float"),
        ("float32", "narrow_float"), ("f64x3", "unknown_dtype"), (64, "unknown_dtype"),
    ])
    def test_declared_name_refusals(self, name: Any, kind: str) -> None:
        with refused(kind, "block 'atoms' column 'x'"):
            check_dtype_name(name, what="block 'atoms' column 'x'")

    @pytest.mark.parametrize("dt,kind", [
        (np.float16, "narrow_float"), (np.float32, "narrow_float"), ("S4", "unknown_dtype"),
        ("V8", "unknown_dtype"), ("datetime64[s]", "unknown_dtype"), ("timedelta64[s]", "unknown_dtype"),
        ([("a", "<f8")], "unknown_dtype"),
    ])
    def test_array_refusals(self, dt: Any, kind: str) -> None:
        with refused(kind, "block 'atoms' column 'x'"):
            dtype_of_array(np.zeros(3, dtype=dt), what="block 'atoms' column 'x'")

    def test_extended_floats_refused(self) -> None:
        ld = np.zeros(2, dtype=np.longdouble)
        if ld.dtype.itemsize != 8:
            with refused("unknown_dtype"):
                dtype_of_array(ld)

    def test_strings(self) -> None:
        assert dtype_of_array(np.array(["a", "bc"])) == "string"
        assert dtype_of_array(np.array(["a"], dtype=object)) == "string"
        with refused("unknown_dtype", "column"):
            dtype_of_array(np.array(["a", 1], dtype=object))
        a, name = as_column_array(np.array(["O", "H"]))
        assert name == "string" and a.dtype == object and all(type(x) is str for x in a)
        if hasattr(np.dtypes, "StringDType"):
            t = np.array(["x", "yz"], dtype=np.dtypes.StringDType())
            assert dtype_of_array(t) == "string"
            a, name = as_column_array(t)
            assert a.dtype == object and a.tolist() == ["x", "yz"]

    def test_as_column_array_keeps_canonical_arrays(self) -> None:
        x = np.arange(3.0)
        a, name = as_column_array(x)
        assert a is x and name == "f64"
        be = np.arange(3, dtype=">i4")
        a, name = as_column_array(be)
        assert name == "i32" and a.dtype == np.dtype("<i4") and a.tolist() == [0, 1, 2]

    @pytest.mark.parametrize("values,column,dtype", [
        ([1.0, 2.5], None, "f64"), ([1, 2], None, "i64"), ([2**63], None, "u64"), ([True, False], None, "bool"),
        (["a", "b"], None, "string"), ([1j, 2], None, "c128"), ([[1.0, 2.0, 3.0]], None, "f64"),
        ([0, 1], "id", "u64"), ([0, 1], "atomi", "u64"), ([0, -1], "charge", "f64"), ([1, -1], "ix", "i32"),
        ([1, 2], "formal_charge", "i64"), ([], "id", "u64"), ([], None, "f64"), ([1, 2.5], None, "f64"),
    ])
    def test_list_conversion(self, values: list, column: str | None, dtype: str) -> None:
        a, name = as_column_array(values, column=column)
        assert name == dtype and a.dtype == NUMPY_DTYPES[dtype]
        assert a.shape[0] == len(values)

    def test_list_to_canonical_only_when_exact(self) -> None:
        a, name = as_column_array([-1, 2], column="id")  # does not fit u64: stays i64 (canonical check refuses)
        assert name == "i64"
        a, name = as_column_array([2**40], column="ix")
        assert name == "i64"

    @pytest.mark.parametrize("values,kind", [
        (3.0, "row_count_mismatch"), (np.float64(3.0), "row_count_mismatch"), ([[1, 2], [3]], "unknown_dtype"),
        ([True, 1], "unknown_dtype"), (["a", 1], "unknown_dtype"), ([None, 1.0], "unknown_dtype"),
        ([2**64], "unknown_dtype"), (np.array(3.0), "row_count_mismatch"),
    ])
    def test_as_column_array_refusals(self, values: Any, kind: str) -> None:
        with refused(kind, "block 'atoms' column 'q'"):
            as_column_array(values, what="block 'atoms' column 'q'")

    def test_big_int_in_float_list_must_be_exact(self) -> None:
        with refused("unknown_dtype"):
            as_column_array([2**53 + 1, 0.5])

    @pytest.mark.parametrize("dtype,trailing,expected", [
        ("f64", (), 8), ("f64", (3,), 24), ("f64", (3, 3), 72), ("string", (), 16), ("string", (2,), 32),
        ("bool", (), 1), ("u8", (3, 3), 9), ("c64", (), 8), ("c128", (2,), 32), ("u64", (), 8), ("i16", (0,), 0),
    ])
    def test_row_bytes(self, dtype: str, trailing: tuple, expected: int) -> None:
        assert row_bytes(dtype, trailing) == expected

    def test_canonical_table_matches_vocabulary(self) -> None:
        vocab = json.loads((SPEC / "vectors" / "schema" / "core" / "vocabulary.json").read_text())
        assert CANONICAL_DTYPES == vocab
        assert EXACT_U64_COLUMNS <= {k for k, v in vocab.items() if v == "u64"}
        assert "atom_map" not in EXACT_U64_COLUMNS

    @pytest.mark.parametrize("column,dtype,trailing", [
        ("id", "i64", ()), ("atomi", "u32", ()), ("atomm", "i64", ()), ("mol_id", "u32", ()),
        ("bond_type", "u8", ()), ("x", "f64", (3,)), ("type", "u64", ()), ("ix", "i64", ()),
        ("free", "u8", ()), ("formal_charge", "i32", ()), ("element", "u8", ()),
    ])
    def test_check_canonical_refuses(self, column: str, dtype: str, trailing: tuple) -> None:
        with refused("canonical_dtype", "'atoms'", repr(column)):
            check_canonical("atoms", column, dtype, trailing)

    def test_check_canonical_exact_u64_message(self) -> None:
        with refused("canonical_dtype", "exactly u64"):
            check_canonical("bonds", "atomj", "i64")

    def test_check_canonical_accepts(self) -> None:
        for column, dtype in CANONICAL_DTYPES.items():
            check_canonical("atoms", column, dtype, ())
        check_canonical("atoms", "velocity", "f64", (3,))  # not canonical: anything goes


# ===========================================================================
# precision


class TestPrecision:
    @pytest.mark.parametrize("p,q", [
        (1e-3, 2.0**-10), (1e-2, 2.0**-7), (0.5, 0.5), (0.75, 0.5), (1.0, 1.0), (2.0**-1000, 2.0**-1000),
        (2.0**1000, 2.0**1000), (3, 2.0), (np.float64(0.1), 2.0**-4),
    ])
    def test_quantum(self, p: float, q: float) -> None:
        assert quantum(p) == q

    @pytest.mark.parametrize("p", [0, 0.0, -1e-3, math.inf, -math.inf, math.nan, True, False, "0.1", None,
                                   2.0**-1001, 2.0**1000 * 1.5, 10**400, [1e-3]])
    def test_bad_precision(self, p: Any) -> None:
        with refused("bad_precision", "block 'atoms' column 'x'"):
            check_precision(p, what="block 'atoms' column 'x'")

    def test_bounds(self) -> None:
        assert P_MIN == 2.0**-1000 == 9.332636185032189e-302
        assert P_MAX == 2.0**1000 == 1.0715086071862673e+301
        assert check_precision(P_MIN) == P_MIN and check_precision(P_MAX) == P_MAX
        assert check_precision(1) == 1.0

    def test_edge_vectors(self) -> None:
        p = 1e-3
        q = quantum(p)
        x = np.array([0.7572, 2.5 * q, 3.5 * q, -2.5 * q, -1e-4, 2.0**43 + 2.0**-9, math.nan, math.inf,
                      -math.inf, -0.0, 0.0])
        r = round_to_precision(x, p)
        expected = np.array([0.7568359375, 2 * q, 4 * q, -2 * q, -0.0, 2.0**43 + 2.0**-9, math.nan, math.inf,
                             -math.inf, -0.0, 0.0])
        assert bits(r) == bits(expected)
        assert np.signbit(r[4]) and np.signbit(r[9]) and not np.signbit(r[10])
        assert r is not x and bits(x[:4]) != bits(r[:4])  # input untouched

    def test_large_values_are_kept(self) -> None:
        q = quantum(1e-3)
        big = np.array([2.0**52 * q, -(2.0**52) * q, 2.0**52 * q + 1.0])
        assert round_to_precision(big, 1e-3) is big

    def test_no_copy_when_on_grid(self) -> None:
        x = np.array([0.5, -0.25, 0.0, -0.0, math.nan])
        assert round_to_precision(x, 1e-3) is x
        assert is_on_grid(x, 1e-3)

    def test_shapes_and_byte_order(self) -> None:
        x = np.array([[0.7572, 1.0, 2.0], [3.0, -1e-4, 0.1]])
        r = round_to_precision(x, 1e-3)
        assert r.shape == (2, 3) and r[0, 0] == 0.7568359375 and np.signbit(r[1, 1])
        be = x.astype(">f8")
        assert bits(round_to_precision(be, 1e-3)) == bits(r)
        assert round_to_precision(np.float64(0.7572), 1e-3) == 0.7568359375

    @pytest.mark.parametrize("values", [np.arange(3), np.zeros(3, dtype=np.float32), np.zeros(2, dtype="c16"),
                                        np.array(["a"], dtype=object)])
    def test_non_f64_refused(self, values: np.ndarray) -> None:
        with refused("bad_precision", "f64"):
            round_to_precision(values, 1e-3)

    def test_off_grid_and_validity(self) -> None:
        x = np.array([0.7572, 0.5, 0.1])
        assert off_grid(x, 1e-3).tolist() == [True, False, True]
        assert not is_on_grid(x, 1e-3)
        assert is_on_grid(x, 1e-3, validity=[False, True, False])  # null rows are unconstrained
        y = np.array([[0.1, 0.5], [0.5, 0.5]])
        assert off_grid(y, 1e-3, validity=[False, True]).tolist() == [[False, False], [False, False]]

    @settings(max_examples=300)
    @given(x=st.floats(allow_nan=False, allow_infinity=False),
           p=st.one_of(st.sampled_from([1e-3, 1e-2, 0.5, 0.75, 1.0, 2.0**-1000, 2.0**1000, 1e-300, 7.0]),
                       st.floats(min_value=2.0**-1000, max_value=2.0**1000)))
    def test_properties(self, x: float, p: float) -> None:
        q = quantum(p)
        assert q <= p < 2 * q and math.frexp(q)[0] == 0.5
        r = float(round_to_precision(np.array([x]), p)[0])
        if abs(x) >= 2.0**52 * q:
            assert bits(r) == bits(x)
        elif math.isfinite(r):
            assert abs(x - r) <= q / 2
            assert (r / q).is_integer()
        assert np.signbit(r) == np.signbit(x)
        again = round_to_precision(np.array([r]), p)
        assert bits(again) == bits([r])  # idempotent
        assert is_on_grid(np.array([r]), p)


# ===========================================================================
# typed JSON


class TestMetaTags:
    def test_sixteen_tags(self) -> None:
        table = {
            "bool": ("bool", ()), "i32": ("i32", ()), "i64": ("i64", ()), "u32": ("u32", ()),
            "u64": ("u64", ()), "f64": ("f64", ()), "string": ("string", ()), "json": ("json", ()),
            "bool3": ("bool", (3,)), "i32x3": ("i32", (3,)), "i64x3": ("i64", (3,)), "u32x3": ("u32", (3,)),
            "u64x3": ("u64", (3,)), "f64x3": ("f64", (3,)), "f64x6": ("f64", (6,)), "f64x9": ("f64", (9,)),
        }
        assert len(META_TAGS) == 16 and TAG_NAMES == tuple(table)
        for name, (element, trailing) in table.items():
            assert (META_TAGS[name].element, META_TAGS[name].trailing) == (element, trailing)
        assert META_TAGS["json"].stored_dtype == "string"

    @pytest.mark.parametrize("tag", ["i64x6", "f32", "float", "c64", "i8", "json3", "", None])
    def test_tag_outside_closed_set(self, tag: Any) -> None:
        with refused("meta_tag_mismatch", "'pe'"):
            coerce_meta_value(tag, 1, key="pe")


class TestCoerce:
    @pytest.mark.parametrize("tag,value,expected,np_type", [
        ("f64", 2, 2.0, np.float64), ("f64", 2**60, 2.0**60, np.float64), ("f64", -(2**53), -(2.0**53), np.float64),
        ("f64", np.float32(0.5), 0.5, np.float64), ("f64", np.int32(3), 3.0, np.float64),
        ("i32", 2**31 - 1, 2**31 - 1, np.int32), ("i32", np.int64(-5), -5, np.int32),
        ("u64", 2**64 - 1, 2**64 - 1, np.uint64), ("i64", -(2**63), -(2**63), np.int64),
        ("u32", np.uint8(7), 7, np.uint32), ("bool", True, True, np.bool_), ("bool", np.bool_(False), False, np.bool_),
        ("string", "NaN", "NaN", str), ("f64", np.array(1.5), 1.5, np.float64),
    ])
    def test_exact_coercions(self, tag: str, value: Any, expected: Any, np_type: type) -> None:
        got = coerce_meta_value(tag, value, key="k")
        assert type(got) is np_type and got == expected

    def test_non_finite_f64_is_legal(self) -> None:
        assert math.isnan(coerce_meta_value("f64", math.nan))
        assert coerce_meta_value("f64", -math.inf) == -math.inf
        assert np.signbit(coerce_meta_value("f64", -0.0))

    def test_vectors(self) -> None:
        v = coerce_meta_value("f64x3", [0, 0.5, 1])
        assert v.dtype == np.float64 and v.tolist() == [0.0, 0.5, 1.0]
        v = coerce_meta_value("i32x3", np.array([1, 2, 3], dtype=np.int64))
        assert v.dtype == np.int32
        v = coerce_meta_value("bool3", (True, False, True))
        assert v.dtype == bool
        assert coerce_meta_value("f64x9", list(range(9))).shape == (9,)
        assert coerce_meta_value("u64x3", [2**64 - 1, 0, 1]).dtype == np.uint64

    def test_json_documents(self) -> None:
        doc = {"a": [1, 2.5, None, True, "s"], "b": {"c": np.int64(3)}, "d": (1, 2)}
        got = coerce_meta_value("json", doc)
        assert got == {"a": [1, 2.5, None, True, "s"], "b": {"c": 3}, "d": [1, 2]}
        assert type(got["b"]["c"]) is int
        assert coerce_meta_value("json", None) is None

    @pytest.mark.parametrize("tag,value,fragment", [
        ("i32", 1.5, "not rounded"), ("i32", 2.0, "not rounded"), ("i32", 2**31, "out of range"),
        ("i32", -(2**31) - 1, "out of range"), ("u64", -1, "out of range"), ("u32", 2**32, "out of range"),
        ("i64", 2**63, "out of range"), ("i64", True, "bool"), ("f64", True, "bool"), ("u64", np.bool_(True), "bool"),
        ("bool", 1, "bool"), ("bool", "true", "bool"), ("f64", 2**53 + 1, "exactly"), ("f64", 10**400, "exactly"),
        ("f64", "NaN", "real"), ("f64", 1j, "real"), ("f64", None, "real"), ("i64", "5", "integer"),
        ("string", 1, "string"), ("string", None, "string"), ("f64x3", [1.0, 2.0], "exactly 3"),
        ("f64x3", [1.0, 2.0, 3.0, 4.0], "exactly 3"), ("f64x6", [0.0] * 9, "exactly 6"),
        ("f64x9", np.zeros((3, 3)), "flat"), ("i32x3", [1, 2, 3.5], "not rounded"), ("f64x3", 1.0, "vector"),
        ("f64x3", "abc", "vector"), ("bool3", [1, 0, 1], "bool"), ("u32x3", [1, 2, -3], "out of range"),
        ("json", {"a": math.nan}, "finite"), ("json", [math.inf], "finite"), ("json", {1: 2}, "JSON"),
        ("json", {"a": {1, 2}}, "JSON"), ("json", np.float64(math.nan), "finite"),
    ])
    def test_refusals(self, tag: str, value: Any, fragment: str) -> None:
        with refused("meta_tag_mismatch", "'energy'", fragment):
            coerce_meta_value(tag, value, key="energy")


    def test_inexact_extended_float_refused(self) -> None:
        third = np.longdouble(1) / np.longdouble(3)
        if float(third) != third:  # platforms where longdouble is wider than binary64
            with refused("meta_tag_mismatch", "'energy'", "exactly"):
                coerce_meta_value("f64", third, key="energy")


class TestTypedJson:
    @pytest.mark.parametrize("tag,value,form", [
        ("f64", 1.5, 1.5), ("f64", math.nan, "NaN"), ("f64", math.inf, "Infinity"), ("f64", -math.inf, "-Infinity"),
        ("f64", 3, 3.0), ("i64", 2**53, 2**53), ("i64", -(2**53), -(2**53)), ("i64", 2**53 + 1, "9007199254740993"),
        ("i64", -(2**63), "-9223372036854775808"), ("u64", 2**64 - 1, "18446744073709551615"),
        ("i32", -7, -7), ("bool", True, True), ("string", "NaN", "NaN"), ("json", {"a": [1, None]}, {"a": [1, None]}),
        ("json", None, None), ("f64x3", [0, math.nan, -math.inf], [0.0, "NaN", "-Infinity"]),
        ("u64x3", [2**64 - 1, 1, 0], ["18446744073709551615", 1, 0]), ("bool3", [True, False, True], [True, False, True]),
        ("c128", 1 + 2j, [1.0, 2.0]), ("c128", complex(math.nan, -math.inf), ["NaN", "-Infinity"]),
        ("c64", 0.5 - 0.25j, [0.5, -0.25]), ("i8", -128, -128), ("u16", 65535, 65535), ("u8", 0, 0),
    ])
    def test_encode_forms(self, tag: str, value: Any, form: Any) -> None:
        got = encode_typed(tag, value)
        assert got == form if not isinstance(form, float) else bits(got) == bits(form)
        assert json.loads(json_dumps(got)) == got
        # and back
        back = decode_typed(tag, json.loads(json_dumps(got)))
        assert json_dumps(encode_typed(tag, back)) == json_dumps(got)

    def test_encoded_values_are_plain_python(self) -> None:
        for v in (encode_typed("i32", np.int32(3)), encode_typed("f64", np.float64(2.5)), encode_typed("bool", np.bool_(1))):
            assert type(v) in (int, float, bool)
        assert type(encode_typed("u64x3", np.array([1, 2, 3], dtype=np.uint64))[0]) is int

    def test_negative_zero_survives(self) -> None:
        text = json_dumps(encode_typed("f64", -0.0))
        assert np.signbit(decode_typed("f64", json.loads(text)))

    @pytest.mark.parametrize("tag,raw,expected", [
        ("u64", 18446744073709551615, 2**64 - 1), ("i64", 2**62, 2**62), ("i64", "-5", -5), ("u64", "12", 12),
        ("f64", 2**60, 2.0**60), ("f64", "NaN", math.nan), ("f64", 7, 7.0), ("i64", -(2**63), -(2**63)),
    ])
    def test_decode_accepts(self, tag: str, raw: Any, expected: Any) -> None:
        got = decode_typed(tag, raw, key="k")
        assert got == expected or (math.isnan(expected) and math.isnan(got))

    @pytest.mark.parametrize("tag,raw,fragment", [
        ("f64", None, "null"), ("i32", None, "null"), ("i64", 2.0, "not rounded"), ("i32", 1.5, "not rounded"),
        ("i32", 2**40, "out of range"), ("i32", 2**31, "out of range"), ("u64", -1, "out of range"),
        ("u64", "18446744073709551616", "out of range"), ("f64", "nan", "not an f64"), ("f64", "inf", "not an f64"),
        ("f64", "1.5", "not an f64"), ("f64", math.nan, "non-finite"), ("f64", math.inf, "non-finite"),
        ("f64", True, "f64"), ("f64", 2**53 + 1, "exactly"), ("i64", "1e3", "decimal"), ("i64", "+5", "decimal"),
        ("i64", " 5", "decimal"), ("i64", True, "bool"), ("bool", 1, "bool"), ("bool", "true", "bool"),
        ("string", 5, "string"), ("f64x3", [1.0, 2.0], "3 elements"), ("f64x3", "NaN", "3 elements"),
        ("f64x3", [1.0, None, 2.0], "null"), ("c128", 1.0, "[re, im]"), ("c128", [1.0], "[re, im]"),
        ("c64", [0.1, 0.0], "c64"), ("json", [math.nan], "finite"), ("i64x3", [1, 2, 3.0], "not rounded"),
        ("nope", 1, "neither"),
    ])
    def test_decode_refusals(self, tag: str, raw: Any, fragment: str) -> None:
        with refused("meta_tag_mismatch", "'pressure'", fragment):
            decode_typed(tag, raw, key="pressure")

    @pytest.mark.parametrize("text,tag", [
        ("true", "bool"), ("false", "bool"), ("2", "i64"), ("-9223372036854775808", "i64"),
        ("9223372036854775807", "i64"), ("9223372036854775808", "u64"), ("18446744073709551615", "u64"),
        ("18446744073709551616", "f64"), ("-9223372036854775809", "f64"), ("2.0", "f64"), ("1e3", "f64"),
        ("-0.0", "f64"), ('"NaN"', "string"), ('"x"', "string"), ("null", "json"), ("[1, 2, 3]", "json"),
        ('{"a": 1}', "json"), ("[]", "json"),
    ])
    def test_infer_tag_from_json(self, text: str, tag: str) -> None:
        assert infer_tag(json.loads(text)) == tag

    @pytest.mark.parametrize("value,tag", [
        (np.bool_(True), "bool"), (np.int32(1), "i32"), (np.int64(1), "i64"), (np.uint32(1), "u32"),
        (np.uint64(1), "u64"), (np.float64(1), "f64"), (np.array([1.0, 2.0, 3.0]), "f64x3"),
        (np.zeros(6), "f64x6"), (np.zeros(9), "f64x9"), (np.zeros(3, dtype=bool), "bool3"),
        (np.zeros(3, dtype=np.int32), "i32x3"), (np.zeros(3, dtype=">i8"), "i64x3"),
        (np.zeros(3, dtype=np.uint32), "u32x3"), (np.zeros(3, dtype=np.uint64), "u64x3"), (np.array(5), "i64"),
        ((1, 2), "json"),
    ])
    def test_infer_tag_from_numpy(self, value: Any, tag: str) -> None:
        assert infer_tag(value) == tag

    @pytest.mark.parametrize("value", [np.int8(1), np.float32(1), np.zeros(4), np.zeros((3, 3)),
                                       np.zeros(3, dtype=np.int16), np.zeros(6, dtype=np.int64), 1j, b"x", {1, 2}])
    def test_infer_tag_refusals(self, value: Any) -> None:
        with refused("meta_tag_mismatch", "'spin'"):
            infer_tag(value, key="spin")

    def test_json_dumps(self) -> None:
        text = json_dumps({"a": np.int64(3), "b": np.float64(0.5), "c": np.bool_(True), "d": np.arange(3),
                           "e": (1, 2)})
        assert json.loads(text) == {"a": 3, "b": 0.5, "c": True, "d": [0, 1, 2], "e": [1, 2]}
        assert json_dumps({"b": 1, "a": 2}, sort_keys=True) == '{"a": 2, "b": 1}'
        for bad in ({"x": math.nan}, {"x": np.float64(math.inf)}, {1: 2}, {"x": object()}):
            with pytest.raises(MetadataError) as info:
                json_dumps(bad)
            assert isinstance(info.value, RefusalError)


# -- hypothesis round trips for every tag and column dtype -------------------

def _ints(dtype: str) -> st.SearchStrategy[int]:
    info = np.iinfo(NUMPY_DTYPES[dtype])
    return st.integers(int(info.min), int(info.max))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def _element(element: str) -> st.SearchStrategy[Any]:
    if element == "bool":
        return st.booleans()
    if element == "string":
        return st.text(max_size=12)
    if element == "f64":
        return st.floats(allow_nan=True, allow_infinity=True)
    if element == "json":
        return _JSON
    if element == "c64":
        f = st.floats(width=32, allow_nan=True, allow_infinity=True)
        return st.builds(complex, f, f)
    if element == "c128":
        f = st.floats(allow_nan=True, allow_infinity=True)
        return st.builds(complex, f, f)
    return _ints(element)


def _tag_value(tag: str) -> st.SearchStrategy[Any]:
    spec = META_TAGS[tag]
    if spec.trailing:
        (n,) = spec.trailing
        return st.lists(_element(spec.element), min_size=n, max_size=n)
    return _element(spec.element)


@st.composite
def _tagged(draw: Any) -> tuple[str, Any]:
    tag = draw(st.sampled_from(TAG_NAMES + ("i8", "i16", "u8", "u16", "c64", "c128")))
    if tag in META_TAGS:
        return tag, draw(_tag_value(tag))
    return tag, draw(_element(tag))


@settings(max_examples=600)
@given(_tagged())
def test_typed_json_round_trip_every_tag(tagged: tuple[str, Any]) -> None:
    tag, value = tagged
    native = coerce_meta_value(tag, value) if tag in META_TAGS else None
    form = encode_typed(tag, value)
    text = json_dumps(form)  # finite, plain JSON
    back = decode_typed(tag, json.loads(text))
    assert json_dumps(encode_typed(tag, back)) == text
    if tag in META_TAGS and META_TAGS[tag].element not in ("json", "string"):
        assert np.asarray(back).dtype == np.asarray(native).dtype
        assert np.asarray(back).shape == META_TAGS[tag].trailing


@settings(max_examples=200)
@given(st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: k != "_meta_types"),
                       st.sampled_from(TAG_NAMES).flatmap(lambda t: st.tuples(st.just(t), _tag_value(t))),
                       max_size=5),
       st.booleans())
def test_meta_document_round_trip(entries: dict[str, tuple[str, Any]], typed: bool) -> None:
    meta = {k: v for k, (t, v) in entries.items()}
    types = {k: t for k, (t, v) in entries.items()}
    attrs, tags = encode_meta_document(meta, types)
    text = json_dumps(attrs)
    back, back_tags = decode_meta_document(json.loads(text))
    assert back_tags == tags == types
    assert json_dumps(encode_meta_document(back, back_tags)[0]) == text
    if not entries:
        assert attrs == {}


class TestMetaDocument:
    def test_every_tag(self) -> None:
        meta = {"b": True, "i": -3, "I": 2**40, "u": 7, "U": 2**64 - 1, "f": math.nan, "s": "NaN",
                "j": {"units": {"preset": "real"}}, "b3": [True, False, True], "i3": [1, 2, 3],
                "I3": [2**60, 0, -1], "u3": [1, 2, 3], "U3": [2**64 - 1, 0, 0], "f3": [0.0, 0.5, 1.0],
                "f6": [0.0] * 6, "f9": list(range(9))}
        types = dict(zip(meta, ["bool", "i32", "i64", "u32", "u64", "f64", "string", "json", "bool3", "i32x3",
                                "i64x3", "u32x3", "u64x3", "f64x3", "f64x6", "f64x9"]))
        attrs, tags = encode_meta_document(meta, types)
        assert attrs["_meta_types"] == types == tags
        assert attrs["f"] == "NaN" and attrs["U"] == "18446744073709551615" and attrs["s"] == "NaN"
        assert attrs["U3"] == ["18446744073709551615", 0, 0] and attrs["I"] == 2**40
        back, back_types = decode_meta_document(json.loads(json_dumps(attrs)))
        assert back_types == types
        assert math.isnan(back["f"]) and back["s"] == "NaN" and back["U"] == 2**64 - 1
        assert back["i"].dtype == np.int32 and back["u3"].dtype == np.uint32 and back["j"] == meta["j"]

    def test_untyped_meta_infers(self) -> None:
        attrs = json.loads('{"n": 2, "x": 2.0, "big": 9223372036854775808, "s": "NaN", "l": [1, 2], '
                           '"o": {"a": 1}, "z": null, "t": true}')
        meta, tags = decode_meta_document(attrs)
        assert tags == {"n": "i64", "x": "f64", "big": "u64", "s": "string", "l": "json", "o": "json",
                        "z": "json", "t": "bool"}
        assert type(meta["x"]) is np.float64 and type(meta["n"]) is np.int64 and meta["z"] is None

    def test_integral_float_stays_real(self) -> None:
        attrs, tags = encode_meta_document({"x": 2.0})
        assert tags == {"x": "f64"}
        back, back_tags = decode_meta_document(json.loads(json_dumps(attrs)))
        assert back_tags == {"x": "f64"} and type(back["x"]) is np.float64

    def test_empty_document_has_no_meta_types(self) -> None:
        assert encode_meta_document({}) == ({}, {})
        assert decode_meta_document({}) == ({}, {})

    def test_stale_tag_ignored(self) -> None:
        attrs, tags = encode_meta_document({"a": 1}, {"a": "i32", "gone": "f64", "bogus": "nope"})
        assert tags == {"a": "i32"} and attrs["_meta_types"] == {"a": "i32"}
        meta, tags = decode_meta_document({"a": 1, "_meta_types": {"a": "u32", "gone": "f64", "bad": "f32"}})
        assert tags == {"a": "u32"} and meta == {"a": 1}

    def test_reserved_key(self) -> None:
        with refused("reserved_meta_key", "'_meta_types'"):
            encode_meta_document({"_meta_types": {"a": "i32"}, "a": 1})

    def test_non_string_key(self) -> None:
        with refused("reserved_meta_key", "1"):
            encode_meta_document({1: 2})

    def test_tag_mismatch_and_out_of_range(self) -> None:
        with refused("meta_tag_mismatch", "'e'"):
            decode_meta_document({"e": 1.5, "_meta_types": {"e": "i32"}})
        with refused("meta_tag_mismatch", "'e'", "out of range"):
            decode_meta_document({"e": 2**40, "_meta_types": {"e": "i32"}})
        with refused("meta_tag_mismatch", "'e'"):
            decode_meta_document({"e": 1.5, "_meta_types": {"e": "f32"}})
        with refused("meta_tag_mismatch", "_meta_types"):
            decode_meta_document({"e": 1.5, "_meta_types": ["f64"]})
        with refused("meta_tag_mismatch", "'e'"):
            encode_meta_document({"e": 1.5}, {"e": "i64"})

    def test_json_meta_non_finite(self) -> None:
        with refused("meta_tag_mismatch", "'doc'", "finite"):
            encode_meta_document({"doc": {"a": [1.0, math.nan]}})
        with refused("meta_tag_mismatch", "'doc'", "finite"):
            encode_meta_document({"doc": [math.inf]}, {"doc": "json"})

    def test_non_finite_f64_meta(self) -> None:
        attrs, _ = encode_meta_document({"pe": math.inf, "ke": -math.inf, "t": math.nan})
        assert (attrs["pe"], attrs["ke"], attrs["t"]) == ("Infinity", "-Infinity", "NaN")
        meta, tags = decode_meta_document(json.loads(json_dumps(attrs)))
        assert meta["pe"] == math.inf and tags["t"] == "f64"


# ===========================================================================
# Box


class TestBox:
    def test_defaults(self) -> None:
        b = Box(np.eye(3) * 10)
        assert b.defined and b.vectors.dtype == np.float64 and b.vectors.shape == (3, 3)
        assert bits(b.origin) == bits([0.0, 0.0, 0.0]) and b.boundary.tolist() == [True, True, True]

    def test_from_any(self) -> None:
        v = [[10.0, 0, 0], [0, 10.0, 0], [0, 0, 10.0]]
        a = Box.from_any(v)
        assert a == Box.from_any(np.array(v)) == Box.from_any({"vectors": v}) == Box.from_any(a)
        slab = Box.from_any({"vectors": v, "boundary": [True, True, False], "origin": [1, 2, 3], "cell_defined": True})
        assert slab.boundary.tolist() == [True, True, False] and slab.origin.tolist() == [1.0, 2.0, 3.0]
        assert Box.from_any({"vectors": v, "origin": None, "boundary": None}) == a

    def test_vectors_are_columns_kept_verbatim(self) -> None:
        v = np.array([[1.0, 0.5, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])  # column 1 = (0.5, 2, 0)
        b = Box(v)
        assert b.vectors[:, 1].tolist() == [0.5, 2.0, 0.0]
        assert b.to_json()["vectors"] == v.tolist()

    def test_undefined_cell(self) -> None:
        b = Box(np.zeros((3, 3)), defined=False)
        assert not b.defined and bits(b.vectors) == bits(np.eye(3))
        assert b.boundary.tolist() == [False, False, False]
        assert Box.from_any({"vectors": [[0] * 3] * 3, "cell_defined": False}) == b
        assert Box(defined=False, origin=[1, 2, 3]).origin.tolist() == [1.0, 2.0, 3.0]
        assert b.to_json() == {"vectors": np.eye(3).tolist(), "boundary": [False, False, False],
                               "cell_defined": False}

    @pytest.mark.parametrize("kwargs,fragment", [
        ({"vectors": np.eye(3), "defined": False, "boundary": [True, False, False]}, "undefined"),
        ({"vectors": np.eye(2)}, "shape"), ({"vectors": None}, "needs vectors"),
        ({"vectors": np.eye(3), "origin": [0, 0]}, "shape"), ({"vectors": np.eye(3), "boundary": [1, 1, 1]}, "bool"),
        ({"vectors": np.eye(3), "boundary": [True, True]}, "bool"), ({"vectors": np.eye(3), "defined": "no"}, "bool"),
        ({"vectors": [["a"] * 3] * 3}, "real"), ({"vectors": np.eye(3, dtype=complex)}, "real"),
    ])
    def test_refusals(self, kwargs: dict, fragment: str) -> None:
        with refused("bad_box", "box", fragment):
            Box(**kwargs)

    def test_from_any_refusals(self) -> None:
        with refused("bad_box", "unknown"):
            Box.from_any({"vectors": np.eye(3), "periodic": True})
        with refused("bad_box", "cell_defined"):
            Box.from_any({"vectors": np.eye(3), "cell_defined": "no"})
        with refused("bad_box"):
            Box.from_any(3.0)
        with refused("narrow_float", "vectors"):
            Box(np.eye(3, dtype=np.float32))

    def test_bitwise_equality(self) -> None:
        a = Box(np.eye(3), origin=[0.0, 0.0, 0.0])
        assert a != Box(np.eye(3), origin=[-0.0, 0.0, 0.0])
        assert Box(np.full((3, 3), np.nan)) == Box(np.full((3, 3), np.nan))
        assert a != Box(np.eye(3), boundary=[True, True, False])
        assert a != Box(np.eye(3), defined=False)

    def test_to_json(self) -> None:
        assert Box(np.eye(3)).to_json() == {"vectors": np.eye(3).tolist()}
        j = Box(np.eye(3), origin=[-0.0, 0, 0], boundary=[True, False, True]).to_json()
        assert j["boundary"] == [True, False, True] and np.signbit(j["origin"][0])
        assert Box.from_any(j) == Box(np.eye(3), origin=[-0.0, 0, 0], boundary=[True, False, True])


# ===========================================================================
# Frame


def water() -> Frame:
    return Frame.from_any({
        "blocks": {
            "atoms": {"x": [0.0, 0.75, -0.75], "y": [0.0, 0.5, 0.5], "element": ["O", "H", "H"],
                      "id": [0, 1, 2], "mol_id": [1, 1, 0]},
            "bonds": {"atomi": [0, 0], "atomj": [1, 2]},
        },
        "masks": {"atoms": {"mol_id": [True, True, False]}},
        "box": np.eye(3) * 10,
        "meta": {"title": "water", "n": 3},
    })


class TestFrame:
    def test_conversion(self) -> None:
        f = water()
        assert f.blocks["atoms"]["x"].dtype == np.float64
        assert f.blocks["atoms"]["element"].dtype == object
        assert f.blocks["atoms"]["id"].dtype == np.uint64 and f.blocks["bonds"]["atomi"].dtype == np.uint64
        assert f.counts == {"atoms": 3, "bonds": 2} and f.rows("atoms") == 3
        assert f.mask("atoms", "mol_id").tolist() == [True, True, False] and f.mask("atoms", "x") is None
        assert isinstance(f.box, Box) and f.meta_types == {"title": "string", "n": "i64"}
        assert Frame.from_any(f) is f

    def test_dict_of_blocks_only(self) -> None:
        f = Frame.from_any({"atoms": {"x": [1.0]}, "meta": {"v": [1]}})  # "meta" is a legal block name
        assert set(f.blocks) == {"atoms", "meta"} and f.meta == {}

    def test_arrays_kept_without_copy(self) -> None:
        x = np.arange(4.0)
        assert Frame({"atoms": {"x": x}}).blocks["atoms"]["x"] is x

    def test_block_without_columns_and_independent_counts(self) -> None:
        f = Frame({"grid": {}, "atoms": {"x": [1.0]}, "empty": {}}, counts={"grid": 5})
        assert f.counts == {"grid": 5, "atoms": 1, "empty": 0}
        g = Frame({"grid": {}}, block_attrs={"grid": {"count": 4, "structural_shape": [2, 2], "note": "v"}})
        assert g.counts == {"grid": 4} and g.block_attrs == {"grid": {"structural_shape": (2, 2), "note": "v"}}

    def test_row_count_mismatch(self) -> None:
        with refused("row_count_mismatch", "'atoms'", "x=3", "y=2"):
            Frame({"atoms": {"x": [0.0, 1.0, 2.0], "y": [0.0, 1.0]}})
        with refused("row_count_mismatch", "'atoms'"):
            Frame({"atoms": {"x": [0.0]}}, counts={"atoms": 2})
        with refused("row_count_mismatch", "'atoms'"):
            Frame({"atoms": {"x": [0.0]}}, block_attrs={"atoms": {"count": 3}})
        with refused("row_count_mismatch", "'ghost'"):
            Frame({"atoms": {}}, counts={"ghost": 1})
        with refused("row_count_mismatch", "'atoms'"):
            Frame({"atoms": {}}, counts={"atoms": -1})
        with refused("row_count_mismatch", "'atoms'", "'x'"):
            Frame({"atoms": {"x": 1.0}})

    @pytest.mark.parametrize("masks,fragment", [
        ({"atoms": {"x": [1, 0]}}, "bool"), ({"atoms": {"x": [True]}}, "[2]"),
        ({"atoms": {"x": [[True], [False]]}}, "[2]"), ({"atoms": {"q": [True, False]}}, "'q'"),
        ({"bonds": {"x": [True, False]}}, "'bonds'"),
    ])
    def test_bad_validity(self, masks: dict, fragment: str) -> None:
        with refused("bad_validity", fragment):
            Frame({"atoms": {"x": [0.0, 1.0]}}, masks=masks)

    def test_all_true_mask_is_no_mask(self) -> None:
        f = Frame({"atoms": {"x": [0.0, 1.0]}}, masks={"atoms": {"x": [True, True]}})
        assert f.masks == {} and f.equals(Frame({"atoms": {"x": [0.0, 1.0]}}))

    def test_reserved_names(self) -> None:
        with refused("reserved_block_name", "'box'"):
            Frame({"box": {"x": [1.0]}})
        with refused("reserved_column_name", "'atoms'", "'_validity'"):
            Frame({"atoms": {"_validity": [True]}})
        for bad in ("", "a/b", ".", "..", "__x"):
            with refused("reserved_block_name", repr(bad)):
                Frame({bad: {}})
            with refused("reserved_column_name", repr(bad)):
                Frame({"atoms": {bad: [1.0]}})
        assert "meta" in Frame({"meta": {}, "values": {}}).blocks

    def test_dtypes(self) -> None:
        with refused("narrow_float", "'atoms'", "'q'"):     # no declared or canonical f64 to widen to
            Frame({"atoms": {"q": np.zeros(2, dtype=np.float32)}})
        with refused("unknown_dtype", "'atoms'", "'name'"):
            Frame({"atoms": {"name": np.array([b"ab", b"c"])}})
        with refused("unknown_dtype", "'atoms'", "'x'"):
            Frame({"atoms": {"x": np.zeros(2, dtype="datetime64[s]")}})
        every = {d: np.zeros(2, dtype=NUMPY_DTYPES[d]) for d in DTYPES if d != "string"}
        every["string"] = np.array(["a", "b"], dtype=object)
        f = Frame({"every": every})
        assert {c: dtype_name(a.dtype) for c, a in f.blocks["every"].items()} == {d: d for d in DTYPES}

    @pytest.mark.parametrize("column,values", [
        # input arrays convert to the canonical dtype only when exactly (issue 14): these are lossy
        ("id", np.array([-1, 1], dtype=np.int64)), ("atomi", np.array([0, -7], dtype=np.int32)),
        ("res_id", np.array([0.5, 1.0])), ("type", np.array([1, 2], dtype=np.uint64)),
        ("x", np.zeros((2, 3))), ("id", [-1, 0]), ("ix", np.array([2**31, 0], dtype=np.int64)),
    ])
    def test_canonical_dtypes(self, column: str, values: Any) -> None:
        with refused("canonical_dtype", "'atoms'", repr(column)):
            Frame({"atoms": {column: values}})

    def test_trailing_axes(self) -> None:
        f = Frame({"atoms": {"velocity": np.zeros((4, 3))}, "grid": {"rho": np.zeros((8, 2, 2))}})
        assert f.counts == {"atoms": 4, "grid": 8}

    def test_precision(self) -> None:
        f = Frame({"atoms": {"x": [0.7572, 0.1]}}, precision={"atoms": {"x": 1e-3}})
        assert f.precision == {"atoms": {"x": 1e-3}}
        r = f.rounded()
        assert r.blocks["atoms"]["x"][0] == 0.7568359375 and f.blocks["atoms"]["x"][0] == 0.7572
        assert r.rounded() is r and r.precision == f.precision
        with refused("bad_precision", "'atoms'", "'n'"):
            Frame({"atoms": {"n": [1, 2]}}, precision={"atoms": {"n": 1e-3}})
        with refused("bad_precision", "'atoms'", "'x'"):
            Frame({"atoms": {"x": [1.0]}}, precision={"atoms": {"x": 0}})
        with refused("bad_precision", "'atoms'", "'x'"):
            Frame({"atoms": {"x": [1.0]}}, precision={"atoms": {"x": -1e-3}})
        with refused("bad_precision", "'y'"):
            Frame({"atoms": {"x": [1.0]}}, precision={"atoms": {"y": 1e-3}})
        assert Frame({"atoms": {"x": [1.0]}}, precision={"atoms": {"x": None}}).precision == {}

    def test_structural_shape(self) -> None:
        f = Frame({"grid": {"rho": np.zeros(8)}}, block_attrs={"grid": {"structural_shape": [2, 2, 2]}})
        assert f.block_attrs["grid"]["structural_shape"] == (2, 2, 2)
        with refused("structural_shape_mismatch", "'grid'", "8"):
            Frame({"grid": {"rho": np.zeros(8)}}, block_attrs={"grid": {"structural_shape": [2, 3]}})
        with refused("structural_shape_mismatch", "'grid'"):
            Frame({"grid": {"rho": np.zeros(8)}}, block_attrs={"grid": {"structural_shape": [-8]}})
        with refused("structural_shape_mismatch", "'grid'"):
            Frame({"grid": {"rho": np.zeros(1)}}, block_attrs={"grid": {"structural_shape": [True]}})

    def test_targets(self) -> None:
        f = Frame({"atoms": {"x": [0.0, 1.0]}, "members": {"ibead": [0, 1], "atom": [0, 1]}},
                  block_attrs={"members": {"targets": {"ibead": "atoms", "atom": "/frame/atoms"}}})
        f.check_references(sections={"frame": f})
        with refused("bad_reference", "'members'", "/trajectory/atoms"):
            Frame({"members": {"atom": [0]}}, block_attrs={"members": {"targets": {"atom": "/trajectory/atoms"}}})
        with refused("bad_reference", "'members'", "'atom'"):
            Frame({"members": {"atom": [0]}}, block_attrs={"members": {"targets": {"atom": "/frame/atoms/x"}}})
        with refused("bad_reference", "'members'", "'atom'", "u64"):
            Frame({"members": {"atom": np.array([-1], dtype=np.int64)}},   # [0] would convert exactly
                  block_attrs={"members": {"targets": {"atom": "atoms"}}})
        with refused("bad_reference", "'members'", "'ghost'"):
            Frame({"members": {"atom": [0]}}, block_attrs={"members": {"targets": {"ghost": "atoms"}}})

    def test_check_references(self) -> None:
        base = {"atoms": {"x": [0.0, 1.0]}, "members": {"atom": [0, 5]}}
        f = Frame(base, block_attrs={"members": {"targets": {"atom": "atoms"}}})
        with refused("bad_reference", "'members'", "'atom'", "row 5", "2 rows"):
            f.check_references()
        g = Frame(base, masks={"members": {"atom": [True, False]}},
                  block_attrs={"members": {"targets": {"atom": "atoms"}}})
        g.check_references()  # null rows reference nothing
        h = Frame({"members": {"atom": [0]}}, block_attrs={"members": {"targets": {"atom": "atoms"}}})
        with refused("bad_reference", "'members'", "'atoms'"):
            h.check_references()
        a = Frame({"members": {"atom": [3]}}, block_attrs={"members": {"targets": {"atom": "/system/atoms"}}})
        a.check_references()  # section not given: not checked
        with refused("bad_reference", "/system/atoms"):
            a.check_references(sections={"system": {"atoms": {"x": [0.0]}}})
        bonds = Frame({"atoms": {"x": [0.0]}, "bonds": {"atomi": [0], "atomj": [1]}})
        bonds.check_references()  # conventional endpoints: SHOULD only, opt-in
        with refused("bad_reference", "'bonds'", "'atomj'"):
            bonds.check_references(conventional=True)

    def test_meta(self) -> None:
        f = Frame({}, meta={"com": [0.0, 0.5, 1.0], "n": 3, "title": "water"},
                  meta_types={"com": "f64x3", "n": "i32", "stale": "f64"})
        assert f.meta_types == {"com": "f64x3", "n": "i32", "title": "string"}
        assert f.meta["com"].dtype == np.float64 and type(f.meta["n"]) is np.int32
        with refused("reserved_meta_key", "'_meta_types'"):
            Frame({}, meta={"_meta_types": {}})
        with refused("meta_tag_mismatch", "'n'"):
            Frame({}, meta={"n": 1.5}, meta_types={"n": "i32"})
        with refused("meta_tag_mismatch", "'e'"):
            Frame({}, meta={"e": 1.5}, meta_types={"e": "f32"})

    def test_equals_bitwise(self) -> None:
        def one(x: Any, **kw: Any) -> Frame:
            return Frame({"atoms": {"x": np.array(x, dtype=np.float64)}}, **kw)

        assert one([math.nan]).equals(one([math.nan]))
        assert not one([0.0]).equals(one([-0.0]))
        assert one([1.0]) == one([1.0]) and one([1.0]) != one([2.0])
        assert not Frame({"a": {"n": np.array([1], dtype=np.int32)}}).equals(
            Frame({"a": {"n": np.array([1], dtype=np.int64)}}))
        m = one([1.0, 2.0], masks={"atoms": {"x": [True, False]}})
        assert not m.equals(one([1.0, 2.0])) and m.equals(one([1.0, 2.0], masks={"atoms": {"x": [True, False]}}))
        assert one([1.0, 2.0], masks={"atoms": {"x": [True, True]}}).equals(one([1.0, 2.0]))
        assert water().equals(water())
        assert water().equals({"blocks": water().blocks, "masks": water().masks, "box": np.eye(3) * 10,
                               "meta": {"title": "water", "n": 3}})
        assert not water().equals(Frame(water().blocks, masks=water().masks, box=np.eye(3) * 10,
                                        meta={"title": "water", "n": 3}, meta_types={"n": "i32"}))
        assert not water().equals(Frame(water().blocks, masks=water().masks, meta={"title": "water", "n": 3}))
        assert Frame({}, meta={"x": math.nan}).equals(Frame({}, meta={"x": math.nan}))
        assert not Frame({}, meta={"x": 0.0}).equals(Frame({}, meta={"x": -0.0}))
        assert not one([1.0], precision={"atoms": {"x": 1e-3}}).equals(one([1.0]))
        s1 = Frame({"a": {"s": ["x", "y"]}})
        assert s1.equals(Frame({"a": {"s": np.array(["x", "y"])}})) and not s1.equals(Frame({"a": {"s": ["x", "z"]}}))
        assert not Frame({"a": {}}, counts={"a": 1}).equals(Frame({"a": {}}))


# ===========================================================================
# SequenceSchema


def atoms_schema() -> SequenceSchema:
    s = SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "element", "string")
    s.declare_column("atoms", "mol_id", "u64", nullable=True)
    s.declare_meta("pe", "f64", fill=math.nan)
    s.declare_meta("step_kind", "string")
    return s


class TestSchemaDeclaration:
    def test_declare_and_to_json(self) -> None:
        s = atoms_schema()
        s.declare_block("grid", structural_shape=[2, 2])
        s.declare_column("grid", "rho", "f64", trailing=(3,))
        s.declare_block("members", targets={"atom": "atoms"})
        s.declare_column("members", "atom", "u64")
        s.declare_block("atom_types", aligned_with="atoms")
        s.declare_column("atom_types", "type", "string")
        s.declare_meta("units", "json", fill=None)
        s.declare_meta("n", "u64", fill=2**64 - 1)
        assert s.blocks["grid"].frame_rows == 4 and s.blocks["atoms"].frame_rows == 3
        assert s.to_json() == {
            "blocks": {
                "atoms": {"columns": {
                    "x": {"dtype": "f64", "trailing": [], "precision": 0.001},
                    "element": {"dtype": "string", "trailing": []},
                    "mol_id": {"dtype": "u64", "trailing": [], "nullable": True}}},
                "grid": {"columns": {"rho": {"dtype": "f64", "trailing": [3]}}, "structural_shape": [2, 2]},
                "members": {"columns": {"atom": {"dtype": "u64", "trailing": []}}, "targets": {"atom": "atoms"}},
                "atom_types": {"columns": {"type": {"dtype": "string", "trailing": []}}, "aligned_with": "atoms"},
            },
            "meta": {"pe": {"dtype": "f64", "fill": "NaN"}, "step_kind": {"dtype": "string"},
                     "units": {"dtype": "json", "fill": None}, "n": {"dtype": "u64", "fill": "18446744073709551615"}},
        }
        json_dumps(s.to_json())
        assert SequenceSchema.from_json(json.loads(json_dumps(s.to_json()))).to_json() == s.to_json()

    def test_empty_meta_is_omitted(self) -> None:
        s = SequenceSchema()
        assert s.to_json() == {"blocks": {}}
        assert SequenceSchema.from_json({"blocks": {}, "meta": {}}).to_json() == {"blocks": {}}

    def test_meta_decl(self) -> None:
        s = atoms_schema()
        assert s.meta["pe"].has_fill and not s.meta["step_kind"].has_fill
        assert s.meta["step_kind"].fill is ABSENT and repr(ABSENT) == "ABSENT" and not ABSENT
        assert MetaDecl("f64", math.nan) == MetaDecl("f64", math.nan) and MetaDecl("f64") != MetaDecl("f64", 0.0)
        s.declare_meta("pressure", "f64", fill=0)
        assert type(s.meta["pressure"].fill) is np.float64

    @pytest.mark.parametrize("name", ["step", "time", "meta", "box"])
    def test_reserved_block_names(self, name: str) -> None:
        with refused("reserved_block_name", repr(name)):
            SequenceSchema().declare_block(name)

    @pytest.mark.parametrize("name", ["offset", "step_index", "_validity"])
    def test_reserved_column_names(self, name: str) -> None:
        s = SequenceSchema()
        s.declare_block("atoms")
        with refused("reserved_column_name", "'atoms'", repr(name)):
            s.declare_column("atoms", name, "u64")

    @pytest.mark.parametrize("dtype,precision,kind", [
        ("u64", 1e-3, "bad_precision"), ("i64", 1e-3, "bad_precision"), ("c128", 1e-3, "bad_precision"),
        ("f64", 0, "bad_precision"), ("f64", -1.0, "bad_precision"), ("f64", math.inf, "bad_precision"),
        ("f64", 2.0**-1001, "bad_precision"), ("f64", True, "bad_precision"), ("float", None, "unknown_dtype"),
        ("int", None, "unknown_dtype"), ("json", None, "unknown_dtype"), ("f32", None, "narrow_float"),
        ("f16", None, "narrow_float"),
    ])
    def test_column_refusals(self, dtype: str, precision: Any, kind: str) -> None:
        s = SequenceSchema()
        s.declare_block("atoms")
        with refused(kind, "'atoms'", "'q'"):
            s.declare_column("atoms", "q", dtype, precision=precision)

    def test_canonical_at_declaration(self) -> None:
        s = SequenceSchema()
        s.declare_block("atoms")
        with refused("canonical_dtype", "'atoms'", "'id'"):
            s.declare_column("atoms", "id", "i64")
        with refused("canonical_dtype", "'atoms'", "'x'"):
            s.declare_column("atoms", "x", "f64", trailing=(3,))

    @pytest.mark.parametrize("trailing", [3, "3", [-1], [1.5], [True], None])
    def test_bad_trailing(self, trailing: Any) -> None:
        s = SequenceSchema()
        s.declare_block("atoms")
        with refused("declaration_mismatch", "'atoms'", "'v'"):
            s.declare_column("atoms", "v", "f64", trailing=trailing)

    def test_misc_declaration_refusals(self) -> None:
        s = atoms_schema()
        with refused("declaration_mismatch", "'atoms'"):
            s.declare_block("atoms")
        with refused("declaration_mismatch", "'atoms'", "'x'"):
            s.declare_column("atoms", "x", "f64")
        with refused("undeclared_block", "'bonds'"):
            s.declare_column("bonds", "atomi", "u64")
        with refused("declaration_mismatch", "'pe'"):
            s.declare_meta("pe", "f64")
        with refused("declaration_mismatch", "'atoms'", "'q'"):
            s.declare_column("atoms", "q", "f64", nullable="yes")
        with refused("declaration_mismatch", "'b'"):
            s.declare_block("b", rows=-1)
        with refused("reserved_meta_key", "'a/b'"):
            s.declare_meta("a/b", "f64")

    @pytest.mark.parametrize("tag,fill,fragment", [
        ("i64x6", ABSENT, "i64x6"), ("f32", ABSENT, "f32"), ("i32", 2**31, "out of range"),
        ("i32", 1.5, "not rounded"), ("f64", "x", "real"), ("f64", None, "null"), ("i64", None, "null"),
        ("bool", 0, "bool"), ("f64x3", [1.0, 2.0], "3"), ("json", {"a": math.nan}, "finite"),
    ])
    def test_meta_refusals(self, tag: str, fill: Any, fragment: str) -> None:
        with refused("meta_tag_mismatch", "'pressure'", fragment):
            SequenceSchema().declare_meta("pressure", tag, fill)

    def test_structural_shape_refusals(self) -> None:
        for shape in ([-1], [1.5], "22", [True], 4):
            with refused("structural_shape_mismatch", "'grid'"):
                SequenceSchema().declare_block("grid", structural_shape=shape)
        with refused("structural_shape_mismatch", "'grid'", "4"):
            SequenceSchema().declare_block("grid", rows=5, structural_shape=[2, 2])

    def test_alignment_refusals(self) -> None:
        s = SequenceSchema()
        s.declare_block("atoms")
        s.declare_column("atoms", "x", "f64")
        with refused("bad_alignment", "'types'", "'bonds'"):
            s.declare_block("types", aligned_with="bonds")
        with refused("bad_alignment", "'types'", "itself"):
            s.declare_block("types", aligned_with="types")
        with refused("bad_alignment", "'types'", "string"):
            s.declare_block("types", aligned_with=["atoms"])  # type: ignore[arg-type]
        with refused("bad_alignment", "'types'", "structural_shape"):
            s.declare_block("types", aligned_with="atoms", structural_shape=[1])
        s.declare_block("types", aligned_with="atoms")
        with refused("bad_alignment", "'chain'", "'types'"):
            s.declare_block("chain", aligned_with="types")
        with refused("bad_alignment", "'types'", "'x'"):
            s.declare_column("types", "x", "f64")
        s.declare_column("types", "type", "string")
        with refused("bad_alignment", "'atoms'", "'type'"):
            s.declare_column("atoms", "type", "string")

    def test_targets_refusals(self) -> None:
        for target in ("/trajectory/atoms", "/frame/atoms/x", "", "/frame", "a/b"):
            with refused("bad_reference", "'members'", "'atom'"):
                SequenceSchema().declare_block("members", targets={"atom": target})
        s = SequenceSchema()
        s.declare_block("members", targets={"atom": "atoms"})
        with refused("bad_reference", "'members'", "'atom'", "u64"):
            s.declare_column("members", "atom", "i64")
        with refused("bad_reference", "'members'", "'atom'"):
            s.to_json()  # the target column was never declared
        with refused("bad_reference", "'members'"):
            SequenceSchema().declare_block("members", targets=["atom"])  # type: ignore[arg-type]

    def test_validate_after_direct_edits(self) -> None:
        s = atoms_schema()
        decl = s.blocks["atoms"]
        s.blocks["atoms"].columns["v"] = ColumnDecl("f64", [3])  # type: ignore[arg-type]
        s.validate()
        assert s.blocks["atoms"] is decl and decl.columns["v"].trailing == (3,)
        s.blocks["atoms"].columns["n"] = ColumnDecl("i64", precision=1e-3)
        with refused("bad_precision", "'atoms'", "'n'"):
            s.validate()
        del s.blocks["atoms"].columns["n"]
        s.blocks["step"] = BlockDecl()
        with refused("reserved_block_name", "'step'"):
            s.to_json()

    def test_equality(self) -> None:
        assert atoms_schema() == atoms_schema()
        other = atoms_schema()
        other.blocks["atoms"].frame_rows = 4
        assert other != atoms_schema()


class TestSchemaJson:
    def test_extras_preserved(self) -> None:
        doc = {"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "trailing": [], "unit_hint": "nm"}},
                                    "vendor": {"a": 1}}},
               "meta": {"pe": {"dtype": "f64", "x_note": None}}, "x_top": [1, 2]}
        assert SequenceSchema.from_json(doc).to_json() == doc

    def test_defaults_and_nulls(self) -> None:
        s = SequenceSchema.from_json({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "precision": None,
                                                                             "nullable": False}},
                                                           "structural_shape": None, "targets": None,
                                                           "aligned_with": None}}})
        assert s.to_json() == {"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "trailing": []}}}}}
        assert SequenceSchema.from_json({}).to_json() == {"blocks": {}}

    def test_order_of_aligned_blocks_is_free(self) -> None:
        doc = {"blocks": {"a_types": {"columns": {}, "aligned_with": "z_atoms"}, "z_atoms": {"columns": {}}}}
        s = SequenceSchema.from_json(doc)
        assert list(s.blocks) == ["a_types", "z_atoms"] and s.to_json() == doc

    @pytest.mark.parametrize("doc,kind,fragment", [
        ([], "declaration_mismatch", "sequence_schema"), ({"blocks": []}, "declaration_mismatch", "blocks"),
        ({"blocks": {"atoms": 1}}, "declaration_mismatch", "'atoms'"),
        ({"blocks": {"atoms": {"columns": []}}}, "declaration_mismatch", "'atoms'"),
        ({"blocks": {"atoms": {"columns": {"x": {}}}}}, "unknown_dtype", "'x'"),
        ({"blocks": {"atoms": {"columns": {"x": "f64"}}}}, "declaration_mismatch", "'x'"),
        ({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "trailing": [-1]}}}}}, "declaration_mismatch", "'x'"),
        ({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "nullable": 1}}}}}, "declaration_mismatch", "'x'"),
        ({"blocks": {"atoms": {"columns": {"x": {"dtype": "f32"}}}}}, "narrow_float", "'x'"),
        ({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "precision": 0}}}}}, "bad_precision", "'x'"),
        ({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "precision": "1e-3"}}}}}, "bad_precision", "'x'"),
        ({"blocks": {"step": {"columns": {}}}}, "reserved_block_name", "'step'"),
        ({"blocks": {"atoms": {"columns": {"offset": {"dtype": "u64"}}}}}, "reserved_column_name", "'offset'"),
        ({"blocks": {"a": {"columns": {}, "aligned_with": "b"}, "b": {"columns": {}, "aligned_with": "c"},
                     "c": {"columns": {}}}}, "bad_alignment", "'a'"),
        ({"blocks": {"a": {"columns": {}, "aligned_with": "missing"}}}, "bad_alignment", "'missing'"),
        ({"blocks": {"a": {"columns": {"x": {"dtype": "f64"}}, "aligned_with": "b"},
                     "b": {"columns": {"x": {"dtype": "f64"}}}}}, "bad_alignment", "'x'"),
        ({"blocks": {"a": {"columns": {}, "aligned_with": 3}}}, "bad_alignment", "'a'"),
        ({"blocks": {"a": {"columns": {}, "aligned_with": "a"}}}, "bad_alignment", "itself"),
        ({"blocks": {"g": {"columns": {}, "structural_shape": [2, -1]}}}, "structural_shape_mismatch", "'g'"),
        ({"blocks": {"m": {"columns": {"t": {"dtype": "u64"}}, "targets": {"t": "/trajectory/atoms"}}}},
         "bad_reference", "'t'"),
        ({"blocks": {"m": {"columns": {"t": {"dtype": "u32"}}, "targets": {"t": "atoms"}}}}, "bad_reference", "'t'"),
        ({"blocks": {"m": {"columns": {}, "targets": {"t": "atoms"}}}}, "bad_reference", "'t'"),
        ({"blocks": {}, "meta": []}, "declaration_mismatch", "meta"),
        ({"meta": {"pe": {}}}, "meta_tag_mismatch", "'pe'"), ({"meta": {"pe": "f64"}}, "meta_tag_mismatch", "'pe'"),
        ({"meta": {"pe": {"dtype": "i64x6"}}}, "meta_tag_mismatch", "'pe'"),
        ({"meta": {"pe": {"dtype": "f64", "fill": None}}}, "meta_tag_mismatch", "'pe'"),
        ({"meta": {"pe": {"dtype": "f64", "fill": "nan"}}}, "meta_tag_mismatch", "'pe'"),
        ({"meta": {"n": {"dtype": "i32", "fill": 2147483648}}}, "meta_tag_mismatch", "'n'"),
        ({"meta": {"n": {"dtype": "i64", "fill": 2.0}}}, "meta_tag_mismatch", "'n'"),
        ({"meta": {"v": {"dtype": "f64x3", "fill": [0.0, 0.0]}}}, "meta_tag_mismatch", "'v'"),
        ({"blocks": {"id_block": {"columns": {"id": {"dtype": "i64"}}}}}, "canonical_dtype", "'id'"),
    ])
    def test_from_json_refusals(self, doc: Any, kind: str, fragment: str) -> None:
        with refused(kind, fragment):
            SequenceSchema.from_json(doc)

    def test_fill_forms(self) -> None:
        doc = {"meta": {"pe": {"dtype": "f64", "fill": "-Infinity"}, "n": {"dtype": "u64", "fill": 18446744073709551615},
                        "units": {"dtype": "json", "fill": {"preset": "real"}},
                        "v": {"dtype": "f64x3", "fill": [0.0, "NaN", 1.0]}}}
        s = SequenceSchema.from_json(doc)
        assert s.meta["pe"].fill == -math.inf and s.meta["n"].fill == 2**64 - 1
        assert s.to_json()["meta"]["n"] == {"dtype": "u64", "fill": "18446744073709551615"}
        assert s.to_json()["meta"]["v"]["fill"] == [0.0, "NaN", 1.0]


class TestSchemaFromFrames:
    def test_union(self) -> None:
        f1 = Frame({"atoms": {"x": [0.0, 1.0], "id": [0, 1]}}, meta={"pe": 1.5},
                   masks={"atoms": {"id": [True, False]}})
        f2 = Frame({"atoms": {"x": [0.0, 1.0, 2.0], "vx": [0.0, 0.0, 0.0]}, "bonds": {"atomi": [0], "atomj": [1]}},
                   precision={"atoms": {"x": 1e-3}}, meta={"pe": 2.5, "step_kind": "md"})
        f3 = Frame({"atoms": {"x": [0.0]}}, precision={"atoms": {"x": 1e-2}})
        s = SequenceSchema.from_frames([f1, f2, f3])
        assert s.blocks["atoms"].frame_rows == 3 and s.blocks["bonds"].frame_rows == 1
        cols = s.blocks["atoms"].columns
        assert list(cols) == ["x", "id", "vx"]
        assert cols["id"].nullable and not cols["x"].nullable
        assert cols["x"].precision == 1e-3  # the first stated precision wins
        assert {k: (m.tag, m.has_fill) for k, m in s.meta.items()} == {"pe": ("f64", False),
                                                                       "step_kind": ("string", False)}
        assert s.blocks["atoms"].aligned_with is None

    def test_from_frame_plain_dict(self) -> None:
        s = SequenceSchema.from_frame({"atoms": {"x": [1.0], "element": ["O"]}})
        assert s.to_json() == {"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "trailing": []},
                                                                "element": {"dtype": "string", "trailing": []}}}}}
        assert SequenceSchema.from_frames([]).to_json() == {"blocks": {}}

    def test_shape_and_targets_from_block_attrs(self) -> None:
        f = Frame({"grid": {"rho": np.zeros((4, 3))}, "atoms": {"x": [0.0]}, "members": {"atom": [0]}},
                  block_attrs={"grid": {"structural_shape": [2, 2]}, "members": {"targets": {"atom": "atoms"}}})
        s = SequenceSchema.from_frame(f)
        j = s.to_json()["blocks"]
        assert j["grid"] == {"columns": {"rho": {"dtype": "f64", "trailing": [3]}}, "structural_shape": [2, 2]}
        assert j["members"]["targets"] == {"atom": "atoms"}

    def test_disagreements(self) -> None:
        with refused("declaration_mismatch", "'atoms'", "'n'"):
            SequenceSchema.from_frames([{"atoms": {"n": np.array([1], dtype=np.int32)}},
                                        {"atoms": {"n": np.array([1], dtype=np.int64)}}])
        with refused("declaration_mismatch", "'atoms'", "'v'"):
            SequenceSchema.from_frames([{"atoms": {"v": np.zeros((1, 3))}}, {"atoms": {"v": np.zeros((1, 2))}}])
        with refused("declaration_mismatch", "'pe'"):
            SequenceSchema.from_frames([Frame({}, meta={"pe": 1}), Frame({}, meta={"pe": 1.5})])
        g = {"grid": {"rho": np.zeros(4)}}
        with refused("declaration_mismatch", "'grid'"):
            SequenceSchema.from_frames([Frame(g, block_attrs={"grid": {"structural_shape": [2, 2]}}),
                                        Frame(g, block_attrs={"grid": {"structural_shape": [4]}})])
        with refused("structural_shape_mismatch", "'grid'"):
            SequenceSchema.from_frames([Frame(g, block_attrs={"grid": {"structural_shape": [2, 2]}}),
                                        Frame({"grid": {"rho": np.zeros(5)}})])

    def test_reserved_names_refused_at_declaration(self) -> None:
        with refused("reserved_block_name", "'meta'"):
            SequenceSchema.from_frame({"meta": {"x": [1.0]}})
        with refused("reserved_column_name", "'atoms'", "'offset'"):
            SequenceSchema.from_frame({"atoms": {"offset": [1.0]}})


class TestCheckFrame:
    def frame(self, **kw: Any) -> Frame:
        blocks = kw.pop("blocks", {"atoms": {"x": [0.0, 1.0], "element": ["O", "H"], "mol_id": [1, 2]}})
        kw.setdefault("meta", {"step_kind": "md"})
        return Frame(blocks, **kw)

    def test_accepts(self) -> None:
        s = atoms_schema()
        s.check_frame(self.frame())
        s.check_frame(self.frame(masks={"atoms": {"mol_id": [True, False]}}, precision={"atoms": {"x": 1e-3}}))
        s.check_frame(self.frame(blocks={}))  # a subset: the block carries forward
        s.check_frame(self.frame(blocks={"atoms": {}}))  # zero rows, no columns: the empty block
        s.check_frame(self.frame(blocks={"atoms": {"x": np.zeros(0), "element": np.zeros(0, dtype=object),
                                                   "mol_id": np.zeros(0, dtype=np.uint64)}}))
        vals = s.meta_values(self.frame())
        assert math.isnan(vals["pe"]) and vals["step_kind"] == "md"
        assert s.meta_values(self.frame(meta={"pe": 1, "step_kind": "x"}))["pe"] == 1.0

    def test_refusals(self) -> None:
        s = atoms_schema()
        q = SequenceSchema.from_json({"blocks": {"atoms": {"columns": {"q": {"dtype": "u32"}}}}})
        with refused("undeclared_block", "'bonds'"):
            s.check_frame(self.frame(blocks={"bonds": {"atomi": [0]}}))
        with refused("undeclared_column", "'atoms'", "'vx'"):
            s.check_frame(self.frame(blocks={"atoms": {"x": [0.0], "element": ["O"], "mol_id": [1], "vx": [0.0]}}))
        with refused("declaration_mismatch", "'atoms'", "'mol_id'"):
            s.check_frame(self.frame(blocks={"atoms": {"x": [0.0], "element": ["O"]}}))
        q.check_frame({"atoms": {"q": [1, 2]}})  # untyped ints take the declared dtype
        with refused("declaration_mismatch", "'atoms'", "'q'"):
            q.check_frame({"atoms": {"q": np.array([-1, 2])}})       # [1, 2] converts exactly to u32
        with refused("declaration_mismatch", "'atoms'", "'q'"):
            q.check_frame({"atoms": {"q": [-1, 2]}})
        with refused("declaration_mismatch", "'atoms'", "'q'"):
            q.check_frame({"atoms": {"q": np.zeros((2, 3), dtype=np.uint32)}})
        with refused("undeclared_nullable", "'atoms'", "'element'"):
            s.check_frame(self.frame(masks={"atoms": {"element": [True, False]}}))
        with refused("precision_mismatch", "'atoms'", "'x'"):
            s.check_frame(self.frame(precision={"atoms": {"x": 1e-2}}))
        t = SequenceSchema.from_json({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64"}}}}})
        with refused("precision_mismatch", "'atoms'", "'x'"):
            t.check_frame(Frame({"atoms": {"x": [1.0]}}, precision={"atoms": {"x": 1e-3}}))
        with refused("undeclared_meta_key", "'temp'"):
            s.check_frame(self.frame(meta={"step_kind": "md", "temp": 300.0}))
        with refused("missing_meta_value", "'step_kind'"):
            s.check_frame(self.frame(meta={}))
        with refused("meta_tag_mismatch", "'pe'"):
            s.check_frame(self.frame(meta={"step_kind": "md", "pe": "high"}))

    def test_structural_shape(self) -> None:
        s = SequenceSchema()
        s.declare_block("grid", structural_shape=[2, 2])
        s.declare_column("grid", "rho", "f64")
        s.check_frame({"grid": {"rho": np.zeros(4)}})
        with refused("structural_shape_mismatch", "'grid'", "5"):
            s.check_frame({"grid": {"rho": np.zeros(5)}})
        with refused("structural_shape_mismatch", "'grid'"):
            s.check_frame({"grid": {"rho": np.zeros(0)}})
        with refused("structural_shape_mismatch", "'grid'"):
            s.check_frame(Frame({"grid": {"rho": np.zeros(4)}}, block_attrs={"grid": {"structural_shape": [4]}}))

    def test_aligned_and_targets(self) -> None:
        s = SequenceSchema.from_json({"blocks": {
            "atoms": {"columns": {"x": {"dtype": "f64"}}},
            "atom_types": {"columns": {"type": {"dtype": "string"}}, "aligned_with": "atoms"},
            "members": {"columns": {"atom": {"dtype": "u64"}}, "targets": {"atom": "atoms"}},
        }})
        s.check_frame({"atoms": {"x": [0.0, 1.0]}, "atom_types": {"type": ["a", "b"]}})
        s.check_frame({"atom_types": {"type": ["a"]}})  # the target carries forward: the writer's to check
        with refused("aligned_count_mismatch", "'atom_types'", "'atoms'"):
            s.check_frame({"atoms": {"x": [0.0, 1.0]}, "atom_types": {"type": ["a"]}})
        s.check_frame({"atoms": {"x": [0.0, 1.0]}, "members": {"atom": [1]}})
        with refused("bad_reference", "'members'", "'atom'"):
            s.check_frame({"atoms": {"x": [0.0, 1.0]}, "members": {"atom": [2]}})
        with refused("declaration_mismatch", "'members'", "'atom'"):
            s.check_frame(Frame({"members": {"atom": [0]}},
                                block_attrs={"members": {"targets": {"atom": "/system/atoms"}}}))
