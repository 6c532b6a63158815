"""Fuzz the readers: mutated zarr.json, shard and zip bytes of real stores.

Builds a few small real records (regular and ragged blocks, masks, a changing box,
meta, irregular steps; one packed to ``*.mrec.zip``), then for each input mutates
one file — a ``zarr.json`` (bit flips, byte edits, truncation, splices of hostile
JSON values: huge, negative, fractional, nested), a shard (bit flips, byte runs,
truncation, extension) or the zip archive (the same, anywhere in it) — and opens
and reads everything with ``mrec.TrajectoryReader``. The only exceptions allowed
are ``mrec.MrecError``; anything else (and any input that takes over 5 s) is a
failure, saved under ``--out`` for reproduction.

Two more targets take the hostile classes of issue 17: ``bounds`` plants untrusted
sizes (gzip / zstd bombs, a frame stating a huge content size, a vlen-utf8 count far
beyond its chunk, a 1 KB zarr.json declaring ~2^40 chunks, declared rows far beyond
the frames, zip entry names of thousands of components; since issue 27 also real stores whose
zarr.json claims what their files do not hold -- a frame column of 2^28..2^33 rows over one
chunk, nstep 2^31..2^62 over one frame -- each under a 200 MiB allocation bound) and reads them
with the array reader, the record readers and ``validate --deep``; ``inputs`` calls the writers with what a user
can get wrong (node names with NUL, '/', a backslash, only periods, 300 bytes or a
lone surrogate; JSON documents nested thousands deep; targets inside a regular file).

Target ``cut`` (issue 27) cuts a trajectory shard at a random byte offset of a store written
with random values and flushes (``tools/cutsweep.py``, four array kinds) and checks that the
reader returns the written bits or raises ``CorruptionError`` or warns ``StandInWarning``,
and that ``validate --deep`` and ``mrec repair`` say the documented thing; a breach is a failure.

Target ``links`` (issue 27) puts a symbolic link -- to a directory, a record, a file, or dangling --
where a writer, pack, unpack, repack or repair writes, inside a record it replaces, or beside it
under the names of mrec's leftovers, and checks that it is refused (``bad_target``, naming it) or
unlinked / left alone, and that nothing it leads to changes; a breach is a failure.

Target ``remote`` (issue 27) serves the seed directory and archive from a hostile HTTP server on
127.0.0.1 (``spec_tests/servers.py``; loopback only, started once a run, stopped at its end) that
misbehaves on one or two of its files or directory pages per input: a 404 for what the listing names,
``Range`` ignored, a flood or an endless body, a stall inside a body, a slow answer, a flipped bit, a
500, a body cut short or a short body. Every input reads the whole record at the URL (timeouts of
0.25 s through ``MREC_STORAGE_OPTIONS``): the same content as the local record, or an ``MrecError``.

    python tools/fuzz.py --n 100000            # the long run
    python tools/fuzz.py --n 300 --seed 1      # a short run (the CI test)

Prints inputs run per target, outcomes (read cleanly / refused) and failures; exits 1
on any failure.
"""
from __future__ import annotations

import argparse
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


# -- bounds: untrusted sizes (issue 17.11) ---------------------------------------------------------

_BOMBS: dict = {}


def _bomb(kind: str) -> bytes:
    """A 64 MiB piece of zeros, compressed once (gzip member / zstd frame without a size / with one)."""
    if kind not in _BOMBS:
        import gzip
        import zstandard
        zeros = bytes(64 << 20)
        _BOMBS[kind] = {"gzip": lambda: gzip.compress(zeros, compresslevel=1),
                        "zstd": lambda: zstandard.ZstdCompressor(level=1, write_content_size=False).compress(zeros),
                        "zstd_sized": lambda: zstandard.ZstdCompressor(level=1).compress(zeros)}[kind]()
    return _BOMBS[kind]


def _doc(shape, chunks, dtype="float64", codecs=None, fill=0.0) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": fill,
            "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}]}


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _stored_zip(entries: list[tuple[str, bytes]]) -> bytes:
    import struct
    import zlib
    local, cd = b"", b""
    for name, data in entries:
        nm = name.encode("utf-8", "surrogatepass")
        crc = zlib.crc32(data)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0x800, 0, 0, 0x21, crc, len(data), len(data),
                          len(nm), 0, 0, 0, 0, 0, len(local)) + nm
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x800, 0, 0, 0x21, crc, len(data), len(data),
                             len(nm), 0) + nm + data
    return local + cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(cd), len(local), 0)


