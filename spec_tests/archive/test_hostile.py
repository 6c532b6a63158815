"""Hostile input: archives and zarr.json built to break a reader, and writer refusals.

Extends spec_tests/archive/test_zip.py (names with '..', absolute names, backslashes, duplicates,
overlaps and sizes beyond the archive are there): here ZIP64 sizes and counts far beyond
the archive, names a zip tool would misplace, and zarr.json documents with huge,
negative or overflowing numbers, deep nesting and chunk counts that would exhaust memory
— each refused with an MrecError before anything is allocated. Then every kind of writer
refusal leaves the store byte-identical.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

import mrec
from mrec.check.validate import validate
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore
from mrec.zarr.stores.zip_read import ZipStore

ROOT_JSON = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'


def zip64_archive(name: str, data: bytes, *, csize: int, usize: int, count64: int | None = None) -> bytes:
    """One stored entry whose central record defers its sizes to a ZIP64 extra field."""
    nm = name.encode()
    crc = zlib.crc32(data)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0x800, 0, 0, 0x21, crc, len(data), len(data), len(nm), 0) + nm + data
    extra = struct.pack("<HHQQ", 0x0001, 16, usize, csize)
    cd = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0x800, 0, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                     len(nm), len(extra), 0, 0, 0, 0, 0) + nm + extra
    cd_off = len(local)
    n = 1 if count64 is None else count64
    z64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(cd), cd_off)
    loc = struct.pack("<IIQI", 0x07064B50, 0, cd_off + len(cd), 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return local + cd + z64 + loc + eocd


@pytest.mark.parametrize("case,kw,why", [
    ("zip64_sizes_beyond", {"csize": 2**62, "usize": 2**62}, "beyond the archive"),
    ("zip64_size_mismatch", {"csize": 3, "usize": 2**40}, "size"),
    ("zip64_count_huge", {"csize": 3, "usize": 3, "count64": 2**40}, "entry count"),
])
def test_zip64_claims_beyond_the_archive(tmp_path, case, kw, why):
    p = tmp_path / f"{case}.zip"
    p.write_bytes(zip64_archive("zarr.json", b"abc", **kw))
    tracemalloc.start()
    with pytest.raises(mrec.ZipFormatError) as e:
        ZipStore(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(p) in str(e.value) and why in str(e.value), str(e.value)
    assert peak < 10 * 2**20                        # refused before anything the claim implies is allocated


@pytest.mark.parametrize("name", ["C:/zarr.json", "a\0b", "..", "a/..", "\\\\server\\share"])
def test_zip_names_a_tool_would_misplace(tmp_path, name):
    nm = name.encode()
    crc = zlib.crc32(b"x")
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x800, 0, 0, 0x21, crc, 1, 1, len(nm), 0) + nm + b"x"
    cd = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0x800, 0, 0, 0x21, crc, 1, 1, len(nm), 0, 0, 0, 0, 0, 0) + nm
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(cd), len(local), 0)
    p = tmp_path / "n.zip"
    p.write_bytes(local + cd + eocd)
    with pytest.raises(mrec.ZipFormatError) as e:
        ZipStore(p)
    assert str(p) in str(e.value)


# -- zarr.json ---------------------------------------------------------------------------------

def _array_doc(shape, chunks, dtype="float64", codecs=None, fill=0.0):
    return {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}]}


def _sharded(inner, location="start"):
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": inner, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": location}}]


HOSTILE_META = {
    "negative_shape": _array_doc([-1], [1]),
    "overflowing_shape": _array_doc([2**64], [1]),
    "float_shape": _array_doc([1.5], [1]),
    "bool_shape": _array_doc([True], [1]),
    "zero_chunk": _array_doc([4], [0]),
    "rank_huge": _array_doc([1] * 1000, [1] * 1000),
    "chunk_count_huge": _array_doc([2**62], [1]),
    "shard_index_huge": _array_doc([2**40], [2**40], codecs=_sharded([1])),
    "fill_overflows_int": _array_doc([4], [4], dtype="int64", fill=2**63),
    "fill_negative_uint": _array_doc([4], [4], dtype="uint64", fill=-1),
    "fill_huge_float": _array_doc([4], [4], fill=1e400),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_META))
def test_hostile_zarr_json_refused(tmp_path, case):
    doc = HOSTILE_META[case]
    d = tmp_path / "a"
    d.mkdir()
    text = json.dumps(doc).replace("Infinity", "1e400")
    (d / "zarr.json").write_text(text)
    st = DirectoryStore(tmp_path)
    tracemalloc.start()
    with pytest.raises(mrec.MrecError) as e:
        a = Array.open(st, "a")
        a.read(slice(0, 1))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "a/zarr.json" in str(e.value) or "a/c/0" in str(e.value), str(e.value)
    assert peak < 64 * 2**20, peak


def test_huge_read_refused_before_allocation(tmp_path):
    """A valid but enormous array: a read that would allocate terabytes is refused, not attempted."""
    d = tmp_path / "a"
    d.mkdir()
    (d / "zarr.json").write_text(json.dumps(_array_doc([2**40, 2**20], [1, 2**20])))
    a = Array.open(DirectoryStore(tmp_path), "a")
    with pytest.raises(mrec.RefusalError) as e:
        a.read(slice(0, 2**30))
    assert e.value.kind == "too_large" and "a" in str(e.value)


def test_deeply_nested_json_refused(tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    (d / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": ' + "[" * 200000 + "]" * 200000 + "}")
    with pytest.raises(mrec.MetadataError, match="a/zarr.json"):
        Array.open(DirectoryStore(tmp_path), "a")


def _traj(tmp_path):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    p = tmp_path / "t.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"blocks": {"atoms": {"x": np.ones(2)}}})
    return p


@pytest.mark.parametrize("attrs", [{"nstep": 2**62}, {"nstep": 2**62, "step_progression": {"start": 0, "stride": 1}}, {"nstep": -1}, {"nstep": 1.0}, {"nstep": True},
                                   {"nstep": 10**30}, {"nstep": 3, "step_progression": {"start": 2**70, "stride": 1}},
                                   {"nstep": 3, "step_progression": {"start": 0, "stride": 2**62}}])
def test_hostile_trajectory_attributes(tmp_path, attrs):
    p = _traj(tmp_path)
    meta = p / "trajectory" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"].update(attrs)
    meta.write_text(json.dumps(doc))
    tracemalloc.start()
    try:
        r = mrec.TrajectoryReader(p)
        r.steps, r[len(r) - 1]
    except mrec.MrecError as e:
        assert "trajectory" in str(e)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


# -- writer refusals leave the store byte-identical -------------------------------------------------

def tree_hash(root) -> dict:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f == ".mrec-writer.lock":
                continue
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def _rich(tmp_path):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    s.declare_block("bonds")
    s.declare_column("bonds", "atomi", "u64")
    s.declare_block("vel", rows=3, aligned_with="atoms")      # declared, never presented
    s.declare_column("vel", "v", "f64")
    p = tmp_path / "rich.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"blocks": {"atoms": {"x": np.ones(3)}, "bonds": {"atomi": np.array([0, 1], np.uint64)}},
                  "box": mrec.Box(np.eye(3) * 5, np.zeros(3), np.ones(3, bool), True)}, step=1, time=0.5)
    return p


REFUSALS = {
    "bad_box": ({"blocks": {"atoms": {"x": np.ones(3)}},
                 "box": mrec.Box(np.zeros((3, 3)), np.zeros(3), np.zeros(3, bool), False)}, {"time": 1.0}),
    "aligned_count_mismatch": ({"blocks": {"atoms": {"x": np.ones(3)}, "vel": {"v": np.ones(2)}}}, {"time": 1.0}),
    "undeclared_block": ({"blocks": {"nope": {"x": np.ones(3)}}}, {"time": 1.0}),
    "row_count_mismatch": ({"blocks": {"atoms": {"x": np.ones(3)}, "bonds": {"atomi": np.ones((2, 2), np.uint64)}}},
                           {"time": 1.0}),
    "step_not_increasing": ({"blocks": {"atoms": {"x": np.ones(3)}}}, {"step": 2**64, "time": 1.0}),
    "partial_time": ({"blocks": {"atoms": {"x": np.ones(3)}}}, {"time": "soon"}),
    "canonical_dtype": ({"blocks": {"atoms": {"x": np.ones(3)}, "bonds": {"atomi": np.array([0.5])}}},
                        {"time": 1.0}),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_every_refusal_kind_leaves_store_byte_identical(tmp_path, case):
    p = _rich(tmp_path)
    frame, kw = REFUSALS[case]
    w = mrec.TrajectoryWriter.open(p)
    before = tree_hash(p)
    with pytest.raises(mrec.RefusalError) as e:
        w.append(frame, **kw)
    assert e.value.kind, e.value
    w.flush()
    assert tree_hash(p) == before, case
    w.close()
    assert len(mrec.TrajectoryReader(p)) == 1


def test_refused_create_open_and_closed_leave_store_byte_identical(tmp_path):
    p = _rich(tmp_path)
    before = tree_hash(p)
    with pytest.raises(mrec.RefusalError) as e:
        mrec.TrajectoryWriter.create(p, mrec.SequenceSchema())
    assert e.value.kind == "exists"
    assert tree_hash(p) == before
    (p / ".mrec-writer.lock").write_text(f"{os.getppid()}\n")
    with pytest.raises(mrec.RefusalError) as e:
        mrec.TrajectoryWriter.open(p)
    assert e.value.kind == "live_writer" and tree_hash(p) == before
    (p / ".mrec-writer.lock").unlink()
    with pytest.raises(mrec.RefusalError) as e:
        mrec.TrajectoryWriter.open(p, flush_every=0)
    assert e.value.kind == "bad_flush_every"
    w = mrec.TrajectoryWriter.open(p)
    w.close()
    after_close = tree_hash(p)
    with pytest.raises(mrec.RefusalError) as e:
        w.append({"blocks": {"atoms": {"x": np.ones(3)}}}, time=9.0)
    assert e.value.kind == "closed" and tree_hash(p) == after_close


def test_huge_inner_chunk_shape_refused_by_name(tmp_path):
    """Found by `python -m tools.fuzz --n 100000`: an inner chunk extent beyond 2^62 (or an inner chunk of
    more elements than one read may allocate) is refused at parse, never a numpy ValueError."""
    import json
    from mrec.errors import MetadataError
    from mrec.zarr.metadata import parse_node
    for inner in ([2 ** 63], [2 ** 20, 2 ** 20], [1] * 33):
        doc = {"zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "float64",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10]}},
               "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0,
               "codecs": [{"name": "sharding_indexed", "configuration": {
                   "chunk_shape": inner, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                   "index_location": "end"}}]}
        with pytest.raises(MetadataError) as e:
            parse_node(json.dumps(doc).encode(), "a/zarr.json")
        assert "a/zarr.json" in str(e.value) and "chunk_shape" in str(e.value)


def test_huge_shuffle_elementsize_refused_by_name():
    """Found by `python -m tools.fuzz --n 100000 --seed 11`: elementsize 2^63 overflowed numpy."""
    from mrec.errors import MetadataError
    from mrec.zarr.codecs.shuffle import ShuffleCodec
    for n in (2 ** 63, 2 ** 31 + 1, 0, -1, True, 1.5):
        with pytest.raises(MetadataError) as e:
            ShuffleCodec.from_config({"elementsize": n}, "a/zarr.json")
        assert "a/zarr.json" in str(e.value)
    assert ShuffleCodec.from_config({"elementsize": 2 ** 31}, "a/zarr.json").elementsize == 2 ** 31


def test_time_progression_overflowing_f64_refused(tmp_path):
    """A time_progression whose times leave the finite f64 range (fuzz: a stride of 1e308) is
    refused naming the trajectory, not read as inf; the store is unchanged."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=1)
    s.declare_column("atoms", "x", "f64")
    p = tmp_path / "t.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(3):
            w.append({"blocks": {"atoms": {"x": np.zeros(1)}}}, step=i, time=0.5 * i)
    meta = p / "trajectory" / "zarr.json"
    for bad in ({"start": 0.0, "stride": 1e308}, {"start": 10 ** 400, "stride": 1.0}):
        doc = json.loads(meta.read_text())
        doc["attributes"]["time_progression"] = bad
        meta.write_text(json.dumps(doc))
        before = hashlib.sha256(meta.read_bytes()).hexdigest()
        with pytest.raises(mrec.RefusalError) as e:
            mrec.TrajectoryReader(p).times
        assert e.value.kind == "broken_index" and "time_progression" in str(e.value)
        assert hashlib.sha256(meta.read_bytes()).hexdigest() == before


