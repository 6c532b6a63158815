"""The read path's trust rules (issues 13 and 17): a chunk never written reads as the fill value,
a chunk whose bytes are lost or run past the end of its file is corruption, a shard index that
fails its crc32c is never read through, byte ranges are bounded before any read, and the
Zarr V3 forms other writers produce (0-d sharded arrays, array→array index codecs) are read.
"""
from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

import mrec
import mrec.repair  # noqa: F401  (mrec.repair.repair below)
from mrec.errors import CorruptionError, RefusalError
from mrec.record.trajectory.layout import load_layout
from mrec.record.trajectory.reader import TrajectoryReader
from mrec.record.trajectory.store import open_store
from mrec.check.validate import validate
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore

from test_corruption import snapshot  # noqa: E402  (spec_tests is on sys.path under pytest)


# -- A / B: a chunk or shard never written reads as the fill value --------------------------------

def _zero_store(root, nullable_null=True):
    """One frame whose every trajectory array holds only fill values where it can: x all zeros,
    a null ion (mask False, value 0), meta 0.0, time 0.0, a cell of zeros with origin 0."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    s.declare_block("ions")
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_meta("pe", "f64")
    with mrec.TrajectoryWriter.create(root, s) as w:
        w.append({"blocks": {"atoms": {"x": np.zeros(3)}, "ions": {"q": np.zeros(1)}},
                  "masks": {"ions": {"q": np.array([False])}},
                  "box": mrec.Box(np.eye(3), np.zeros(3), np.ones(3, bool), True),
                  "meta": {"pe": 0.0}}, step=0, time=0.0)
        w.append({"blocks": {"atoms": {"x": np.zeros(3)}, "ions": {"q": np.zeros(2)}},
                  "masks": {"ions": {"q": np.array([False, False])}},
                  "meta": {"pe": 0.0}}, step=7, time=1.0)
        w.append({"blocks": {"atoms": {"x": np.zeros(3)}},
                  "box": mrec.Box(np.eye(3) * 2, np.ones(3), np.ones(3, bool), True),
                  "meta": {"pe": 0.0}}, step=8, time=5.0)


def _shard_keys(root):
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
            if "/c/" in rel and rel.startswith("trajectory/"):
                out.append(rel)
    return sorted(out)


def _array_of(rel):
    return rel.split("/c/")[0]


def test_the_issue_example_a_deleted_x_shard_reads_as_zeros(tmp_path):
    root = tmp_path / "z.mrec"
    _zero_store(root)
    want = snapshot(str(root))
    os.unlink(root / "trajectory" / "atoms" / "x" / "c" / "0")
    r = TrajectoryReader(root)
    assert r[0].blocks["atoms"]["x"].tobytes() == np.zeros(3).tobytes()
    assert snapshot(str(root)) == want


@pytest.mark.parametrize("form", ["dir", "zip"])
def test_every_trajectory_array_kind_missing_its_shard_reads_fill(tmp_path, form):
    """For every shard of every trajectory array kind (columns, masks, step, time, meta, offset,
    step_index, the box arrays): without its shard the array reads as its fill value, the
    reader opens without a CorruptionError, and validate --deep agrees with the reader."""
    src = tmp_path / "src.mrec"
    _zero_store(src)
    keys = _shard_keys(src)
    kinds = {_array_of(k).split("/", 1)[1] for k in keys}
    assert {"atoms/x", "ions/q", "ions/_validity/q", "ions/offset", "ions/step_index", "step",
            "time", "meta/pe", "box/vectors", "box/origin", "box/step_index"} <= kinds, kinds
    for n, rel in enumerate(keys):
        d = tmp_path / f"d{n}.mrec"
        shutil.copytree(src, d)
        os.unlink(d / rel)
        path = mrec.pack(d) if form == "zip" else d
        store = open_store(path)
        node = Array.open(store, _array_of(rel))
        got = node.read()
        assert got.tobytes() == np.full(got.shape, node.meta.fill_value, dtype=got.dtype).tobytes(), rel
        try:
            r = TrajectoryReader(path)
            frames = [r[i] for i in range(len(r))]
        except CorruptionError as exc:                  # never: a missing chunk is not corruption
            raise AssertionError(f"{rel}: {exc}") from None
        except RefusalError as exc:                     # content rules may refuse what fill makes
            frames = exc
        rep = validate(path, deep=True)
        if isinstance(frames, RefusalError):
            assert not rep.ok and any(v.kind == frames.kind for v in rep.violations), (rel, rep.violations)
        else:
            assert rep.ok, (rel, [str(v) for v in rep.violations])
            # and validate says where the fill came from
            assert any("never written" in w.message and rel.split("/c/")[0] in w.path for w in rep.warnings), \
                (rel, [str(w) for w in rep.warnings])


def test_missing_step_shard_reader_and_validate_agree(tmp_path):
    """Issue 17.3: the reader refused a store with its trajectory/step shard gone while validate
    --deep said ok. Both now read the step shard as fill (the Zarr rule) and agree."""
    root = tmp_path / "s.mrec"
    s = mrec.SequenceSchema()
    s.declare_meta("pe", "f64")
    with mrec.TrajectoryWriter.create(root, s) as w:
        for i, step in enumerate((0, 3, 4)):
            w.append(mrec.Frame(meta={"pe": float(i)}), step=step)
    assert (root / "trajectory" / "step" / "c" / "0").exists()
    os.unlink(root / "trajectory" / "step" / "c" / "0")
    r = TrajectoryReader(root)
    assert r.steps.tolist() == [0, 0, 0] and [r[i].meta["pe"] for i in range(3)] == [0.0, 1.0, 2.0]
    rep = validate(root, deep=True)
    assert rep.ok and rep.checked["frames"] == 3
    assert [w.path for w in rep.warnings if "never written" in w.message] == [str(root / "trajectory" / "step")]


# -- F / H: byte ranges bounded before any read; an entry's failure is named as such -------------

from mrec.zarr.array import write_group  # noqa: E402
from mrec.zarr.dtypes import DATA_TYPES  # noqa: E402
from mrec.zarr.metadata import ArrayMetadata  # noqa: E402
from mrec.zarr.pipeline import CodecPipeline  # noqa: E402
from mrec.zarr.stores.directory import DirectoryStore as _DS  # noqa: E402

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}
BIG = 2**64 - 1


def _sharded_array(store, path, location, inner_codecs=None, index_codecs=None, n=8, inner=4):
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [inner], "codecs": inner_codecs or [BYTES, CRC],
        "index_codecs": index_codecs or [BYTES, CRC], "index_location": location}}]
    meta = ArrayMetadata.create((n,), DATA_TYPES["int64"], (n,), CodecPipeline.from_json(codecs, path))
    a = Array.create(store, path, meta)
    a.write(np.arange(n, dtype=np.int64))
    return a


def _set_entry(store, a, key, coord, off, nb):
    """Rewrite entry ``coord`` of the shard at ``key`` (index re-encoded: its crc32c verifies)."""
    index = a.shard_index(key, cached=False).copy()
    index.offsets[coord] = off
    index.nbytes[coord] = nb
    raw = bytearray(store.get(key))
    enc = a.sharding.encode_index(index)
    if a.sharding.index_location == "start":
        raw[:len(enc)] = enc
    else:
        raw[len(raw) - len(enc):] = enc
    store.set(key, bytes(raw))


HOSTILE = [(2**63, 8), (2**63 + 5, 2**63), (BIG, 0), (0, BIG), (8, 2**40), (BIG - 7, 16), (40, 10**6)]


@pytest.mark.parametrize("form", ["dir", "zip"])
@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("entry", HOSTILE, ids=[f"{o:x}+{n:x}" for o, n in HOSTILE])
def test_index_entries_past_the_shard_are_corruption_naming_the_entry(tmp_path, form, location, entry):
    root = tmp_path / "r.mrec"
    st = _DS(root)
    write_group(st, "")
    a = _sharded_array(st, "x", location)
    _set_entry(st, a, "x/c/0", 1, *entry)
    path = mrec.pack(root, keep=True) if form == "zip" else root
    store = open_store(path)
    with pytest.raises(CorruptionError) as info:
        Array.open(store, "x").read()
    msg = str(info.value)
    assert "x/c/0" in msg and "entry [1]" in msg, msg
    assert ("half-empty" in msg) if entry[0] == BIG or entry[1] == BIG else ("past the end" in msg), msg
    # the other inner chunk still reads: a range that needs only chunk 0 is not refused for chunk 1?
    # no: the index as a whole is not trusted once one entry is impossible
    with pytest.raises(CorruptionError):
        Array.open(store, "x").read(slice(0, 4))


def test_index_entry_failure_is_named_not_a_generic_decode_error(tmp_path):
    """Issue 13.9: an inner chunk that fails because its entry is wrong (it names bytes that are
    not that chunk) says that its shard index entry is the suspect, with the entry's range."""
    st = _DS(tmp_path / "r")
    a = _sharded_array(st, "x", "end", inner_codecs=[BYTES])
    index = a.shard_index("x/c/0", cached=False)
    _set_entry(st, a, "x/c/0", 1, int(index.offsets[1]) + 1, int(index.nbytes[1]) - 1)   # a short, shifted range
    with pytest.raises(CorruptionError) as info:
        Array.open(st, "x").read()
    msg = str(info.value)
    assert "inner chunk [1]" in msg and "shard index entry" in msg and f"{int(index.offsets[1]) + 1}" in msg, msg


