"""The at-rest form ``*.mrec.zip`` (chunking-and-packing.md, "At-rest form").

Python's ``zipfile`` serves as an independent oracle in both directions;
hostile archives are built byte by byte here, independently of mrec's
writer.  Records are minimal hand-built directory stores.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrec.errors import CorruptionError, RefusalError, StoreError, ZipFormatError
from mrec.fs import PosixFileSystem, RecordingFileSystem
from mrec.archive.pack import LOCK_NAME, entry_order, pack, parse_lock_pid, pid_alive, unpack
from mrec.zarr.stores.zip_format import PIECE_SIZE as ZIP_PIECE
from mrec.zarr.stores.zip_format import zip_problems
from mrec.zarr.stores.zip_read import ZipStore
from mrec.zarr.stores.zip_write import ZipWriter

ROOT_JSON = b'{"zarr_format":3,"node_type":"group","attributes":{}}'
GROUP_JSON = b'{"zarr_format":3,"node_type":"group","attributes":{"x":1}}'


# -- helpers -------------------------------------------------------------------

def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for key, data in files.items():
        p = root.joinpath(*key.split("/"))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def record_files() -> dict[str, bytes]:
    rng = __import__("random").Random(7)
    blob = bytes(rng.getrandbits(8) for _ in range(5000))
    return {
        "zarr.json": ROOT_JSON,
        "meta/zarr.json": GROUP_JSON,
        "frame/zarr.json": GROUP_JSON,
        "frame/atoms/zarr.json": GROUP_JSON,
        "frame/atoms/x/zarr.json": b'{"zarr_format":3,"node_type":"array"}',
        "frame/atoms/x/c/0": blob,
        "frame/atoms/x/c/1": b"",
        "trajectory/zarr.json": GROUP_JSON,
        "trajectory/step/c/0": blob[:333],
        "metrics/metrics.jsonl": b'{"t":"scalar","k":"a","v":1}\n',
        "meta/na\u00efve": b"utf-8 name",
    }


EXPECTED_ORDER = [
    "zarr.json",
    "frame/zarr.json",
    "meta/zarr.json",
    "trajectory/zarr.json",
    "frame/atoms/zarr.json",
    "frame/atoms/x/zarr.json",
    "frame/atoms/x/c/0",
    "frame/atoms/x/c/1",
    "meta/na\u00efve",
    "metrics/metrics.jsonl",
    "trajectory/step/c/0",
]


def make_record(parent: Path, name: str = "run.mrec", files: dict[str, bytes] | None = None) -> Path:
    root = parent / name
    root.mkdir()
    write_tree(root, files if files is not None else record_files())
    return root


def tree_digest(root: Path) -> dict[str, str]:
    """Every file's relative path -> sha256 (the whole tree, hidden files included)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath, n)
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def read_tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath, n)
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def parent_listing(parent: Path) -> list[str]:
    return sorted(os.listdir(parent))


# -- a hand-built zip (independent of mrec's writer) -------------------------------

def raw_zip(entries: list[dict], *, count: int | None = None, cd_size: int | None = None,
            cd_cut: int = 0, tail_cut: int = 0) -> bytes:
    """Bytes of a zip from entry dicts: name (str), data, method, csize, usize, offset, cd_extra, flags."""
    body = b""
    records = b""
    for e in entries:
        name = e["name"].encode("utf-8")
        data = e.get("data", b"")
        method = e.get("method", 0)
        flags = e.get("flags", 0x800)
        crc = zlib.crc32(e.get("raw", data))
        csize = e.get("csize", len(data))
        usize = e.get("usize", len(e.get("raw", data)))
        offset = len(body)
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0x21, crc,
                            csize, usize, len(name), 0) + name + data
        extra = e.get("cd_extra", b"")
        records += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, method, 0, 0x21, crc,
                               csize, usize, len(name), len(extra), 0, 0, 0, 0,
                               e.get("offset", offset)) + name + extra
    if cd_cut:
        records = records[:-cd_cut]
    n = len(entries) if count is None else count
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n,
                       len(records) if cd_size is None else cd_size, len(body), 0)
    out = body + records + eocd
    return out[:-tail_cut] if tail_cut else out


# -- mrec writes, zipfile reads ---------------------------------------------------------