# -- issue 17.2: the CRC-32 of every entry read whole; a lost entry is an error -------------------

def _stored_zip(entries: list[tuple[str, bytes]]) -> bytes:
    """A stored zip of ``(name, data)`` entries with correct CRC-32s (names need not be safe)."""
    local, cd = b"", b""
    for name, data in entries:
        nm = name.encode()
        crc = zlib.crc32(data)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0x800, 0, 0, 0x21, crc, len(data), len(data),
                          len(nm), 0, 0, 0, 0, 0, len(local)) + nm
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x800, 0, 0, 0x21, crc, len(data), len(data),
                             len(nm), 0) + nm + data
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(cd), len(local), 0)
    return local + cd + eocd


def _packed_traj(tmp_path, n=5):
    from mrec.archive.pack import pack
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    p = tmp_path / "t.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(n):
            w.append({"blocks": {"atoms": {"x": np.full(2, float(i))}}}, step=10 * i, time=float(i))
    return pack(p)


def _entry_data_offset(archive, name: str) -> tuple[int, int]:
    import zipfile
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(name)
    return info.header_offset + 30 + len(name.encode()), info.file_size


def test_flipped_bit_in_packed_metadata_is_refused_naming_the_entry(tmp_path):
    """One flipped bit in trajectory/zarr.json (stride 10 -> 30) read the steps 0 30 60 ... silently."""
    z = _packed_traj(tmp_path)
    assert list(mrec.TrajectoryReader(z).steps) == [0, 10, 20, 30, 40]
    data = bytearray(z.read_bytes())
    start, size = _entry_data_offset(z, "trajectory/zarr.json")
    pos = start + bytes(data[start:start + size]).index(b'"stride": 10') + len('"stride": ')
    data[pos] ^= 0x02                                      # '1' -> '3'
    z.write_bytes(bytes(data))
    with pytest.raises(mrec.CorruptionError) as e:
        mrec.TrajectoryReader(z).steps
    assert str(z) in str(e.value) and "'trajectory/zarr.json'" in str(e.value) and "CRC-32" in str(e.value)


