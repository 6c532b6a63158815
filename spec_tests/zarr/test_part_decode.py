"""Issue 16: a random small frame unshuffles only its own rows of the inner chunk it lies in.

``Array._whole_chunk`` reading part of a chunk (a 100-atom frame of a 21-frame chunk) inflates the
chunk (crc32c and zstd checked as ever) and unshuffles just the frame's elements of each byte
plane (``CodecPipeline.part_decoder``); the inflated bytes are kept, and the next frame of the same
chunk unshuffles the whole chunk from them and caches it for the rest.  What must hold: every read,
in any order, is bit for bit the rows written -- shuffled or not, with a trailing shape or not --
and a damaged chunk still raises the general path's CorruptionError.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mrec
from mrec.errors import CorruptionError
from mrec.record.model.precision import round_to_precision
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.stores.directory import DirectoryStore

from test_batch_decode import flip_inner_chunk  # noqa: E402  (spec_tests is on sys.path)

ATOMS = 100


def _records(tmp_path_factory):
    """(path, {column: values}) of a record with a shuffled f64 column (x) and one with a trailing
    shape (v), plus unshuffled copies of both (px, pv) in a second store."""
    path = tmp_path_factory.mktemp("part") / "t.mrec"
    rng = np.random.default_rng(11)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=ATOMS)
    s.declare_column("atoms", "x", "f64", precision=1e-3)     # rounded: shuffle + zstd + crc32c
    s.declare_column("atoms", "v", "f64", trailing=(3,), precision=1e-2)
    frames = 130
    x = round_to_precision(rng.normal(size=(frames, ATOMS)), 1e-3)
    v = round_to_precision(rng.normal(size=(frames, ATOMS, 3)), 1e-2)
    w = mrec.TrajectoryWriter.create(path, s, durable=False)
    w.extend([{"atoms": {"x": x[i], "v": v[i]}} for i in range(frames)])
    w.close()
    plain = path.parent / "plain"
    for col in ("x", "v"):
        a = Array.open(DirectoryStore(str(path)), f"trajectory/atoms/{col}")
        doc = json.loads(a.metadata_json())
        cfg = doc["codecs"][0]["configuration"]
        cfg["codecs"] = [c for c in cfg["codecs"] if c["name"] != "numcodecs.shuffle"]
        doc["shape"] = [0, *doc["shape"][1:]]
        b = Array.create(DirectoryStore(str(plain)), col, ArrayMetadata.from_json(doc, col))
        ap = ShardedAppender(b)
        ap.append(a.read())
        ap.land()
        b.write_metadata()
    want = {"x": x.reshape(-1), "v": v.reshape(-1, 3)}
    return path, plain, want


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return _records(tmp_path_factory)


def _open(stores, which: str) -> tuple[Array, np.ndarray]:
    path, plain, want = stores
    col = which[-1]
    if which.startswith("plain"):
        a = Array.open(DirectoryStore(str(plain)), col, appended=True)
    else:
        a = Array.open(DirectoryStore(str(path)), f"trajectory/atoms/{col}", appended=True)
    a.read(slice(0, 1))                       # the shard index cached, as in any long read
    return a, want[col]


@pytest.mark.parametrize("which", ["x", "v", "plain x", "plain v"])
def test_the_part_decoder_is_used_for_part_of_a_chunk(stores, which):
    a, want = _open(stores, which)
    per = a.sharding.chunk_shape[0] // ATOMS
    assert per > 2                                     # frames an inner chunk
    assert a._part_decoder() is not None
    got = a.read(slice(5 * ATOMS, 6 * ATOMS))
    assert a._inflated is not None                     # kept for a neighbour
    assert got.tobytes() == want[5 * ATOMS:6 * ATOMS].tobytes()
    got = a.read(slice(7 * ATOMS, 8 * ATOMS))          # the neighbour: the whole chunk cached now
    assert a._inflated is None and a._chunk_cache is not None
    assert got.tobytes() == want[7 * ATOMS:8 * ATOMS].tobytes()


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(["x", "v", "plain x", "plain v"]),
       reads=st.lists(st.tuples(st.integers(0, 129), st.integers(1, 3)), min_size=1, max_size=25))
def test_frames_read_in_any_order_are_the_rows_written(stores, which, reads):
    a, want = _open(stores, which)
    per = a.sharding.chunk_shape[0] // ATOMS
    for f, k in reads:
        k = min(k, per - f % per, 130 - f)             # inside one inner chunk
        got = a.read(slice(f * ATOMS, (f + k) * ATOMS))
        assert got.tobytes() == want[f * ATOMS:(f + k) * ATOMS].tobytes()
        got[...] = 0                                   # the caller's copy: the caches are not views of it


def test_rows_of_a_chunk_are_its_decoded_rows():
    """part_decoder's rows(lo, hi) is the slice of the whole decode, for every range: a fresh,
    writable, C-contiguous array of the chunk's trailing shape."""
    from test_read_fastpaths import _pipeline  # noqa: E402  (spec_tests is on sys.path)
    rng = np.random.default_rng(2)
    for dtype, trailing in (("float64", ()), ("float64", (3,)), ("int16", (2,))):
        for shuffle in (True, False):
            p = _pipeline(np.dtype(dtype).itemsize, shuffle)
            spec = ChunkSpec((12, *trailing), DATA_TYPES[dtype], 0, "")
            values = rng.normal(size=(12, *trailing)).astype(dtype)
            raw = p.encode(values, spec)
            part = p.part_decoder(spec)
            assert part is not None
            data = part[0](raw)
            for lo in range(12):
                for hi in range(lo + 1, 13):
                    out = part[1](data, lo, hi)
                    assert out.shape == (hi - lo, *trailing) and out.dtype == values.dtype
                    assert out.flags.c_contiguous and out.flags.writeable
                    assert out.tobytes() == values[lo:hi].tobytes()
            whole = np.empty_like(values)
            part[2](data, whole)
            assert whole.tobytes() == values.tobytes()
            assert part[0](raw[:-1] + bytes([raw[-1] ^ 1])) is None       # a crc32c mismatch: nothing known


def test_a_damaged_chunk_read_in_part_raises_the_general_error(stores, tmp_path):
    path, _plain, want = stores
    import shutil
    copy = tmp_path / "t.mrec"
    shutil.copytree(path, copy)
    flip_inner_chunk(copy, "x", 2)
    a = Array.open(DirectoryStore(str(copy)), "trajectory/atoms/x", appended=True)
    a.read(slice(0, 1))
    per = a.sharding.chunk_shape[0] // ATOMS
    f = 2 * per + 3
    with pytest.raises(CorruptionError, match=r"inner chunk \[2\]"):
        a.read(slice(f * ATOMS, (f + 1) * ATOMS))
    f = 3 * per + 1
    assert a.read(slice(f * ATOMS, (f + 1) * ATOMS)).tobytes() == want["x"][f * ATOMS:(f + 1) * ATOMS].tobytes()
