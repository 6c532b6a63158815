"""Where ``TrajectoryWriter.append`` spends its time, stage by stage (issue 16).

    PYTHONPATH=. python tools/profile_append.py [--atoms 3000] [--frames 200] [--repeat 3] [--threads 1]
                                                [--extend K]

Writes the bench's synthetic workload (``tools/bench/``: a random walk, ``x y z`` f64 at
p = 1e-3) with ``append`` one frame at a time (``durable=False``, the automatic flush every K
frames as in the bench) and times, in the same process, the writer's stages: planning
(``RunPlanner.plan_run``: validation, rounding, change detection), buffering (``RowBuffer.apply_run``), and the
commit (``Committer.commit``) with its parts — ``ShardedAppender.land`` (encoding, ``pwrite``), the
encoding alone (``encode_all`` chunk by chunk, the batch encoder's calls in the calling thread:
``codecs.batch.batch_encoder`` as the appender calls it; ahead on the pool is not counted), the arrays' ``zarr.json``
publishes and every atomic replace (``DirectoryStore.set``).  Each stage is given as wall time
and as this thread's CPU time: on a loaded machine the CPU column is the stable one, and wall
minus CPU is waiting (the file system, or the other core).  The codec ceiling (round + shuffle +
zstd + crc32c of the same inner chunks, no I/O, ``tools/bench/baselines.py``'s ``Ceiling``) is printed
first.  The best of ``--repeat`` runs (by CPU time) is shown.
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.bench.baselines import Ceiling  # noqa: E402
from tools.bench.runs import threads_env  # noqa: E402
from tools.bench.workloads import schema, synthetic  # noqa: E402

import mrec  # noqa: E402
from mrec.record.trajectory import land as trajectory_land  # noqa: E402
from mrec.record.trajectory.buffer import RowBuffer  # noqa: E402
from mrec.record.trajectory.batch_plan import RunPlanner  # noqa: E402
from mrec.zarr import append as zarr_append  # noqa: E402
from mrec.zarr.stores import directory as zarr_store  # noqa: E402

STAGES = [  # (owner, attribute, label): timed by wrapping the attribute
    (RunPlanner, "plan_run", "plan (validate, round, change-detect)"),
    (RowBuffer, "apply_run", "buffer (apply the plan, append rows)"),
    (mrec.TrajectoryWriter, "_commit", "commit (automatic flushes), of which"),
    (zarr_append.ShardedAppender, "land", "  land: encode, pwrite"),
    (zarr_append, "encode_all", "    encode (shuffle, zstd, crc32c)"),
    (None, "batch", "    batch encode (shuffle, zstd, crc32c)"),
    (trajectory_land._Writer, "publish", "  publish each array's zarr.json"),
    (zarr_store.DirectoryStore, "set", "  atomic replaces (zarr.json)"),
]


def _timed(fn, label: str, acc: dict):
    """``fn`` adding its wall and thread CPU time to ``acc[label]``."""
    def timed(*a, **k):
        w, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            tw, tc = acc.get(label, (0.0, 0.0))
            acc[label] = (tw + time.perf_counter() - w, tc + time.thread_time() - c)
    return timed


def _wrap(owner, name: str, label: str, acc: dict) -> None:
    if owner is None:               # the batch encoders the appenders make (codecs.batch.batch_encoder)
        make = zarr_append.batch_encoder

        def made(*a, **k):
            enc = make(*a, **k)
            return None if enc is None else _timed(enc, label, acc)
        zarr_append.batch_encoder = made
        return
    setattr(owner, name, _timed(getattr(owner, name), label, acc))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--atoms", type=int, default=3000)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1", help="MREC_THREADS for the writer (default 1)")
    ap.add_argument("--extend", type=int, default=0, metavar="K",
                    help="write with extend() of lists of K frames instead of append() (0: append)")
    ap.add_argument("--dir", default=None, help="where the store is written (default: the system temp directory)")
    args = ap.parse_args(argv)
    wl = synthetic(args.atoms, args.frames, "synthetic")
    frames = [wl.frame(f) for f in range(wl.frames)]
    n = len(frames)
    ceil = Ceiling(wl, wl.p)
    cw = []
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.thread_time()
        ceil.write()
        cw.append((time.perf_counter() - w0, time.thread_time() - c0))
    acc: dict = {}
    for owner, name, label in STAGES:
        _wrap(owner, name, label, acc)
    work = Path(tempfile.mkdtemp(prefix="mrec-profile-", dir=args.dir))
    runs = []
    try:
        for _ in range(args.repeat):
            path = work / "p.mrec"
            if path.exists():
                shutil.rmtree(path)
            acc.clear()
            gc.collect()
            with threads_env(args.threads):
                w = mrec.TrajectoryWriter.create(path, schema(wl.atoms, wl.p), durable=False)
                w0, c0 = time.perf_counter(), time.thread_time()
                if args.extend:
                    for f0 in range(0, n, args.extend):
                        w.extend(frames[f0:f0 + args.extend])
                else:
                    for f in frames:
                        w.append(f)
                runs.append((time.perf_counter() - w0, time.thread_time() - c0, dict(acc)))
                w.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    wall, cpu, stages = min(runs, key=lambda r: r[1])
    cwall, ccpu = min(cw, key=lambda r: r[1])
    per = 1e3 / n
    how = f"extend (lists of {args.extend} frames)" if args.extend else "append"
    print(f"{how} of {wl.desc}, MREC_THREADS={args.threads}, flush every {w.flush_every} frames; "
          f"best of {args.repeat}; ms a frame")
    print(f"  {'':40s} {'wall':>8s} {'cpu':>8s}")
    print(f"  {'codec ceiling (round, shuffle, zstd, crc)':40s} {cwall * per:8.3f} {ccpu * per:8.3f}")
    print(f"  {how.split()[0] + ', total':40s} {wall * per:8.3f} {cpu * per:8.3f}   ceiling/{how.split()[0]} {ccpu / cpu:.2f}x (cpu), "
          f"{cwall / wall:.2f}x (wall)")
    for _owner, _name, label in STAGES:
        sw, sc = stages.get(label, (0.0, 0.0))
        print(f"  {label:40s} {sw * per:8.3f} {sc * per:8.3f}")
    accounted = sum(stages.get(label, (0, 0))[1] for _o, _n, label in STAGES[:3])
    print(f"  {'the rest (append, checks, counting)':40s} {'':8s} {(cpu - accounted) * per:8.3f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