def test_every_whole_entry_read_checks_its_crc(tmp_path):
    """Every metadata entry and every chunk read whole (get, or a range that is the whole entry)."""
    z = _packed_traj(tmp_path)
    st = ZipStore(z)
    for key in st.list():
        assert st.get(key) is not None
    clean = z.read_bytes()
    for key in ("zarr.json", "meta/zarr.json", "trajectory/atoms/x/zarr.json", "trajectory/atoms/x/c/0"):
        data = bytearray(clean)
        start, size = _entry_data_offset(z, key)
        data[start + size - 1] ^= 0x01
        z.write_bytes(bytes(data))
        st = ZipStore(z)
        with pytest.raises(mrec.CorruptionError, match=f"'{key}': CRC-32"):
            st.get(key)
        with pytest.raises(mrec.CorruptionError, match=f"'{key}': CRC-32"):
            st.get_range(key, 0, size)
        assert len(st.get_range(key, 0, size - 1)) == size - 1       # a part is not (the CRC covers all)


def test_entry_listed_but_its_bytes_lost_is_an_error_not_fill(tmp_path):
    """The central directory lists every entry: a chunk whose local header (or data) is gone is an
    error when read, never the fill value of a missing chunk."""
    z = _packed_traj(tmp_path)
    clean = z.read_bytes()
    key = "trajectory/atoms/x/c/0"
    start, size = _entry_data_offset(z, key)
    header = start - 30 - len(key)
    lost_header = bytearray(clean)
    lost_header[header:header + 4] = b"\0\0\0\0"
    lost_data = bytearray(clean)
    lost_data[start + size // 2: start + size // 2 + 64] = bytes(64)
    for damaged in (lost_header, lost_data):
        z.write_bytes(bytes(damaged))
        with pytest.raises(mrec.MrecError) as e:
            mrec.TrajectoryReader(z)[0]
        assert key in str(e.value) or "trajectory/atoms/x" in str(e.value), str(e.value)


def test_entry_name_of_many_components_refused_fast(tmp_path):
    """A 64 KiB name of 32 767 components took 4.7 s and 1 GiB to open, and unpack hit RecursionError."""
    import time
    from mrec.archive.pack import unpack
    name = "a/" * 32767 + "a"
    p = tmp_path / "deep.mrec.zip"
    p.write_bytes(_stored_zip([("zarr.json", ROOT_JSON), (name, b"x")]))
    t0 = time.perf_counter()
    tracemalloc.start()
    with pytest.raises(mrec.ZipFormatError) as e:
        ZipStore(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - t0 < 1.0 and peak < 16 * 2**20
    assert "4096 bytes" in str(e.value) and len(str(e.value)) < 400
    with pytest.raises(mrec.ZipFormatError):
        unpack(p)
    assert not (tmp_path / "deep.mrec").exists()


@pytest.mark.parametrize("name,why", [("a" * 256 + "/zarr.json", "longer than 255 bytes"),
                                      ("b/" * 300 + "zarr.json", "path components"),
                                      ("c" * 200 + "/" + "/".join(["d" * 200] * 25), "longer than 4096 bytes")])
def test_entry_names_no_file_system_can_hold_refused(tmp_path, name, why):
    p = tmp_path / "n.mrec.zip"
    p.write_bytes(_stored_zip([("zarr.json", ROOT_JSON), (name, b"x")]))
    with pytest.raises(mrec.ZipFormatError, match=why):
        ZipStore(p)


# -- issue 17.11: nothing allocated or looped from untrusted sizes -------------------------------

def _array_dir(tmp_path, doc, chunks: dict[str, bytes]):
    d = tmp_path / "a"
    d.mkdir()
    (d / "zarr.json").write_text(json.dumps(doc))
    for key, data in chunks.items():
        f = d / key
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return Array.open(DirectoryStore(tmp_path), "a")


def _bounded(fn, limit=64 * 2**20):
    """Run ``fn`` under tracemalloc; return (exception, peak bytes)."""
    tracemalloc.start()
    try:
        fn()
        exc = None
    except Exception as e:        # noqa: BLE001 - the caller asserts the type
        exc = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < limit, peak
    return exc


def test_vlen_utf8_count_beyond_the_chunk_refused_before_allocation(tmp_path):
    """A 16-byte vlen-utf8 chunk declaring 2^31 strings allocated 16 GiB (validate --deep)."""
    doc = _array_doc([2**31], [2**31], dtype="string", codecs=[{"name": "vlen-utf8"}], fill="")
    arr = _array_dir(tmp_path, doc, {"c/0": struct.pack("<I", 2**31) + bytes(12)})
    exc = _bounded(lambda: arr.read(slice(0, 1)))
    assert isinstance(exc, mrec.CorruptionError) and "a/c/0" in str(exc) and "cannot hold" in str(exc), exc
    (tmp_path / "zarr.json").write_bytes(ROOT_JSON)              # the same array under validate --deep
    report = {}
    assert _bounded(lambda: report.setdefault("r", validate(tmp_path, deep=True))) is None
    assert any("a/c/0" in v.path and "cannot hold" in v.message for v in report["r"].violations), report["r"].violations


def test_deep_walk_visits_only_stored_chunks(tmp_path):
    """A 1 KB zarr.json declaring 2^20 x 2^20 one-element chunks: validate --deep walked 2^40 keys."""
    import time
    (tmp_path / "r.mrec").mkdir()
    root = tmp_path / "r.mrec"
    (root / "zarr.json").write_bytes(ROOT_JSON)
    doc = _array_doc([2**20, 2**20], [1, 1])
    (root / "frame").mkdir()
    (root / "frame" / "zarr.json").write_bytes(ROOT_JSON)
    (root / "big").mkdir()
    (root / "big" / "zarr.json").write_text(json.dumps(doc))
    for key in ("c/0/0", "c/7/5"):
        (root / "big" / key).parent.mkdir(parents=True, exist_ok=True)
        (root / "big" / key).write_bytes(struct.pack("<d", 1.5))
    (root / "big" / "c" / "9").mkdir()
    (root / "big" / "c" / "9" / "x").write_bytes(b"not a chunk key")
    t0 = time.perf_counter()
    r = validate(root, deep=True)
    assert time.perf_counter() - t0 < 5
    assert r.checked["chunks"] == 2, r.checked
    (root / "big" / "c" / "7" / "5").write_bytes(b"short")
    r = validate(root, deep=True)
    assert any("big/c/7/5" in v.path or "big/c/7/5" in v.message for v in r.violations), r.violations


def _bomb_gzip(total: int) -> bytes:
    import gzip
    member = gzip.compress(bytes(64 << 20), compresslevel=1)
    return member * (total // (64 << 20))


def _bomb_zstd(total: int, content_size: bool) -> bytes:
    import zstandard
    frame = zstandard.ZstdCompressor(level=1, write_content_size=content_size).compress(bytes(64 << 20))
    return frame * (total // (64 << 20)) if not content_size else frame


@pytest.mark.parametrize("codec,make", [
    ("gzip", lambda: _bomb_gzip(2 << 30)),                     # 2 GiB in concatenated members
    ("zstd", lambda: _bomb_zstd(2 << 30, False)),              # 2 GiB in frames stating no size
    ("zstd", lambda: _bomb_zstd(0, True)),                     # one frame stating 64 MiB
])
def test_compression_bombs_bounded_by_the_chunk_size(tmp_path, codec, make):
    """gzip / zstd chunks decoding to 1.25-2 GiB for a 64 KB chunk: the decode stops at what the
    array metadata fixes (here 1000 float64) and refuses, naming the chunk."""
    import time
    doc = _array_doc([1000], [1000], codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                                             {"name": codec, "configuration": {"level": 1}}])
    arr = _array_dir(tmp_path, doc, {"c/0": make()})
    t0 = time.perf_counter()
    exc = _bounded(lambda: arr.read())
    assert time.perf_counter() - t0 < 5
    assert isinstance(exc, mrec.CorruptionError) and "a/c/0" in str(exc) and "can hold" in str(exc), exc


def test_sharded_inner_chunk_bomb_bounded(tmp_path):
    """The same bound inside a shard: the inner chunk's shape fixes it."""
    import zstandard
    from mrec.zarr.codecs.sharding import ShardIndex, ShardingCodec
    from mrec.zarr.pipeline import CodecPipeline
    inner = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [10], "codecs": inner,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "start"}}]
    doc = _array_doc([10], [10], codecs=codecs)
    sh = CodecPipeline.from_json(codecs, "x").array_bytes
    assert isinstance(sh, ShardingCodec)
    bomb = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(bytes(64 << 20))
    index = ShardIndex.empty((1,))
    index.offsets[0], index.nbytes[0] = sh.index_size((1,)), len(bomb)
    arr = _array_dir(tmp_path, doc, {"c/0": sh.encode_index(index) + bomb})
    exc = _bounded(lambda: arr.read())
    assert isinstance(exc, mrec.CorruptionError) and "can hold" in str(exc), exc