#: most bytes (tracemalloc) one input of the issue-27 claims may allocate
CLAIM_PEAK = 200 << 20


def _peak_bounded(fn):
    """``fn`` run under tracemalloc: an AssertionError (a failure) when it allocated more than
    CLAIM_PEAK, whatever it raised."""
    import tracemalloc

    def run():
        tracemalloc.start()
        refused = None
        try:
            fn()
        except mrec.MrecError as exc:
            refused = exc
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        if peak > CLAIM_PEAK:
            raise AssertionError(f"peak {peak >> 20} MiB (refused: {refused})")
        if refused is not None:
            raise refused
    return run


def _edit(path: str, edit) -> None:
    with open(path) as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


def _claim_case(rng: random.Random, root: str, kind: int) -> tuple[str, callable]:
    """A small real store whose zarr.json claims far more than its files hold: a frame column (a fixed
    array) of 2^28..2^33 rows over one stored chunk, or a trajectory of nstep 2^31..2^62 over one
    stored frame; read by the readers and ``validate --deep`` in bounded memory and time."""
    from mrec.check.validate import validate
    shutil.rmtree(root)
    if kind == 7:
        rows = rng.choice([2**28, 2**31, 2**33])
        chunk = rng.choice([5, rows])
        mrec.write_record(root, meta={}, frame={"blocks": {"atoms": {"x": np.arange(5.0)}}},
                          compression=rng.choice([None, "zstd"]))
        _edit(f"{root}/frame/atoms/x/zarr.json", lambda d: (
            d.update(shape=[rows]), d["chunk_grid"]["configuration"].update(chunk_shape=[chunk])))
        _edit(f"{root}/frame/atoms/zarr.json", lambda d: d["attributes"].update(count=rows))

        def run():
            try:
                mrec.read_frame(root)
            finally:
                validate(root, deep=True)
        return f"a frame column claiming {rows} rows in chunks of {chunk}", _peak_bounded(run)
    e = rng.choice([31, 40, 62])
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    s.declare_meta("pe", "f64")
    with mrec.TrajectoryWriter.create(root, s) as w:
        w.append({"blocks": {"atoms": {"x": np.arange(3.0)}}, "meta": {"pe": 1.0}})
    _edit(f"{root}/trajectory/zarr.json", lambda d: d["attributes"].update(
        nstep=2**e, step_progression={"start": 0, "stride": 1}))
    grown = [a for a in ("atoms/x", "meta/pe") if rng.random() < 0.5]
    for a in grown:
        _edit(f"{root}/trajectory/{a}/zarr.json", lambda d: d.update(shape=[3 * 2**e if a == "atoms/x" else 2**e]))

    def run():
        try:
            r = mrec.TrajectoryReader(root)
            r[len(r) - 1]
        finally:
            validate(root, deep=True)
    return f"nstep 2^{e} over one stored frame (grown: {grown})", _peak_bounded(run)


