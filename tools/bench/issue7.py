"""Issue 7's sub-commands (throughput, size, open, memory, profile) and its targets table.

Each run stores its key ratios in ``RESULTS``; ``targets`` prints the issue's targets from them, met
or not.
"""
from __future__ import annotations

import cProfile
import io
import math
import os
import pstats
import shutil
import time
import tracemalloc
from pathlib import Path

import numpy as np

import mrec
from mrec.zarr.array import Array
from mrec.zarr.codecs.sharding import EMPTY
from mrec.zarr.stores.directory import DirectoryStore

from .baselines import Ceiling
from .common import COLS, have, note, pct, row
from .peers import xtc_digits, xtc_read, xtc_write, zarr_read, zarr_write
from .runs import mrec_random, mrec_read_seq, mrec_write, threads_env
from .workloads import Workload, layout, schema, synthetic


RESULTS: dict[str, float] = {}      # key ratios for the targets table


def throughput(wl: Workload, args, work: Path) -> None:
    rpc, shard = layout(wl.atoms)
    k = mrec.TrajectoryWriter.create(work / "k.mrec", schema(wl.atoms, wl.p), durable=False)
    K = k.flush_every
    k.close()
    shutil.rmtree(work / "k.mrec")
    print(f"\n== {wl.name}: {wl.desc}")
    print(f"   layout: {rpc} rows/inner chunk ({rpc // wl.atoms} frames), {shard // rpc} chunks/shard, automatic flush "
          f"every {K} frames; input {wl.mb:.1f} MB of f64; best of {args.repeat * (3 if wl.mb < 20 else 1)}")
    ceil = Ceiling(wl, wl.p)
    path = work / f"{wl.name}.mrec"
    nf = min(wl.frames, args.flush_frames)
    sub = wl.head(nf)
    ceil_sub = Ceiling(sub, wl.p)
    # each repetition times a baseline and its mrec figure back to back; best of each is kept
    t_cw = t_w = t_cw_sub = t_wf = t_cr = t_seq = t_col = t_e = t_e2 = math.inf
    reps = args.repeat * (3 if wl.mb < 20 else 1)      # short runs are the noisiest: more of them
    ncpu = os.cpu_count() or 1
    for _ in range(reps):
        t_cw = min(t_cw, ceil.write())
        t_w = min(t_w, mrec_write(wl, path, wl.p))
        t_e = min(t_e, mrec_write(wl, work / "extend.mrec", wl.p, batch=K))
        if ncpu > 1:
            t_e2 = min(t_e2, mrec_write(wl, work / "extend.mrec", wl.p, batch=K, threads=ncpu))
        t_cw_sub = min(t_cw_sub, ceil_sub.write())
        t_wf = min(t_wf, mrec_write(sub, work / "flush.mrec", wl.p, flush_each=True))
        t_cr = min(t_cr, ceil.read())
        with threads_env(1):                          # the rows say MREC_THREADS=1: issue16 times the pool
            a, b = mrec_read_seq(path)
        t_seq, t_col = min(t_seq, a), min(t_col, b)
    shutil.rmtree(work / "flush.mrec", ignore_errors=True)
    shutil.rmtree(work / "extend.mrec", ignore_errors=True)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, wl.frames, size=args.random)
    with threads_env(1):
        lat, one = mrec_random(path, idx, ceil)
    w_ceil, r_ceil = wl.mb / t_cw, wl.mb / t_cr
    w_mrec, w_flush = wl.mb / t_w, sub.mb / t_wf
    w_ext = wl.mb / t_e
    w_ext2 = wl.mb / t_e2 if t_e2 < math.inf else None
    seq, col = wl.mb / t_seq, wl.mb / t_col
    # the peers first: the extend rows print their ratio to zarr-python
    zroot = work / f"{wl.name}.zarr"
    zf = min(wl.frames, args.peer_frames or wl.frames)
    zsub = wl.head(zf)
    w_zarr = zr_seq = None
    zlat = None
    if have("zarr"):
        t_z = zarr_write(zsub, zroot, K)
        w_zarr = zsub.mb / t_z
    else:
        note("zarr-python not installed: peer skipped")
    xfn = work / f"{wl.name}.xtc"
    w_xtc = x_seq = None
    xlat = None
    if have("MDAnalysis"):
        digits = xtc_digits(wl.p)
        t_x = xtc_write(wl, xfn, digits)
        w_xtc = wl.mb / t_x
    else:
        note("MDAnalysis not installed: XTC peer skipped")

    def vs(w):
        return ("/zarr", w / w_zarr if w_zarr else None), ("/XTC", w / w_xtc if w_xtc else None)

    print(f"  {'':<44} {'':>14}  ratios measured in this run (mrec rows: MREC_THREADS=1 unless stated)")
    print("  write")
    row("ceiling (round+shuffle+zstd3+crc)", w_ceil)
    row("mrec, automatic flush", w_mrec, ("of ceiling", w_mrec / w_ceil))
    row(f"mrec, flush() per frame ({nf} fr)", w_flush, ("of ceiling", w_flush / (sub.mb / t_cw_sub)))
    row(f"mrec, extend() (batches of {K} frames)", w_ext, ("of ceiling", w_ext / w_ceil), *vs(w_ext))
    if w_ext2 is not None:
        row(f"mrec, extend(), MREC_THREADS={ncpu}", w_ext2, ("of ceiling", w_ext2 / w_ceil), *vs(w_ext2))
    if w_zarr is not None:
        # a writer at the codec ceiling is ceiling/zarr times zarr-python: the most any single-threaded
        # writer of these chunks can reach against it in this run
        row(f"zarr-python, same layout ({zf} fr)", w_zarr, ("mrec/zarr", w_mrec / w_zarr),
            ("ceiling/zarr", w_ceil / w_zarr))
    if w_xtc is not None:
        row(f"XTC (MDAnalysis, {digits} digits nm)", w_xtc, ("mrec/XTC", w_mrec / w_xtc))
    print("  read")
    row("ceiling (crc+zstd decode+unshuffle)", r_ceil)
    row("mrec sequential, r[i] per frame", seq, ("of ceiling", seq / r_ceil))
    row("mrec sequential, r.column() x3", col, ("of ceiling", col / r_ceil))
    if w_zarr is not None:
        zidx = idx[idx < zf]
        zrf = min(zf, args.peer_read_frames)
        t_zs, zlat = zarr_read(zroot, wl.atoms, zrf, zidx)
        zr_seq = zsub.head(zrf).mb / t_zs
        row(f"zarr-python sequential per frame ({zrf} fr)", zr_seq, ("mrec/zarr", seq / zr_seq),
            ("ceiling/zarr", r_ceil / zr_seq))
        RESULTS[f"{wl.name}.rceiling/zarr"] = r_ceil / zr_seq
    if w_xtc is not None:
        t_xo, t_xs, xlat = xtc_read(xfn, idx)
        x_seq = wl.mb / t_xs
        row("XTC sequential (MDAnalysis)", x_seq, ("mrec/XTC", seq / x_seq))
    print("  random frame (x, y, z of one frame)        p50 ms    p99 ms")
    p50, p99, o50 = pct(lat, 50), pct(lat, 99), pct(one, 50)
    print(f"  {'decode its 3 inner chunks (ceiling)':<40} {o50:8.3f}  {pct(one, 99):8.3f}")
    print(f"  {'mrec r[i]':<40} {p50:8.3f}  {p99:8.3f}   p50 {p50 / o50:5.2f}x the chunk decode")
    z50 = None
    if zlat:
        z50 = pct(zlat, 50)
        print(f"  {'zarr-python':<40} {z50:8.3f}  {pct(zlat, 99):8.3f}   zarr/mrec p50 {z50 / p50:5.2f}x")
    if xlat:
        print(f"  {'XTC r[i] (offsets, open ' + f'{t_xo * 1e3:.0f} ms)':<40} {pct(xlat, 50):8.3f}  {pct(xlat, 99):8.3f}   "
              f"XTC/mrec p50 {pct(xlat, 50) / p50:5.2f}x")
    RESULTS[f"{wl.name}.write/ceiling"] = w_mrec / w_ceil
    RESULTS[f"{wl.name}.extend/ceiling"] = w_ext / w_ceil
    if w_zarr:
        RESULTS[f"{wl.name}.extend/zarr"] = w_ext / w_zarr
        RESULTS[f"{wl.name}.ceiling/zarr"] = w_ceil / w_zarr
    if w_xtc and w_ext2 is not None:
        RESULTS[f"{wl.name}.extend2/xtc"] = w_ext2 / w_xtc
    RESULTS[f"{wl.name}.read/ceiling"] = seq / r_ceil
    RESULTS[f"{wl.name}.column/ceiling"] = col / r_ceil
    RESULTS[f"{wl.name}.random/chunk"] = p50 / o50
    if w_zarr:
        RESULTS[f"{wl.name}.write/zarr"] = w_mrec / w_zarr
    if w_xtc:
        RESULTS[f"{wl.name}.write/xtc"] = w_mrec / w_xtc
        RESULTS[f"{wl.name}.read/zarr"] = seq / zr_seq
        if z50:
            RESULTS[f"{wl.name}.random/zarr"] = z50 / p50
    for p in (path, zroot):
        shutil.rmtree(p, ignore_errors=True)
    if xfn.exists():
        xfn.unlink()