def test_declared_rows_far_beyond_any_frame_refused_at_declaration(tmp_path):
    """rows=2^40 planned 8 TiB chunks: the first 3-row frame raised MemoryError at landing."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2**40)
    with pytest.raises(mrec.RefusalError) as e:
        s.declare_column("atoms", "u", "f64", trailing=(3,))
    assert e.value.kind == "declaration_mismatch" and "'atoms'" in str(e.value) and "rows" in str(e.value)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2**20)                # a large but real frame is fine
    s.declare_column("atoms", "u", "f64", trailing=(3,))


# -- issue 17.12: every failure a user can cause is an MrecError naming what was wrong --------------

def _nested(depth: int):
    d: list = []
    for _ in range(depth):
        d = [d]
    return d


def _schema(block="atoms", column="u"):
    s = mrec.SequenceSchema()
    s.declare_block(block, rows=2)
    s.declare_column(block, column, "f64")
    return s


DEEP_JSON_ENTRY_POINTS = {
    "trajectory_frame_meta": lambda p: _append_one(p, meta={"doc": _nested(5000)}),
    "record_meta": lambda p: mrec.write_record(p, meta={"d": _nested(5000)}, frame=_frame()),
    "record_status": lambda p: mrec.write_record(p, meta={}, frame=_frame(), status={"d": _nested(5000)}),
    "frame_meta": lambda p: mrec.write_record(p, meta={}, frame={**_frame(), "meta": {"d": _nested(5000)}}),
    "observable_meta": lambda p: mrec.write_record(p, meta={}, frame=_frame(), observables={
        "o": {"data": np.ones(3), "kind": "scalar", "description": "", "time_dependent": False, "x": _nested(5000)}}),
    "schema_extra": lambda p: mrec.SequenceSchema().declare_block("a", rows=1, extra={"x": _nested(5000)}),
}


def _frame():
    return {"blocks": {"atoms": {"u": np.ones(2)}}}


def _append_one(p, meta=None, schema=None):
    with mrec.TrajectoryWriter.create(p, schema or _schema()) as w:
        w.append({**_frame(), "meta": meta or {}})


@pytest.mark.parametrize("case", sorted(DEEP_JSON_ENTRY_POINTS))
def test_deeply_nested_json_documents_refused_by_name(tmp_path, case):
    """JSON nested 5000 deep raised RecursionError from the writer's checks."""
    with pytest.raises(mrec.RefusalError) as e:
        DEEP_JSON_ENTRY_POINTS[case](tmp_path / "r.mrec")
    assert "nests deeper than 256" in str(e.value), str(e.value)
    if case == "trajectory_frame_meta":                  # created, then the frame refused: nothing committed
        assert len(mrec.TrajectoryReader(tmp_path / "r.mrec")) == 0
    else:
        assert not (tmp_path / "r.mrec").exists()


