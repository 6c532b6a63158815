"""Remote reads and zip directory trust (issue 27): against REAL servers on 127.0.0.1 (spec_tests/servers.py),
never mocks.

* a key the listing (or a shard index) says exists and the server cannot give is a ``StoreError`` naming
  the URL, never the fill value;
* a bit flipped in a ``*.mrec.zip``'s central directory is refused (``ZipFormatError`` naming the entry):
  every entry's local header is compared with its central record (at open for a local archive; for a
  remote one those the open already holds, the rest before their first byte is used or their absence
  is believed), never wrong bytes;
* a server that ignores ``Range`` or streams without end is read at most a little past what was asked;
* a slow server trips mrec's own connect / read timeouts (``storage_options``).
"""
from __future__ import annotations

import shutil
import struct
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mrec import TrajectoryReader, read_frame, read_record
from mrec import pack
from mrec.errors import MrecError, RefusalError, StoreError, ZipFormatError
from mrec.fs.remote import RemoteFileSystem
from mrec.zarr.stores.zip_format import CENTRAL_FMT
from mrec.zarr.stores.zip_read import ZipStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servers import http_server, s3_server, upload  # noqa: E402
from test_remote import big_record  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    pack(big_record(root / "big.mrec"), keep=True)                 # one shard of 1.5 MB per column
    shutil.copy(FIXTURES / "masks.mrec.zip", root / "masks.mrec.zip")
    http = http_server(root)
    yield {"root": root, "http": http}
    http.stop()


@pytest.fixture
def http(served):
    srv = served["http"]
    yield srv
    srv.faults.clear()
    srv.delay = 2.0


def frame_bytes(frame) -> dict:
    return {(b, c): np.asarray(v).tobytes() for b, cols in frame.blocks.items() for c, v in cols.items()}


# -- 1. a listed key the server cannot give is an error, never fill ---------------------------------------

@pytest.mark.parametrize("when", ["before open", "after open"])
def test_a_chunk_the_listing_names_but_the_server_404s_is_a_store_error(http, when):
    url = f"{http.url}/big.mrec"
    key = "/big.mrec/trajectory/atoms/y/c/0"
    if when == "before open":
        http.faults[key] = "missing"
    r = TrajectoryReader(url)
    http.faults[key] = "missing"
    with pytest.raises(StoreError) as e:
        r[12]
    assert "big.mrec/trajectory/atoms/y/c/0" in str(e.value) and http.url in str(e.value)
    with pytest.raises(StoreError):
        read_frame(url, 3)


def test_a_directory_the_listing_names_but_the_server_404s_is_a_store_error(http):
    http.faults["/big.mrec/trajectory/atoms/y/"] = "missing"       # its page; the parent's page names it
    with pytest.raises(StoreError) as e:
        TrajectoryReader(f"{http.url}/big.mrec")[0]
    assert "big.mrec/trajectory/atoms/y/" in str(e.value)


def test_a_chunk_the_shard_index_names_but_the_server_404s_is_a_store_error(http, served):
    url = f"{http.url}/big.mrec"
    r = TrajectoryReader(url)
    local = TrajectoryReader(served["root"] / "big.mrec")
    assert frame_bytes(r[59]) == frame_bytes(local[59])        # every shard index is held now
    http.faults["/big.mrec/trajectory/atoms/y/c/0"] = "missing"
    with pytest.raises(StoreError) as e:
        r[0]                                                    # chunk 0 is 1.5 MB before the index
    assert "big.mrec/trajectory/atoms/y/c/0" in str(e.value)


def test_a_listed_object_gone_from_s3_is_a_store_error(tmp_path):
    import s3fs
    s3 = s3_server()
    try:
        url = upload(s3, "records", big_record(tmp_path / "s.mrec", atoms=50, frames=8), "s.mrec")
        r = TrajectoryReader(url, storage_options=s3.storage_options)
        s3fs.S3FileSystem(**s3.storage_options).rm_file("records/s.mrec/trajectory/atoms/x/c/0")
        with pytest.raises(StoreError) as e:
            r[3]
        assert "s.mrec/trajectory/atoms/x/c/0" in str(e.value)
    finally:
        s3.stop()


# -- 2. the central directory is checked against the local headers -----------------------------------------

def central_records(path: Path) -> list[tuple[str, int]]:
    """(name, offset of its central record) of every entry."""
    z = ZipStore(path)
    data = path.read_bytes()
    out, pos = [], z.end.cd_offset
    for _ in z.entries:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        out.append((data[pos + 46: pos + 46 + name_len].decode(), pos))
        pos += CENTRAL_FMT.size + name_len + extra_len + comment_len
    return out


def flipped(src: Path, dst: Path, flips: list[tuple[int, int]]) -> Path:
    data = bytearray(src.read_bytes())
    for offset, bit in flips:
        data[offset] ^= 1 << bit
    dst.write_bytes(bytes(data))
    return dst