def bounds_case(rng: random.Random, work: str) -> tuple[str, callable]:
    """(what, run): one hostile-size input planted in a fresh directory under ``work``."""
    import struct
    from mrec.check.validate import validate
    from mrec.zarr.array import Array
    from mrec.zarr.stores.directory import DirectoryStore
    root = tempfile.mkdtemp(prefix="b", dir=work) + "/r.mrec"
    _write(f"{root}/zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    n = rng.choice([1, 10, 1000, 4096])
    kind = rng.randrange(9)
    by = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if kind <= 2:                                  # compression bombs: 64 MiB .. 2 GiB of zeros
        codec = ["gzip", "zstd", "zstd"][kind]
        bomb = _bomb(["gzip", "zstd", "zstd_sized"][kind])
        reps = 1 if kind == 2 else rng.choice([1, 4, 20, 32])
        inner = rng.random() < 0.5
        cfg = [*by, {"name": codec, "configuration": {"level": 1}}]
        if inner:
            from mrec.zarr.codecs.sharding import ShardIndex
            from mrec.zarr.pipeline import CodecPipeline
            codecs = [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [n], "codecs": cfg, "index_location": "start",
                "index_codecs": [*by, {"name": "crc32c"}]}}]
            sh = CodecPipeline.from_json(codecs, "fuzz").array_bytes
            index = ShardIndex.empty((1,))
            index.offsets[0], index.nbytes[0] = sh.index_size((1,)), len(bomb) * reps
            chunk = sh.encode_index(index) + bomb * reps
        else:
            codecs, chunk = cfg, bomb * reps
        _write(f"{root}/a/zarr.json", json.dumps(_doc([n], [n], codecs=codecs)).encode())
        _write(f"{root}/a/c/0", chunk)
        what = f"{codec} bomb of {reps} x 64 MiB{' in a shard' if inner else ''} for {n} float64"
    elif kind == 3:                                # a vlen-utf8 count far beyond its chunk
        count = rng.choice([2**20, 2**31, 2**32 - 1, n])
        _write(f"{root}/a/zarr.json", json.dumps(_doc([count], [count], "string", [{"name": "vlen-utf8"}], "")).encode())
        _write(f"{root}/a/c/0", struct.pack("<I", count) + bytes(rng.randrange(0, 64)))
        what = f"vlen-utf8 chunk declaring {count} strings"
    elif kind == 4:                                # a 1 KB zarr.json declaring ~2^40 chunks
        e = rng.choice([10, 20, 24])
        _write(f"{root}/a/zarr.json", json.dumps(_doc([2**e, 2**e], [1, 1])).encode())
        for _ in range(rng.randrange(4)):
            _write(f"{root}/a/c/{rng.randrange(2**e)}/{rng.randrange(2**e)}", bytes(rng.choice([8, 3])))
        # only the deep walk: a read of one row of it is 2^e lookups the caller asked for
        return f"shape 2^{e} x 2^{e} of one-element chunks", lambda: validate(root, deep=True)
    elif kind == 5:                                # declared rows far beyond the frames
        rows = rng.choice([2**31, 2**40, 2**62])

        def run():
            s = mrec.SequenceSchema()
            s.declare_block("atoms", rows=rows)
            s.declare_column("atoms", "u", "f64", trailing=(3,))
            with mrec.TrajectoryWriter.create(root.replace("r.mrec", "t.mrec"), s) as w:
                w.append({"blocks": {"atoms": {"u": np.zeros((3, 3))}}})
        return f"rows={rows} for a 3-row frame", run
    elif kind >= 7:                                # claims the files do not back (issue 27)
        return _claim_case(rng, root, kind)
    else:                                          # zip entry names of thousands of components
        depth = rng.choice([300, 2000, 32767])
        name = "/".join(["a"] * depth) if rng.random() < 0.5 else "x" * rng.choice([256, 5000, 65535])
        z = root + ".zip"
        with open(z, "wb") as f:
            f.write(_stored_zip([("zarr.json", b'{"zarr_format": 3, "node_type": "group"}'), (name, b"x")]))

        def run():
            try:
                mrec.TrajectoryReader(z)
            finally:
                mrec.unpack(z, out=root.replace("r.mrec", "u.mrec"))
        return f"zip entry name of {len(name)} characters", run

    def run():
        st = DirectoryStore(root)
        try:
            Array.open(st, "a").read(slice(0, 1))
        finally:
            validate(root, deep=True)
    return what, run


# -- inputs: what a user can get wrong (issue 17.12) -------------------------------------------------

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


_CUT_SEEDS: dict = {}