def test_deep_stored_attributes_refused_on_read(tmp_path):
    """A stored zarr.json nesting 300 levels (loadable by json, too deep for what reads it next)."""
    from mrec.zarr.metadata import parse_node
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {"a": _nested(300)}}
    with pytest.raises(mrec.MetadataError, match="nests deeper than 256"):
        parse_node(json.dumps(doc).encode(), "g/zarr.json")
    doc["attributes"]["a"] = _nested(200)
    parse_node(json.dumps(doc).encode(), "g/zarr.json")


BAD_NAMES = {"nul": ("x\0y", "NUL"), "long": ("a" * 300, "300 bytes"), "periods": ("...", "only of periods"),
             "backslash": ("a\\b", "backslash"), "surrogate": ("a\ud800", "UTF-8")}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_unsafe_names_refused_at_every_entry_point(tmp_path, case):
    """A NUL in a column name raised ValueError, a 300-character block name OSError: every name that
    becomes a node (block, column, meta key, frame block / column, observable, metrics key) is
    refused before anything is written, naming the rule."""
    name, why = BAD_NAMES[case]
    entry_points = [
        ("reserved_block_name", lambda: _schema(block=name)),
        ("reserved_column_name", lambda: _schema(column=name)),
        ("reserved_meta_key", lambda: _schema().declare_meta(name, "f64")),
        ("reserved_block_name", lambda: mrec.write_record(tmp_path / "f.mrec", meta={},
                                                          frame={"blocks": {name: {"u": np.ones(2)}}})),
        ("reserved_column_name", lambda: mrec.write_record(tmp_path / "f.mrec", meta={},
                                                           frame={"blocks": {"atoms": {name: np.ones(2)}}})),
        ("bad_observable", lambda: mrec.write_record(tmp_path / "f.mrec", meta={}, frame=_frame(), observables={
            name: {"data": np.ones(3), "kind": "scalar", "description": "", "time_dependent": False}})),
    ]
    for kind, fn in entry_points:
        with pytest.raises(mrec.RefusalError) as e:
            fn()
        assert e.value.kind == kind and why in str(e.value), (kind, str(e.value))
    assert os.listdir(tmp_path) == []
    if case == "long":
        with pytest.raises(mrec.RefusalError) as e:
            mrec.write_record(tmp_path / "m.mrec", meta={}, frame=_frame(), metrics={"k" * 300: [1.0]})
        assert e.value.kind == "bad_metrics" and os.listdir(tmp_path) == []


