"""The mrec benchmark suite (GitHub issue 7): every number next to its baseline, measured in the same run.

The machine is shared and noisy, so absolute MB/s mean little; each mrec figure is printed with its
ratio to a baseline timed in the same process a moment before or after:

* ceiling  - the pure codec cost of the same bytes (precision rounding + numcodecs shuffle + zstd 3 +
             crc32c per inner chunk to write; crc32c + zstd decode + unshuffle to read), no I/O, no
             Python bookkeeping beyond one loop over the chunks;
* peers    - zarr-python writing the same sharded layout (resize + write per landing) and reading it;
             XTC through MDAnalysis (XTCWriter, XTCReader, random access by its offsets);
* floors   - (issue16) what a short line could reach with no Python of mrec's around the work the
             layout itself prescribes: the writer's ceiling plus the file I/O of its commit protocol
             (timed in ``mrec.fs.posix``); one-thread ``extend``'s whole run spread over every core
             (no faster than its Python, which the GIL keeps on one core), with the share of the
             cores the 1.5x line needs busy; and a random frame's pread + crc32c + zstd of its inner
             chunks + unshuffle of its rows.

Sub-commands (``--quick`` scales every workload down; ``all`` runs everything and ends with the
issue's targets, met or not):

    throughput [--workload synthetic|small|large|dcd|xtc|trr|all]  write / read / random / peers
    size                                                           bytes/atom/frame, p in 1e-2..1e-4, vs XTC
    open                                                           open time at 10, 10^3, 10^5 frames
    memory                                                         writer peak memory against nstep
    profile                                                        cProfile of the small-frame writer
    issue16                                                        issue 16's targets, each next to its baseline
    issue29                                                        issue 29's six targets (realistic MD frames,
                                                                   public reads, random frames, MD surfaces)
    all

    .venv/bin/python -m tools.bench [--quick] all

Workloads (x, y, z f64 columns of one regular block ``atoms``):

* synthetic - the chapter's: 3000 atoms uniform in a 40 A box, 0.05 A random walk, random atom order;
* small     - 100 atoms (same density), 100k frames (10k with --quick);
* large     - 50k atoms (same density);
* dcd / xtc / trr - real MD trajectories shipped in MDAnalysisTests (PSF+DCD, GRO+XTC, GRO+TRR), in A.

mrec writers run with ``durable=False`` (no fsync: the disk is not what is measured).  Data lives
under a temporary directory in /tmp, removed at the end.  zarr-python and MDAnalysis are optional
(``pip install -e '.[bench]'``): a missing one is skipped with a note.

The parts: ``workloads`` (and the layout mrec gives them), ``baselines`` (the codec ceiling, the
floors), ``runs`` (mrec measured), ``peers`` (zarr-python, XTC), ``issue7`` (its sub-commands and
targets table), ``issue16`` (its sub-command and targets), ``common`` (the printed rows); this module
holds the command line.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from .issue7 import memory, open_time, profile, size, targets, throughput
from .issue16 import issue16
from .issue29 import issue29
from .workloads import workloads


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="scale every workload down (a minute or two)")
    ap.add_argument("--repeat", type=int, default=None, help="best of N for ceilings, writes and reads")
    ap.add_argument("--random", type=int, default=200, help="random frame reads")
    ap.add_argument("--flush-frames", type=int, default=None, help="frames of the flush-per-frame run")
    ap.add_argument("--peer-frames", type=int, default=None, help="frames zarr-python writes (default all; it "
                    "rewrites the whole shard per landing, so its cost grows with the run)")
    ap.add_argument("--peer-read-frames", type=int, default=None, help="frames zarr-python reads one by one")
    ap.add_argument("--dir", default=None, help="where the stores are written (default: the system temp "
                    "directory); e.g. /dev/shm to take the file system's rename cost out of the writer rows")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput", help="write / read / random access, mrec vs ceiling and peers")
    t.add_argument("--workload", default="all", choices=["synthetic", "small", "large", "dcd", "xtc", "trr", "all"])
    sub.add_parser("size", help="bytes/atom/frame against precision, next to XTC")
    sub.add_parser("open", help="open time against nstep")
    sub.add_parser("memory", help="writer peak memory against nstep")
    sub.add_parser("profile", help="cProfile of the small-frame writer")
    sub.add_parser("issue16", help="issue 16's targets (pipelined writer, reads on every core, batch reads)")
    sub.add_parser("issue29", help="issue 29's six targets: realistic MD frames, public reads, random frames, "
                   "MD surfaces")
    sub.add_parser("all", help="everything, then the issue's targets")
    args = ap.parse_args(argv)
    args.repeat = args.repeat or (2 if args.quick else 3)
    args.flush_frames = args.flush_frames or (200 if args.quick else 2000)
    args.peer_read_frames = args.peer_read_frames or (300 if args.quick else 2000)
    warnings.simplefilter("ignore", DeprecationWarning)
    all_names = ["synthetic", "small", "large", "dcd", "xtc", "trr"]
    work = Path(tempfile.mkdtemp(prefix="mrec-bench-", dir=args.dir))
    t0 = time.perf_counter()
    print(f"mrec bench{' --quick' if args.quick else ''}: {args.cmd}; numpy {np.__version__}, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; data under {work}")
    try:
        if args.cmd in ("throughput", "all"):
            names = all_names if args.cmd == "all" or args.workload == "all" else [args.workload]
            for wl in workloads(names, args.quick):
                throughput(wl, args, work)
        if args.cmd in ("size", "all"):
            size(workloads(all_names, args.quick), work, 200_000 if args.quick else 1_000_000)
        if args.cmd in ("open", "all"):
            open_time(work, args.quick)
        if args.cmd in ("memory", "all"):
            memory(work, args.quick)
        if args.cmd in ("profile", "all"):
            profile(work, args.quick)
        if args.cmd == "all":
            targets()
        if args.cmd in ("issue16", "all"):
            issue16(work, args.quick)
        if args.cmd in ("issue29", "all"):
            issue29(work, args.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nrun {time.perf_counter() - t0:.0f} s")