def cut_case(rng: random.Random, work: str) -> tuple[str, callable]:
    """A shard of a small store (one of four array kinds, random values with many zeros, random
    flushes; built once a run and kind) cut at a random offset: the rules of tools/cutsweep.py."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import cutsweep
    kind = rng.choice(cutsweep.KINDS)
    key = (work, kind)
    if key not in _CUT_SEEDS:
        os.makedirs(work, exist_ok=True)
        pick = [0.0, 0.0, -0.0, float("nan"), 1.5, rng.uniform(-9, 9)]
        values = [[rng.choice(pick) for _ in range(cutsweep.ROWS)] for _ in range(rng.randint(3, 10))]
        flushes = {i for i in range(len(values)) if rng.random() < 0.6}
        _CUT_SEEDS[key] = cutsweep.build(work, kind, values, flushes)
    seed = _CUT_SEEDS[key]
    shard = rng.choice(seed.shards)
    cut = rng.randrange(len(shard.original))

    def run():
        found = cutsweep.check_cut(seed, shard, cut)
        if found:
            raise AssertionError("; ".join(found[:3]))
    return f"{kind} {shard.key} cut at {cut} of {len(shard.original)}", run


_REMOTE: dict = {}
#: What the hostile server may do to a file, and to a directory page (spec_tests/servers.py).
REMOTE_FILE_FAULTS = ("missing", "norange", "flood", "endless", "stall", "slow", "flip", "error", "cut", "short")
REMOTE_PAGE_FAULTS = ("missing", "flood", "endless", "slow")
REMOTE_OPTIONS = {"read_timeout": 0.25, "connect_timeout": 2}


def _remote_setup(work: str, seeds: list[str]) -> dict | None:
    """The hostile server (on 127.0.0.1) over a copy of the seed directory and archive, and what the
    local copies read as; None without the remote extra."""
    try:
        import aiohttp  # noqa: F401
        import fsspec  # noqa: F401
    except ImportError:
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spec_tests"))
    from pathlib import Path
    from servers import http_server
    from mrec.check.fixtures import describe
    root = os.path.join(work, "served")
    shutil.copytree(seeds[0], os.path.join(root, "r.mrec"))
    shutil.copy(seeds[2], os.path.join(root, "r.mrec.zip"))
    server = http_server(Path(root))
    server.delay, server.flood_bytes = 0.5, 16 * 1024 * 1024
    tree = os.path.join(root, "r.mrec")
    files = ["/r.mrec/" + os.path.relpath(f, tree).replace(os.sep, "/") for f in files_of(tree, lambda f, d: True)]
    pages = ["/r.mrec/"] + ["/r.mrec/" + os.path.relpath(d, tree).replace(os.sep, "/") + "/"
                            for d, _, _ in os.walk(tree) if d != tree]
    return {"server": server, "files": files, "pages": pages, "chunks": [f for f in files if "/c/" in f],
            "want": {form: describe(os.path.join(root, "r" + form)) for form in (".mrec", ".mrec.zip")}}


def _remote_faults(rng: random.Random, state: dict, form: str) -> dict[str, str]:
    """One or two (URL path suffix -> mode); a flipped bit only where a checksum covers it (the archive,
    the chunks of the directory form: its zarr.json files have none, on disk or served)."""
    faults = {}
    for _ in range(rng.choice((1, 1, 2))):
        mode = rng.choice(REMOTE_FILE_FAULTS)
        if form == ".mrec.zip":
            faults["/r.mrec.zip"] = mode
        elif mode == "flip":
            faults[rng.choice(state["chunks"])] = mode
        elif mode in REMOTE_PAGE_FAULTS and rng.random() < 0.3:
            faults[rng.choice(state["pages"])] = mode
        else:
            faults[rng.choice(state["files"])] = mode
    return faults


def remote_case(rng: random.Random, work: str, seeds: list[str]) -> tuple[str, callable]:
    """The whole seed record read at a URL while the hostile server misbehaves: the local record's
    content or an MrecError."""
    if work not in _REMOTE:
        _REMOTE[work] = _remote_setup(work, seeds)
    state = _REMOTE[work]
    if state is None:
        return "skipped (no remote extra)", lambda: None
    from mrec.check.fixtures import describe
    form = rng.choice((".mrec", ".mrec.zip"))
    faults = _remote_faults(rng, state, form)
    server = state["server"]

    def run():
        server.faults.clear()
        server.faults.update(faults)
        before = os.environ.get("MREC_STORAGE_OPTIONS")
        os.environ["MREC_STORAGE_OPTIONS"] = json.dumps(REMOTE_OPTIONS)
        try:
            got = describe(server.url + "/r" + form)
        finally:
            server.faults.clear()
            if before is None:
                os.environ.pop("MREC_STORAGE_OPTIONS")
            else:
                os.environ["MREC_STORAGE_OPTIONS"] = before
        if got != state["want"][form]:
            raise AssertionError(f"wrong content read through {faults}")
    return f"r{form} with {faults}", run


def _remote_stop() -> None:
    for state in _REMOTE.values():
        if state is not None:
            state["server"].stop()
    _REMOTE.clear()


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


def files_of(root: str, pred) -> list[str]:
    out = []
    for d, _, fs in os.walk(root):
        for f in fs:
            if pred(f, d):
                out.append(os.path.join(d, f))
    return sorted(out)


def attempt(fn, target: str, victim: str, data: bytes, failures: list) -> int:
    """Run one input: 0 read cleanly, 1 refused with an MrecError, 2 failed (anything else, or over
    5 s; appended to ``failures``)."""
    started = time.time()
    try:
        fn()
        outcome = 0
    except mrec.MrecError:
        outcome = 1
    except BaseException as exc:           # noqa: BLE001 - the point of the fuzzer
        if isinstance(exc, KeyboardInterrupt):
            raise
        failures.append((target, victim, data, f"{type(exc).__name__}: {exc}"[:500], traceback.format_exc(limit=-6)))
        return 2
    if time.time() - started > 5:
        failures.append((target, victim, data, f"slow: {time.time() - started:.1f} s", ""))
        return 2
    return outcome


def run(n: int, seed: int, out_dir: str | None, verbose: bool) -> int:
    t0 = time.time()
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="mrec-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    targets = ("zarr.json", "shard", "zip", "bounds", "inputs", "cut", "remote", "links")
    counts = {t: [0, 0, 0] for t in targets}     # clean, refused, failed
    failures = []
    try:
        seeds = build(work)
        dirs, archive = seeds[:2], seeds[2]
        metas = [f for d in dirs for f in files_of(d, lambda f, _: f == "zarr.json")]
        shards = [f for d in dirs for f in files_of(d, lambda f, p: f != "zarr.json" and f"{os.sep}c" in p)]
        zip_bytes = open(archive, "rb").read()
        bad_zip = os.path.join(work, "fuzz.mrec.zip")
        for k in range(n):
            target = targets[k % len(targets)]
            if target in ("bounds", "inputs", "links"):
                cases = os.path.join(work, "cases")
                shutil.rmtree(cases, ignore_errors=True)
                os.makedirs(cases)
                what, fn = {"bounds": bounds_case, "inputs": inputs_case, "links": links_case}[target](rng, cases)
                counts[target][attempt(fn, target, what, what.encode("utf-8", "backslashreplace"), failures)] += 1
                continue
            if target == "cut":
                what, fn = cut_case(rng, os.path.join(work, "cut"))
                counts[target][attempt(fn, target, what, what.encode(), failures)] += 1
                continue
            if target == "remote":
                what, fn = remote_case(rng, os.path.join(work, "remote"), seeds)
                counts[target][attempt(fn, target, what, what.encode(), failures)] += 1
                continue
            if target == "zip":
                data = mutate_bytes(rng, zip_bytes)
                with open(bad_zip, "wb") as f:
                    f.write(data)
                path, victim, original = bad_zip, bad_zip, None
            else:
                victim = rng.choice(metas if target == "zarr.json" else shards)
                original = open(victim, "rb").read()
                data = (mutate_json if target == "zarr.json" else mutate_bytes)(rng, original)
                with open(victim, "wb") as f:
                    f.write(data)
                path = next(d for d in dirs if victim.startswith(d + os.sep))
            counts[target][attempt(lambda: read_all(path), target, victim, data, failures)] += 1
            if original is not None:
                with open(victim, "wb") as f:
                    f.write(original)
            if verbose and (k + 1) % 5000 == 0:
                print(f"  {k + 1} inputs, {len(failures)} failures, {time.time() - t0:.0f} s", flush=True)
        if failures and out_dir:
            os.makedirs(out_dir, exist_ok=True)
            for i, (target, victim, data, what, tb) in enumerate(failures[:50]):
                with open(os.path.join(out_dir, f"failure{i}.{target.replace('.', '_')}"), "wb") as f:
                    f.write(data)
                with open(os.path.join(out_dir, f"failure{i}.txt"), "w") as f:
                    where = victim if target in ("bounds", "inputs", "cut", "links", "remote") else os.path.relpath(victim, work)
                    f.write(f"{target} {where}\n{what}\n{tb}")
    finally:
        _remote_stop()
        shutil.rmtree(work, ignore_errors=True)
    total = sum(sum(c) for c in counts.values())
    print(f"fuzz: {total} inputs (seed {seed}) in {time.time() - t0:.1f} s; "
          + "; ".join(f"{t}: {c[0]} read, {c[1]} refused, {c[2]} failed" for t, c in counts.items())
          + f"; failures {len(failures)}")
    for target, victim, _, what, tb in failures[:10]:
        print(f"  [{target}] {victim if target in ('bounds', 'inputs', 'cut', 'links', 'remote') else os.path.basename(victim)}: {what}")
        if verbose:
            print(tb)
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="inputs to run (default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder for reproducers of failures")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    return run(a.n, a.seed, a.out, a.verbose)


if __name__ == "__main__":
    sys.exit(main())