def test_paths_inside_a_regular_file_refused_naming_the_path(tmp_path):
    """A record, archive or unpack target whose directory is a regular file raised FileExistsError /
    NotADirectoryError from os.makedirs."""
    from mrec.archive.pack import pack, unpack
    reg = tmp_path / "reg"
    reg.write_text("x")
    ok = tmp_path / "ok.mrec"
    _append_one(ok)
    archive = pack(ok, keep=True)
    calls = [
        lambda: mrec.TrajectoryWriter.create(reg / "t.mrec", _schema()),
        lambda: mrec.TrajectoryWriter.create(reg, _schema()),
        lambda: mrec.write_record(reg / "r.mrec", meta={}, frame=_frame()),
        lambda: pack(ok, out=reg / "o.mrec.zip", keep=True),
        lambda: unpack(archive, out=reg / "o.mrec"),
        lambda: pack(ok, out=tmp_path / "nope" / "o.mrec.zip", keep=True),
    ]
    for fn in calls:
        with pytest.raises(mrec.MrecError) as e:
            fn()
        assert str(reg) in str(e.value) or "nope" in str(e.value), str(e.value)
    assert reg.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["ok.mrec", "ok.mrec.zip", "reg"]


# -- issue 13.8: what the Zarr V3 core spec says to refuse ------------------------------------------