# -- size ---------------------------------------------------------------------------------------

def mrec_sizes(path: Path, atom_frames: int) -> tuple[float, float]:
    """(encoded inner chunks, column files) in bytes/atom/frame."""
    store = DirectoryStore(str(path))
    chunks = files = 0
    for c in COLS:
        arr = Array.open(store, f"trajectory/atoms/{c}")
        for key in store.list(f"trajectory/atoms/{c}/c/"):
            idx = arr.shard_index(key)
            chunks += int(idx.nbytes[idx.offsets != EMPTY].sum())
            files += store.size(key)
    return chunks / atom_frames, files / atom_frames


def size(wls: list[Workload], work: Path, cap: int) -> None:
    print("\n== size: bytes/atom/frame (x, y, z); chunks = encoded inner chunks, files = + the fixed shard index")
    print("   p is in A for the synthetic profiles and in nm for real data (mrec stores A: p_A = 10 p_nm);")
    print("   XTC at the same grid (its precision in decimal digits of nm)")
    print("   compact = the opt-in writer profile (16 frames per inner chunk, zstd 19), its own MB/s of input")
    print(f"  {'profile':<10} {'frames':>6} {'p':>6} {'unit':>4} {'mrec chunks':>11} {'files':>7} {'XTC':>7} "
          f"{'mrec/XTC':>8} {'compact':>8} {'c/XTC':>6} {'c MB/s':>7}")
    xtc = have("MDAnalysis")
    if not xtc:
        note("MDAnalysis not installed: XTC column skipped")
    for wl in wls:
        n = max(1, min(wl.frames, cap // wl.atoms))
        sub = wl.head(n)
        for p in (1e-2, 1e-3, 1e-4):
            p_a = p * 10 if wl.real else p
            path = work / "size.mrec"
            mrec_write(sub, path, p_a)
            ch, fi = mrec_sizes(path, n * wl.atoms)
            shutil.rmtree(path)
            t_c = mrec_write(sub, path, p_a, profile="compact")
            cc, _ = mrec_sizes(path, n * wl.atoms)
            shutil.rmtree(path)
            xs = ratio = cratio = ""
            if xtc:
                fn = work / "size.xtc"
                xtc_write(sub, fn, xtc_digits(p_a))
                xb = fn.stat().st_size / (n * wl.atoms)
                fn.unlink()
                xs, ratio, cratio = f"{xb:7.2f}", f"{ch / xb:8.2f}", f"{cc / xb:6.2f}"
                if wl.real and p == 1e-3:
                    RESULTS[f"{wl.name}.compact/xtc"] = cc / xb
            print(f"  {wl.name:<10} {n:>6} {p:>6g} {'nm' if wl.real else 'A':>4} {ch:11.2f} {fi:7.2f} {xs:>7} {ratio:>8} "
                  f"{cc:8.2f} {cratio:>6} {sub.mb / t_c:7.1f}")


# -- open time ------------------------------------------------------------------------------------

def open_time(work: Path, quick: bool) -> None:
    ns = (10, 1_000, 10_000) if quick else (10, 1_000, 100_000)
    print(f"\n== open: TrajectoryReader(path) on a regular block (10 atoms, step progression), best of 7")
    wl = synthetic(10, ns[-1], "open")
    base = None
    for n in ns:
        path = work / f"open{n}.mrec"
        mrec_write(wl.head(n), path, 1e-3)
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            r = mrec.TrajectoryReader(path)
            assert len(r) == n
            times.append(time.perf_counter() - t0)
            r.close()
        t = min(times)
        base = base or t
        print(f"  {n:>7} frames  {t * 1e3:7.2f} ms   {t / base:5.2f}x the 10-frame open")
        shutil.rmtree(path)
    RESULTS["open.ratio"] = t / base
    RESULTS["open.n"] = ns[-1]


# -- writer memory ---------------------------------------------------------------------------------

def memory(work: Path, quick: bool) -> None:
    marks = (5_000, 20_000) if quick else (5_000, 20_000, 100_000)
    wl = synthetic(100, marks[-1], "memory")
    path = work / "mem.mrec"
    w = mrec.TrajectoryWriter.create(path, schema(wl.atoms, 1e-3), durable=False)
    window = 2 * w.flush_every                 # every window holds two automatic flushes
    print(f"\n== memory: writer peak (tracemalloc: Python + numpy allocations) against nstep, {wl.atoms} atoms, "
          f"automatic flush every {w.flush_every} frames; peak over the {window} frames before each mark")
    tracemalloc.start()
    prev = 0
    peaks = []
    for m in marks:
        for f in range(prev, m - window):
            w.append(wl.frame(f))
        tracemalloc.reset_peak()
        for f in range(max(prev, m - window), m):
            w.append(wl.frame(f))
        cur, peak = tracemalloc.get_traced_memory()
        peaks.append(peak)
        print(f"  nstep {m:>7}  peak {peak / 2**20:7.2f} MiB  held {cur / 2**20:7.2f} MiB   "
              f"{peak / peaks[0]:5.2f}x the first")
        prev = m
    w.close()
    tracemalloc.stop()
    shutil.rmtree(path)
    RESULTS["memory.ratio"] = peaks[-1] / peaks[0]


# -- profile --------------------------------------------------------------------------------------

# self time of these counts as codec / I/O work; everything else is bookkeeping
CODEC_FUNCS = ("'compress' of 'zstandard", "built-in method crc32c._crc32c.crc32c", "shuffle.py", "pwrite",
               "posix.replace", "'rint'", "'tobytes'")


def profile(work: Path, quick: bool, top: int = 18) -> None:
    wl = synthetic(100, 10_000 if quick else 100_000, "profile")
    print(f"\n== profile: cProfile of the small-frame writer ({wl.atoms} atoms, {wl.frames} frames, flush_every=1000)")
    ceil = Ceiling(wl, 1e-3)
    t_c = min(ceil.write() for _ in range(3))
    # the producer's own cost inside every timed write: building the frame dicts (mrec_write builds
    # them inside the timing, as a simulation code would); not mrec's bookkeeping
    t_dicts = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for f in range(wl.frames):
            wl.frame(f)
        t_dicts = min(t_dicts, time.perf_counter() - t0)
    path = work / "prof.mrec"
    pr = cProfile.Profile()
    pr.enable()
    t = mrec_write(wl, path, 1e-3, flush_every=1000)
    pr.disable()
    t_plain = mrec_write(wl, path, 1e-3, flush_every=1000)
    shutil.rmtree(path)
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(top)
    lines = s.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    for line in lines[start:]:
        if line.strip():
            print("  " + line.replace(str(Path(mrec.__file__).parent.parent) + "/", "")[:150])
    codec = sum(v[2] for k, v in st.stats.items() if any(c in f"{k[0]}:{k[2]}" for c in CODEC_FUNCS))
    total = sum(v[2] for v in st.stats.values())
    print(f"  without the profiler: {t_plain:.2f} s ({wl.frames / t_plain:.0f} frames/s); codec ceiling of the same "
          f"bytes {t_c:.2f} s = {t_c / t_plain:.0%} of it")
    print(f"  under the profiler: {codec / total:.0%} of self time in codec / write calls, "
          f"{1 - codec / total:.0%} in Python bookkeeping")
    RESULTS["small.bookkeeping"] = 1 - t_c / t_plain
    # the same frames through extend(), in batches of the flush interval
    pr = cProfile.Profile()
    pr.enable()
    mrec_write(wl, path, 1e-3, flush_every=1000, batch=1000)
    pr.disable()
    t_ext = min(mrec_write(wl, path, 1e-3, flush_every=1000, batch=1000) for _ in range(2))
    shutil.rmtree(path)
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(8)
    print(f"\n  the same frames through extend() in batches of 1000 (one batch per flush):")
    lines = s.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    for line in lines[start:]:
        if line.strip():
            print("  " + line.replace(str(Path(mrec.__file__).parent.parent) + "/", "")[:150])
    print(f"  without the profiler: {t_ext:.2f} s ({wl.frames / t_ext:.0f} frames/s, {t_plain / t_ext:.1f}x append); "
          f"codec ceiling {t_c:.2f} s = {t_c / t_ext:.0%} of it")
    own = t_ext - t_dicts
    print(f"  of which the producer's frame dicts {t_dicts:.2f} s; mrec's own {own:.2f} s, the codec ceiling "
          f"{t_c / own:.0%} of it, {1 - t_c / own:.0%} outside the codecs")
    RESULTS["small.bookkeeping.extend"] = 1 - t_c / t_ext
    RESULTS["small.bookkeeping.extend.own"] = 1 - t_c / own


# -- targets --------------------------------------------------------------------------------------

def targets() -> None:
    R = RESULTS
    print("\n== targets (issue 7), from the numbers above")

    def line(what, value, ok, detail):
        status = "met" if ok else "NOT met"
        print(f"  {what:<58} {value:<22} {status}")
        if detail:
            print(f"      {detail}")

    def each(suffix):
        return {k.split(".")[0]: v for k, v in R.items() if k.endswith(suffix)}

    for suffix, what, test, fmt in (
            (".write/ceiling", "writer >= 0.8 x write ceiling", lambda v: v >= 0.8, "{:.2f}x"),
            (".write/zarr", "writer >= 10 x zarr-python same layout", lambda v: v >= 10, "{:.1f}x"),
            (".extend/ceiling", "writer, extend() >= 0.8 x write ceiling", lambda v: v >= 0.8, "{:.2f}x"),
            (".extend/zarr", "writer, extend() >= 10 x zarr-python same layout", lambda v: v >= 10, "{:.1f}x"),
            (".write/xtc", "writer >= XTC write (one core)", lambda v: v >= 1, "{:.2f}x"),
            (".extend2/xtc", "writer, extend() on every core >= XTC write", lambda v: v >= 1, "{:.2f}x"),
            (".read/zarr", "reader >= 5 x zarr-python, sequential", lambda v: v >= 5, "{:.1f}x"),
            (".random/zarr", "reader >= 5 x zarr-python, random", lambda v: v >= 5, "{:.1f}x"),
            (".read/ceiling", "sequential read (r[i]) >= 0.8 x read ceiling", lambda v: v >= 0.8, "{:.2f}x"),
            (".column/ceiling", "sequential read (column()) >= 0.8 x read ceiling", lambda v: v >= 0.8, "{:.2f}x"),
            (".random/chunk", "random frame p50 within 10 % of one chunk decode", lambda v: v <= 1.1, "{:.2f}x")):
        vals = each(suffix)
        if not vals:
            continue
        ok = all(test(v) for v in vals.values())
        line(what, f"{min(vals.values()):.2f}..{max(vals.values()):.2f}", ok,
             ", ".join(f"{k} {fmt.format(v)}" for k, v in vals.items()))
        if suffix.endswith("/zarr") and suffix.startswith((".write", ".extend", ".read")) and not ok:
            who = "reader" if suffix.startswith(".read") else "writer"
            bound = each(".rceiling/zarr" if who == "reader" else ".ceiling/zarr")
            print(f"      bound: a single-threaded {who} at the codec ceiling would be "
                  + ", ".join(f"{k} {v:.1f}x" for k, v in bound.items()) + " zarr-python")
    compact = each(".compact/xtc")
    if compact:
        protein = {k: v for k, v in compact.items() if k == "dcd"}
        solvated = {k: v for k, v in compact.items() if k != "dcd"}
        for what, vals, limit in (("compact <= 1.0 x XTC bytes, protein (dcd), 1e-3 nm", protein, 1.0),
                                  ("compact <= 1.35 x XTC bytes, solvated (xtc, trr), 1e-3 nm", solvated, 1.35)):
            if vals:
                line(what, f"{max(vals.values()):.2f}x", all(v <= limit for v in vals.values()),
                     ", ".join(f"{k} {v:.2f}x" for k, v in vals.items()))
    if "open.ratio" in R:
        line(f"open at {R['open.n']} frames <= 1.5 x open at 10", f"{R['open.ratio']:.2f}x", R["open.ratio"] <= 1.5, "")
    if "memory.ratio" in R:
        line("writer memory flat in nstep (last / first segment peak)", f"{R['memory.ratio']:.2f}x",
             R["memory.ratio"] <= 1.5, "")
    if "small.bookkeeping" in R:
        b = R["small.bookkeeping"]
        line("small frames not dominated by Python bookkeeping (append)", f"{b:.0%} outside codecs", b < 0.5, "")
    if "small.bookkeeping.extend" in R:
        b = R["small.bookkeeping.extend"]
        line("small frames not dominated by Python bookkeeping (extend)", f"{b:.0%} outside codecs", b < 0.5,
             "the producer's frame dicts included")
    if "small.bookkeeping.extend.own" in R:
        b = R["small.bookkeeping.extend.own"]
        line("  the same, mrec's own time (frame dicts excluded)", f"{b:.0%} outside codecs", b < 0.5, "")