# field offsets inside a central record: crc 16, compressed size 20, size 24, local header offset 42
DAMAGE = {
    "name": lambda rec, n: [(rec + 46 + n - 1, 0)],               # 'c/0' -> 'c/1': chunk 0 would read as fill
    "crc": lambda rec, n: [(rec + 16, 3)],
    "sizes": lambda rec, n: [(rec + 20, 2), (rec + 24, 2)],       # both sizes, alike: stored entries agree
    "offset": lambda rec, n: [(rec + 42, 4)],
}


@pytest.mark.parametrize("field", sorted(DAMAGE))
def test_a_flipped_central_directory_field_is_refused_when_a_local_archive_opens(served, tmp_path, field):
    src = served["root"] / "big.mrec.zip"
    name, rec = next((n, r) for n, r in central_records(src) if n == "trajectory/atoms/x/c/0")
    bad = flipped(src, tmp_path / "bad.mrec.zip", DAMAGE[field](rec, len(name)))
    with pytest.raises(ZipFormatError) as e:
        TrajectoryReader(bad)
    assert "trajectory/atoms/x/c/" in str(e.value) and "bad.mrec.zip" in str(e.value)
    with pytest.raises(ZipFormatError):
        ZipStore(bad)


def read_everything(path) -> list:
    r = TrajectoryReader(path)
    return [len(r), list(r.steps)] + [frame_bytes(r[i]) for i in range(len(r))]


def test_every_single_bit_flip_of_a_central_record_is_refused_or_reads_exactly(tmp_path):
    """A sweep over every bit of the central records of a chunk entry and of its array's zarr.json (a
    small packed trajectory): each flip is refused with an MrecError or changes nothing a reader returns."""
    src = pack(big_record(tmp_path / "small.mrec", atoms=4, frames=5), keep=True)
    want = read_everything(src)
    records = central_records(src)
    ends = {r: (records[i + 1][1] if i + 1 < len(records) else ZipStore(src).end.cd_offset + ZipStore(src).end.cd_size)
            for i, (_, r) in enumerate(records)}
    silent, refused = [], 0
    for name, rec in records:
        if name not in ("trajectory/atoms/y/c/0", "trajectory/atoms/y/zarr.json"):
            continue
        for offset in range(rec, ends[rec]):
            for bit in range(8):
                bad = flipped(src, tmp_path / "b.mrec.zip", [(offset, bit)])
                try:
                    got = read_everything(bad)
                except MrecError:
                    refused += 1
                    continue
                if got != want:
                    silent.append((name, offset - rec, bit))
    assert not silent, silent[:20]
    assert refused > 0


@pytest.mark.parametrize("field", ["name", "offset"])
def test_a_flipped_central_directory_of_a_remote_archive_is_refused_within_the_open_budget(http, served, field):
    root = served["root"]
    name, rec = next((n, r) for n, r in central_records(root / "big.mrec.zip") if n == "trajectory/atoms/x/c/0")
    flipped(root / "big.mrec.zip", root / f"flip-{field}.mrec.zip", DAMAGE[field](rec, len(name)))
    url = f"{http.url}/flip-{field}.mrec.zip"
    n = http.count()

    def open_then_read():
        r = TrajectoryReader(url)                            # (a damaged offset may be refused here)
        assert len(http.since(n)) <= 3                       # the open budget holds
        r[7]                                                 # never chunk 0 as fill

    with pytest.raises(ZipFormatError) as e:
        open_then_read()
    assert "trajectory/atoms/x/c/" in str(e.value) and url in str(e.value)


def test_a_flipped_metadata_name_of_a_remote_archive_is_refused_within_the_open_budget(http, served):
    root = served["root"]
    name, rec = next((n, r) for n, r in central_records(root / "big.mrec.zip") if n == "trajectory/atoms/y/zarr.json")
    flipped(root / "big.mrec.zip", root / "flip-meta.mrec.zip", [(rec + 46 + len("trajectory/atoms/"), 1)])
    url = f"{http.url}/flip-meta.mrec.zip"
    n = http.count()
    with pytest.raises(ZipFormatError) as e:
        TrajectoryReader(url)[7]
    assert len(http.since(n)) <= 3                          # refused from what the open fetched
    assert "trajectory/atoms/" in str(e.value)


# -- 3. bounded bodies ---------------------------------------------------------------------------------------

def peak_while(fn) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        fn()
        raised = None
    except BaseException as exc:     # noqa: BLE001
        raised = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, raised


@pytest.mark.parametrize("mode", ["flood", "endless"])
@pytest.mark.parametrize("form", [".mrec.zip", ".mrec"])
def test_a_server_streaming_a_huge_body_is_refused_after_what_was_asked(http, form, mode):
    url = f"{http.url}/big{form}"
    r = TrajectoryReader(url)
    http.faults["/big.mrec.zip" if form == ".mrec.zip" else "/big.mrec/trajectory/atoms/z/c/0"] = mode
    http.sent = 0
    started = time.monotonic()
    peak, raised = peak_while(lambda: r[33])
    assert isinstance(raised, StoreError), raised
    assert f"big{form}" in str(raised)
    assert peak < 16 * MiB, peak                           # the server offered 256 MiB
    assert http.sent < 64 * MiB, http.sent                  # hung up soon (socket buffers aside)
    assert time.monotonic() - started < 10


