"""Target ``inputs``: the writers called with what a user can get wrong (issue 17.12): bad node names,
JSON documents nested thousands deep, targets inside a regular file."""
from __future__ import annotations

import os
import random
import tempfile

import numpy as np

import mrec


BAD_NAMES = ["x\0y", "a" * 300, "...", "a\\b", "a/b", "__x", "", "a\ud800", "\u00e9" * 128, ".", "ok"]


def _deep(rng: random.Random):
    d: object = rng.choice([[], {}])
    for _ in range(rng.choice([100, 300, 1000, 5000])):
        d = [d] if rng.random() < 0.5 else {"k": d}
    return d


def inputs_case(rng: random.Random, work: str) -> tuple[str, callable]:
    base = tempfile.mkdtemp(prefix="i", dir=work)
    name = rng.choice(BAD_NAMES)
    frame = {"blocks": {"atoms": {"u": np.ones(2)}}}
    p = os.path.join(base, "r.mrec")
    kind = rng.randrange(9)
    if kind == 0:
        return f"block {name!r}", lambda: mrec.SequenceSchema().declare_block(name, rows=2)
    if kind == 1:
        def run():
            s = mrec.SequenceSchema()
            s.declare_block("atoms", rows=2)
            s.declare_column("atoms", name, "f64")
            s.declare_meta(name, "f64")
        return f"column / meta key {name!r}", run
    if kind == 2:
        return f"frame block {name!r}", lambda: mrec.write_record(p, meta={}, frame={"blocks": {name: {"u": np.ones(2)}}})
    if kind == 3:
        return f"observable / metrics {name!r}", lambda: mrec.write_record(
            p, meta={}, frame=frame, metrics={name: [1.0]},
            observables={name: {"data": np.ones(2), "kind": "s", "description": "", "time_dependent": False}})
    doc = _deep(rng)
    if kind == 4:
        return "deep record documents", lambda: mrec.write_record(p, meta={"d": doc}, frame=frame, status={"d": doc})
    if kind == 5:
        def run():
            s = mrec.SequenceSchema()
            s.declare_block("atoms", rows=2)
            s.declare_column("atoms", "u", "f64")
            with mrec.TrajectoryWriter.create(p, s) as w:
                w.append({**frame, "meta": {"d": doc}})
        return "deep frame meta", run
    if kind == 6:
        return "deep schema extra", lambda: mrec.SequenceSchema().declare_block("a", rows=1, extra={"x": doc})
    reg = os.path.join(base, "reg")
    with open(reg, "w") as f:
        f.write("x")
    inside = os.path.join(reg, rng.choice(["t.mrec", "a/b.mrec"]))
    if kind == 7:
        def run():
            s = mrec.SequenceSchema()
            s.declare_block("atoms", rows=2)
            s.declare_column("atoms", "u", "f64")
            if rng.random() < 0.5:
                mrec.TrajectoryWriter.create(inside if rng.random() < 0.5 else reg, s).close()
            else:
                mrec.write_record(inside, meta={}, frame=frame)
        return "a record inside a regular file", run

    def run():
        mrec.write_record(p, meta={}, frame=frame)
        z = mrec.pack(p, out=inside + ".zip" if rng.random() < 0.5 else os.path.join(base, "r.mrec.zip"))
        mrec.unpack(z, out=inside)
    return "pack / unpack inside a regular file", run