def test_directory_store_range_reads_never_allocate_from_the_length(tmp_path):
    st = _DS(tmp_path)
    st.set("k", b"0123456789")
    assert st.get_range("k", 2**63 + 1, 8) == b""
    assert st.get_range("k", 4, 2**40) == b"456789"
    assert st.get_range("k", 2**64 - 1, 2**64 - 1) == b""
    assert st.get_range("k", -3, 2**62) == b"789"


# -- E: 0-d sharded arrays (chunk_shape [] with sharding_indexed) ---------------------------------

def _ts_zero_d(path, value, location):
    import tensorstore as ts
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "create": True,
                 "metadata": {"shape": [], "data_type": "float64",
                              "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
                              "codecs": [{"name": "sharding_indexed", "configuration": {
                                  "chunk_shape": [], "codecs": [BYTES, CRC], "index_codecs": [BYTES, CRC],
                                  "index_location": location}}]}}).result()
    t.write(np.float64(value)).result()


@pytest.mark.parametrize("location", ["start", "end"])
def test_zero_d_sharded_array_written_by_tensorstore_reads(tmp_path, location):
    _ts_zero_d(tmp_path / "a", -2.75, location)
    a = Array.open(_DS(tmp_path), "a")
    got = a.read()
    assert got.shape == () and got.tobytes() == np.float64(-2.75).tobytes()
    assert a[()].tobytes() == np.float64(-2.75).tobytes()