def _open_text(tmp_path, text: str):
    d = tmp_path / "a"
    d.mkdir(exist_ok=True)
    (d / "zarr.json").write_text(text)
    from mrec.zarr.array import read_node
    return read_node(DirectoryStore(tmp_path), "a")


@pytest.mark.parametrize("node", ["group", "array"])
def test_unknown_field_without_must_understand_false_refused(tmp_path, node):
    """Core spec (group and array metadata, "Unknown"): an implementation must fail to open a node
    with unknown metadata fields, except objects with "must_understand": false."""
    base = json.loads(ROOT_JSON) if node == "group" else _array_doc([4], [4])
    for bad in (1, "x", None, [], {"must_understand": True}, {"name": "ext"}):
        if node == "group" and bad is None:
            continue        # consolidated_metadata null only; another name with null is refused below
        doc = {**base, "ext_field": bad}
        with pytest.raises(mrec.UnsupportedError) as e:
            _open_text(tmp_path, json.dumps(doc))
        assert "a/zarr.json" in str(e.value) and "'ext_field'" in str(e.value), str(e.value)
    with pytest.raises(mrec.UnsupportedError):
        _open_text(tmp_path, json.dumps({**base, "ext_field": None}))
    ok = {**base, "ext_field": {"must_understand": False, "x": 1}}
    meta = _open_text(tmp_path, json.dumps(ok))
    assert meta.extra == {"ext_field": {"must_understand": False, "x": 1}}
    assert meta.to_json()["ext_field"] == ok["ext_field"]            # kept verbatim


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint8", "uint64"])
@pytest.mark.parametrize("spelling", ["1e2", "100.0", "1E2", "1.0e2", "100.5"])
def test_integer_fill_written_as_json_float_refused(tmp_path, dtype, spelling):
    """Core spec, permitted fill values: integers are "a JSON number with no fraction or exponent part"."""
    text = json.dumps(_array_doc([4], [4], dtype=dtype, fill=0)).replace('"fill_value": 0', f'"fill_value": {spelling}')
    with pytest.raises(mrec.MetadataError) as e:
        _open_text(tmp_path, text)
    assert "a/zarr.json" in str(e.value) and "fraction or exponent" in str(e.value)
    assert _open_text(tmp_path, text.replace(f'"fill_value": {spelling}', '"fill_value": 100')).fill_value == 100


@pytest.mark.parametrize("dtype,fill,ok", [
    ("complex64", ["0x3f800000", 0.0], True), ("complex64", ["0x3ff0000000000000", 0.0], False),
    ("complex64", [0.0, "0x3ff0000000000000"], False), ("complex128", ["0x3ff0000000000000", "0x0000000000000000"], True),
    ("complex128", ["0x3f800000", 0.0], False), ("complex128", [0.0, "0x7fc00000"], False),
])
def test_complex_hex_fill_of_the_component_width(tmp_path, dtype, fill, ok):
    """A hex fill spells the IEEE 754 bits of the component type: 8 hex digits for complex64's
    float32 components, 16 for complex128's float64 ones."""
    text = json.dumps(_array_doc([4], [4], dtype=dtype, fill=fill))
    if ok:
        assert complex(_open_text(tmp_path, text).fill_value) == complex(1.0, 0.0)
        return
    with pytest.raises(mrec.MetadataError) as e:
        _open_text(tmp_path, text)
    assert "a/zarr.json" in str(e.value) and "hex-encoded bytes" in str(e.value)


@pytest.mark.parametrize("order", ["F", "C"])
def test_transpose_memory_order_strings_refused(tmp_path, order):
    """transpose v1.0 (as accepted): order "no longer supports the constants "C" or "F"" (V2 leftovers)."""
    codecs = [{"name": "transpose", "configuration": {"order": order}}, {"name": "bytes", "configuration": {"endian": "little"}}]
    with pytest.raises(mrec.MetadataError) as e:
        _open_text(tmp_path, json.dumps(_array_doc([4, 2], [4, 2], codecs=codecs)))
    assert "a/zarr.json" in str(e.value) and "explicit permutation" in str(e.value)


# -- issue 13.9: messages ---------------------------------------------------------------------------

def test_object_form_of_a_core_data_type_named_as_such(tmp_path):
    """{"name": "float64"} was refused as "'float64' is not supported": the core spec names a core
    data type by its string; the object form is for extension data types."""
    with pytest.raises(mrec.MetadataError) as e:
        _open_text(tmp_path, json.dumps(_array_doc([4], [4], dtype={"name": "float64"})))
    assert "a/zarr.json" in str(e.value) and "object form" in str(e.value) and "'float64'" in str(e.value)
    with pytest.raises(mrec.UnsupportedError) as e:
        _open_text(tmp_path, json.dumps(_array_doc([4], [4], dtype={"name": "urn:x:dt", "configuration": {"u": 1}})))
    assert e.value.kind == "unknown_dtype" and "extension data type 'urn:x:dt'" in str(e.value)


