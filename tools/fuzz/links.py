"""Target ``links`` (issue 27): a symbolic link where a writer, pack, unpack, repack or repair writes,
inside a record it replaces, or beside it under the names of mrec's leftovers."""
from __future__ import annotations

import os
import random

import numpy as np

import mrec


def _outside(work: str) -> tuple[str, dict]:
    """``outside/``: what no case may change -- files, a record, names like mrec's leftovers -- and
    its snapshot (links as links, never followed)."""
    out = os.path.join(work, "outside")
    os.makedirs(os.path.join(out, "sub", ".out.mrec.mrec-tmp-0badf00d"))
    for name, data in (("notes.txt", b"precious"), ("sub/data.bin", os.urandom(257)),
                       (".mrec-tmp-notes.txt.0badf00d", b"bait")):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    mrec.write_record(os.path.join(out, "rec.mrec"), meta={}, frame={"blocks": {"a": {"x": np.ones(2)}}})
    with open(os.path.join(out, "rec.mrec", ".mrec-tmp-zarr.json.0badf00d"), "wb") as f:
        f.write(b"bait")
    return out, _snapshot(out)


def _snapshot(root: str) -> dict:
    got = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            got[os.path.relpath(p, root)] = (os.readlink(p) if os.path.islink(p) else None if os.path.isdir(p)
                                             else open(p, "rb").read())
    return got


def _link_ops(src: str, archive: str) -> dict:
    """What a user does with a target (its name in the case's folder -> the call)."""
    frame = {"blocks": {"a": {"x": np.ones(2)}}}
    s = mrec.SequenceSchema()
    s.declare_block("a", rows=2)
    s.declare_column("a", "x", "f64")
    from mrec.archive.repack import repack
    from mrec.check.repair import repair
    return {
        "write_record": ("out.mrec", lambda t, ow: mrec.write_record(t, meta={}, frame=frame, overwrite=ow)),
        "write_frame": ("out.mrec", lambda t, ow: mrec.write_frame(t, frame, overwrite=ow)),
        "write_section": ("out.mrec", lambda t, ow: mrec.write_section(t, "extra", {"attributes": {"k": 1}},
                                                                       overwrite=ow)),
        "create": ("out.mrec", lambda t, ow: mrec.TrajectoryWriter.create(t, s).close()),
        "open": ("out.mrec", lambda t, ow: mrec.TrajectoryWriter.open(t).close()),
        "repair": ("out.mrec", lambda t, ow: repair(t, dry_run=not ow)),
        "pack": ("out.mrec.zip", lambda t, ow: mrec.pack(src, out=t, keep=True, overwrite=ow)),
        "pack_source": ("out.mrec", lambda t, ow: mrec.pack(t, keep=False)),
        "unpack": ("out.mrec", lambda t, ow: mrec.unpack(archive, out=t)),
        "repack": ("out.mrec", lambda t, ow: repack(src, t, overwrite=ow)),
        "repack_zip": ("out.mrec.zip", lambda t, ow: repack(src, t, overwrite=ow)),
    }


def links_case(rng: random.Random, work: str) -> tuple[str, callable]:
    """Issue 27 link traps: a symbolic link where an op writes (to a directory, a record, a file,
    dangling: refused, kind ``bad_target``, naming it), inside a target it replaces (unlinked, never
    entered), or beside it under a leftover's name (left alone); in every case nothing under
    ``outside/`` changes.  A breach is a failure."""
    from mrec.errors import RefusalError
    outside, before = _outside(work)
    src = os.path.join(work, "src.mrec")
    mrec.write_record(src, meta={}, frame={"blocks": {"a": {"x": np.arange(2.0)}}})
    archive = os.fspath(mrec.pack(src, out=os.path.join(work, "src.mrec.zip"), keep=True))
    ops = _link_ops(src, archive)
    op = rng.choice(sorted(ops))
    name, call = ops[op]
    target = os.path.join(work, name)
    where = rng.choice(["target", "inside", "beside"])
    to = os.path.join(outside, rng.choice(["", "rec.mrec", "notes.txt", "missing"]))
    if where == "target":
        os.symlink(to, target)
    elif name.endswith(".zip"):
        where = "beside"
    else:
        mrec.write_record(target, meta={}, frame={"blocks": {"a": {"x": np.ones(2)}}})
        if where == "inside":
            os.symlink(to, os.path.join(target, "linked"))
            os.symlink(to, os.path.join(target, "frame", "linked"))
    if where == "beside":
        for bait in (f".{name}.mrec-tmp-{rng.getrandbits(32):08x}", f".mrec-tmp-{name}.{rng.getrandbits(32):08x}",
                     f".mrec-tmp-new-{name}", f".mrec-tmp-old-{name}"):
            os.symlink(to, os.path.join(work, bait))
    overwrite = rng.random() < 0.7

    def run():
        got = None
        try:
            call(target, overwrite)
        except mrec.MrecError as exc:
            got = exc
        if _snapshot(outside) != before:
            raise AssertionError(f"{op} changed what {target} {'is' if where == 'target' else 'holds'} a link to")
        if where == "target" and not (isinstance(got, RefusalError) and got.kind == "bad_target"
                                      and target in str(got) and os.readlink(target) == to):
            raise AssertionError(f"{op} into a link: {got!r}, not a bad_target refusal naming it")
        if where == "beside" and sum(".mrec-tmp-" in e for e in os.listdir(work)) != 4:
            raise AssertionError(f"{op}: links named like leftovers beside {name} were not left alone")
        if got is not None:
            raise got
    return f"{op} (overwrite={overwrite}) with a link {where} to {os.path.relpath(to, outside)}", run