def test_packed_archive_read_by_zipfile(tmp_path):
    root = make_record(tmp_path)
    files = record_files()
    archive = pack(root, keep=True)
    assert archive == tmp_path / "run.mrec.zip"
    with zipfile.ZipFile(archive) as zf:
        assert zf.testzip() is None                       # every CRC-32 verified
        infos = zf.infolist()
        assert [i.filename for i in infos] == EXPECTED_ORDER
        for info in infos:
            assert info.compress_type == zipfile.ZIP_STORED
            assert not info.is_dir() and not info.filename.endswith("/")
            assert info.flag_bits & 0x800                 # UTF-8 names
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.CRC == zlib.crc32(files[info.filename])
            assert zf.read(info) == files[info.filename]
    assert tree_digest(root) == {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}


def test_packing_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = make_record(tmp_path / "a")
    b = make_record(tmp_path / "b")
    assert pack(a, keep=True).read_bytes() == pack(b, keep=True).read_bytes()


def test_entry_order_zarr_json_breadth_first():
    keys = ["b/c/zarr.json", "a/x", "zarr.json", "a/zarr.json", "b/zarr.json", "a/b/c/zarr.json", "0"]
    assert entry_order(keys) == ["zarr.json", "a/zarr.json", "b/zarr.json", "b/c/zarr.json",
                                 "a/b/c/zarr.json", "0", "a/x"]