def test_a_server_ignoring_range_is_a_store_error_naming_the_url(http):
    """Past ``whole_read_limit`` (issue 28: below it the object is read whole, test_remote_serving.py)."""
    r = TrajectoryReader(f"{http.url}/big.mrec.zip", storage_options={"whole_read_limit": MiB})
    http.faults["/big.mrec.zip"] = "norange"
    peak, raised = peak_while(lambda: r[21])
    assert isinstance(raised, StoreError) and "big.mrec.zip" in str(raised)
    assert "Range" in str(raised) and "whole_read_limit" in str(raised)
    assert peak < 8 * MiB, peak                             # the archive is 4.5 MB: not buffered whole


@pytest.mark.parametrize("what, where, mode", [("listing", "/big.mrec/", "endless"),
                                               ("a group's listing", "/big.mrec/trajectory/atoms/", "flood"),
                                               ("metadata", "/big.mrec/trajectory/zarr.json", "endless")])
def test_an_endless_listing_page_or_metadata_object_is_bounded(http, what, where, mode):
    http.faults[where] = mode
    http.sent = 0
    http.flood_bytes = 1024 * MiB
    try:
        peak, raised = peak_while(lambda: TrajectoryReader(f"{http.url}/big.mrec"))
    finally:
        http.flood_bytes = 256 * MiB
    assert isinstance(raised, StoreError), raised
    assert peak < 200 * MiB and http.sent < 400 * MiB, (peak, http.sent)     # 1 GiB offered; 64 MiB taken
    if mode == "flood":
        assert peak < 16 * MiB                                  # a page declaring 1 GiB: refused unread


# -- 4. timeouts of mrec's own --------------------------------------------------------------------------------

def test_default_timeouts_and_overrides():
    from mrec.fs.urls import CONNECT_TIMEOUT, READ_TIMEOUT
    fs = RemoteFileSystem("http://127.0.0.1:9/x.mrec.zip")
    assert (fs.connect_timeout, fs.read_timeout) == (CONNECT_TIMEOUT, READ_TIMEOUT)
    assert 0 < CONNECT_TIMEOUT <= 30 and 0 < READ_TIMEOUT <= 60
    fs = RemoteFileSystem("http://127.0.0.1:9/x.mrec.zip", {"connect_timeout": 1.5, "read_timeout": None})
    assert (fs.connect_timeout, fs.read_timeout) == (1.5, None)
    for bad in ({"read_timeout": -1}, {"connect_timeout": "soon"}, {"read_timeout": True}):
        with pytest.raises(RefusalError) as e:
            RemoteFileSystem("http://127.0.0.1:9/x.mrec.zip", bad)
        assert e.value.kind == "bad_storage_options"


@pytest.mark.parametrize("mode", ["slow", "stall"])
@pytest.mark.parametrize("form", [".mrec.zip", ".mrec"])
def test_a_slow_server_trips_the_read_timeout_with_a_store_error(http, form, mode):
    url = f"{http.url}/big{form}"
    opts = {"read_timeout": 0.4}
    http.delay = 3.0
    r = TrajectoryReader(url, storage_options=opts)
    http.faults["/big.mrec.zip" if form == ".mrec.zip" else "/big.mrec/trajectory/atoms/x/c/0"] = mode
    started = time.monotonic()
    with pytest.raises(StoreError) as e:
        r[40]
    assert time.monotonic() - started < 2.5
    assert f"big{form}" in str(e.value) and "read_timeout" in str(e.value)
    if mode == "slow":
        http.faults["/big.mrec/" if form == ".mrec" else "/big.mrec.zip"] = "slow"     # opening, too
        started = time.monotonic()
        with pytest.raises(StoreError) as e:
            read_record(url, storage_options=opts)
        assert time.monotonic() - started < 2.5 and "read_timeout" in str(e.value)


def test_a_server_that_never_accepts_trips_the_connect_timeout():
    import socket
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    port = lst.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):                     # fill the accept queue: later SYNs go unanswered
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.1)
        started = time.monotonic()
        with pytest.raises(StoreError) as e:
            TrajectoryReader(f"http://127.0.0.1:{port}/x.mrec.zip", storage_options={"connect_timeout": 0.5,
                                                                                     "read_timeout": 0.5})
        assert time.monotonic() - started < 5
        assert "connect_timeout" in str(e.value) and f"127.0.0.1:{port}" in str(e.value)
    finally:
        for s in fillers:
            s.close()
        lst.close()


def test_mrec_reads_exactly_again_once_the_server_behaves(http, served):
    for mode in ("missing", "norange", "flood", "slow", "flip"):
        http.faults["/big.mrec.zip"] = mode
        http.delay = 1.0
        try:
            TrajectoryReader(f"{http.url}/big.mrec.zip", storage_options={"read_timeout": 0.3})[5]
        except MrecError:
            pass
    http.faults.clear()
    got = TrajectoryReader(f"{http.url}/big.mrec.zip")
    want = TrajectoryReader(served["root"] / "big.mrec")
    assert frame_bytes(got[5]) == frame_bytes(want[5])
