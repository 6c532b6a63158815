"""Recording a session operation by operation, and the crash states the simulator makes of it.

``record`` runs a plan on a recording file system; ``commit_points`` finds where each ``nstep`` was
published and made durable; the rest cuts and materialises states (a large write torn between
pages, a crash state rebuilt as the start of a second session) and names the operation at a cut.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import mrec
from mrec.fs.faulty import CrashSimulator, recording_fs

from .plans import Plan


def record(plan: Plan, work: str, durable=True, pipeline: bool = False):
    """Run the plan on a recording file system; returns (ops, root, appended frames, commits).

    ``commits`` lists, per op index that published a trajectory/zarr.json, its nstep.  ``pipeline``
    (``--pipeline``): the writer runs with pipeline=True (automatic commits on the committer thread,
    inner chunks encoded ahead while appends go on): the same cuts are checked.
    """
    fs = recording_fs()
    root = os.path.join(work, "rec.mrec")
    frames = []
    w = None
    extra = {"pipeline": True} if pipeline else {}
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


def recorded(plan: Plan, work: str, durable=True, pipeline: bool = False):
    """:func:`record` of ``plan`` in its own folder of ``work``: (ops, root, frames, a CrashSimulator
    of the ops, :func:`commit_points`)."""
    rec_dir = os.path.join(work, plan.name)
    os.makedirs(rec_dir)
    ops, root, frames = record(plan, rec_dir, durable, pipeline)
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


def last_before(points, cut: int) -> int:
    n = 0
    for i, v in points:
        if i < cut:
            n = v
    return n


PAGE = 4096


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


def next_op(ops, cut):
    if cut >= len(ops):
        return "end"
    op = ops[cut]
    return f"next {op.kind} {os.path.basename(os.path.dirname(op.path))}/{os.path.basename(op.path)}"


@contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A scratch directory, in memory when the machine has one, removed when the block ends."""
    work = tempfile.mkdtemp(prefix=prefix, dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
