"""Crash-consistency checker for the trajectory writer (ALICE / CrashMonkey style).

Records writer sessions operation by operation (``mrec.fs.RecordingFileSystem``
with payloads), then materialises the store a crash would leave after *every*
prefix of the operations (``mrec.fs.faulty.CrashSimulator``) and checks it:

* process crash (every operation before the cut reached the OS): the store
  opens with ``TrajectoryReader`` at exactly the last ``nstep`` the OS received;
* power loss (only fsync'd data and fsync'd directory entries are sure; other
  writes dropped, reordered or torn at 512-byte sectors — sampled seeds plus the
  two extremes per cut): the store opens with at least the frames of the last
  completed explicit flush and never more than the last nstep issued;

and, for every state: every visible frame (blocks, masks, box, meta, step, time)
is bit-identical to what was appended; ``TrajectoryWriter.open`` reopens the
store (running the torn-index repair, removing replace temp files), appends two
frames and closes, the result reads back, and ``pack`` would not refuse it.  A
state with a temp file left inside an atomic replace is also given, on a copy,
to ``mrec repair`` alone, after which it must hold no temp file and pack.

The ``overwrite`` session records ``write_record(old)`` then
``write_record(new, overwrite=True)`` in one directory (directory renames
included) and cuts it at every op under both models: after recovery — by a
read, ``mrec repair`` or the next write, in turn — the path holds exactly the
complete old or the complete new record (the new one once its commit rename is
issued / durable), no well-known sibling is left, and a further overwrite
leaves nothing beside the record.

The ``nested-overwrite`` sessions do the same inside a record: a section
(``write_section(frame, overwrite=True)``) and a group (``write_frame(group=
"a/b", overwrite=True)``) replaced, every op of the overwrite cut under both
models, each state given in turn to one entry point of the record (a read of
the record, the frame or the group tree, a write of another section, a
trajectory writer's create, ``mrec repair``, ``pack``): the group holds
exactly the complete old or new version (new once its commit rename is issued /
durable), the rest of the record is intact, no ``.mrec-tmp-`` sibling is left
(nothing at all after a writer, repair or pack) and pack archives none.

With ``--faults`` it checks write errors instead of crashes: each session is
replayed once per injection point (every write, replace, rename, truncate,
remove, mkdir, fsync and directory fsync the writer issues after create /
open; ``mrec.fs.faulty.FaultyFileSystem``), that call failing once with ENOSPC
and once with EIO (a short write first, as a full disk does).  The failing
call must raise ``mrec.WriteError`` carrying the errno and naming a file of
the store; the retries (flush, append, close) must all refuse; the store must
hold every frame the writer reported committed, bit-identically, with no block
vanished, at an nstep the writer issued; and reopen must continue from it.
``--tmpfs`` runs sessions on really full file systems (small tmpfs mounts,
root only), then grows the mount and checks the same.

    python tools/crashcheck.py            # the full run (every session, every cut)
    python tools/crashcheck.py --quick    # a short run (the CI test)
    python tools/crashcheck.py --seeds 16 --strict-metadata --durable-always
    python tools/crashcheck.py --faults [--quick] [--tmpfs]
    python tools/crashcheck.py --reopen [--quick] [--strict-metadata] [--s1-states N] [--cuts N]

``--reopen`` runs a second writer session (``TrajectoryWriter.open``, and ``open(truncate_after_step=...)``)
on sampled crash states of the first -- large-frame sessions (one frame an inner chunk) included --
and checks every cut of it, large writes torn between pages among them (docs/reliability.md,
"Reopen mode").

Prints the states checked per model and every violation; exits 1 on any.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import mrec  # noqa: E402
from mrec.fs.faulty import CrashSimulator, FaultyFileSystem, recording_fs  # noqa: E402
from mrec.archive.pack import plan_pack  # noqa: E402
from mrec.record.integrity.replace import names as replace_names  # noqa: E402
from mrec.check.repair import repair  # noqa: E402
from mrec.record.model.precision import round_to_precision  # noqa: E402

PREC = 1e-3


# -- sessions ------------------------------------------------------------------------

def schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=4)
    s.declare_column("atoms", "x", "f64", precision=PREC)
    s.declare_column("atoms", "y", "f64")
    s.declare_block("ions")                                   # ragged
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_column("ions", "id", "u64")
    s.declare_meta("pe", "f64")
    s.declare_meta("tag", "string", fill="")
    return s


class Plan:
    """A scripted session: actions and the frames they append, with the model of each frame."""

    make_schema = staticmethod(schema)     # the schema the session creates the trajectory with
    compression = None                     # TrajectoryWriter.create(compression=...)

    def __init__(self, name: str, seed: int, nframes: int, *, flush_every: int, explicit_every: int,
                 reopen_at=(), ragged=True, box_every=0, irregular_from=None):
        self.name = name
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.flush_every = flush_every
        self.ragged, self.box_every = ragged, box_every
        self.actions: list = [("create",)]
        step, t = 0, 0.0
        for i in range(nframes):
            frame = self.make_frame(rng, i)
            if irregular_from is not None and i >= irregular_from:
                step += int(rng.integers(1, 5))
                t += float(rng.choice([0.5, 0.25, 1.0]))
            else:
                step += 2
                t += 0.5
            self.actions.append(("append", frame, step, t))
            if explicit_every and (i + 1) % explicit_every == 0:
                self.actions.append(("flush",))
            if i + 1 in reopen_at:
                self.actions.append(("close",))
                self.actions.append(("open",))
        self.actions.append(("close",))

    def make_frame(self, rng, i: int) -> dict:
        ragged, box_every = self.ragged, self.box_every
        blocks = {}
        masks = {}
        if i == 0 or rng.random() < 0.7:
            blocks["atoms"] = {"x": rng.normal(size=4), "y": rng.normal(size=4)}
            if rng.random() < 0.2:
                blocks["atoms"]["y"][rng.integers(4)] = -0.0
        if ragged and (i == 0 or rng.random() < 0.6):
            k = int(rng.integers(0, 6))
            q = rng.normal(size=k)
            if k and rng.random() < 0.3:
                q[rng.integers(k)] = np.nan
            blocks["ions"] = {"q": q, "id": rng.integers(0, 1000, size=k).astype(np.uint64)}
            if k and rng.random() < 0.4:
                m = rng.random(k) < 0.7
                masks["ions"] = {"q": m}
        frame = {"blocks": blocks, "meta": {"pe": float(rng.normal())}}
        if rng.random() < 0.3:
            frame["meta"]["tag"] = f"t{i}"
        if masks:
            frame["masks"] = masks
        if box_every and i % box_every == 0:
            origin = np.zeros(3) if i % (2 * box_every) else np.array([0.5, -0.0, 1.0])
            frame["box"] = mrec.Box(np.eye(3) * (10.0 + i), origin, np.ones(3, bool), True)
        return frame

    @staticmethod
    def extra_frame(k: int) -> dict:
        """The k-th frame check_state appends after reopening a state."""
        return {"blocks": {"atoms": {"x": np.full(4, 0.5 + k), "y": np.full(4, -1.5 - k)},
                           "ions": {"q": np.arange(k + 1, dtype=float), "id": np.arange(k + 1, dtype=np.uint64)}},
                "box": mrec.Box(np.eye(3) * 99.0, np.zeros(3), np.ones(3, bool), True),
                "meta": {"pe": -7.0 - k, "tag": "re"}}


def plans(quick: bool) -> list[Plan]:
    if quick:
        return [Plan("quick", 1, 5, flush_every=2, explicit_every=3, reopen_at=(4,), box_every=2,
                     irregular_from=3)]
    return [
        Plan("regular-auto", 11, 24, flush_every=3, explicit_every=0, ragged=False),
        Plan("ragged-explicit", 12, 20, flush_every=4, explicit_every=3, box_every=5),
        Plan("reopen-irregular", 13, 24, flush_every=2, explicit_every=7, reopen_at=(8, 15), box_every=3,
             irregular_from=10),
        Plan("per-frame-flush", 14, 12, flush_every=1, explicit_every=4, reopen_at=(6,), irregular_from=3),
    ]


# -- the model of what a reader must see ----------------------------------------------------

def expected_frames(frames: list) -> list[dict]:
    """Carry-forward resolution of the appended frames, precision applied."""
    out, cur, box = [], {}, None
    for frame, step, t in frames:
        for name, cols in frame["blocks"].items():
            vals = {c: np.asarray(v) for c, v in cols.items()}
            if name == "atoms":
                vals["x"] = round_to_precision(vals["x"].astype(np.float64), PREC)
            m = (frame.get("masks") or {}).get(name, {})
            cur[name] = (vals, {c: np.asarray(v, bool) for c, v in m.items() if not np.all(v)})
        if "box" in frame:
            box = frame["box"]
        meta = {"pe": frame["meta"]["pe"], "tag": frame["meta"].get("tag", "")}
        out.append({"blocks": dict(cur), "box": box, "meta": meta, "step": step, "time": t})
    return out


def _bits(a) -> bytes:
    a = np.asarray(a)
    return a.dtype.str.encode() + repr(a.shape).encode() + np.ascontiguousarray(a).tobytes()


def compare(r: mrec.TrajectoryReader, want: list[dict], n: int) -> str | None:
    steps = r.steps
    times = r.times
    for i in range(n):
        e = want[i]
        if int(steps[i]) != e["step"] or times is None or _bits(times[i]) != _bits(np.float64(e["time"])):
            return f"frame {i}: step/time {steps[i]}/{None if times is None else times[i]} != {e['step']}/{e['time']}"
        f = r[i]
        if set(f.blocks) != set(e["blocks"]):
            return f"frame {i}: blocks {sorted(f.blocks)} != {sorted(e['blocks'])}"
        for name, (vals, masks) in e["blocks"].items():
            for c, v in vals.items():
                got = f.blocks[name][c]
                if _bits(got) != _bits(v.astype(got.dtype) if v.dtype != got.dtype and v.size == 0 else v):
                    return f"frame {i}: {name}/{c} differs: {got!r} != {v!r}"
            got_m = (f.masks or {}).get(name, {})
            if set(got_m) != set(masks) or any(_bits(got_m[c]) != _bits(masks[c]) for c in masks):
                return f"frame {i}: masks of {name} differ"
        if (e["box"] is None) != (f.box is None):
            return f"frame {i}: box {f.box} != {e['box']}"
        if e["box"] is not None and any(_bits(getattr(f.box, a)) != _bits(np.asarray(getattr(e["box"], a)))
                                        for a in ("vectors", "origin", "boundary")):
            return f"frame {i}: box differs: {f.box} != {e['box']}"
        if _bits(np.float64(f.meta["pe"])) != _bits(np.float64(e["meta"]["pe"])) or f.meta["tag"] != e["meta"]["tag"]:
            return f"frame {i}: meta {f.meta} != {e['meta']}"
    return None


# -- recording ------------------------------------------------------------------------

#: ``--pipeline``: record the sessions with TrajectoryWriter(pipeline=True) (automatic commits on the
#: committer thread, inner chunks encoded ahead while appends go on): the same cuts are checked
PIPELINE = False


def record(plan: Plan, work: str, durable=True):
    """Run the plan on a recording file system; returns (ops, root, appended frames, commits).

    ``commits`` lists, per op index that published a trajectory/zarr.json, its nstep.
    """
    fs = recording_fs()
    root = os.path.join(work, "rec.mrec")
    frames = []
    w = None
    extra = {"pipeline": True} if PIPELINE else {}
    for act in plan.actions:
        if act[0] == "create":
            w = mrec.TrajectoryWriter.create(root, plan.make_schema(), fs=fs, flush_every=plan.flush_every,
                                             durable=durable, compression=plan.compression, **extra)
        elif act[0] == "open":
            w = mrec.TrajectoryWriter.open(root, fs=fs, flush_every=plan.flush_every, durable=durable, **extra)
        elif act[0] == "append":
            _, frame, step, t = act
            w.append(frame, step=step, time=t)
            frames.append((frame, step, t))
        elif act[0] == "flush":
            w.flush()
        elif act[0] == "close":
            w.close()
    return fs.ops, root, frames


def _model_text(ordered: bool, writer_durable) -> str:
    """The crash model as the summary lines name it."""
    model = "ordered metadata (journaling fs)" if ordered else "strict (only fsync orders)"
    return model + (", writer durable='always'" if writer_durable == "always" else "")


def recorded(plan: Plan, work: str, durable=True):
    """:func:`record` of ``plan`` in its own folder of ``work``: (ops, root, frames, a CrashSimulator
    of the ops, :func:`commit_points`)."""
    rec_dir = os.path.join(work, plan.name)
    os.makedirs(rec_dir)
    ops, root, frames = record(plan, rec_dir, durable)
    return ops, root, frames, CrashSimulator(ops, root), commit_points(ops, root)


def commit_points(ops, root: str):
    """(op index, nstep) of every publish of trajectory/zarr.json, and the durable points.

    A publish is durable once an fsync of trajectory/zarr.json and then an
    fsync_dir of trajectory/ followed it.
    """
    traj = os.path.join(root, "trajectory")
    meta = os.path.join(traj, "zarr.json")
    published, durable = [], []
    last, synced = None, False
    for i, op in enumerate(ops):
        if op.kind == "replace" and op.path == meta:
            last = json.loads(op.data)["attributes"]["nstep"]
            published.append((i, last))
            synced = op.fsync
        elif op.kind == "fsync" and op.path == meta:
            synced = True
        elif op.kind == "fsync_dir" and op.path == traj and synced and last is not None:
            if not durable or durable[-1][1] != last:
                durable.append((i, last))
    return published, durable


def _upto(points, cut: int) -> int:
    n = 0
    for i, v in points:
        if i < cut:
            n = v
    return n


# -- checking one state ------------------------------------------------------------------

def check_state(path: str, want: list[dict], lo: int, hi: int, allowed: set[int], extra_frame=None) -> str | None:
    try:
        r = mrec.TrajectoryReader(path)
    except mrec.MrecError as exc:
        if lo == 0 and hi == 0 and not os.path.exists(os.path.join(path, "trajectory", "zarr.json")):
            return None       # crashed before the trajectory existed: nothing was promised
        return f"reader refused the store: {exc}"
    n = len(r)
    if n < lo:
        return f"nstep {n} lost committed frames (at least {lo} must be visible)"
    if n > hi or n not in allowed:
        return f"nstep {n} claims frames never committed (at most {hi}; published {sorted(allowed)})"
    try:
        bad = compare(r, want, n)
    except mrec.MrecError as exc:
        return f"a visible frame is unreadable: {exc}"
    if bad:
        return bad
    # reopen, append two frames, close, read back
    try:
        w = mrec.TrajectoryWriter.open(path, flush_every=1, durable=False)   # fsync adds nothing here
        base = w.committed
        if base != n:
            return f"writer reopened at {base} frames, reader saw {n}"
        last_step = int(r.steps[-1]) if n else 0
        last_t = float(r.times[-1]) if n else 0.0
        extra = []
        for k in range(2):
            f = (extra_frame or Plan.extra_frame)(k)
            w.append(f, step=last_step + 1 + k, time=last_t + 1.0 + k)
            extra.append((f, last_step + 1 + k, last_t + 1.0 + k))
        w.close()
        r2 = mrec.TrajectoryReader(path)
        if len(r2) != n + 2:
            return f"after reopen + 2 appends nstep is {len(r2)}, expected {n + 2}"
        full = want[:n] + [dict(e, blocks=dict(e["blocks"])) for e in expected_frames(extra)]
        bad = compare(r2, full, n + 2)
        if bad:
            return f"after reopen + append: {bad}"
    except mrec.MrecError as exc:
        return f"reopen + append failed: {exc}"
    try:                                  # nothing the crash left (temp files, the lock) blocks pack
        plan_pack(path)
    except mrec.MrecError as exc:
        return f"pack refuses after reopen + close: {exc}"
    return None


def check_repair_then_pack(path: str) -> str | None:
    """A state a crash inside an atomic replace left: `mrec repair` alone makes it packable."""
    try:
        report = repair(path)
        if not report.ok:
            return f"repair found it unrecoverable: {report.summary()}"
        if os.path.exists(os.path.join(path, "zarr.json")):       # else: cut before there was a record
            plan_pack(path)
    except mrec.MrecError as exc:
        return f"after mrec repair, pack refuses: {exc}"
    left = [os.path.join(d, f) for d, _, fs_ in os.walk(path) for f in fs_ if f.startswith(".mrec-tmp-")]
    return f"temp files left after repair: {left}" if left else None


def tree_digest(root: str) -> str:
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        h.update(os.path.relpath(d, root).encode() + b"\0")
        for f in sorted(files):
            h.update(f.encode() + b"\0")
            with open(os.path.join(d, f), "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


class Checker:
    """check_state, memoised on the state's bytes (many cuts leave identical trees)."""

    def __init__(self, want, extra_frame=None):
        self.want = want
        self.extra_frame = extra_frame
        self.memo: dict = {}
        self.distinct = 0

    def __call__(self, path: str, lo: int, hi: int, allowed: set[int]) -> str | None:
        key = (tree_digest(path), lo, hi, frozenset(allowed))
        if key not in self.memo:
            self.distinct += 1
            self.memo[key] = _guard(check_state, path, self.want, lo, hi, allowed, self.extra_frame)
        return self.memo[key]