@pytest.mark.parametrize("location", ["start", "end"])
def test_zero_d_sharded_array_written_by_mrec_reads_in_the_oracles(tmp_path, location):
    import tensorstore as ts
    import zarr
    st = _DS(tmp_path)
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [], "codecs": [BYTES, CRC], "index_codecs": [BYTES, CRC], "index_location": location}}]
    meta = ArrayMetadata.create((), DATA_TYPES["float64"], (), CodecPipeline.from_json(codecs, "a"))
    Array.create(st, "a", meta).write(np.float64(6.5))
    assert Array.open(st, "a").read().tobytes() == np.float64(6.5).tobytes()
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")}}).result()
    assert t.read().result().tobytes() == np.float64(6.5).tobytes()
    assert zarr.open_array(str(tmp_path / "a"), mode="r")[...].tobytes() == np.float64(6.5).tobytes()


# -- G: index_codecs with an array→array codec of fixed size ------------------------------------

def test_transposed_index_codecs_written_by_zarr_python_read(tmp_path):
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, TransposeCodec
    data = np.arange(48, dtype=np.int64).reshape(8, 6) * 7 - 5
    for loc in ("start", "end"):
        z = zarr.create_array(zarr.storage.LocalStore(str(tmp_path / loc)), name="x", shape=(8, 6),
                              chunks=(8, 6), dtype="int64", compressors=None,
                              serializer=ShardingCodec(chunk_shape=(4, 3), codecs=[BytesCodec(), Crc32cCodec()],
                                                       index_codecs=[TransposeCodec(order=(2, 0, 1)), BytesCodec(),
                                                                     Crc32cCodec()], index_location=loc))
        z[:] = data
        doc = json.loads((tmp_path / loc / "x" / "zarr.json").read_text())
        assert doc["codecs"][0]["configuration"]["index_codecs"][0]["name"] == "transpose"
        a = Array.open(_DS(tmp_path / loc), "x")
        assert a.read().tobytes() == data.tobytes()
        assert a.read(slice(5, 7)).tobytes() == data[5:7].tobytes()


