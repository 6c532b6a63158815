"""Remote, read-only records (issue 15, part 2): every read entry point takes a URL, against REAL servers
on 127.0.0.1 started here — moto's S3 in server mode (through s3fs) and a stdlib HTTP server honouring
Range (through fsspec's HTTPFileSystem).  Requests are counted in the servers' own logs.

The chapter's scope: "an object store ... holds closed records ... and is read, never appended to" —
every write entry point refuses a URL (kind ``remote_read_only``).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec import TrajectoryReader, TrajectoryWriter, read_frame, read_record, sections, unpack, write_record
from mrec import pack
from mrec.errors import MrecError, RefusalError, StoreError
from mrec.check.fixtures import describe
from mrec.fs.remote import RemoteFileSystem
from mrec.fs.urls import require
from mrec.archive.repack import repack
from mrec.check.repair import repair
from mrec.check.validate import validate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servers import http_server, s3_server, upload  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
MiB = 1024 * 1024
NAMES = ["whole_record", "block_ragged", "masks", "strings", "uncommitted_tail_flush", "cell_changing"]


def big_record(path: Path, atoms=3000, frames=60, precision=None) -> Path:
    """A regular block with a step progression: opening reads nothing but metadata."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=precision)
    rng = np.random.default_rng(3)
    with TrajectoryWriter.create(path, s, durable=False) as w:
        for i in range(frames):
            w.append({"blocks": {"atoms": {c: rng.normal(size=atoms) * 10 for c in "xyz"}}}, step=10 * i)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Both servers, holding the fixtures and two bigger records in both forms."""
    root = tmp_path_factory.mktemp("served")
    for n in NAMES:
        shutil.copytree(FIXTURES / f"{n}.mrec", root / f"{n}.mrec")
        shutil.copy(FIXTURES / f"{n}.mrec.zip", root / f"{n}.mrec.zip")
    pack(big_record(root / "big.mrec"), keep=True)                        # ~4.3 MB of chunks, 1.4 MB a column
    pack(big_record(root / "scan.mrec", atoms=5000, frames=80), keep=True)  # 3.2 MB a column
    http = http_server(root)
    s3 = s3_server()
    for p in sorted(root.iterdir()):
        upload(s3, "records", p, p.name)
    yield {"root": root, "http": http, "s3": s3}
    http.stop()
    s3.stop()


def url_of(served, kind: str, name: str) -> tuple[str, dict, object]:
    srv = served[kind]
    if kind == "http":
        return f"{srv.url}/{name}", {}, srv
    return f"s3://records/{name}", srv.storage_options, srv


KINDS = ["http", "s3"]
FORMS = [".mrec", ".mrec.zip"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NAMES)
def test_every_read_entry_point_reads_a_url_like_the_local_record(served, monkeypatch, kind, form, name):
    url, opts, _ = url_of(served, kind, name + form)
    local = served["root"] / (name + form)
    monkeypatch.setenv("MREC_STORAGE_OPTIONS", json.dumps(opts))     # describe() passes no options
    assert describe(url) == describe(local)                           # read_record + every frame
    monkeypatch.delenv("MREC_STORAGE_OPTIONS")
    assert sections(url, storage_options=opts) == sections(local)
    with read_record(url, storage_options=opts) as rec:
        assert rec.sections() == read_record(local).sections()
    if name != "strings":
        r = TrajectoryReader(url, storage_options=opts)
        ref = TrajectoryReader(local)
        assert len(r) == len(ref) and list(r.steps) == list(ref.steps)
        if len(r):
            got, want = read_frame(url, -1, storage_options=opts), ref[-1]
            for b, cols in want.blocks.items():
                for c, v in cols.items():
                    assert np.asarray(got.blocks[b][c]).tobytes() == np.asarray(v).tobytes()
    report = validate(url, deep=True, storage_options=opts)
    assert report.ok, [str(v) for v in report.violations]


@pytest.mark.parametrize("kind, form", [("s3", ".mrec.zip"), ("http", ".mrec")])
def test_cli_info_validate_cat_take_a_url(served, kind, form):
    url, opts, _ = url_of(served, kind, "whole_record" + form)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MREC_STORAGE_OPTIONS=json.dumps(opts))
    local = str(served["root"] / ("whole_record" + form))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "mrec", *args], capture_output=True, text=True, env=env)

    info, local_info = run("info", "--json", url), run("info", "--json", local)
    assert info.returncode == 0, info.stderr
    a, b = json.loads(info.stdout), json.loads(local_info.stdout)
    assert {k: v for k, v in a.items() if k != "path"} == {k: v for k, v in b.items() if k != "path"}
    v = run("validate", "--deep", url)
    assert v.returncode == 0 and ": valid," in v.stdout, v.stdout + v.stderr
    cat, local_cat = run("cat", "--frame", "2", url), run("cat", "--frame", "2", local)
    assert cat.returncode == 0 and cat.stdout == local_cat.stdout, cat.stderr


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", [".mrec", ".mrec.zip"])
def test_cli_convert_takes_a_url(served, kind, form, tmp_path):
    """`mrec convert URL out.extxyz|out.xtc` reads the record at the URL (issue 15: every read entry
    point): the same file as converting the local record; converting *into* a URL is refused."""
    url, opts, _ = url_of(served, kind, "big" + form)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MREC_STORAGE_OPTIONS=json.dumps(opts))
    local = str(served["root"] / ("big" + form))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "mrec", "convert", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path)

    for ext in ("extxyz", "xtc"):
        a, b = run(url, f"remote.{ext}", "--frames", "0:4"), run(local, f"local.{ext}", "--frames", "0:4")
        assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
        assert (tmp_path / f"remote.{ext}").read_bytes() == (tmp_path / f"local.{ext}").read_bytes()
    bad = run(local, url + ".xtc")
    assert bad.returncode == 2 and "cannot convert into a URL" in bad.stderr, bad.stderr


# -- request budgets (counted in the servers' logs) ------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_opening_a_packed_record_costs_at_most_three_requests(served, kind):
    url, opts, srv = url_of(served, kind, "big.mrec.zip")
    assert os.path.getsize(served["root"] / "big.mrec.zip") > 1 * MiB      # the tail read is not the whole file
    n = srv.count()
    r = TrajectoryReader(url, storage_options=opts)
    opened = srv.since(n)
    assert len(opened) <= 3, opened
    assert len(r) == 60
    n = srv.count()
    assert sections(url, storage_options=opts) == ["meta", "trajectory"]
    assert len(srv.since(n)) <= 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_random_frame_is_one_request_per_column_chunk_once_indexes_are_cached(served, kind):
    url, opts, srv = url_of(served, kind, "big.mrec.zip")
    r = TrajectoryReader(url, storage_options=opts)
    local = TrajectoryReader(served["root"] / "big.mrec")
    r[0]                                                   # touches every column's shard (its index is cached)
    for i in (41, 17, 55, 29):
        n = srv.count()
        f = r[i]
        got = srv.since(n)
        assert len(got) <= 3, got                          # x, y, z: one chunk each, nothing else
        assert all(g.method == "GET" and g.range for g in got)
        for c in "xyz":
            assert f.blocks["atoms"][c].tobytes() == local[i].blocks["atoms"][c].tobytes()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_sequential_scan_coalesces_neighbouring_chunks_into_requests_of_1_mib(served, kind, form):
    url, opts, srv = url_of(served, kind, "scan" + form)
    local = served["root"] / "scan.mrec"
    r = TrajectoryReader(url, storage_options=opts)
    ref = TrajectoryReader(local)
    n = srv.count()
    for i in range(len(r)):
        f = r[i]
        assert f.blocks["atoms"]["x"].tobytes() == ref[i].blocks["atoms"]["x"].tobytes()
    got = [g for g in srv.since(n) if g.method == "GET"]
    small = [g for g in got if (g.length or 0) < MiB]
    data = sum(os.path.getsize(p) for p in (local / "trajectory/atoms").rglob("c/*"))
    # per column at most: the local header (zip), the shard index and the last, short, piece
    assert len(small) <= 3 * 3, small
    assert len(got) <= math.ceil(data / MiB) + 3 * 3, (len(got), data)


# -- failures: a clear StoreError, never wrong data -----------------------------------------------------

@pytest.mark.parametrize("fault", ["error", "cut", "short"])
def test_a_failing_server_gives_a_store_error_never_wrong_data(served, fault):
    srv = served["http"]
    url = f"{srv.url}/big.mrec.zip"
    r = TrajectoryReader(url)                               # opened while the server behaves
    srv.faults["/big.mrec.zip"] = fault
    try:
        with pytest.raises(StoreError) as e:
            r[33]
        assert "big.mrec.zip" in str(e.value)
        if fault == "short":
            assert "truncated body" in str(e.value)
        with pytest.raises(StoreError):
            TrajectoryReader(url)                           # opening fails the same way
        d = f"{srv.url}/big.mrec"
        srv.faults["/big.mrec/trajectory/atoms/y/c/0"] = fault
        with pytest.raises(StoreError):
            TrajectoryReader(d)[12]
    finally:
        srv.faults.clear()
    assert TrajectoryReader(url)[33].blocks["atoms"]["x"].tobytes() == \
        TrajectoryReader(served["root"] / "big.mrec")[33].blocks["atoms"]["x"].tobytes()


def test_a_missing_remote_record_is_a_store_error(served):
    url, opts, _ = url_of(served, "s3", "nothing.mrec.zip")
    with pytest.raises(StoreError):
        TrajectoryReader(url, storage_options=opts)
    with pytest.raises(StoreError):
        read_record(f"{served['http'].url}/nothing.mrec")


# -- writes are refused --------------------------------------------------------------------------------

def test_every_write_to_a_url_is_refused_citing_the_chapter(served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url, opts, _ = url_of(served, "s3", "new.mrec")
    src = FIXTURES / "whole_record.mrec"
    frame = TrajectoryReader(src)[0]
    attempts = [
        lambda: TrajectoryWriter.create(url, frame),
        lambda: TrajectoryWriter.open("s3://records/whole_record.mrec"),
        lambda: write_record(url, meta={}, frame=frame),
        lambda: pack("s3://records/whole_record.mrec"),
        lambda: unpack(FIXTURES / "whole_record.mrec.zip", out="s3://records/y.mrec"),
        lambda: unpack("s3://records/whole_record.mrec.zip"),
        lambda: repair("s3://records/whole_record.mrec"),
        lambda: repack(src, "s3://records/z.mrec.zip"),
        lambda: RemoteFileSystem(f"{served['http'].url}/whole_record.mrec").write_at(
            f"{served['http'].url}/whole_record.mrec/zarr.json", 0, b"x"),
    ]
    for attempt in attempts:
        with pytest.raises(RefusalError) as e:
            attempt()
        assert e.value.kind == "remote_read_only"
        assert "read, never appended to" in str(e.value)
    assert list(tmp_path.iterdir()) == []                   # nothing written locally under a URL-like name
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "mrec", "repair", "s3://records/whole_record.mrec"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "never appended to" in p.stderr


def test_pack_streams_a_closed_record_up_to_s3_without_a_temp_file(served, tmp_path):
    s3 = served["s3"]
    opts = dict(s3.storage_options, default_block_size=5 * MiB)       # S3's smallest multipart part
    src = big_record(tmp_path / "up.mrec", atoms=5000, frames=100)        # 12 MB: parts of 5 MiB (the last merged)
    expect = pack(src, out=tmp_path / "local.mrec.zip", keep=True).read_bytes()
    (tmp_path / "local.mrec.zip").unlink()
    listing = sorted(p.name for p in tmp_path.iterdir())
    n = s3.count()
    url = pack(src, out="s3://records/up.mrec.zip", keep=True, storage_options=opts)
    log = s3.since(n)
    assert url == "s3://records/up.mrec.zip"
    assert sorted(p.name for p in tmp_path.iterdir()) == listing         # no temporary file, source kept
    assert any(g.method == "POST" and g.path.endswith("?uploads") for g in log)            # multipart
    assert sum(1 for g in log if g.method == "PUT" and "partNumber=" in g.path) >= 2
    import s3fs
    assert s3fs.S3FileSystem(**s3.storage_options).cat_file("records/up.mrec.zip") == expect  # pack's bytes
    r = TrajectoryReader(url, storage_options=s3.storage_options)
    assert r[99].blocks["atoms"]["z"].tobytes() == TrajectoryReader(src)[99].blocks["atoms"]["z"].tobytes()
    with pytest.raises(RefusalError) as e:
        pack(src, out=url, keep=True, storage_options=opts)
    assert e.value.kind == "exists"
    small = big_record(tmp_path / "small.mrec", atoms=10, frames=5)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MREC_STORAGE_OPTIONS=json.dumps(s3.storage_options))
    p = subprocess.run([sys.executable, "-m", "mrec", "pack", str(small), "s3://records/small.mrec.zip"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "s3://records/small.mrec.zip" in p.stdout, p.stderr
    assert not small.exists()                                               # pack's default: the source goes
    assert len(TrajectoryReader("s3://records/small.mrec.zip", storage_options=s3.storage_options)) == 5


def test_repack_reads_its_source_from_a_url(served, tmp_path):
    for kind in KINDS:
        url, opts, _ = url_of(served, kind, "whole_record.mrec.zip")
        out = repack(url, tmp_path / f"{kind}.mrec.zip", profile="archive", storage_options=opts)
        local = served["root"] / "whole_record.mrec"
        assert {k: v for k, v in describe(out).items() if k != "arrays"} == \
            {k: v for k, v in describe(local).items() if k != "arrays"}
        assert validate(out, deep=True).ok


def test_a_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)       # as if `pip install 'mrec[remote]'` never ran
    with pytest.raises(MrecError) as e:
        require("fsspec", "remote")
    assert e.value.kind == "missing_extra" and "mrec[remote]" in str(e.value)
    with pytest.raises(MrecError) as e:
        TrajectoryReader("s3://records/whole_record.mrec.zip")
    assert "mrec[remote]" in str(e.value)