def run(quick: bool, seeds: int, ordered: bool, verbose: bool, limit_cuts: int | None = None,
        only: list[str] | None = None, writer_durable=True) -> int:
    t0 = time.time()
    counts = {"process": 0, "power": 0, "temp": 0}
    distinct = 0
    violations: list[str] = []
    work = _scratch("mrec-crashcheck-")
    try:
        for plan in plans(quick):
            if only and plan.name not in only:
                continue
            ops, root, frames, sim, (published, durable) = recorded(plan, work, writer_durable)
            want = expected_frames(frames)
            check = Checker(want)
            cuts = range(len(ops) + 1)
            if limit_cuts:
                cuts = range(0, len(ops) + 1, max(1, (len(ops) + 1) // limit_cuts))
            for cut in cuts:
                received = _upto(published, cut)
                allowed = {0} | {v for i, v in published if i < cut}
                # process crash: exactly what the OS received
                _process_states(sim, ops, cut, work, check, received, allowed, counts, violations, plan.name)
                # power loss: the extremes and sampled drop / tear combinations
                must = _upto(durable, cut)
                for seed in [None, "all"] + [cut * 1000 + k for k in range(seeds)]:
                    dest = os.path.join(work, "state.mrec")
                    shutil.rmtree(dest, ignore_errors=True)
                    sim.materialise_power(cut, dest, seed=seed, ordered_metadata=ordered)
                    counts["power"] += 1
                    bad = check(dest, must, received, allowed)
                    if bad:
                        violations.append(f"[power] {plan.name} cut {cut}/{len(ops)} ({_op(ops, cut)}) seed {seed}: {bad}")
            distinct += check.distinct
            if verbose:
                print(f"  {plan.name}: {len(ops)} ops, {len(frames)} frames, {len(published)} commits "
                      f"({len(durable)} durable)", flush=True)
        if not only or "overwrite" in only:
            ow = run_overwrite(work, seeds, ordered, limit_cuts, violations)
            if verbose:
                print(f"  overwrite: {ow['ops']} ops, process-crash states {ow['process']}, "
                      f"power-loss states {ow['power']}", flush=True)
            counts["ow-process"], counts["ow-power"] = ow["process"], ow["power"]
        if not only or "nested-overwrite" in only:
            run_nested_overwrite(work, seeds, ordered, limit_cuts, violations, verbose)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    model = _model_text(ordered, writer_durable)
    print(f"crashcheck: process-crash states {counts['process']}, power-loss states {counts['power']} "
          f"[{model}, {seeds} sampled seeds + 2 extremes per cut], {distinct} distinct, "
          f"temp-leftover states repaired then packed {counts['temp']}, "
          f"overwrite states {counts.get('ow-process', 0)} process / {counts.get('ow-power', 0)} power, "
          f"violations {len(violations)}, {time.time() - t0:.1f} s")
    return _report(violations, verbose)


# -- write errors: ENOSPC / EIO at every injection point -----------------------------------------

def replay_with_fault(plan: Plan, root: str, fs: FaultyFileSystem, durable=True):
    """Run ``plan`` on ``fs`` (armed by the caller), injection points counted only inside append /
    flush / close.  Returns (frames appended, the failure or None, committed, nframes, retries) where
    ``retries`` lists the calls after a failure that did not refuse."""
    frames, w = [], None
    for act in plan.actions:
        fs.active = False
        if act[0] == "create":
            w = mrec.TrajectoryWriter.create(root, schema(), fs=fs, flush_every=plan.flush_every, durable=durable)
            continue
        if act[0] == "open":
            w = mrec.TrajectoryWriter.open(root, fs=fs, flush_every=plan.flush_every, durable=durable)
            continue
        fs.active = True
        try:
            if act[0] == "append":
                _, frame, step, t = act
                frames.append((frame, step, t))
                w.append(frame, step=step, time=t)
            elif act[0] == "flush":
                w.flush()
            elif act[0] == "close":
                w.close()
        except Exception as exc:        # noqa: BLE001 -- judged by the caller
            fs.active = False
            committed, nframes = w.committed, w.nframes
            retries = []
            nxt = next((a for a in plan.actions if a[0] == "append" and a[2] > frames[-1][1]), None) \
                if frames else None
            calls = [("flush", w.flush)] + ([("close", w.close)] if act[0] != "close" else [])
            if nxt is not None:
                calls.insert(1, ("append", lambda: w.append(nxt[1], step=nxt[2], time=nxt[3])))
            for name, call in calls:
                try:
                    call()
                    retries.append(name)
                except mrec.WriteError:
                    pass
                except mrec.RefusalError as e2:
                    if e2.kind != "closed":   # a close that failed after its commit: closed, not failed
                        retries.append(f"{name} raised {type(e2).__name__}: {e2}")
                except Exception as e2:   # noqa: BLE001
                    retries.append(f"{name} raised {type(e2).__name__}: {e2}")
            return frames, exc, committed, nframes, retries
    fs.active = False
    return frames, None, None, None, []


def check_fault(root: str, plan: Plan, k: int, err: int, outcome, kinds) -> str | None:
    frames, exc, committed, nframes, retries = outcome
    if exc is None:
        return None if k is None else f"point {k}: no failure was injected"
    if not isinstance(exc, mrec.WriteError):
        return f"the failure surfaced as {type(exc).__name__}: {exc}"
    if exc.errno != err or not isinstance(exc.__cause__, OSError):
        return f"WriteError without the errno / OSError: {exc!r}"
    if not (exc.path or "").startswith(root):
        return f"WriteError names no file of the store: {exc}"
    if retries:
        return f"after the failure the writer accepted {retries}"
    want = expected_frames(frames)
    return _guard(check_state, root, want, committed, nframes, {committed, nframes})


def run_faults(quick: bool, verbose: bool, limit_cuts: int | None = None, only=None, tmpfs: bool = False) -> int:
    import errno as E
    t0 = time.time()
    counts: dict[str, int] = {}
    violations: list[str] = []
    work = _scratch("mrec-faultcheck-")
    try:
        for plan in plans(quick):
            if only and plan.name not in only:
                continue
            for durable in (True, False):
                probe = FaultyFileSystem()
                probe.arm(None)
                replay_with_fault(plan, os.path.join(work, "probe.mrec"), probe, durable)
                shutil.rmtree(os.path.join(work, "probe.mrec"))
                n = probe.count
                points = range(n) if not limit_cuts else range(0, n, max(1, n // limit_cuts))
                for err in (E.ENOSPC, E.EIO):
                    label = f"{os.strerror(err)}{'' if durable else ', durable=False'}"
                    for k in points:
                        root = os.path.join(work, f"{plan.name}-{k}.mrec")
                        fs = FaultyFileSystem()
                        fs.arm(k, err)
                        outcome = replay_with_fault(plan, root, fs, durable)
                        counts[label] = counts.get(label, 0) + 1
                        bad = check_fault(root, plan, k, err, outcome, None)
                        if bad:
                            op = fs.failures[0] if fs.failures else ("?", "?")
                            violations.append(f"[{label}] {plan.name} point {k}/{n} ({op[0]} "
                                              f"{os.path.relpath(op[1], root)}): {bad}")
                        shutil.rmtree(root, ignore_errors=True)
                if verbose:
                    print(f"  {plan.name}{'' if durable else ' (durable=False)'}: {n} injection points", flush=True)
        if tmpfs:
            t = full_disk_runs(work, quick, violations)
            counts.update(t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = sum(counts.values())
    detail = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(f"crashcheck --faults: {total} failing-write sessions ({detail}), violations {len(violations)}, "
          f"{time.time() - t0:.1f} s")
    return _report(violations, verbose)


def full_disk_runs(work: str, quick: bool, violations: list) -> dict:
    """Sessions on really full tmpfs mounts of growing sizes (root only): the first ENOSPC the
    kernel gives, the same checks, then the mount grown and the store reopened."""
    import subprocess
    mnt = os.path.join(work, "tmpfs")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], capture_output=True).returncode:
        print("  tmpfs: cannot mount a tmpfs here (needs root): skipped")
        return {}
    subprocess.run(["umount", mnt], check=True)
    plan = Plan("full-disk", 21, 40 if quick else 120, flush_every=3, explicit_every=4, box_every=5,
                irregular_from=10)
    n = hit = 0
    sizes = range(64, 64 + (12 if quick else 48) * 12, 12)       # KiB
    for kib in sizes:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", mnt], check=True)
        try:
            root = os.path.join(mnt, "t.mrec")
            fs = FaultyFileSystem()
            fs.arm(None)
            try:
                outcome = replay_with_fault(plan, root, fs, True)
            except mrec.WriteError as exc:   # create / open (the layout) did not fit: nothing promised
                if exc.errno != 28:
                    violations.append(f"[full tmpfs {kib} KiB] create failed: {exc}")
                continue
            n += 1
            if outcome[1] is None:
                continue                # the whole session fitted
            hit += 1
            subprocess.run(["mount", "-o", f"remount,size={kib + 4096}k", mnt], check=True)
            bad = check_fault(root, plan, None, 28, outcome, None)
            if bad:
                violations.append(f"[full tmpfs {kib} KiB] {bad}")
        finally:
            subprocess.run(["umount", mnt], check=True)
    return {f"full tmpfs (mounts {len(sizes)}, layout fitted {n}, ENOSPC mid-session {hit})": n}


def _scratch(prefix: str) -> str:
    """A scratch directory, in memory when the machine has one."""
    return tempfile.mkdtemp(prefix=prefix, dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


def _report(violations: list, verbose: bool) -> int:
    for v in violations[: (None if verbose else 40)]:
        print("  " + v)
    if len(violations) > 40 and not verbose:
        print(f"  ... {len(violations) - 40} more (use -v)")
    return 1 if violations else 0


# -- write_record(overwrite=True): the path holds the complete old or the complete new record ----------

OW_VERSIONS = {
    "old": {"meta": {"title": "old"}, "status": {"state": "old"},
            "frame": {"blocks": {"atoms": {"x": np.arange(5.0), "q": np.array([1, 2, 3, 4, 5], np.int32)}}}},
    "new": {"meta": {"title": "new"}, "status": {"state": "new"},
            "system": {"blocks": {"atoms": {"element": ["O", "H", "H"]}}},
            "frame": {"blocks": {"atoms": {"x": -np.arange(3.0)}, "ions": {"q": np.array([0.5, -0.5])}}}},
}


def _matches(rec, want: dict) -> bool:
    if rec.meta.get("title") != want["meta"]["title"] or rec.status != want["status"]:
        return False
    for section in ("frame", "system"):
        got, exp = getattr(rec, section), want.get(section)
        if (got is None) != (exp is None):
            return False
        if exp is None:
            continue
        if set(got.blocks) != set(exp["blocks"]):
            return False
        for b, cols in exp["blocks"].items():
            if set(got.blocks[b]) != set(cols):
                return False
            for c, v in cols.items():
                g = got.blocks[b][c]
                if (list(g) != list(v)) if isinstance(v, list) else _bits(g) != _bits(np.asarray(v)):
                    return False
    return True


def check_overwrite_state(parent: str, name: str, allowed: set[str], via: str) -> str | None:
    """Recover (by ``via``: a read, ``mrec repair`` or the next write), then the path holds exactly
    one allowed version; no well-known sibling is left; a further overwrite leaves only the record."""
    path = os.path.join(parent, name)
    try:
        if via == "repair" and (os.path.isdir(path) or any(os.path.exists(p) for p in replace_names(path))):
            try:
                repair(path)
            except mrec.MrecError:
                pass                          # a record without a trajectory: repair checks nothing more
        rec = mrec.read_record(path) if os.path.exists(path) or any(
            os.path.exists(p) for p in replace_names(path)) else None
    except mrec.MrecError as exc:
        return f"after recovery the path does not read: {exc}"
    if rec is None:
        if "absent" not in allowed:
            return f"the path is absent (allowed: {sorted(allowed)})"
    else:
        got = [v for v, want in OW_VERSIONS.items() if _matches(rec, want)]
        rec.close()
        if not got or got[0] not in allowed:
            return f"the path holds {got or 'neither version (a mixture)'}; allowed: {sorted(allowed)}"
    left = [p for p in replace_names(path) if os.path.lexists(p)]
    if left:
        return f"siblings left after recovery: {left}"
    try:
        mrec.write_record(path, overwrite=True, **OW_VERSIONS["new"])
    except mrec.MrecError as exc:
        return f"a further overwrite failed: {exc}"
    extra = sorted(set(os.listdir(parent)) - {name})
    return f"a further overwrite left {extra} beside the record" if extra else None


def run_overwrite(work: str, seeds: int, ordered: bool, limit_cuts: int | None, violations: list) -> dict:
    """Record write_record(old) then write_record(new, overwrite=True) in one directory; cut at every
    op under both models; recover through a read, mrec repair or the next write, in turn."""
    parent = os.path.join(work, "overwrite")
    os.makedirs(parent)
    fs = recording_fs()
    name = "rec.mrec"
    path = os.path.join(parent, name)
    mrec.write_record(path, fs=fs, **OW_VERSIONS["old"])
    mrec.write_record(path, fs=fs, overwrite=True, **OW_VERSIONS["new"])
    ops = fs.ops
    renames = [i for i, op in enumerate(ops) if op.kind == "rename"]
    old_pub = next(i for i in renames if ops[i].path == path)              # build -> path
    # the new record is complete under some name once its build is renamed (-> .mrec-tmp-new-<name>)
    new_commit = next(i for i in renames if i > old_pub and os.path.basename(ops[i].data.decode()).startswith(
        f".mrec-tmp-{name}."))
    syncs = [i for i, op in enumerate(ops) if op.kind == "fsync_dir" and op.path == parent]
    old_durable = next(i for i in syncs if i > old_pub)
    new_durable = next(i for i in syncs if i > new_commit)
    sim = CrashSimulator(ops, parent)
    counts = {"ops": len(ops), "process": 0, "power": 0}
    cuts = range(len(ops) + 1)
    if limit_cuts:
        cuts = range(0, len(ops) + 1, max(1, (len(ops) + 1) // limit_cuts))
    ways = ("read", "repair", "write")
    memo: dict = {}
    for cut in cuts:
        if cut > new_commit:
            proc = {"new"}
        elif cut > old_pub:
            proc = {"old"}
        else:
            proc = {"absent"}
        if cut > new_durable:
            power = {"new"}
        elif cut > old_durable:
            power = {"old"} | ({"new"} if cut > new_commit else set())
        else:
            power = {"absent"} | ({"old"} if cut > old_pub else set())
        _replace_states(sim, ops, cut, proc, power, seeds, ordered, os.path.join(work, "ow-state"), ways,
                        lambda dest, allowed, via: check_overwrite_state(dest, name, allowed, via),
                        memo, counts, violations, "overwrite")
    shutil.rmtree(parent, ignore_errors=True)
    return counts


def _replace_states(sim, ops, cut, proc, power, seeds, ordered, dest, ways, check, memo, counts, violations,
                    label) -> None:
    """The states of an overwrite session cut at ``cut`` (process crash, with and without a stray
    temp file inside a replace; power loss at the sampled seeds), each checked through one of
    ``ways`` in turn by ``check(dest, allowed, via)`` (memoised by tree digest)."""
    variants = [False, True] if cut < len(ops) and ops[cut].kind == "replace" else [False]
    states = [("process", proc, lambda d, st=st: sim.materialise_process(cut, d, stray_temp=st))
              for st in variants]
    states += [("power", power, lambda d, sd=sd: sim.materialise_power(cut, d, seed=sd, ordered_metadata=ordered))
               for sd in [None, "all"] + [cut * 1000 + k for k in range(seeds)]]
    for k, (model, allowed, make) in enumerate(states):
        shutil.rmtree(dest, ignore_errors=True)
        make(dest)
        counts[model] += 1
        via = ways[(cut + k) % len(ways)]
        key = (tree_digest(dest), frozenset(allowed), via)
        if key not in memo:
            memo[key] = _guard(check, dest, allowed, via)
        if memo[key]:
            violations.append(f"[{model}] {label} cut {cut}/{len(ops)} ({_op(ops, cut)}) via {via}: {memo[key]}")


# -- nested overwrites: write_section / write_frame(group=) replace a group inside a record --------------

NESTED = {"section": "frame", "group": "a/b"}        # the session -> the group it replaces
NESTED_WAYS = ("read_record", "read_frame", "read_group", "write", "writer", "repair", "pack")


def _nested_version(frame) -> str | None:
    """'old' / 'new' when ``frame`` is bit-identical to that version's frame (OW_VERSIONS), else None."""
    from types import SimpleNamespace
    doc = {"meta": {"title": "t"}, "status": {"state": "s"}}
    got = SimpleNamespace(frame=frame, system=None, **doc)
    return next((v for v in ("old", "new") if _matches(got, {**doc, "frame": OW_VERSIONS[v]["frame"]})), None)


def _temp_names(root: str, siblings_only: bool) -> list[str]:
    """``.mrec-tmp-`` names in the tree (only ``new-`` / ``old-`` siblings with ``siblings_only``)."""
    marks = (".mrec-tmp-new-", ".mrec-tmp-old-") if siblings_only else (".mrec-tmp-",)
    out = []
    for d, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in dirs + files if n.startswith(marks)]
    return sorted(out)


def _nested_overwrite(path: str, scenario: str, version: str, fs=None) -> None:
    frame = OW_VERSIONS[version]["frame"]
    if scenario == "section":
        mrec.write_section(path, "frame", frame, overwrite=True, fs=fs)
    else:
        mrec.write_frame(path, frame, group="a/b", overwrite=True, fs=fs)


def check_nested_state(parent: str, scenario: str, allowed: set[str], via: str) -> str | None:
    """Give the crash state to one entry point of the record (``via``), then: what it read is an
    allowed version; no new / old sibling is left (a writer, repair or pack: no ``.mrec-tmp-`` name
    at all); the group holds exactly that allowed version, the record's other group and documents
    are intact; a further overwrite of the group leaves nothing of itself behind."""
    from mrec.archive.pack import pack
    node = NESTED[scenario]
    other = "a/b" if node == "frame" else "frame"
    path = os.path.join(parent, "r.mrec")
    read = None
    try:
        if via == "read_record":
            with mrec.read_record(path) as rec:
                shown = [s for s in rec.sections() if s.startswith(".mrec-tmp-")] + \
                    [k for k in rec.unknown if ".mrec-tmp-" in k]
                if shown:
                    return f"read_record shows temporary nodes: {shown[:4]}"
                read = _nested_version(rec.frame) if node == "frame" else None
        elif via == "read_frame":
            read = _nested_version(mrec.read_frame(path, group=node))
        elif via == "read_group":
            g = mrec.read_group(path, node)
            read = _nested_version(mrec.Frame(blocks={b: dict(s.arrays) for b, s in g.groups.items()}))
        elif via == "write":
            mrec.write_section(path, "notes", {"attributes": {"k": 1}})
        elif via == "writer":
            mrec.TrajectoryWriter.create(path, schema()).close()
        elif via == "repair":
            try:
                repair(path)
            except mrec.MrecError:
                pass                          # a record without a trajectory: repair checks nothing more
        elif via == "pack":
            z = pack(path, keep=True)
            import zipfile
            with zipfile.ZipFile(z) as zf:
                packed = [n for n in zf.namelist() if ".mrec-tmp-" in n]
            if packed:
                return f"pack archived temporaries: {packed[:4]}"
            read = _nested_version(mrec.read_frame(z, group=node))
            os.remove(z)
        else:
            raise ValueError(via)
        if via.startswith("read") and read is None and via != "read_record" or (read is not None and read not in allowed):
            return f"{via} read {read or 'neither version'}; allowed: {sorted(allowed)}"
        left = _temp_names(path, siblings_only=via.startswith("read"))
        if left:
            return f"left after {via}: {left[:4]}"
        now = _nested_version(mrec.read_frame(path, group=node))
        if now not in allowed or (read is not None and now != read):
            return f"after {via} the group holds {now or 'neither version'}; allowed {sorted(allowed)}, read {read}"
        if _nested_version(mrec.read_frame(path, group=other)) != "old":
            return f"the group {other!r}, not replaced, changed"
        with mrec.read_record(path) as rec:
            if rec.meta.get("title") != "t" or rec.status != {"state": "s"}:
                return "the record's documents changed"
        _nested_overwrite(path, scenario, "new")
    except mrec.MrecError as exc:
        return f"{via}: {type(exc).__name__}: {exc}"
    left = _temp_names(path, siblings_only=False)
    return f"a further overwrite left {left[:4]}" if left else None


def run_nested_overwrite(work: str, seeds: int, ordered: bool, limit_cuts: int | None, violations: list,
                         verbose: bool = False) -> dict:
    """A record with a section ``frame`` and a group ``a/b``, then ``write_section(frame, overwrite=True)``
    (session ``section``) or ``write_frame(group="a/b", overwrite=True)`` (session ``group``), each cut at
    every op of the overwrite under both models; each state recovered by one entry point, in turn."""
    t0 = time.time()
    counts = {"ops": 0, "process": 0, "power": 0}
    for scenario, node in NESTED.items():
        parent = os.path.join(work, f"nested-{scenario}")
        os.makedirs(parent)
        fs = recording_fs()
        path = os.path.join(parent, "r.mrec")
        mrec.write_record(path, fs=fs, meta={"title": "t"}, status={"state": "s"}, frame=OW_VERSIONS["old"]["frame"])
        mrec.write_frame(path, OW_VERSIONS["old"]["frame"], group="a/b", fs=fs)
        start = len(fs.ops)
        _nested_overwrite(path, scenario, "new", fs=fs)
        ops = fs.ops
        group_dir = os.path.dirname(os.path.join(path, *node.split("/")))
        build = f".mrec-tmp-{node.rsplit('/', 1)[-1]}."
        # the new group is complete under some name once its build is renamed (-> .mrec-tmp-new-<name>)
        commit = next(i for i in range(start, len(ops)) if ops[i].kind == "rename"
                      and os.path.basename(ops[i].data.decode()).startswith(build))
        durable = next(i for i in range(commit, len(ops)) if ops[i].kind == "fsync_dir" and ops[i].path == group_dir)
        sim = CrashSimulator(ops, parent)
        counts["ops"] += len(ops) - start
        cuts = range(start, len(ops) + 1)
        if limit_cuts:
            cuts = range(start, len(ops) + 1, max(1, (len(ops) + 1 - start) // limit_cuts))
        memo: dict = {}
        for cut in cuts:
            proc = {"new"} if cut > commit else {"old"}
            power = {"new"} if cut > durable else {"old", "new"} if cut > commit else {"old"}
            _replace_states(sim, ops, cut, proc, power, seeds, ordered, os.path.join(work, "nested-state"),
                            NESTED_WAYS, lambda dest, allowed, via, sc=scenario: check_nested_state(dest, sc, allowed, via),
                            memo, counts, violations, f"nested {scenario} overwrite")
        shutil.rmtree(parent, ignore_errors=True)
    bad = sum(v.startswith(("[process] nested", "[power] nested")) for v in violations)
    print(f"crashcheck nested overwrite: {counts['ops']} ops (a section, a write_frame group), process-crash "
          f"states {counts['process']}, power-loss states {counts['power']} "
          f"[{'ordered metadata' if ordered else 'strict'}], violations {bad}, {time.time() - t0:.1f} s", flush=True)
    return counts


def _op(ops, cut):
    if cut >= len(ops):
        return "end"
    op = ops[cut]
    return f"next {op.kind} {os.path.basename(os.path.dirname(op.path))}/{os.path.basename(op.path)}"


def _guard(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:      # anything outside the MrecError family is itself a violation
        return f"unexpected {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"


def _process_states(sim, ops, cut, work, check, received, allowed, counts, violations, name,
                    torn: bool = False) -> None:
    """The process-crash states of one cut (plus a stray temp file when the next op is a replace):
    each must open at exactly ``received`` frames; a state with a stray temp file must also, on a
    copy, be made packable by ``mrec repair`` alone.  With ``torn``, a next op that is a write_at of
    more than a page also gives the states where only a page-aligned prefix of it landed
    (:func:`torn_prefixes`: a fatal signal can end a large pwrite between pages)."""
    variants = [False, True] if cut < len(ops) and ops[cut].kind == "replace" else [False]
    for stray in variants:
        dest = os.path.join(work, "state.mrec")
        shutil.rmtree(dest, ignore_errors=True)
        sim.materialise_process(cut, dest, stray_temp=stray)
        counts["process"] += 1
        if stray:                  # first: mrec repair alone makes it packable
            counts["temp"] = counts.get("temp", 0) + 1
            copy = os.path.join(work, "state-repair.mrec")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(dest, copy)
            bad = _guard(check_repair_then_pack, copy)
            if bad:
                violations.append(f"[temp] {name} cut {cut}/{len(ops)} ({_op(ops, cut)}): {bad}")
        bad = check(dest, received, received, allowed)
        if bad:
            violations.append(f"[process] {name} cut {cut}/{len(ops)} ({_op(ops, cut)})"
                              f"{' +temp' if stray else ''}: {bad}")
    for keep in (torn_prefixes(ops[cut]) if torn and cut < len(ops) else ()):
        dest = os.path.join(work, "state.mrec")
        shutil.rmtree(dest, ignore_errors=True)
        materialise_torn(sim, cut, dest, keep)
        counts["torn"] = counts.get("torn", 0) + 1
        bad = check(dest, received, received, allowed)
        if bad:
            violations.append(f"[torn] {name} cut {cut}/{len(ops)} ({_op(ops, cut)}, {keep} of "
                              f"{len(ops[cut].data)} bytes landed): {bad}")


def run_truncation(seeds: int, ordered: bool, verbose: bool) -> int:
    """Restarts: a durable session of 10 frames, then ``TrajectoryWriter.open(truncate_after_step=S)``
    and ``close()``; every cut of the truncation's operations must open at the old state or the
    truncated one -- exactly the one the OS last received for a process crash, and the truncated
    one once its commit marker was fsynced -- with every visible frame intact, and must reopen,
    take two frames and read back."""
    t0 = time.time()
    counts = {"process": 0, "power": 0}
    violations: list[str] = []
    work = tempfile.mkdtemp(prefix="mrec-crashcheck-trunc-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        plan = Plan("truncation", 21, 10, flush_every=3, explicit_every=4, box_every=3, irregular_from=6)
        fs = recording_fs()
        root = os.path.join(work, "rec.mrec")
        frames = []
        w = mrec.TrajectoryWriter.create(root, schema(), fs=fs, flush_every=plan.flush_every)
        for act in plan.actions[1:]:
            if act[0] == "append":
                w.append(act[1], step=act[2], time=act[3])
                frames.append(act[1:])
            elif act[0] == "flush":
                w.flush()
        w.close()
        old = len(frames)
        keep = 4
        start = len(fs.ops)
        w = mrec.TrajectoryWriter.open(root, fs=fs, truncate_after_step=frames[keep - 1][1] + 1)
        w.close()
        ops = fs.ops
        sim = CrashSimulator(ops, root)
        published, durable = commit_points(ops, root)
        want = expected_frames(frames)
        check = Checker(want)
        for cut in range(start, len(ops) + 1):
            received = _upto(published, cut)
            _process_states(sim, ops, cut, work, check, received, {received}, counts, violations, "truncation")
            # power loss: the truncated state is always allowed, the old one until the lowered
            # marker is durable
            lo, hi = keep, (keep if _upto(durable, cut) == keep else old)
            for seed in [None, "all"] + [cut * 1000 + k for k in range(seeds)]:
                dest = os.path.join(work, "state.mrec")
                shutil.rmtree(dest, ignore_errors=True)
                sim.materialise_power(cut, dest, seed=seed, ordered_metadata=ordered)
                counts["power"] += 1
                bad = check(dest, lo, hi, {keep, hi})
                if bad:
                    violations.append(f"[power] truncation cut {cut}/{len(ops)} ({_op(ops, cut)}) seed {seed}: {bad}")
        if verbose:
            print(f"  truncation: {len(ops) - start} ops cut, {old} -> {keep} frames", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"crashcheck truncation: process-crash states {counts['process']}, power-loss states {counts['power']} "
          f"[{'ordered metadata' if ordered else 'strict'}], {check.distinct} distinct, violations {len(violations)}, "
          f"{time.time() - t0:.1f} s")
    for v in violations[: (None if verbose else 40)]:
        print("  " + v)
    return 1 if violations else 0


# -- reopen: a second writer session on the states a crash of the first left (issue 17) ---------------

PAGE = 4096
LARGE_COL_ROWS = 2048     # 1-d f64, 16 KiB a frame: one inner chunk a frame (extents.COLUMN_CHUNK_TARGET)
LARGE_ATOMS = 1400        # positions f64 [3] at precision 1e-3 (shuffle + zstd: variable size), one chunk a frame


def large_schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("col", rows=LARGE_COL_ROWS)
    s.declare_column("col", "x", "f64")
    s.declare_block("mol", rows=LARGE_ATOMS)
    s.declare_column("mol", "pos", "f64", trailing=(3,), precision=PREC)
    s.declare_meta("pe", "f64")
    s.declare_meta("tag", "string", fill="")
    return s


class LargePlan(Plan):
    """A session of large frames: every block's frame is one inner chunk, so each landing writes
    whole chunks at the shard's tail and rewrites a 64 KiB index, and leading values repeat between
    frames (what a rebuild matching first rows is fooled by)."""

    make_schema = staticmethod(large_schema)

    def __init__(self, name: str, seed: int, nframes: int, *, compression=None, **kw):
        self.compression = compression
        super().__init__(name, seed, nframes, ragged=False, **kw)

    def make_frame(self, rng, i: int) -> dict:
        blocks = {}
        if i == 0 or rng.random() < 0.8:
            x = rng.normal(size=LARGE_COL_ROWS)
            if rng.random() < 0.6:
                x[0] = float(rng.integers(0, 2))                  # a first row other frames share
            blocks["col"] = {"x": x}
        if i == 0 or rng.random() < 0.7:
            pos = rng.normal(size=(LARGE_ATOMS, 3)) * 10.0
            if rng.random() < 0.6:
                pos[0] = (1.0, 2.0, 3.0)
            pos = round_to_precision(pos, PREC)              # on the grid already: what reads back
            blocks["mol"] = {"pos": pos}
        frame = {"blocks": blocks, "meta": {"pe": float(rng.normal())}}
        if rng.random() < 0.3:
            frame["meta"]["tag"] = f"t{i}"
        return frame

    @staticmethod
    def extra_frame(k: int) -> dict:
        return {"blocks": {"col": {"x": np.full(LARGE_COL_ROWS, 0.5 + k)},
                           "mol": {"pos": np.full((LARGE_ATOMS, 3), -1.5 - k)}},
                "meta": {"pe": -7.0 - k, "tag": "re"}}


def reopen_plans(quick: bool) -> list[Plan]:
    large = [LargePlan("large-quick", 31, 5, flush_every=2, explicit_every=3)] if quick else [
        LargePlan("large", 31, 12, flush_every=2, explicit_every=5, reopen_at=(7,)),
        LargePlan("large-zstd", 32, 10, flush_every=3, explicit_every=4, compression="zstd", irregular_from=4),
    ]
    return large + plans(quick)


def torn_prefixes(op) -> list[int]:
    """How many leading bytes of a write_at of more than a page landed when a fatal signal ended
    the pwrite between pages: the first, a middle and the last page boundary inside it."""
    if op.kind != "write_at" or op.data is None or len(op.data) <= PAGE:
        return []
    ends = list(range(PAGE - op.offset % PAGE, len(op.data), PAGE))
    return sorted({ends[0], ends[len(ends) // 2], ends[-1]}) if ends else []


def materialise_torn(sim: CrashSimulator, cut: int, dest: str, keep: int) -> None:
    """The process-crash state before ``ops[cut]`` (a write_at), plus its first ``keep`` bytes."""
    sim.materialise_process(cut, dest)
    op = sim.ops[cut]
    fd = os.open(os.path.join(dest, os.path.relpath(op.path, sim.root)), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, op.data[:keep], op.offset)
    finally:
        os.close(fd)


def durable_tree_ops(root: str) -> list:
    """Operations that build the tree under ``root`` from nothing, every file and directory fsynced:
    a state a crash of session 1 left is what session 2 starts from, and after the restart it is on
    disk (a simplification for a process crash, whose bytes may still sit in the page cache)."""
    from mrec.fs.base import Op
    ops, dirs = [], []
    for d, dnames, fnames in os.walk(root):
        dnames.sort()
        ops.append(Op("mkdir", d))
        dirs.append(d)
        for f in sorted(fnames):
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                data = fh.read()
            ops += [Op("write_at", p, offset=0, length=len(data), data=data), Op("fsync", p)]
    return ops + [Op("fsync_dir", d) for d in reversed(dirs)]


def session1_states(ops, published, durable, n: int | None) -> list[tuple]:
    """Crash states of session 1 that a reopen must continue from: around every landing of a chunk
    (the largest chunks' only, when a plan has chunks of more than a page): the process crash after
    the index rewrite (indexed, uncommitted copies), inside it (torn between pages), before it
    (unindexed copies), and a power loss after it; then the
    clean end.  ``n`` of them (all when None), taken by turns from each kind.  Each is (label, cut, how, bounds)."""
    pairs = [i for i in range(1, len(ops)) if ops[i].kind == "write_at" and ops[i].offset == 0
             and ops[i - 1].kind == "write_at" and ops[i - 1].path == ops[i].path and ops[i - 1].offset > 0]
    big = [i for i in pairs if len(ops[i - 1].data) > PAGE]
    pairs = big or pairs
    kinds: dict[str, list] = {"indexed": [], "torn": [], "process": [], "power": []}
    for i in pairs:
        shard = ops[i].path.split("trajectory" + os.sep, 1)[-1].replace(os.sep, "/")
        kinds["indexed"].append((f"indexed uncommitted landing in {shard}", i + 1, "process"))
        kinds["process"].append((f"unindexed landing in {shard}", i, "process"))
        prefixes = torn_prefixes(ops[i])
        if prefixes:
            keep = prefixes[len(prefixes) // 2]
            kinds["torn"].append((f"index rewrite of {shard} torn after {keep} bytes", i, ("torn", keep)))
        kinds["power"].append((f"power loss after a landing in {shard}", i + 1, ("power", i)))
    kinds["clean"] = [("clean close", len(ops), "process")]
    # round robin over the kinds (the defect-2 precondition first), each kind's states spread over
    # the session: its middle one first, then the others in a fixed shuffled order
    for k, lst in kinds.items():
        mid = lst[len(lst) // 2:len(lst) // 2 + 1]
        kinds[k] = mid + random.Random(len(lst)).sample([x for x in lst if x not in mid], len(lst) - len(mid))
    out = []
    for p in range(max(map(len, kinds.values()))):
        out += [lst[p] for lst in kinds.values() if p < len(lst)]
    if n is not None:
        out = out[:n]
    out.sort(key=lambda x: x[1])
    states = []
    for label, cut, how in out:
        received = _upto(published, cut)
        allowed = {0} | {v for i, v in published if i < cut}
        lo = _upto(durable, cut) if isinstance(how, tuple) and how[0] == "power" else received
        states.append((f"{label} (cut {cut}/{len(ops)})", cut, how, (lo, received, allowed)))
    return states


def _materialise(sim: CrashSimulator, cut: int, how, dest: str, ordered: bool) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    if how == "process":
        sim.materialise_process(cut, dest)
    elif how[0] == "torn":
        materialise_torn(sim, cut, dest, how[1])
    else:
        sim.materialise_power(cut, dest, seed=how[1], ordered_metadata=ordered)


def session2_frames(plan: Plan, frames1: list, n1: int, keep: int, count: int, seed: int) -> list:
    """``count`` frames a writer reopened after ``keep`` committed frames appends: fresh values whose
    first row echoes the session-1 frame at the same position (an uncommitted leftover when the
    crash left one) or else an earlier frame; steps and times go on from frame ``keep - 1``."""
    rng = np.random.default_rng(seed)
    step, t = (frames1[keep - 1][1], frames1[keep - 1][2]) if keep else (0, 0.0)
    out = []
    for k in range(count):
        frame = plan.make_frame(rng, k)
        ref = frames1[keep + k][0] if keep + k < len(frames1) else frames1[k % max(1, n1)][0] if frames1 else None
        for name, cols in frame["blocks"].items():
            for c, v in cols.items():
                r = (ref or {"blocks": {}})["blocks"].get(name, {}).get(c)
                if r is not None and len(v) and len(r) and np.asarray(r).dtype == v.dtype:
                    v[0] = np.asarray(r)[0]
        out.append((frame, step + 2 * (k + 1), t + 0.5 * (k + 1)))
    return out


class _OldOrNew:
    """The checker of a truncating reopen: until the lowered commit marker is published (process
    crash) or durable (power loss), a state may still be the old store: it is checked as such when
    it reads as the old store, else as the new one."""

    def __init__(self, old: Checker | None, n_old: int, new: Checker):
        self.old, self.n_old, self.new = old, n_old, new

    def __call__(self, path: str, lo: int, hi: int, allowed: set[int]) -> str | None:
        if self.old is not None:
            try:
                r = mrec.TrajectoryReader(path)
                same = len(r) == self.n_old and compare(r, self.old.want, self.n_old) is None
            except mrec.MrecError:
                same = False
            if same:
                return self.old(path, self.n_old, self.n_old, {self.n_old})
        return self.new(path, lo, hi, allowed)


def run_session2(plan, frames1, base: str, n1: int, keep: int | None, seed: int, count: int, work: str,
                 seeds: int, ordered: bool, limit_cuts, writer_durable, counts: dict, violations: list,
                 label: str) -> int:
    """Reopen the crash state at ``base`` (``n1`` frames committed) -- with
    ``truncate_after_step`` when ``keep`` is given --, append ``count`` frames, close; then check
    every cut of that session: process crash (whole, and large writes torn between pages) and power
    loss.  Returns the distinct states checked."""
    trunc = keep is not None
    keep = n1 if keep is None else keep
    frames2 = session2_frames(plan, frames1, n1, keep, count, seed)
    start_ops = durable_tree_ops(base)
    fs = recording_fs()
    try:
        w = mrec.TrajectoryWriter.open(base, fs=fs, flush_every=plan.flush_every, durable=writer_durable,
                                       truncate_after_step=frames1[keep - 1][1] if trunc else None,
                                       **({"pipeline": True} if PIPELINE else {}))
        for j, (frame, step, t) in enumerate(frames2):
            w.append(frame, step=step, time=t)
            if j == count // 2:
                w.flush()
        w.close()
    except mrec.MrecError as exc:
        violations.append(f"[reopen] {label}: the second session failed: {exc}")
        return 0
    ops = start_ops + fs.ops
    start = len(start_ops)
    sim = CrashSimulator(ops, base)
    published, durable = commit_points(ops, base)
    new = Checker(expected_frames(frames1[:keep] + frames2), plan.extra_frame)
    old = Checker(expected_frames(frames1[:n1]), plan.extra_frame) if trunc else None
    lowered = published[0][0] if trunc and published else len(ops) + 1   # the lowered marker's publish
    lowered_durable = durable[0][0] if trunc and durable else len(ops) + 1
    cuts = range(start, len(ops) + 1)
    if limit_cuts:
        cuts = range(start, len(ops) + 1, max(1, (len(ops) + 1 - start) // limit_cuts))
    name = f"{label}, session 2{' (truncate_after_step)' if trunc else ''}"
    for cut in cuts:
        before = [v for i, v in published if i < cut]
        received = before[-1] if before else n1
        allowed = {n1} | set(before)
        check = _OldOrNew(old if cut <= lowered else None, n1, new)
        _process_states(sim, ops, cut, work, check, received, allowed, counts, violations, name, torn=True)
        upto = [v for i, v in durable if i < cut]
        must = upto[-1] if upto else (keep if trunc else n1)
        check = _OldOrNew(old if cut <= lowered_durable else None, n1, new)
        for sd in [None, "all"] + [cut * 1000 + k for k in range(seeds)]:
            dest = os.path.join(work, "state.mrec")
            shutil.rmtree(dest, ignore_errors=True)
            sim.materialise_power(cut, dest, seed=sd, ordered_metadata=ordered)
            counts["power"] += 1
            bad = check(dest, min(must, received), received, allowed)
            if bad:
                violations.append(f"[power] {name} cut {cut}/{len(ops)} ({_op(ops, cut)}) seed {sd}: {bad}")
    return new.distinct + (old.distinct if old else 0)


def run_reopen(quick: bool, seeds: int, ordered: bool, verbose: bool, limit_cuts: int | None = None,
               only: list[str] | None = None, writer_durable=True, s1_states: int | None = None) -> int:
    """``--reopen``: for sampled crash states of a first session (:func:`session1_states`), a second
    session reopens the store (``TrajectoryWriter.open``, and ``open(truncate_after_step=...)``),
    appends frames whose leading values repeat earlier ones and closes; every cut of the second
    session must read exactly the frames committed (session 1's committed prefix, then session 2's)."""
    t0 = time.time()
    counts = {"process": 0, "power": 0, "temp": 0, "torn": 0}
    sessions = {"s1": 0, "append": 0, "truncate": 0}
    distinct = 0
    violations: list[str] = []
    work = _scratch("mrec-crashcheck-reopen-")
    count = 3 if quick else 6
    try:
        for plan in reopen_plans(quick):
            if only and plan.name not in only:
                continue
            ops1, root1, frames1, sim1, (published1, durable1) = recorded(plan, work, writer_durable)
            check1 = Checker(expected_frames(frames1), plan.extra_frame)
            large = isinstance(plan, LargePlan)
            # --quick: the large-frame session (what the defects need) at 4 crash states and every cut of
            # its second sessions; the small-frame one at its clean close, 20 cuts a second session
            n_states = s1_states if s1_states is not None else (12 if not quick else 4 if large else 1)
            cuts2 = limit_cuts or (20 if quick and not large else None)
            states = session1_states(ops1, published1, durable1, n_states)
            for k, (label, cut, how, (lo, hi, allowed)) in enumerate(states):
                label = f"{plan.name} session 1 {label}"
                dest = os.path.join(work, "s1.mrec")
                _materialise(sim1, cut, how, dest, ordered)
                sessions["s1"] += 1
                bad = check1(dest, lo, hi, allowed)
                if bad:
                    violations.append(f"[session 1] {label}: {bad}")
                    continue
                for trunc in (False, True):
                    base = os.path.join(work, "s2", "rec.mrec")
                    shutil.rmtree(os.path.dirname(base), ignore_errors=True)
                    _materialise(sim1, cut, how, base, ordered)
                    try:
                        n1 = len(mrec.TrajectoryReader(base))
                    except mrec.MrecError:
                        break                   # no trajectory yet (check_state allowed it): nothing to reopen
                    if trunc and n1 < 2:
                        break
                    sessions["truncate" if trunc else "append"] += 1
                    distinct += run_session2(plan, frames1, base, n1, n1 // 2 if trunc else None,
                                             plan.seed * 100 + k, count, work, seeds, ordered, cuts2,
                                             writer_durable, counts, violations, label)
            distinct += check1.distinct
            if verbose:
                print(f"  {plan.name}: {len(ops1)} ops, {len(frames1)} frames, {len(states)} session-1 states: "
                      + "; ".join(st[0] for st in states), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    model = _model_text(ordered, writer_durable)
    print(f"crashcheck --reopen: session-1 states {sessions['s1']}, second sessions {sessions['append']} appending "
          f"+ {sessions['truncate']} truncating; their process-crash states {counts['process']}, torn-write states "
          f"{counts['torn']}, power-loss states {counts['power']} [{model}, {seeds} sampled seeds + 2 extremes "
          f"per cut], {distinct} distinct, violations {len(violations)}, {time.time() - t0:.1f} s")
    if violations:
        print("  by kind: " + ", ".join(f"{k} {v}" for k, v in classify(violations).items()))
    return _report(violations, verbose)


def classify(violations: list[str]) -> dict[str, int]:
    """Violations by what went wrong: committed frames read with other rows (silently), the store
    refused as a contradicting shard index, other refusals, wrong nstep, anything else."""
    out: dict[str, int] = {}
    for v in violations:
        if "contradict the file" in v:
            k = "refused: shard index contradicts the file"
        elif any(w in v for w in (" differs", "masks of", "blocks [", "meta {")):
            k = "wrong rows / values of a committed frame"
        elif "nstep" in v or "reopened at" in v:
            k = "wrong frame count"
        elif "refused" in v or "unreadable" in v or "failed" in v:
            k = "refused / failed otherwise"
        else:
            k = "other"
        out[k] = out.get(k, 0) + 1
    return out


def main(argv=None) -> int:
    import warnings
    # a power-loss state whose committed rows end in fill values reads with a StandInWarning (it
    # cannot be told from a file cut there: docs/reliability.md); the rows are checked bit for bit
    warnings.simplefilter("ignore", mrec.StandInWarning)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short session (a few seconds)")
    ap.add_argument("--seeds", type=int, default=None, help="sampled power-loss states per cut (default 6, quick 2)")
    ap.add_argument("--strict-metadata", action="store_true",
                    help="power loss without journal ordering: directory changes survive per directory, "
                         "only fsync orders anything")
    ap.add_argument("--cuts", type=int, default=None, help="check about this many evenly spaced cuts, not every one")
    ap.add_argument("--plan", action="append", default=None,
                    help="check only this session (repeatable): " + ", ".join(p.name for p in plans(False))
                    + ", overwrite (write_record(overwrite=True)), nested-overwrite "
                    "(write_section / write_frame(group=...) with overwrite=True); with --reopen also large, "
                    "large-zstd, large-quick")
    ap.add_argument("--durable-always", action="store_true",
                    help="record the sessions with TrajectoryWriter(durable='always'): every flush fsynced "
                         "(what --strict-metadata needs for every commit to be durable)")
    ap.add_argument("--faults", action="store_true",
                    help="write errors instead of crashes: ENOSPC / EIO at every write and fsync, then retry, "
                         "close and reopen")
    ap.add_argument("--tmpfs", action="store_true", help="with --faults: also fill real tmpfs mounts (root only)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--truncate", action="store_true",
                    help="check the restart truncation (TrajectoryWriter.open(truncate_after_step=...)) at every cut")
    ap.add_argument("--reopen", action="store_true",
                    help="a second session (reopen, or reopen with truncate_after_step, then appends) on sampled "
                         "crash states of the first, large-frame sessions included; its own cuts checked")
    ap.add_argument("--s1-states", type=int, default=None,
                    help="with --reopen: session-1 crash states per session (default 12; quick: 4 of the "
                         "large-frame session, 1 of the small)")
    ap.add_argument("--pipeline", action="store_true",
                    help="record the writer sessions with pipeline=True (commits on the committer thread); "
                         "the plain and --reopen checks")
    a = ap.parse_args(argv)
    global PIPELINE
    PIPELINE = a.pipeline
    if a.faults:
        return run_faults(a.quick, a.verbose, a.cuts, a.plan, a.tmpfs)
    seeds = a.seeds if a.seeds is not None else (2 if a.quick else 6)
    if a.truncate:
        return run_truncation(seeds, not a.strict_metadata, a.verbose)
    if a.reopen:
        return run_reopen(a.quick, seeds, not a.strict_metadata, a.verbose, a.cuts, a.plan,
                          "always" if a.durable_always else True, a.s1_states)
    return run(a.quick, seeds, not a.strict_metadata, a.verbose, a.cuts, a.plan,
               "always" if a.durable_always else True)


if __name__ == "__main__":
    sys.exit(main())