def test_transposed_index_codecs_written_by_mrec_read_in_zarr_python(tmp_path):
    import zarr
    st = _DS(tmp_path)
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 3], "codecs": [BYTES, CRC],
        "index_codecs": [{"name": "transpose", "configuration": {"order": [2, 1, 0]}}, BYTES, CRC],
        "index_location": "end"}}]
    data = np.arange(24, dtype=np.int64).reshape(4, 6)
    meta = ArrayMetadata.create((4, 6), DATA_TYPES["int64"], (4, 6), CodecPipeline.from_json(codecs, "a"))
    Array.create(st, "a", meta).write(data)
    assert zarr.open_array(str(tmp_path / "a"), mode="r")[...].tobytes() == data.tobytes()
    import tensorstore as ts
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")}}).result()
    assert t.read().result().tobytes() == data.tobytes()
    assert Array.open(st, "a").read().tobytes() == data.tobytes()


# -- D: a shard index that fails its crc32c is never trusted ------------------------------------

def _multi_chunk_store(root, frames=20):
    """A column of 400-atom f64 frames: 5 frames an inner chunk, several inner chunks a shard."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=400)
    s.declare_column("atoms", "x", "f64")
    rng = np.random.default_rng(4)
    data = [rng.normal(size=400) for _ in range(frames)]
    with mrec.TrajectoryWriter.create(root, s, compression=None) as w:
        for x in data:
            w.append({"blocks": {"atoms": {"x": x}}})
    return data


def _entries(raw, n):
    return [struct.unpack_from("<QQ", raw, 16 * c) for c in range(n)]


def _put_entries(path, ents):
    raw = bytearray(path.read_bytes())
    for c, (o, n) in enumerate(ents):
        struct.pack_into("<QQ", raw, 16 * c, o, n)
    path.write_bytes(bytes(raw))               # the index's crc32c is left as it was: it now fails


@pytest.mark.parametrize("how", ["swap01", "swap12", "dup0to1", "dup1to0", "rotate"])
def test_crc_failing_index_with_swapped_entries_is_never_read_wrong(tmp_path, how):
    from mrec.check.repair import repair
    root = tmp_path / "t.mrec"
    data = _multi_chunk_store(root)
    shard = root / "trajectory" / "atoms" / "x" / "c" / "0"
    a = Array.open(_DS(root), "trajectory/atoms/x")
    assert a.sharding.chunk_shape[0] * 3 < len(data) * 400      # at least 4 inner chunks
    ents = _entries(shard.read_bytes(), 4)
    e = list(ents)
    if how == "swap01":
        e[0], e[1] = ents[1], ents[0]
    elif how == "swap12":
        e[1], e[2] = ents[2], ents[1]
    elif how == "dup0to1":
        e[1] = ents[0]
    elif how == "dup1to0":
        e[0] = ents[1]
    else:
        e[0], e[1], e[2] = ents[1], ents[2], ents[0]
    _put_entries(shard, e)
    r = TrajectoryReader(root)
    for i in range(len(data)):
        try:
            got = r[i].blocks["atoms"]["x"]
        except CorruptionError as exc:
            assert "trajectory/atoms/x/c/0" in str(exc) and "mrec repair" in str(exc), str(exc)
            continue
        assert got.tobytes() == data[i].tobytes(), (how, i)      # never another chunk's rows
    rep = repair(root)
    r = TrajectoryReader(root)
    if rep.ok:
        assert [r[i].blocks["atoms"]["x"].tobytes() for i in range(len(data))] == [x.tobytes() for x in data]
    else:
        assert "trajectory/atoms/x/c/0" in rep.unrecoverable[0][0]
        with pytest.raises(CorruptionError):
            for i in range(len(data)):
                r[i]


# -- C: a chunk whose bytes run past the end of its file is corruption, never fill ----------------

def _twelve(root, compression=None, zero_tail=False):
    """12 values of a meta key, flushed at 6 and 12: the chunk's copy A holds rows 0..5, its
    newest copy B rows 0..11 (B lies last in the file)."""
    s = mrec.SequenceSchema()
    s.declare_meta("e", "f64")
    vals = [0.0 if zero_tail and i >= 6 else float(i + 1) for i in range(12)]
    with mrec.TrajectoryWriter.create(root, s, compression=compression) as w:
        for i, v in enumerate(vals):
            w.append(mrec.Frame(meta={"e": v}))
            if i == 5:
                w.flush()
        w.flush()
    key = "trajectory/meta/e/c/0"
    a = Array.open(_DS(root), "trajectory/meta/e", appended=True)
    index = a.shard_index(key)
    return vals, key, int(index.offsets[0]), int(index.nbytes[0])


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_shard_cut_inside_the_newest_copy_of_a_committed_chunk_is_corruption(tmp_path, compression):
    """Issue 17.1: a shard cut inside the chunk copy holding committed rows: every cut position
    inside it is a CorruptionError for the rows only it holds (reader and validate --deep), and
    `mrec repair` leaves the shard unrecoverable and untouched, never an index reading fill."""
    from mrec.check.repair import repair
    src = tmp_path / "src.mrec"
    vals, key, off, nb = _twelve(src, compression)
    cuts = sorted({off + 1, off + 3, off + nb // 2, off + nb - 5, off + nb - 1} | {off + k * (nb // 9) for k in range(1, 9)})
    for cut in cuts:
        root = tmp_path / f"c{cut}.mrec"
        shutil.copytree(src, root)
        os.truncate(root / key, cut)
        r = TrajectoryReader(root)
        assert [r[i].meta["e"] for i in range(6)] == vals[:6]       # held by the copy before
        with pytest.raises(CorruptionError, match="meta/e/c/0"):
            r[11]
        rep = validate(root, deep=True)
        assert not rep.ok and any(v.rule == "N-4e" and "meta/e" in v.path for v in rep.violations), cut
        before = (root / key).read_bytes()
        rep = repair(root)
        assert not rep.ok and rep.unrecoverable[0][0].endswith(key), cut
        assert (root / key).read_bytes() == before
        with pytest.raises(CorruptionError):
            TrajectoryReader(root)[11]


def test_power_loss_before_the_newest_copy_still_reads_the_committed_rows(tmp_path):
    """The newest copy wholly past the end of the file and the commit marker at 6: the state a
    power loss leaves when the second flush's index rewrite landed and its chunk did not. The six
    committed rows read exactly, validate agrees, repair rewrites the index."""
    import mrec.check.repair
    root = tmp_path / "t.mrec"
    s = mrec.SequenceSchema()
    s.declare_meta("e", "f64")
    with mrec.TrajectoryWriter.create(root, s) as w:
        for i in range(6):
            w.append(mrec.Frame(meta={"e": float(i + 1)}))
        w.flush()
        traj = (root / "trajectory" / "zarr.json").read_bytes()
        arr = (root / "trajectory" / "meta" / "e" / "zarr.json").read_bytes()
        for i in range(6, 12):
            w.append(mrec.Frame(meta={"e": float(i + 1)}))
        w.flush()
    key = "trajectory/meta/e/c/0"
    a = Array.open(_DS(root), "trajectory/meta/e", appended=True)
    os.truncate(root / key, int(a.shard_index(key).offsets[0]))
    (root / "trajectory" / "zarr.json").write_bytes(traj)
    (root / "trajectory" / "meta" / "e" / "zarr.json").write_bytes(arr)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # the committed rows: no stand-in warning
        r = TrajectoryReader(root)
        assert len(r) == 6 and [r[i].meta["e"] for i in range(6)] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    rep = validate(root, deep=True)
    assert [v.rule for v in rep.violations] == ["N-12"] and not [w for w in rep.warnings if w.rule == "RT-6"]
    rep = mrec.repair.repair(root)
    assert rep.ok and len(rep.repaired) == 1 and rep.stand_ins == []
    r = TrajectoryReader(root)
    assert [r[i].meta["e"] for i in range(6)] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert validate(root, deep=True).ok


def test_shard_cut_exactly_at_the_newest_copy_is_the_power_loss_state_and_validate_says_so(tmp_path):
    """A file cut exactly where the newest copy begins leaves the bytes of the power-loss state
    above; with the commit marker at 12 the rows only that copy held are gone. The reader follows
    the crash model (the copy before it holds every committed row: docs/reliability.md), so rows
    6..11 read as that copy's values; validate --deep warns (RT-6) that they may have been lost."""
    root = tmp_path / "t.mrec"
    vals, key, off, nb = _twelve(root)
    os.truncate(root / key, off)
    r = TrajectoryReader(root)
    assert [r[i].meta["e"] for i in range(6)] == vals[:6]
    # never silent: reading the rows the older copy cannot vouch for warns, in the reader too
    with pytest.warns(mrec.StandInWarning, match=r"inner chunk \[0\].*past the end of the file"):
        TrajectoryReader(root)[11]
    rep = validate(root, deep=True)
    stand = [w for w in rep.warnings if w.rule == "RT-6"]
    assert len(stand) == 1 and key in stand[0].path and "rows 0..11" in stand[0].message, [str(w) for w in rep.warnings]
    from mrec.check.repair import repair
    rep = repair(root, dry_run=True)
    assert rep.ok and [k for k, _ in rep.stand_ins] == [str(root / key)] and "rows 0..11" in rep.summary()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(scope="module")