@pytest.mark.parametrize("dtype,refused", [("float64", True), ("int16", True), ("complex64", True),
                                           ("uint8", False), ("bool", False)])
def test_bytes_codec_without_endian_is_an_error_of_zarr_json(tmp_path, dtype, refused):
    """A bytes codec without endian on a multi-byte type failed at the first chunk read; it is an
    error of the array's zarr.json, when it is opened."""
    plain = [{"name": "bytes", "configuration": {}}]
    inner = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2], "codecs": plain,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}]
    for codecs in (plain, inner):
        text = json.dumps(_array_doc([4], [4], dtype=dtype, codecs=codecs, fill=False if dtype == "bool" else 0))
        if not refused:
            assert _open_text(tmp_path, text).data_type.name == dtype
            continue
        with pytest.raises(mrec.MetadataError) as e:
            _open_text(tmp_path, text)
        assert "a/zarr.json" in str(e.value) and "endian" in str(e.value) and dtype in str(e.value)


def test_unsafe_node_name_names_the_store_and_the_rule(tmp_path):
    """A stored sequence_schema naming a block '..' (or 'a/b', '__x', 'x\\y') is refused naming the
    trajectory and the node-name rule it breaks; a store key is refused naming the store."""
    p = _traj(tmp_path)
    meta = p / "trajectory" / "zarr.json"
    doc = json.loads(meta.read_text())
    blocks = doc["attributes"]["sequence_schema"]["blocks"]
    for bad, rule in (("..", "only of periods"), ("a/b", "contains '/'"), ("__x", "'__'"), ("x\\y", "backslash")):
        doc["attributes"]["sequence_schema"]["blocks"] = {bad: blocks["atoms"]}
        meta.write_text(json.dumps(doc))
        with pytest.raises(mrec.RefusalError) as e:
            mrec.TrajectoryReader(p)
        assert str(p / "trajectory") in str(e.value) and rule in str(e.value), str(e.value)
    with pytest.raises(mrec.StoreError) as e:
        DirectoryStore(p).get("../outside")
    assert str(p) in str(e.value) and "'..'" in str(e.value)


@pytest.mark.parametrize("stored,why", [("[" * 5000 + "]" * 5000, "nests deeper than 256"),
                                        ("[" * 300 + "]" * 300, "nests deeper than 256"),
                                        ("not json", "is not JSON")])
def test_stored_json_meta_value_that_is_no_document_refused(tmp_path, stored, why):
    """A per-step meta value of tag json, as a foreign writer could store it: text nested 5000 deep
    raised RecursionError, text that is not JSON a JSONDecodeError (a ValueError) from the reader."""
    s = _schema()
    s.declare_meta("d", "json")
    p = tmp_path / "j.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({**_frame(), "meta": {"d": {"a": 1}}})
    arr = Array.open(DirectoryStore(p), "trajectory/meta/d")
    assert list(arr.read()) == ['{"a": 1}']
    arr.write(np.array([stored], dtype=object))                # a valid chunk holding that text
    with pytest.raises(mrec.RefusalError) as e:
        mrec.TrajectoryReader(p)[0]
    assert e.value.kind == "meta_tag_mismatch" and "trajectory/meta/d" in str(e.value) and why in str(e.value)


@pytest.mark.parametrize("where", ["meta", "frame", "system", "status", "write_frame", "write_section"])
def test_lone_surrogate_in_a_whole_record_refused_before_writing(tmp_path, where):
    """Issue 17.12: write_record / write_frame / write_section refuse text UTF-8 cannot encode
    (kind bad_string, naming where) and leave nothing at the path -- never a UnicodeEncodeError."""
    import mrec
    bad = "b\udcff"
    good = mrec.Frame(blocks={"atoms": {"name": ["a", "b"], "x": np.zeros(2)}})
    poisoned = mrec.Frame(blocks={"atoms": {"name": np.array(["a", bad], dtype=object), "x": np.zeros(2)}})
    target = tmp_path / "r.mrec"
    if where == "write_frame":
        call = lambda: mrec.write_frame(target, poisoned, group="")  # noqa: E731
    elif where == "write_section":
        mrec.write_record(target, meta={"title": "t"}, frame=good)
        before = sorted(p.relative_to(target) for p in target.rglob("*"))
        with pytest.raises(mrec.RefusalError) as info:
            mrec.write_section(target, "system", poisoned)
        assert info.value.kind == "bad_string"
        assert sorted(p.relative_to(target) for p in target.rglob("*")) == before
        return
    else:
        kw = {"meta": {"title": "t"}, "frame": good}
        if where == "meta":
            kw["meta"] = {"title": bad}
        elif where == "status":
            kw["status"] = {"state": bad}
        else:
            kw[where] = poisoned
        call = lambda: mrec.write_record(target, **kw)  # noqa: E731
    with pytest.raises(mrec.RefusalError) as info:
        call()
    assert info.value.kind == "bad_string"
    assert "surrogate" in str(info.value)
    assert not target.exists() and list(tmp_path.iterdir()) == []
