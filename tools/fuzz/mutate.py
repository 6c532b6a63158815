"""The seed records and the mutations of the targets ``zarr.json``, ``shard`` and ``zip``: a file's
bytes flipped, overwritten, cut, extended, or (``zarr.json``) a JSON value replaced by a hostile one;
``read_all`` reads a whole record as the inputs are judged by."""
from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np

import mrec


HOSTILE_VALUES = [0, -1, 1.5, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308, "x", "", None, True, [], {},
                  [2**62], [0], [-1], [1] * 40, {"a": [[[[[]]]]]}, "NaN", "Infinity", "0xffffffffffffffff"]


def build(root: str) -> list[str]:
    """Seed records: two directories and one archive; returns their paths."""
    out = []
    for k, (ragged, compression) in enumerate([(True, "zstd"), (False, None)]):
        s = mrec.SequenceSchema()
        s.declare_block("atoms", rows=3)
        s.declare_column("atoms", "x", "f64", precision=1e-3)
        s.declare_column("atoms", "id", "u64")
        if ragged:
            s.declare_block("ions")
            s.declare_column("ions", "q", "f64", nullable=True)
            s.declare_column("ions", "name", "string")
        s.declare_meta("pe", "f64")
        p = os.path.join(root, f"seed{k}.mrec")
        rng = np.random.default_rng(k)
        with mrec.TrajectoryWriter.create(p, s, flush_every=3, compression=compression) as w:
            for i in range(10):
                f = {"blocks": {"atoms": {"x": rng.normal(size=3), "id": np.arange(3, dtype=np.uint64)}},
                     "meta": {"pe": float(i)}}
                if ragged and i % 3 != 2:
                    n = int(rng.integers(0, 4))
                    f["blocks"]["ions"] = {"q": rng.normal(size=n), "name": [f"i{j}" for j in range(n)]}
                    f["masks"] = {"ions": {"q": rng.random(n) < 0.5}}
                if i % 4 == 0:
                    f["box"] = mrec.Box(np.eye(3) * (3 + i), np.zeros(3), np.ones(3, bool), True)
                w.append(f, step=i * i, time=0.1 * i)
        out.append(p)
    z = mrec.pack(out[0], keep=True)
    shutil.move(z, os.path.join(root, "seed.mrec.zip"))
    out.append(os.path.join(root, "seed.mrec.zip"))
    return out


def read_all(path: str) -> None:
    r = mrec.TrajectoryReader(path)
    r.steps
    r.times
    for i in range(len(r)):
        r[i]
    for b in r.schema.blocks:
        for c in r.schema.blocks[b].columns:
            try:
                r.column(b, c)
            except mrec.MrecError:
                pass
    r.close()


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    op = rng.randrange(7)
    if not b:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if op == 0:                                    # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif op == 1:                                  # a byte run overwritten
        i = rng.randrange(len(b))
        n = rng.randint(1, 64)
        b[i:i + n] = bytes([rng.choice([0, 0xFF, rng.randrange(256)])]) * n
    elif op == 2:                                  # truncation
        del b[rng.randrange(len(b)):]
    elif op == 3:                                  # extension
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 600)))
    elif op == 4:                                  # deletion inside
        i = rng.randrange(len(b))
        del b[i:i + rng.randint(1, 32)]
    elif op == 5:                                  # insertion inside
        i = rng.randrange(len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    else:                                          # a little-endian integer field set to an extreme
        i = rng.randrange(max(1, len(b) - 8))
        b[i:i + 8] = rng.choice([2**64 - 1, 2**63, 2**32 - 1, 0, 1 << rng.randrange(64)]).to_bytes(8, "little")
    return bytes(b)


def mutate_json(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.4:
        return mutate_bytes(rng, data)
    try:
        doc = json.loads(data)
    except ValueError:
        return mutate_bytes(rng, data)
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])
    walk(doc, [])
    path = rng.choice(paths[1:] or [[]])
    if not path:
        return json.dumps(rng.choice(HOSTILE_VALUES)).encode()
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(HOSTILE_VALUES)
    return json.dumps(doc).encode()


def files_of(root: str, pred) -> list[str]:
    out = []
    for d, _, fs in os.walk(root):
        for f in fs:
            if pred(f, d):
                out.append(os.path.join(d, f))
    return sorted(out)
