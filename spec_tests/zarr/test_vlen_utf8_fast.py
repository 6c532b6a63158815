"""vlen-utf8's fast paths (issue 29): the same bytes, items and refusals as the plain item-by-item
codec, kept here as the reference, for any input."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrec.errors import CorruptionError, MetadataError
from mrec.zarr.codecs import vlen_utf8
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.codecs.vlen_utf8 import VlenUtf8Codec
from mrec.zarr.dtypes import parse_data_type

STRING = parse_data_type("string", "x")
CODEC = VlenUtf8Codec()
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_encode(arr, where: str = "") -> bytes:
    """The codec as it was before its fast path: item by item."""
    flat = np.asarray(arr, dtype=object).ravel(order="C")
    parts = [struct.pack("<I", len(flat))]
    for item in flat:
        if not isinstance(item, str):
            raise MetadataError(f"string array holds a {type(item).__name__}", path=where)
        b = item.encode("utf-8")
        parts += [struct.pack("<I", len(b)), b]
    return b"".join(parts)


def reference_decode(data: bytes, shape: tuple[int, ...], where: str = "") -> np.ndarray:
    """The decoder as it was before its fast path: header checks, then item by item."""
    n = int(np.prod(shape, dtype=np.int64))
    if len(data) < 4:
        raise CorruptionError("vlen-utf8 chunk shorter than its header", path=where)
    (count,) = struct.unpack_from("<I", data, 0)
    if count != n:
        raise CorruptionError(f"vlen-utf8 chunk holds {count} items, expected {n}", path=where)
    if 4 + 4 * n > len(data):
        raise CorruptionError(f"vlen-utf8 chunk of {len(data)} bytes cannot hold {n} items (each takes "
                              "at least 4 bytes)", path=where)
    out, pos = np.empty(n, dtype=object), 4
    try:
        for i in range(n):
            (ln,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if pos + ln > len(data):
                raise CorruptionError("vlen-utf8 item runs past the chunk", path=where)
            out[i] = data[pos:pos + ln].decode("utf-8")
            pos += ln
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptionError(f"vlen-utf8 chunk does not decode: {exc}", path=where) from None
    return out.reshape(shape)


def outcome(fn, *args):
    """What a call gives: ("ok", value) or ("raised", type, kind, message, path)."""
    try:
        value = fn(*args)
    except Exception as exc:           # noqa: BLE001 - the refusal itself is compared
        return ("raised", type(exc), getattr(exc, "kind", None), str(exc), getattr(exc, "path", None))
    return ("ok", value.tolist() if isinstance(value, np.ndarray) else value)


def spec_of(shape, where: str = "a/c/0") -> ChunkSpec:
    return ChunkSpec(tuple(shape), STRING, "", where)


def as_array(items: list, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr.reshape(shape)


#: any text: empty strings, NULs, astral characters, long strings
TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.text(max_size=600)
#: a few values repeated many times, as an MD topology column
POOL = st.lists(TEXT, min_size=1, max_size=6).flatmap(
    lambda pool: st.lists(st.sampled_from(pool), max_size=300))
ITEMS = st.lists(TEXT, max_size=60) | POOL


@st.composite
def arrays(draw) -> np.ndarray:
    """An object array of strings in any shape (a 0-element one too)."""
    items = draw(ITEMS)
    n = len(items)
    lead = draw(st.sampled_from([d for d in (1, 2, 3, 5) if n % d == 0] or [1])) if n else 0
    shape = draw(st.sampled_from([(n,), (lead, n // lead) if lead else (0, 3), (1, n, 1)]))
    return as_array(items, shape)


@FAST
@given(arrays())
def test_encode_is_the_reference_bytes_and_decodes_back(arr):
    spec = spec_of(arr.shape)
    raw = CODEC.encode(arr, spec)
    assert raw == reference_encode(arr)
    back = CODEC.decode(raw, spec)
    assert back.shape == arr.shape and back.tolist() == arr.tolist()


@FAST
@given(arrays(), st.data())
def test_decode_of_damaged_chunks_answers_as_the_reference(arr, data):
    """Truncated, cut, flipped, extended chunks: the same items or the same refusal."""
    raw = bytearray(reference_encode(arr))
    how = data.draw(st.sampled_from(["cut", "flip", "extend", "splice"]))
    if how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    elif how == "flip" and raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    elif how == "extend":
        raw += data.draw(st.binary(max_size=12))
    elif how == "splice" and len(raw) > 4:
        at = data.draw(st.integers(4, len(raw)))
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=6))
    raw, spec = bytes(raw), spec_of(arr.shape)
    assert outcome(CODEC.decode, raw, spec) == outcome(reference_decode, raw, arr.shape, spec.where)


@pytest.mark.parametrize("items", [
    ["a", 1, "b"], ["a", None], [b"bytes"], ["ok", "\ud800"], ["\udfff", 3.0], [2, "\ud800"],
    ["x", np.str_("y"), "x"], ["nul\0inside", "b"], [], [""], ["", "", ""],
])
def test_encode_refusals_and_odd_items_as_the_reference(items):
    arr = as_array(items, (len(items),))
    spec = spec_of(arr.shape)
    assert outcome(CODEC.encode, arr, spec) == outcome(reference_encode, arr, spec.where)


class Shouting(str):
    """A str subclass encoding its own way: the codec calls the item's ``encode``, as it did."""

    def encode(self, encoding="utf-8", errors="strict"):
        return str.upper(self).encode(encoding, errors)


def test_a_str_subclass_keeps_its_own_encode():
    arr = as_array(["a", Shouting("b"), "a"], (3,))
    assert CODEC.encode(arr, spec_of((3,))) == reference_encode(arr)


def test_an_item_beyond_a_u32_length_is_left_to_the_reference(monkeypatch):
    """A 4 GiB item cannot be built here: the bound is lowered to show the fast path declines."""
    monkeypatch.setattr(vlen_utf8, "_MAX_ITEM", 3)
    head = struct.pack("<I", 2)
    assert vlen_utf8._fast_chunk(["abcd", "ab"], head) is None
    fits = ["abc", "ab"]
    assert vlen_utf8._fast_chunk(fits, head) == reference_encode(as_array(fits, (2,)))


@pytest.mark.parametrize("items", [
    ["", "", "a", "", "bc"],                        # empty strings: no zero-triple guess, walked
    ["x" * 300, "y", "z" * 70000],                  # lengths of 256 and more: the u32 walk
    ["ab"] * 1000 + ["ñé𝔸"] * 7,                   # non-ASCII, repeated
    ["\x00\x00\x00"] * 3,                          # NULs in items: the reference loop
    ["a"] * 300 + ["é" * 70000],                    # long items after short ones: the loops
])
def test_encode_and_decode_paths_give_the_reference(items):
    arr = as_array(items, (len(items),))
    raw = reference_encode(arr)
    assert CODEC.encode(arr, spec_of(arr.shape)) == raw
    for tail in (b"", b"\0\0\0\0", b"\x03\0\0\0abc"):    # bytes after the last item are ignored
        assert CODEC.decode(raw + tail, spec_of(arr.shape)).tolist() == items


def test_a_column_of_many_atoms_with_few_names():
    """The case the fast path is for: 47,681 atoms, 20 names."""
    rng = np.random.default_rng(29)
    names = np.array([f"C{i}" for i in range(19)] + ["OW"], dtype=object)
    col = names[rng.integers(0, 20, 47_681)]
    spec = spec_of(col.shape)
    raw = CODEC.encode(col, spec)
    assert raw == reference_encode(col)
    assert CODEC.decode(raw, spec).tolist() == col.tolist()
