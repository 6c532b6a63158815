"""Requests a remote record costs, counted by the servers themselves (issue 15, part 2).

    .venv/bin/python tools/bench_remote.py        # needs the remote extra and moto[server] (test extra)

Starts the test servers of spec_tests/servers.py on 127.0.0.1 — a stdlib HTTP server honouring Range
and moto's S3 in server mode — writes a record (3000 atoms x 60 frames, x y z f64; and one of 5000
atoms x 80 frames for the scan), in both forms, and prints for each server and form: the requests to
open it (TrajectoryReader), to read a random frame once the shard indexes it touches are cached, and
to read every frame in order, with the sizes of the scan's requests.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "spec_tests"))

import mrec  # noqa: E402
from servers import http_server, s3_server, upload  # noqa: E402

MiB = 1024 * 1024


def record(path: Path, atoms: int, frames: int) -> Path:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    rng = np.random.default_rng(0)
    with mrec.TrajectoryWriter.create(path, s, durable=False) as w:
        for i in range(frames):
            w.append({"blocks": {"atoms": {c: rng.normal(size=atoms) for c in "xyz"}}}, step=i)
    return path


def measure(srv, url: str, opts: dict) -> tuple:
    n = srv.count()
    r = mrec.TrajectoryReader(url, storage_options=opts)
    opened = srv.count() - n
    r[0]
    per = []
    for i in (41, 17, 55, 29):
        n = srv.count()
        r[i]
        per.append(srv.count() - n)
    return opened, max(per)


def scan(srv, url: str, opts: dict) -> tuple:
    r = mrec.TrajectoryReader(url, storage_options=opts)
    n = srv.count()
    for i in range(len(r)):
        r[i]
    got = [g for g in srv.since(n) if g.method == "GET"]
    sizes = [g.length for g in got if g.length]
    return len(got), sum(1 for s in sizes if s >= MiB), statistics.median(sizes) / MiB if sizes else 0.0


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="mrec-remote-"))
    http, s3 = http_server(work), s3_server()
    try:
        record(work / "big.mrec", 3000, 60)
        record(work / "scan.mrec", 5000, 80)
        for n in ("big", "scan"):
            mrec.pack(work / f"{n}.mrec", keep=True)
        for p in sorted(work.iterdir()):
            upload(s3, "bench", p, p.name)
        print("mrec bench_remote: requests counted by the servers (HTTP: stdlib server with Range; S3: moto)")
        print("  record: 3000 atoms x 60 frames, x y z f64 (reference extents); scan: 5000 atoms x 80 frames")
        print(f"  {'server':6s} {'form':10s} {'open':>5s} {'random r[i]':>12s} {'scan GETs':>10s} "
              f"{'>= 1 MiB':>9s} {'median MiB':>11s} {'scan data MiB':>14s}")
        data = sum(os.path.getsize(p) for p in (work / "scan.mrec/trajectory/atoms").rglob("c/*")) / MiB
        for name, srv, base, opts in (("http", http, http.url, {}), ("s3", s3, "s3://bench", s3.storage_options)):
            for form in (".mrec.zip", ".mrec"):
                opened, rand = measure(srv, f"{base}/big{form}", opts)
                gets, big, med = scan(srv, f"{base}/scan{form}", opts)
                print(f"  {name:6s} {form:10s} {opened:5d} {rand:12d} {gets:10d} {big:9d} {med:11.2f} {data:14.1f}")
    finally:
        http.stop()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
