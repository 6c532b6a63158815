"""``mrec.dask`` (issue 15, part 3): lazy dask arrays on the inner chunks, read by URL in the workers of a
real ``dask.distributed`` cluster (2 worker processes) from a real S3-compatible server (moto, server mode)."""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

import mrec
import mrec.dask as md
from mrec import TrajectoryReader, TrajectoryWriter
from mrec import pack
from mrec.errors import MrecError, RefusalError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servers import http_server, s3_server, upload  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def record(path: Path, seed: int, atoms=300, frames=70, precision=1e-2) -> Path:
    """A regular block at a precision grid (2^-7 A): every value is k * 2^-7, so sums of values and of
    their squares are exact in float64 and do not depend on the order dask adds them in."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=precision)
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 30, size=(atoms, 3))
    with TrajectoryWriter.create(path, s, durable=False, profile="compact") as w:   # 16 frames a chunk
        for i in range(frames):
            pos += rng.normal(0, 0.3, size=pos.shape)
            w.append({"blocks": {"atoms": {c: pos[:, k].copy() for k, c in enumerate("xyz")}}}, step=i)
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("dask")
    for k in range(10):
        pack(record(r / f"run{k}.mrec", seed=k), keep=True)
    return r


def serial(paths) -> np.ndarray:
    out = []
    for p in paths:
        r = TrajectoryReader(p)
        out.append(np.stack([r.column("atoms", c) for c in "xyz"], axis=-1))
    return np.concatenate(out)


def test_positions_are_lazy_and_chunked_on_inner_chunks(root):
    http = http_server(root)
    try:
        url = f"{http.url}/run3.mrec.zip"
        n = http.count()
        pos = md.positions(url)
        opened = http.count() - n
        assert opened <= 3                                   # metadata only: nothing read until computed
        assert pos.shape == (70, 300, 3) and pos.dtype == np.float64
        assert pos.chunks[0] == (16, 16, 16, 16, 6)          # the compact profile's 16-frame inner chunks
        assert http.count() - n == opened
        got = pos.compute(scheduler="synchronous")
        assert got.tobytes() == serial([root / "run3.mrec"]).tobytes()
        x = md.column(url, "atoms", "x")
        assert x.chunks[0] == pos.chunks[0] and x.shape == (70, 300)
        assert x[17:40].compute(scheduler="synchronous").tobytes() == got[17:40, :, 0].tobytes()
    finally:
        http.stop()


def test_a_ragged_column_is_its_rows_on_inner_chunks():
    src = FIXTURES / "block_ragged.mrec"
    r = TrajectoryReader(src)
    name = next(n for n, b in r.layout.blocks.items() if not b.regular and b.n_updates)
    b = r.layout.blocks[name]
    col = next(iter(b.columns))
    lazy = md.column(src, name, col)
    assert lazy.shape[0] == b.total_rows
    assert lazy.compute(scheduler="synchronous").tobytes() == b.columns[col].read(slice(0, b.total_rows)).tobytes()
    with pytest.raises(RefusalError):
        md.positions(src, name)


def test_a_reader_pickles_by_url_and_options(root):
    r = TrajectoryReader(root / "run1.mrec.zip")
    blob = pickle.dumps(r)
    assert len(blob) < 1000                                  # a path and options, no bytes
    again = pickle.loads(blob)
    assert again[5].blocks["atoms"]["y"].tobytes() == r[5].blocks["atoms"]["y"].tobytes()
    lazy = md.positions(r)
    assert lazy.compute(scheduler="synchronous").tobytes() == serial([root / "run1.mrec"]).tobytes()
    with pytest.raises(TypeError):
        pickle.dumps(TrajectoryReader(None, store=r.store))


def test_mean_and_rmsf_over_10_records_on_a_cluster_equal_numpy_bit_for_bit(root):
    from dask.distributed import Client, LocalCluster
    s3 = s3_server()
    try:
        urls = [upload(s3, "runs", root / f"run{k}.mrec.zip", f"run{k}.mrec.zip") for k in range(10)]
        pos = md.concatenate(urls, storage_options=s3.storage_options)
        assert pos.shape == (700, 300, 3)
        mean = pos.mean(axis=0)
        rmsf = np.sqrt(((pos ** 2).mean(axis=0) - mean ** 2).sum(axis=-1))
        with LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            n = s3.count()
            got_mean, got_rmsf = client.compute([mean, rmsf], sync=True)
            assert s3.count() > n                            # the workers read from the server
            workers = client.run(lambda: __import__("os").getpid())
            assert len(set(workers.values())) == 2
        ref = serial([root / f"run{k}.mrec" for k in range(10)])
        want_mean = ref.mean(axis=0)
        want_rmsf = np.sqrt(((ref ** 2).mean(axis=0) - want_mean ** 2).sum(axis=-1))
        assert got_mean.tobytes() == want_mean.tobytes()
        assert got_rmsf.tobytes() == want_rmsf.tobytes()
    finally:
        s3.stop()


def test_a_missing_dask_extra_names_it(monkeypatch, root):
    monkeypatch.setitem(sys.modules, "dask", None)
    with pytest.raises(MrecError) as e:
        md.positions(root / "run0.mrec")
    assert e.value.kind == "missing_extra" and "mrec[dask]" in str(e.value)