@pytest.mark.skipif(shutil.which("unzip") is None, reason="Info-ZIP unzip not installed")
@pytest.mark.parametrize("threshold", [0xFFFFFFFF, 64])
def test_unzip_tests_archive(tmp_path, threshold):
    root = make_record(tmp_path)
    archive = pack(root, keep=True, zip64_threshold=threshold)
    run = subprocess.run(["unzip", "-tq", str(archive)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


# -- zipfile writes, ZipStore reads ---------------------------------------------------------

def test_zipfile_stored_archive_read_by_zipstore(tmp_path):
    files = record_files()
    p = tmp_path / "foreign.zip"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_STORED) as zf:
        for k, v in files.items():
            zf.writestr(k, v)
    store = ZipStore(p)
    assert store.list() == sorted(files)
    for k, v in files.items():
        assert store.get(k) == v
        assert store.size(k) == len(v)
        assert store.exists(k)
        assert store.verify_crc(k)
    assert store.get("nope") is None and store.size("nope") is None and not store.exists("nope")
    assert store.list("frame") == sorted(k for k in files if k.startswith("frame/"))
    assert store.list("frame/atoms/") == ["frame/atoms/x/c/0", "frame/atoms/x/c/1",
                                          "frame/atoms/x/zarr.json", "frame/atoms/zarr.json"]
    assert store.list_dir() == ["frame", "meta", "metrics", "trajectory", "zarr.json"]
    assert store.list_dir("frame/atoms/x") == ["c", "zarr.json"]
    assert store.list_dir("missing") == []
    assert zip_problems(p, check_crc=True) == []


def test_zipfile_forced_zip64_read_by_zipstore(tmp_path):
    files = record_files()
    p = tmp_path / "zip64.zip"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for k, v in files.items():
            with zf.open(k, "w", force_zip64=True) as f:
                f.write(v)
    with zipfile.ZipFile(p) as zf:
        assert all(i.extract_version >= 45 for i in zf.infolist())
    store = ZipStore(p)
    for k, v in files.items():
        assert store.get(k) == v
        assert store.get_range(k, -3, 3) == v[-3:]
    assert zip_problems(p, check_crc=True) == []


def test_foreign_directory_entries_skipped_but_flagged(tmp_path):
    p = tmp_path / "dirs.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr(zipfile.ZipInfo("meta/"), b"")
        zf.writestr("zarr.json", ROOT_JSON)
        zf.writestr("meta/zarr.json", GROUP_JSON)
    store = ZipStore(p)
    assert store.directory_entries == ["meta/"]
    assert store.list() == ["meta/zarr.json", "zarr.json"]
    assert store.get("meta/") is None
    problems = zip_problems(p)
    assert len(problems) == 1 and "'meta/'" in problems[0] and "directory entry" in problems[0]


# -- ZIP64 through a lowered threshold ----------------------------------------------------------

def _eocd(data: bytes) -> tuple:
    pos = data.rfind(b"PK\x05\x06")
    return struct.unpack_from("<IHHHHIIH", data, pos), pos


def test_zip64_lowered_threshold_read_by_both(tmp_path):
    src = tmp_path / "big.bin"
    big = os.urandom(3000)
    src.write_bytes(big)
    p = tmp_path / "z64.zip"
    w = ZipWriter(p, PosixFileSystem(), 100, zip64_count_threshold=2, piece_size=1024)
    w.add_bytes("zarr.json", ROOT_JSON)                         # offset 0, small: no ZIP64
    w.add_file_streaming("c/0", src)                            # size > threshold (streamed, CRC patched)
    w.add_bytes("c/1", b"tail")                                 # offset > threshold
    w.close()
    data = p.read_bytes()

    (sig, _d, _cd, n_disk, n, size, offset, _c), pos = _eocd(data)
    assert (n_disk, n, size, offset) == (0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    assert data[pos - 20: pos - 16] == b"PK\x06\x07"             # ZIP64 locator
    locator = struct.unpack_from("<IIQI", data, pos - 20)
    assert data[locator[2]: locator[2] + 4] == b"PK\x06\x06"    # ZIP64 end record

    with zipfile.ZipFile(p) as zf:
        assert zf.testzip() is None
        infos = {i.filename: i for i in zf.infolist()}
        assert infos["zarr.json"].extract_version == 20
        assert infos["c/0"].extract_version == 45 and infos["c/1"].extract_version == 45
        assert zf.read("c/0") == big and zf.read("c/1") == b"tail"
        # the central records carry 0xFFFFFFFF and the 0x0001 extra, like a real > 4 GiB archive
        assert infos["c/0"].extra[:2] == b"\x01\x00" and len(infos["c/0"].extra) == 4 + 16
        assert infos["c/1"].extra[:2] == b"\x01\x00" and len(infos["c/1"].extra) == 4 + 8
        assert infos["zarr.json"].extra == b""
    store = ZipStore(p)
    assert store.end.zip64_offset == locator[2]
    assert store.get("c/0") == big and store.get("c/1") == b"tail" and store.get("zarr.json") == ROOT_JSON
    assert store.get_range("c/0", 2990, 100) == big[2990:]
    assert all(store.verify_crc(k) for k in store.list())
    assert zip_problems(p, check_crc=True) == []


def test_zip64_entry_count_only(tmp_path):
    p = tmp_path / "count.zip"
    w = ZipWriter(p, zip64_count_threshold=3)
    for i in range(5):
        w.add_bytes(f"k/{i}", bytes([i]) * i)
    w.close()
    data = p.read_bytes()
    (_s, _d, _cd, n_disk, n, size, offset, _c), pos = _eocd(data)
    assert (n_disk, n) == (0xFFFF, 0xFFFF) and offset < 0xFFFFFFFF
    with zipfile.ZipFile(p) as zf:
        assert zf.namelist() == [f"k/{i}" for i in range(5)]
    assert ZipStore(p).list() == [f"k/{i}" for i in range(5)]


def test_pack_unpack_through_zip64(tmp_path):
    root = make_record(tmp_path)
    before = read_tree(root)
    archive = pack(root, zip64_threshold=64)
    assert not root.exists()
    with zipfile.ZipFile(archive) as zf:
        assert zf.testzip() is None
    assert read_tree(unpack(archive)) == before


# -- get_range ------------------------------------------------------------------------------------

def test_get_range(tmp_path):
    p = tmp_path / "r.zip"
    blob = bytes(range(256)) * 4
    with ZipWriter(p) as w:
        w.add_bytes("a", blob)
        w.add_bytes("empty", b"")
    s = ZipStore(p)
    assert s.get_range("a", 0, 10) == blob[:10]
    assert s.get_range("a", 1000, 100) == blob[1000:]
    assert s.get_range("a", -24, 24) == blob[-24:]
    assert s.get_range("a", -24, 4) == blob[-24:-20]
    assert s.get_range("a", -5000, 3) == blob[:3]
    assert s.get_range("a", 2000, 5) == b""
    assert s.get_range("a", 10, 0) == b""
    assert s.get_range("empty", 0, 10) == b"" and s.get_range("empty", -1, 1) == b""
    assert s.get_range("missing", 0, 1) is None
    assert b"".join(s.iter_pieces("a", 100)) == blob


def test_reads_are_ranged_not_whole(tmp_path):
    p = tmp_path / "big.zip"
    big = os.urandom(2 * 1024 * 1024)
    with ZipWriter(p) as w:
        w.add_bytes("zarr.json", ROOT_JSON)
        w.add_bytes("c/0", big)
    rec = RecordingFileSystem(record_reads=True)
    s = ZipStore(p, fs=rec)
    opened = sum(op.length for op in rec.ops)
    assert opened < 70 * 1024                    # tail search, central directory and the local headers
    assert {30 + 3, 30 + 9} <= {op.length for op in rec.ops}   # every local header checked at open (issue 27)
    rec.clear()
    assert s.get_range("c/0", 1000, 10) == big[1000:1010]
    assert [op.length for op in rec.ops] == [10]              # the range only: the header was checked at open
    rec.clear()
    assert s.get_range("c/0", -10, 10) == big[-10:]
    assert [op.length for op in rec.ops] == [10]              # local header cached


# -- hostile archives ---------------------------------------------------------------------------------

HOSTILE = {
    "dotdot": ([{"name": "a/../zarr.json", "data": b"x"}], {}, "a/../zarr.json", "'..'"),
    "absolute": ([{"name": "/etc/passwd", "data": b"x"}], {}, "/etc/passwd", "absolute"),
    "backslash": ([{"name": "a\\b", "data": b"x"}], {}, "a\\\\b", "backslash"),
    "empty_component": ([{"name": "a//b", "data": b"x"}], {}, "a//b", "empty path component"),
    "dot_component": ([{"name": "./a", "data": b"x"}], {}, "./a", "'.'"),
    "duplicate": ([{"name": "zarr.json", "data": b"1"}, {"name": "zarr.json", "data": b"2"}], {},
                  "zarr.json", "duplicate"),
    "file_and_dir": ([{"name": "a", "data": b"1"}, {"name": "a/b", "data": b"2"}], {}, "'a'", "directory of"),
    "overlap": ([{"name": "first", "data": b"1234"}, {"name": "second", "data": b"5678", "offset": 0}], {},
                "first", "overlaps"),
    "into_central_directory": ([{"name": "a", "data": b"12", "csize": 40, "usize": 40}], {}, "'a'",
                               "central directory"),
    "beyond_archive": ([{"name": "huge", "data": b"12", "csize": 10**6, "usize": 10**6}], {}, "huge",
                       "beyond the archive"),
    "stored_size_mismatch": ([{"name": "m", "data": b"12", "usize": 3}], {}, "'m'", "compressed size"),
    "truncated_central_directory": ([{"name": "a", "data": b"1"},
                                     {"name": "b", "data": b"2", "cd_extra": b"\x99\x99\x04\x00abcd"}],
                                    {"cd_cut": 3}, "'b'", "truncated"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_refused(tmp_path, case):
    entries, opts, entry_text, why = HOSTILE[case]
    p = tmp_path / f"{case}.zip"
    p.write_bytes(raw_zip(entries, **opts))
    with pytest.raises(ZipFormatError) as err:
        ZipStore(p)
    message = str(err.value)
    assert str(p) in message
    assert entry_text in message, message
    assert why in message, message
    problems = zip_problems(p)
    assert problems and any(entry_text in m for m in problems), problems
    with pytest.raises(ZipFormatError):
        unpack(p, out=tmp_path / "out.mrec")
    assert not (tmp_path / "out.mrec").exists()


STRUCTURAL = {
    "count_too_large": ({"count": 1000}, "entry count 1000"),
    "count_huge": ({"count": 0xFFFF}, "entry count 65535"),
    "cd_size_beyond": ({"cd_size": 10**6}, "extends past"),
    "truncated_eocd": ({"tail_cut": 5}, "truncated"),
    "missing_eocd": ({"tail_cut": 22}, "no end of central directory"),
}


@pytest.mark.parametrize("case", sorted(STRUCTURAL))
def test_structurally_broken_archive_refused(tmp_path, case):
    opts, why = STRUCTURAL[case]
    p = tmp_path / f"{case}.zip"
    p.write_bytes(raw_zip([{"name": "zarr.json", "data": ROOT_JSON}, {"name": "c/0", "data": b"abc"}], **opts))
    with pytest.raises(ZipFormatError) as err:
        ZipStore(p)
    assert str(p) in str(err.value) and why in str(err.value), str(err.value)
    assert zip_problems(p) == [str(err.value)]


def test_not_a_zip_and_missing(tmp_path):
    p = tmp_path / "plain.zip"
    p.write_bytes(b"hello")
    with pytest.raises(ZipFormatError, match="too small"):
        ZipStore(p)
    p.write_bytes(b"x" * 1000)
    with pytest.raises(ZipFormatError, match="no end of central directory"):
        ZipStore(p)
    with pytest.raises(StoreError, match="does not exist"):
        ZipStore(tmp_path / "missing.zip")


def test_deflated_entry_refused_on_access(tmp_path):
    raw = b"a" * 1000
    p = tmp_path / "deflated.mrec.zip"
    deflated = zlib.compress(raw)[2:-4]
    p.write_bytes(raw_zip([{"name": "zarr.json", "data": ROOT_JSON},
                           {"name": "c/0", "data": deflated, "raw": raw, "method": 8}]))
    with zipfile.ZipFile(p) as zf:                      # the hand-built archive is a valid zip
        assert zf.read("c/0") == raw
    store = ZipStore(p)
    assert store.compressed_entries == ["c/0"]
    assert store.get("zarr.json") == ROOT_JSON
    for read in (lambda: store.get("c/0"), lambda: store.get_range("c/0", 0, 1)):
        with pytest.raises(ZipFormatError) as err:
            read()
        assert str(p) in str(err.value) and "'c/0'" in str(err.value) and "compression method 8" in str(err.value)
    assert any("'c/0'" in m and "method 8" in m for m in zip_problems(p))
    with pytest.raises(ZipFormatError, match="c/0"):
        unpack(p)
    assert not (tmp_path / "deflated.mrec").exists()
    assert parent_listing(tmp_path) == ["deflated.mrec.zip"]


def test_local_header_disagreeing_with_central_directory(tmp_path):
    data = bytearray(raw_zip([{"name": "abc", "data": b"123"}]))
    data[30:33] = b"xyz"                                  # local name differs
    p = tmp_path / "local.zip"
    p.write_bytes(bytes(data))
    with pytest.raises(ZipFormatError, match="'abc'.*local header"):
        ZipStore(p)                                      # every local header is checked at open (issue 27)
    store = ZipStore(p, check_headers=False)             # as over a URL: before the entry's first byte
    with pytest.raises(ZipFormatError, match="'abc'.*local header"):
        store.get("abc")
    assert any("local header" in m for m in zip_problems(p))


def test_crc_mismatch_detected(tmp_path):
    root = make_record(tmp_path)
    archive = pack(root)
    data = bytearray(archive.read_bytes())
    pos = data.find(b"frame/atoms/x/c/0") + len("frame/atoms/x/c/0") + 100
    data[pos] ^= 0xFF
    archive.write_bytes(bytes(data))
    store = ZipStore(archive)
    assert not store.verify_crc("frame/atoms/x/c/0") and store.verify_crc("zarr.json")
    with pytest.raises(CorruptionError):
        store.check_crc("frame/atoms/x/c/0")
    assert any("CRC-32" in m and "frame/atoms/x/c/0" in m for m in zip_problems(archive, check_crc=True))
    with pytest.raises(CorruptionError, match="frame/atoms/x/c/0"):
        unpack(archive)
    assert not (tmp_path / "run.mrec").exists()
    assert parent_listing(tmp_path) == ["run.mrec.zip"]


# -- the writer refuses bad names ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../a", "/a", "a\\b", "a/", "", "a//b", "./a", "a/./b", "a/.."])
def test_writer_refuses_bad_names(tmp_path, name):
    p = tmp_path / "w.zip"
    w = ZipWriter(p)
    with pytest.raises(ZipFormatError) as err:
        w.add_bytes(name, b"x")
    assert str(p) in str(err.value) and repr(name) in str(err.value)


def test_writer_refuses_duplicates_and_clashes(tmp_path):
    w = ZipWriter(tmp_path / "w.zip")
    w.add_bytes("a/b", b"1")
    for bad in ("a/b", "a", "a/b/c"):
        with pytest.raises(ZipFormatError, match=repr(bad)):
            w.add_bytes(bad, b"2")
    with pytest.raises(StoreError, match="already exists"):
        ZipWriter(tmp_path / "w.zip")


# -- pack / unpack ------------------------------------------------------------------------------------------

def test_pack_unpack_round_trip_byte_identical(tmp_path):
    root = make_record(tmp_path)
    before = read_tree(root)
    seen: list[tuple[int, int]] = []
    archive = pack(root, progress=lambda d, t: seen.append((d, t)))
    assert not root.exists()
    assert parent_listing(tmp_path) == ["run.mrec.zip"]
    total = sum(len(v) for v in before.values())
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    store = ZipStore(archive)
    assert store.list() == sorted(before)
    assert all(store.get(k) == v for k, v in before.items())

    seen.clear()
    out = unpack(archive, progress=lambda d, t: seen.append((d, t)))
    assert out == root
    after = read_tree(out)
    assert sorted(after) == sorted(before) and after == before
    assert seen[-1] == (total, total)
    assert archive.exists()                               # keep=True is the default for unpack
    assert parent_listing(tmp_path) == ["run.mrec", "run.mrec.zip"]


def test_unpack_keep_false_and_out(tmp_path):
    root = make_record(tmp_path)
    before = read_tree(root)
    archive = pack(root)
    out = unpack(archive, out=tmp_path / "elsewhere.mrec", keep=False)
    assert read_tree(out) == before and not archive.exists()


def test_pack_to_out_and_overwrite(tmp_path):
    root = make_record(tmp_path)
    target = tmp_path / "custom.mrec.zip"
    target.write_bytes(b"old")
    with pytest.raises(RefusalError) as err:
        pack(root, out=target)
    assert err.value.kind == "exists"
    assert pack(root, out=target, keep=True, overwrite=True) == target
    assert ZipStore(target).get("zarr.json") == ROOT_JSON


def _assert_refused_untouched(tmp_path: Path, root: Path, kind: str, **kwargs) -> RefusalError:
    before = tree_digest(root) if root.is_dir() else None
    listing = parent_listing(tmp_path)
    with pytest.raises(RefusalError) as err:
        pack(root, **kwargs)
    assert err.value.kind == kind, err.value
    assert parent_listing(tmp_path) == listing
    if before is not None:
        assert tree_digest(root) == before
    return err.value


def test_pack_refuses_live_writer(tmp_path):
    """A writer holding the store's lock (in this very process, too) is refused, named by its pid."""
    from mrec.fs import DEFAULT_FS
    from mrec.record.integrity.lock import lock_store
    root = make_record(tmp_path)
    held = lock_store(DEFAULT_FS, str(root), "writer")
    try:
        err = _assert_refused_untouched(tmp_path, root, "live_writer")
    finally:
        held.release()
    assert str(os.getpid()) in str(err) and LOCK_NAME in str(err)


def test_pack_refuses_pid_only_lock_of_a_living_process(tmp_path):
    """A lock file naming another living process that holds no OS lock (a writer that does not
    take it) is refused as before."""
    root = make_record(tmp_path)
    (root / LOCK_NAME).write_text(f"{os.getppid()}\n")
    err = _assert_refused_untouched(tmp_path, root, "live_writer")
    assert str(os.getppid()) in str(err)


def test_pack_takes_over_an_unheld_unreadable_lock(tmp_path):
    """No process holds the lock: whatever the file says (here garbage), it is a leftover, not packed."""
    root = make_record(tmp_path)
    files = record_files()
    (root / LOCK_NAME).write_bytes(b"garbage")
    archive = pack(root)
    assert ZipStore(archive).list() == sorted(files)


def test_pack_refuses_stray_temp_files(tmp_path):
    root = make_record(tmp_path)
    (root / "frame" / ".mrec-tmp-zarr.json.1a2b3c4d").write_bytes(b"half")
    err = _assert_refused_untouched(tmp_path, root, "stray_temp_files")
    assert ".mrec-tmp-zarr.json.1a2b3c4d" in str(err)


def test_pack_refuses_existing_target(tmp_path):
    root = make_record(tmp_path)
    (tmp_path / "run.mrec.zip").write_bytes(b"precious")
    _assert_refused_untouched(tmp_path, root, "exists")
    assert (tmp_path / "run.mrec.zip").read_bytes() == b"precious"


def test_pack_refuses_non_records(tmp_path):
    no_meta = make_record(tmp_path, "nometa.mrec", {"a/b": b"1"})
    _assert_refused_untouched(tmp_path, no_meta, "not_a_record")
    wrong_name = make_record(tmp_path, "run.zarr")
    _assert_refused_untouched(tmp_path, wrong_name, "not_a_record")
    _assert_refused_untouched(tmp_path, tmp_path / "absent.mrec", "not_a_record")
    a_file = tmp_path / "file.mrec"
    a_file.write_bytes(b"x")
    _assert_refused_untouched(tmp_path, a_file, "not_a_record")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    if pid_alive(proc.pid):
        pytest.skip("pid reused")
    return proc.pid


def test_pack_skips_dead_writer_lock(tmp_path):
    root = make_record(tmp_path)
    files = record_files()
    (root / LOCK_NAME).write_text(str(_dead_pid()))
    archive = pack(root)
    store = ZipStore(archive)
    assert LOCK_NAME not in store.list()
    assert store.list() == sorted(files)
    assert not root.exists()


def test_parse_lock_pid():
    assert parse_lock_pid(b"123\n") == 123
    assert parse_lock_pid(b'{"pid": 42, "host": "x"}') == 42
    assert parse_lock_pid(b"77 started 2026-01-01") == 77
    assert parse_lock_pid(b"") is None and parse_lock_pid(b"0") is None
    assert parse_lock_pid(b"\xff\xfe") is None and parse_lock_pid(b'{"pid": true}') is None


def test_unpack_refusals(tmp_path):
    root = make_record(tmp_path)
    archive = pack(root, keep=True)
    with pytest.raises(RefusalError) as err:
        unpack(archive)                                   # run.mrec still exists
    assert err.value.kind == "exists"
    other = tmp_path / "plain.zip"
    shutil.copy(archive, other)
    with pytest.raises(RefusalError) as err:
        unpack(other)
    assert err.value.kind == "not_a_record"
    headless = tmp_path / "headless.mrec.zip"
    headless.write_bytes(raw_zip([{"name": "meta/zarr.json", "data": GROUP_JSON}]))
    with pytest.raises(RefusalError) as err:
        unpack(headless)
    assert err.value.kind == "not_a_record" and "zarr.json" in str(err.value)
    assert not (tmp_path / "headless.mrec").exists()


def test_pack_op_order_temp_fsync_rename_then_remove(tmp_path):
    root = make_record(tmp_path)
    rec = RecordingFileSystem(keep_data=True)
    archive = pack(root, fs=rec)
    ops = rec.ops
    kinds = [op.kind for op in ops]
    final = str(archive)
    rename_at = kinds.index("rename")
    rename = ops[rename_at]
    tmp = rename.data.decode()
    assert rename.path == final
    assert os.path.basename(tmp).startswith(".run.mrec.zip.mrec-tmp-")
    assert os.path.dirname(tmp) == str(tmp_path)
    writes = [i for i, op in enumerate(ops) if op.kind == "write_at"]
    assert writes and all(ops[i].path == tmp for i in writes)
    fsync_at = next(i for i, op in enumerate(ops) if op.kind == "fsync" and op.path == tmp)
    assert max(writes) < fsync_at < rename_at
    dir_sync_at = next(i for i, op in enumerate(ops) if op.kind == "fsync_dir" and i > rename_at)
    assert ops[dir_sync_at].path == str(tmp_path)
    removes = [i for i, op in enumerate(ops) if op.kind in ("remove", "rmdir")]
    assert removes and min(removes) > dir_sync_at
    # the source is renamed aside (under the lock, so nothing reaches it by name), then removed
    aside_at = next(i for i, op in enumerate(ops) if op.kind == "rename" and op.data.decode() == str(root))
    aside = ops[aside_at].path
    assert os.path.basename(aside).startswith(".run.mrec.mrec-tmp-") and dir_sync_at < aside_at < min(removes)
    assert ops[max(removes)].kind == "rmdir" and ops[max(removes)].path == aside
    assert kinds[-1] == "fsync_dir"
    removed = [os.path.relpath(op.path, aside) for op in ops if op.kind == "remove"]
    assert sorted(removed) == sorted([*record_files(), LOCK_NAME])      # pack's own lock went with the tree


class FailingFS(PosixFileSystem):
    """Raises on the n-th call of one operation (a crash mid-way)."""

    def __init__(self, op: str, nth: int):
        self.op = op
        self.nth = nth
        self.count = 0

    def _tick(self, op: str) -> None:
        if op == self.op:
            self.count += 1
            if self.count == self.nth:
                raise OSError(f"injected failure in {op} #{self.nth}")

    def write_at(self, path, offset, data):
        self._tick("write_at")
        super().write_at(path, offset, data)

    def create_exclusive(self, path):        # the archive's creation: its first write
        self._tick("write_at")
        super().create_exclusive(path)

    def fsync(self, path):
        self._tick("fsync")
        super().fsync(path)

    def fsync_dir(self, path):
        self._tick("fsync_dir")
        super().fsync_dir(path)

    def rename(self, src, dst):
        self._tick("rename")
        super().rename(src, dst)


@pytest.mark.parametrize("op,nth", [("write_at", 1), ("write_at", 2), ("fsync", 1), ("rename", 1)])
def test_failed_pack_leaves_nothing(tmp_path, op, nth):
    root = make_record(tmp_path)
    before = tree_digest(root)
    with pytest.raises(OSError, match="injected"):
        pack(root, fs=FailingFS(op, nth))
    assert parent_listing(tmp_path) == ["run.mrec"]
    assert tree_digest(root) == before


def test_failed_pack_streaming_copy_leaves_nothing(tmp_path):
    big = os.urandom(ZIP_PIECE * 2 + 17)
    root = make_record(tmp_path, files={"zarr.json": ROOT_JSON, "c/0": big})
    before = tree_digest(root)
    with pytest.raises(OSError, match="injected"):
        pack(root, fs=FailingFS("write_at", 4))            # inside the streamed copy of c/0
    assert parent_listing(tmp_path) == ["run.mrec"]
    assert tree_digest(root) == before
    archive = pack(root)                                    # and a real one streams in pieces
    assert ZipStore(archive).get("c/0") == big


@pytest.mark.parametrize("op,nth", [("write_at", 1), ("write_at", 4), ("write_at", 9), ("fsync", 3),
                                    ("fsync_dir", 1), ("rename", 1)])
def test_failed_unpack_leaves_nothing(tmp_path, op, nth):
    root = make_record(tmp_path)
    archive = pack(root)
    with pytest.raises(OSError, match="injected"):
        unpack(archive, fs=FailingFS(op, nth))
    assert parent_listing(tmp_path) == ["run.mrec.zip"]


# -- property: random trees round-trip ---------------------------------------------------------------------

component = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=6).filter(
    lambda c: c not in (".", ".."))
paths = st.lists(st.lists(component, min_size=1, max_size=3).map(tuple), max_size=8, unique=True)


def _no_clashes(ps: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Drop paths that are a directory of another path (a file cannot also be a directory)."""
    keep = [p for p in ps if not any(len(q) > len(p) and q[: len(p)] == p for q in ps)]
    return [p for p in keep if p != ("zarr.json",)]


trees = paths.map(_no_clashes).flatmap(
    lambda ps: st.lists(st.binary(max_size=300), min_size=len(ps), max_size=len(ps)).map(
        lambda blobs: {"/".join(p): b for p, b in zip(ps, blobs)}))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=trees)
def test_property_pack_unpack_round_trip(files):
    files = {"zarr.json": ROOT_JSON, **files}
    with tempfile.TemporaryDirectory() as d:
        parent = Path(d)
        root = make_record(parent, "p.mrec", files)
        archive = pack(root, keep=True)
        store = ZipStore(archive)
        assert store.list() == sorted(files)
        for k, v in files.items():
            assert store.get(k) == v
        with zipfile.ZipFile(archive) as zf:
            assert zf.namelist() == entry_order(list(files))
        shutil.rmtree(root)
        assert read_tree(unpack(archive)) == files


# -- zarr-python as a zip-backed Zarr store reader (the chapter's "Read path") ---------------------------

def test_zarr_python_zipstore_reads_packed_record(tmp_path):
    zarr = pytest.importorskip("zarr")
    np = pytest.importorskip("numpy")
    root = tmp_path / "z.mrec"
    group = zarr.open_group(zarr.storage.LocalStore(str(root)), mode="w", zarr_format=3)
    group.attrs["answer"] = 42
    values = np.arange(1000, dtype="f8")
    arr = group.create_array("frame/atoms/x", shape=(1000,), chunks=(128,), dtype="f8")
    arr[:] = values
    before = read_tree(root)
    archive = pack(root)
    store = zarr.storage.ZipStore(str(archive), mode="r")
    reread = zarr.open_group(store, mode="r")
    assert reread.attrs["answer"] == 42
    assert (reread["frame/atoms/x"][:] == values).all()
    store.close()
    assert read_tree(unpack(archive)) == before


def test_zipstore_reads_zarr_python_zip(tmp_path):
    zarr = pytest.importorskip("zarr")
    np = pytest.importorskip("numpy")
    p = tmp_path / "zp.zip"
    store = zarr.storage.ZipStore(str(p), mode="w")
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("a", shape=(10,), chunks=(5,), dtype="i4")
    arr[:] = np.arange(10, dtype="i4")
    store.close()
    ours = ZipStore(p)
    assert "zarr.json" in ours.list() and "a/zarr.json" in ours.list()
    assert ours.compressed_entries == [] and ours.directory_entries == []
    assert zip_problems(p, check_crc=True) == []
