"""Target ``bounds``: untrusted sizes (issue 17.11, claims of issue 27) planted in fresh stores --
compression bombs, huge counts and shapes, zip entry names of thousands of components, zarr.json
claiming what the files do not hold -- read under a bound on allocation."""
from __future__ import annotations

import json
import os
import random
import shutil
import tempfile

import numpy as np

import mrec


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