def four_chunk_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("d") / "t.mrec"
    data = _multi_chunk_store(root)
    return root, data


@settings(max_examples=100)
@given(pick=st.lists(st.integers(0, 4), min_size=4, max_size=4))
def test_any_rewiring_of_a_crc_failing_index_never_reads_wrong_rows(four_chunk_store, pick):
    """Entry c of a crc-failing index names copy pick[c] (4: empty): permutations, duplicates and
    dropped entries. Whatever the reader and repair do, no frame reads another chunk's rows."""
    import tempfile
    from mrec.check.repair import repair
    src, data = four_chunk_store
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "t.mrec")
        shutil.copytree(src, root)
        shard = __import__("pathlib").Path(root) / "trajectory" / "atoms" / "x" / "c" / "0"
        ents = _entries(shard.read_bytes(), 4)
        _put_entries(shard, [ents[k] if k < 4 else (BIG, BIG) for k in pick])
        for stage in ("read", "repaired"):
            r = TrajectoryReader(root)
            for i in range(len(data)):
                try:
                    got = r[i].blocks["atoms"]["x"]
                except CorruptionError:
                    continue
                assert got.tobytes() == data[i].tobytes(), (pick, stage, i)
            if stage == "read":
                repair(root)


@pytest.mark.parametrize("location", ["start", "end"])
def test_crc_failing_index_of_a_plain_array_is_refused_even_when_its_entries_name_valid_chunks(tmp_path, location):
    """Outside trajectory/ (written whole, not appended) an index failing its crc32c is refused
    naming the shard, also when its swapped entries name chunks that verify (read through
    before: rows 4..7 then 0..3, no error)."""
    st_ = _DS(tmp_path)
    a = _sharded_array(st_, "x", location)
    p = tmp_path / "x" / "c" / "0"
    raw = bytearray(p.read_bytes())
    base = 0 if location == "start" else len(raw) - (2 * 16 + 4)
    e0, e1 = raw[base:base + 16], raw[base + 16:base + 32]
    raw[base:base + 16], raw[base + 16:base + 32] = e1, e0                 # crc32c left as it was
    p.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError, match="crc32c") as info:
        Array.open(st_, "x").read()
    assert str(p) in str(info.value) and "mrec repair" in str(info.value)
    assert a is not None
