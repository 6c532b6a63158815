"""Readers check what writers check, in bounded resources (issue 27, items 3 and 4).

* row references (``targets``): one checker for every reader path — ``read_record``, ``read_frame``
  (the frame section, a group anywhere, a trajectory frame), ``TrajectoryReader`` and ``validate``;
* a reader hands back the stored dtype or refuses: a stored ``int64`` row reference is refused
  (``bad_reference``), never widened to ``uint64`` as a writer widens a caller's exact input;
* a trajectory whose fixed cell lived in a lost ``trajectory/box/zarr.json`` is refused, not read
  without its cell;
* every allocation and loop is bounded by what the store holds, not by a declared count;
* a trajectory writer refuses a frame that is no frame (``append(None)``) with a ``RefusalError``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mrec
from mrec.errors import CorruptionError, MrecError, RefusalError
from mrec.check.validate import validate
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _edit_json(path, edit) -> None:
    with open(path) as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


# -- a frame that is no frame ----------------------------------------------------------------------

def _schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    return s


def _writer(tmp_path, **kw):
    return mrec.TrajectoryWriter.create(tmp_path / "t.mrec", _schema(), **kw)


def _one_frame(tmp_path) -> str:
    """``tmp_path/t.mrec`` holding one committed 3-row frame; its path."""
    with _writer(tmp_path) as w:
        w.append({"blocks": {"atoms": {"x": np.arange(3.0)}}})
    return str(tmp_path / "t.mrec")


@pytest.mark.parametrize("bad", [None, [1, 2], 5, "frame", (1,), b"x", 1.5])
@pytest.mark.parametrize("how", ["append", "extend", "pipeline"])
def test_a_frame_that_is_no_frame_is_refused_by_kind(tmp_path, bad, how):
    """append(None) / append([1, 2]) raised TypeError; now a RefusalError naming the frame, and the
    writer goes on (the frames before it are kept)."""
    w = _writer(tmp_path, pipeline=how == "pipeline")
    w.append({"blocks": {"atoms": {"x": np.arange(3.0)}}})
    with pytest.raises(RefusalError) as e:
        if how == "extend":
            w.extend([{"blocks": {"atoms": {"x": np.arange(3.0)}}}, bad])
        else:
            w.append(bad)
    assert e.value.kind == "bad_layout" and "frame" in str(e.value) and type(bad).__name__ in str(e.value)
    w.append({"blocks": {"atoms": {"x": np.arange(3.0) + 1}}})
    w.close()
    r = mrec.TrajectoryReader(tmp_path / "t.mrec")
    want = 3 if how == "extend" else 2
    assert len(r) == want and r[want - 1].blocks["atoms"]["x"].tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("bad", [None, 5, 1.5])
def test_extend_of_no_iterable_is_refused_by_kind(tmp_path, bad):
    w = _writer(tmp_path)
    with pytest.raises(RefusalError) as e:
        w.extend(bad)
    assert e.value.kind == "bad_argument" and type(bad).__name__ in str(e.value)
    w.close()


# -- row references: one checker on every reader path ----------------------------------------------

def _bonded_record(path, ref="ref"):
    """A record whose frame's bonds/<ref> references rows of atoms (declared targets)."""
    f = {"blocks": {"atoms": {"x": np.arange(3.0)}, "bonds": {ref: np.array([0, 2], "u8")}},
         "block_attrs": {"bonds": {"targets": {ref: "atoms"}}}}
    mrec.write_record(path, meta={}, frame=f)
    return path


def _out_of_range(path, ref="ref"):
    Array.open(DirectoryStore(path), f"frame/bonds/{ref}").write(np.array([0, 7], "u8"))


def _target_lost(path, ref="ref"):
    shutil.rmtree(os.path.join(path, "frame", "atoms"))


def _frame_readers(path):
    """Every way a reader hands back the frame section."""
    return {
        "read_record": lambda: mrec.read_record(path).frame,
        "read_frame": lambda: mrec.read_frame(path),
        "read_frame_group": lambda: mrec.read_frame(path, group="frame"),
    }


@pytest.mark.parametrize("damage", [_out_of_range, _target_lost])
@pytest.mark.parametrize("packed", [False, True])
def test_every_frame_reader_checks_row_references(tmp_path, damage, packed):
    """read_record refused an out-of-range reference or a missing target block; read_frame read them."""
    path = _bonded_record(str(tmp_path / "r.mrec"))
    damage(path)
    if packed:
        mrec.pack(path)
        path += ".zip"
    for name, read in _frame_readers(path).items():
        with pytest.raises(RefusalError) as e:
            read()
        assert e.value.kind == "bad_reference", (name, e.value)
        assert "'ref'" in str(e.value) and "frame" in str(e.value), (name, e.value)
    rep = validate(path, deep=True)
    assert any(v.rule == "N-2.6a" for v in rep.violations), rep.violations


def test_absolute_references_checked_by_read_frame(tmp_path):
    """A frame referencing /system/atoms: read_frame reads the system section to check it, as
    read_record does."""
    path = str(tmp_path / "r.mrec")
    f = {"blocks": {"bonds": {"ref": np.array([0, 1], "u8")}}, "block_attrs": {"bonds": {"targets": {"ref": "/system/atoms"}}}}
    mrec.write_record(path, meta={}, frame=f, system={"blocks": {"atoms": {"x": np.arange(2.0)}}})
    assert mrec.read_frame(path).blocks["bonds"]["ref"].tolist() == [0, 1]
    Array.open(DirectoryStore(path), "frame/bonds/ref").write(np.array([0, 2], "u8"))
    for name, read in _frame_readers(path).items():
        with pytest.raises(RefusalError) as e:
            read()
        assert e.value.kind == "bad_reference" and "/system/atoms" in str(e.value), (name, e.value)


@pytest.mark.parametrize("ref", ["ref", "atomi"])
@pytest.mark.parametrize("stored", ["int64", "int32", "uint32"])
def test_a_stored_row_reference_of_another_dtype_is_refused_never_widened(tmp_path, ref, stored):
    """A stored int64 row reference was read back as uint64 (the writers' exact-input widening
    applied to what was on disk): a reader hands back the stored dtype or refuses."""
    path = _bonded_record(str(tmp_path / "r.mrec"), ref)
    zj = os.path.join(path, "frame", "bonds", ref, "zarr.json")
    values = Array.open(DirectoryStore(path), f"frame/bonds/{ref}").read().astype(stored)
    _edit_json(zj, lambda d: d.update(data_type=stored))
    Array.open(DirectoryStore(path), f"frame/bonds/{ref}").write(values)
    for name, read in _frame_readers(path).items():
        with pytest.raises(RefusalError) as e:
            read()
        # a canonical endpoint (atomi) is refused by the vocabulary first, as before
        assert e.value.kind == ("canonical_dtype" if ref == "atomi" else "bad_reference"), (name, e.value)
        short = {"int64": "i64", "int32": "i32", "uint32": "u32"}[stored]
        assert stored in str(e.value) or short in str(e.value), (name, e.value)
    assert not validate(path, deep=True).ok


def test_a_stored_unreferenced_column_keeps_its_dtype(tmp_path):
    """The other side of the rule: a column nobody references reads back in its stored dtype."""
    path = str(tmp_path / "r.mrec")
    mrec.write_record(path, meta={}, frame={"blocks": {"b": {"n": np.array([1, 2], "i4")}}})
    for name, read in _frame_readers(path).items():
        got = read().blocks["b"]["n"]
        assert got.dtype == np.dtype("<i4") and got.tolist() == [1, 2], name


def _bonded_trajectory(path, values=((0, 2), (1, 2), (0, 5)), rows=(3, 3, 6)):
    """Frames whose bonds/ref hold ``values`` beside ``rows`` atoms, written without the targets
    declaration (so the writer does not refuse them), which is then added to the stored schema."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms")
    s.declare_column("atoms", "x", "f64")
    s.declare_block("bonds")
    s.declare_column("bonds", "ref", "u64")
    with mrec.TrajectoryWriter.create(path, s) as w:
        for v, n in zip(values, rows):
            w.append({"blocks": {"atoms": {"x": np.arange(float(n))}, "bonds": {"ref": np.array(v, "u8")}}})
    _edit_json(os.path.join(path, "trajectory", "zarr.json"),
               lambda d: d["attributes"]["sequence_schema"]["blocks"]["bonds"].update(targets={"ref": "atoms"}))
    return path


def test_trajectory_readers_check_declared_references_on_every_resolved_frame(tmp_path):
    """A trajectory's targets hold on every resolved frame: TrajectoryReader[i], iteration,
    read_frame(path, i) and validate --deep refuse the frame that breaks them and read the rest."""
    path = _bonded_trajectory(str(tmp_path / "t.mrec"), values=((0, 2), (1, 3), (0, 5)), rows=(3, 3, 6))
    r = mrec.TrajectoryReader(path)
    assert r[0].blocks["bonds"]["ref"].tolist() == [0, 2] and r[2].blocks["bonds"]["ref"].tolist() == [0, 5]
    for read in (lambda: r[1], lambda: list(r), lambda: r[0:3], lambda: mrec.read_frame(path, 1)):
        with pytest.raises(RefusalError) as e:
            read()
        assert e.value.kind == "bad_reference" and "row 3" in str(e.value) and "'atoms'" in str(e.value), e.value
    rep = validate(path, deep=True)
    assert [v.rule for v in rep.violations] == ["N-2.6a"] and "frame 1" in rep.violations[0].message, rep.violations


def test_trajectory_reference_to_a_block_absent_in_the_frame_is_refused(tmp_path):
    path = _bonded_trajectory(str(tmp_path / "t.mrec"), values=((0, 1),), rows=(0,))
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryReader(path)[0]
    assert e.value.kind == "bad_reference" and "'atoms'" in str(e.value), e.value


# -- the fixed cell's group -------------------------------------------------------------------------

def _fixed_cell_trajectory(path, defined=True, origin=False):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    cell = mrec.Box(np.eye(3) * 40, np.ones(3) if origin else None, None, True) if defined else \
        mrec.Box(None, None, np.zeros(3, bool), False)
    with mrec.TrajectoryWriter.create(path, s) as w:
        for k in range(4):
            w.append({"blocks": {"atoms": {c: np.arange(3.0) + k for c in "xyz"}}, "box": cell})
    assert os.listdir(os.path.join(path, "trajectory", "box")) == ["zarr.json"]   # the cell is attributes only
    return path


@pytest.mark.parametrize("defined,origin", [(True, False), (True, True), (False, False)])
def test_a_lost_fixed_cell_group_is_refused_not_read_without_its_cell(tmp_path, defined, origin):
    """A fixed cell lives only in trajectory/box/zarr.json's attributes; with that file lost every
    frame read with no cell (reader, MDAnalysis, ASE, convert) and validate --deep said VALID."""
    path = _fixed_cell_trajectory(str(tmp_path / "t.mrec"), defined, origin)
    assert mrec.TrajectoryReader(path)[3].box is not None
    os.remove(os.path.join(path, "trajectory", "box", "zarr.json"))
    for read in (lambda: mrec.TrajectoryReader(path), lambda: mrec.read_frame(path, 0),
                 lambda: mrec.read_record(path).trajectory, lambda: mrec.TrajectoryWriter.open(path)):
        with pytest.raises(RefusalError) as e:
            read()
        assert e.value.kind == "broken_index" and "trajectory/box/zarr.json" in str(e.value), e.value
        assert "cell" in str(e.value)
    rep = validate(path, deep=True)
    assert not rep.ok and [v.rule for v in rep.violations] == ["N-3.3"], rep.violations
    assert "trajectory/box/zarr.json" in rep.violations[0].path


def test_a_lost_fixed_cell_group_is_refused_by_the_md_readers(tmp_path):
    pytest.importorskip("MDAnalysis")
    import MDAnalysis as mda
    import mrec.md.mdanalysis  # noqa: F401
    path = _fixed_cell_trajectory(str(tmp_path / "t.mrec"))
    os.remove(os.path.join(path, "trajectory", "box", "zarr.json"))
    with pytest.raises(Exception) as e:
        mda.Universe(path)
    chain = [e.value, e.value.__cause__, e.value.__context__]
    assert any(isinstance(x, RefusalError) and x.kind == "broken_index" for x in chain), chain


def test_a_trajectory_without_a_cell_and_an_empty_box_leftover_state(tmp_path):
    """The refusal needs the box folder: a trajectory that never had a cell has none and reads as
    an open system; a cell whose first commit a crash cut (folder and a temp file, nstep 0) is no
    committed cell either."""
    path = _one_frame(tmp_path)
    assert not os.path.exists(os.path.join(path, "trajectory", "box"))
    assert mrec.TrajectoryReader(path)[0].box is None and validate(path, deep=True).ok
    w = mrec.TrajectoryWriter.create(str(tmp_path / "c.mrec"), _schema())
    w.close()
    os.makedirs(os.path.join(tmp_path, "c.mrec", "trajectory", "box"))
    with open(os.path.join(tmp_path, "c.mrec", "trajectory", "box", ".mrec-tmp-zarr.json.0123abcd"), "wb") as f:
        f.write(b'{"zarr_format": 3, "node_type": "group", "attributes": {"vectors"')
    assert len(mrec.TrajectoryReader(str(tmp_path / "c.mrec"))) == 0


# -- bounded resources -----------------------------------------------------------------------------

_PROBE = """
import resource, sys, time, json
resource.setrlimit(resource.RLIMIT_AS, ({limit} << 20, {limit} << 20))   # a 16 GiB attempt fails fast
import numpy as np, mrec
from mrec.check.validate import validate
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
try:
{body}
    out = {{"ok": True, "value": repr(got)[:400]}}
except Exception as exc:   # noqa: BLE001 - reported to the test
    out = {{"ok": False, "type": type(exc).__name__, "kind": getattr(exc, "kind", None), "text": str(exc)[:400]}}
out["seconds"] = time.perf_counter() - t0
out["peak_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(json.dumps(out))
"""


def _probe(body: str, limit_mb: int = 1500) -> dict:
    """Run ``body`` (which sets ``got``) in a fresh interpreter whose address space is capped (so a
    claim of 16 GiB cannot take the machine): its outcome, seconds and peak RSS growth in MB."""
    code = _PROBE.format(limit=limit_mb, body=textwrap.indent(textwrap.dedent(body), "    "))
    env = {**os.environ, "PYTHONPATH": ROOT, "MREC_THREADS": "1"}
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "type": "timeout", "kind": None, "text": "", "seconds": 60.0, "peak_mb": 0.0}
    assert p.returncode == 0 and p.stdout.strip(), p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _declare_huge_frame_column(path, rows=2**31, chunk=None):
    """A frame column (a fixed array) whose zarr.json and block count claim ``rows`` rows, its one
    stored chunk holding 5."""
    mrec.write_record(path, meta={}, frame={"blocks": {"atoms": {"x": np.arange(5.0)}}})
    _edit_json(os.path.join(path, "frame", "atoms", "x", "zarr.json"), lambda d: (
        d.update(shape=[rows]),
        d["chunk_grid"]["configuration"].update(chunk_shape=[chunk or 5])))
    _edit_json(os.path.join(path, "frame", "atoms", "zarr.json"), lambda d: d["attributes"].update(count=rows))


@pytest.mark.parametrize("chunk", [None, 2**31])
def test_a_fixed_array_declared_huge_is_refused_before_allocating(tmp_path, chunk):
    """A frame column declared [2**31] allocated 16 GiB on read (read_record, read_frame and
    validate --deep): a read that would materialise more than the store's chunks can hold is
    refused (too_large) before anything is allocated, in bounded time."""
    path = str(tmp_path / "r.mrec")
    _declare_huge_frame_column(path, chunk=chunk)
    for call in ("mrec.read_frame(path)", "mrec.read_record(path).frame",
                 "mrec.zarr.array.Array.open(mrec.zarr.stores.directory.DirectoryStore(path), 'frame/atoms/x').read()"):
        out = _probe(f"import mrec.zarr.stores.directory\npath = {path!r}\ngot = {call}")
        assert not out["ok"] and out["kind"] == "too_large" and "frame/atoms/x" in out["text"], (call, out)
        assert out["peak_mb"] < 200 and out["seconds"] < 10, (call, out)
    out = _probe(f"r = validate({path!r}, deep=True)\ngot = [(v.rule, v.kind) for v in r.violations]")
    assert out["ok"] and "too_large" in out["value"] and out["peak_mb"] < 200 and out["seconds"] < 10, out


def test_the_bound_is_what_the_stored_chunks_can_hold(tmp_path, monkeypatch):
    """Not a fixed size: a read the stored chunks back reads whole (uncompressed: their bytes;
    compressed: their bytes times the codec's expansion), one beyond them by more than the fill
    allowance is refused; a small read over a huge grid visits the stored chunks only."""
    import mrec.zarr.read.plan as A
    monkeypatch.setattr(A, "MAX_FILL_BYTES", 1 << 20)
    st = DirectoryStore(tmp_path)
    from mrec.record.sections.fixed import write_fixed_array
    values = np.arange(6 * 2**17, dtype=np.float64)                 # 6 MiB in 12 chunks of 512 KiB
    write_fixed_array(st, "a", values, "f64")
    assert np.array_equal(Array.open(st, "a").read(), values)
    _edit_json(tmp_path / "a" / "zarr.json", lambda d: d.update(shape=[64 * 2**17]))   # 64 MiB declared
    got = Array.open(st, "a").read(slice(0, 6 * 2**17 + 2**16))      # 0.5 MiB of fill: allowed
    assert np.array_equal(got[:6 * 2**17], values) and not got[6 * 2**17:].any()
    with pytest.raises(RefusalError) as e:
        Array.open(st, "a").read()
    assert e.value.kind == "too_large" and "a" in str(e.value)
    for codec in ("zstd", "gzip"):                                   # 32 MiB of zeros in one small chunk
        os.makedirs(tmp_path / codec)
        (tmp_path / codec / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "array", "shape": [2**22], "data_type": "float64", "fill_value": 0.0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2**22]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": codec, "configuration": {"level": 1}}]}))
        Array.open(st, codec).write(np.full(2**22, 1.5))
        assert os.path.getsize(tmp_path / codec / "c" / "0") < 1 << 20            # far below 32 MiB
        assert (Array.open(st, codec).read() == 1.5).all()


@pytest.mark.parametrize("e", [40, 62])
def test_validate_deep_on_a_huge_nstep_is_bounded_by_what_is_stored(tmp_path, e):
    """nstep 2^40 / 2^62 (one stored frame, a progression, a column declared 3 x 2^40 rows): the deep
    frame walk resolved every ordinal (past 10 s, never ending); it now walks what the store holds."""
    path = _one_frame(tmp_path)
    _edit_json(os.path.join(path, "trajectory", "zarr.json"), lambda d: d["attributes"].update(
        nstep=2**e, step_progression={"start": 0, "stride": 1}))
    if e == 40:
        _edit_json(os.path.join(path, "trajectory", "atoms", "x", "zarr.json"), lambda d: d.update(shape=[3 * 2**e]))
    out = _probe(f"r = validate({path!r}, deep=True)\n"
                 "got = (r.ok, r.checked['frames'], [(v.rule, v.kind) for v in r.violations + r.warnings])")
    assert out["ok"] and out["seconds"] < 10 and out["peak_mb"] < 200, out
    ok, frames, found = eval(out["value"])
    assert ok and 1 <= frames < 1000 and all(rule == "RT-1" for rule, _kind in found), out
    r = mrec.TrajectoryReader(path)
    assert len(r) == 2**e and r[2**e - 1].blocks["atoms"]["x"].tolist() == ([0.0] * 3 if e == 40 else [0.0, 1.0, 2.0])


@pytest.mark.parametrize("dtype,precision,compression", [
    ("f64", None, None), ("f64", 1e-3, None), ("i32", None, None), ("f64", None, "zstd"), ("f64", None, "gzip")])
def test_a_three_row_frame_of_an_oversized_declaration_lands_in_bounded_memory(tmp_path, dtype, precision, compression):
    """A block declared at 2^23 rows of 3 values (a 192 MiB inner chunk; 2^25 made 2.3 GB): a 3-row
    frame's partial chunk was padded, encoded and joined whole, three times its size.  It is now
    encoded and written a piece at a time (memory: the rows plus a few MiB), and reads back exact."""
    path = str(tmp_path / "t.mrec")
    body = f"""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2**23)
    s.declare_column("atoms", "u", {dtype!r}, trailing=(3,), precision={precision!r})
    with mrec.TrajectoryWriter.create({path!r}, s, compression={compression!r}) as w:
        w.append({{"blocks": {{"atoms": {{"u": np.arange(9).reshape(3, 3).astype({dtype!r} == "f64" and "f8" or "i4")}}}}}})
        w.flush()
        w.append({{"blocks": {{"atoms": {{"u": np.arange(6).reshape(2, 3).astype({dtype!r} == "f64" and "f8" or "i4")}}}}}})
    got = None
    """
    out = _probe(body, limit_mb=3000)
    assert out["ok"] and out["peak_mb"] < 200 and out["seconds"] < 60, out
    r = mrec.TrajectoryReader(path)
    assert r[0].blocks["atoms"]["u"].tolist() == np.arange(9).reshape(3, 3).tolist()
    assert r[1].blocks["atoms"]["u"].tolist() == np.arange(6).reshape(2, 3).tolist()
    assert validate(path, deep=True).ok


@pytest.mark.parametrize("codecs", [
    [], ["crc32c"], ["gzip", "crc32c"], ["zstd", "crc32c"], ["shuffle", "zstd", "crc32c"], ["shuffle", "gzip"],
    ["shuffle", "crc32c"]])
@pytest.mark.parametrize("dtype,fill", [("float64", 0.0), ("float64", -1.5), ("int32", 7), ("complex128", 0.0),
                                        ("uint8", 3)])
def test_padded_pieces_encode_what_the_pipeline_encodes(codecs, dtype, fill):
    """The pieces decode to the padded chunk, byte for byte the whole encoding except zstd's blocks."""
    from mrec.zarr.codecs import padded
    from mrec.zarr.codecs.base import ChunkSpec
    from mrec.zarr.dtypes import DATA_TYPES
    from mrec.zarr.pipeline import CodecPipeline
    dt = DATA_TYPES[dtype]
    spec = {"crc32c": {"name": "crc32c"}, "gzip": {"name": "gzip", "configuration": {"level": 1}},
            "zstd": {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
            "shuffle": {"name": "numcodecs.shuffle", "configuration": {"elementsize": dt.numpy.itemsize}}}
    pipe = CodecPipeline.from_json([{"name": "bytes", "configuration": {"endian": "little"}},
                                    *(spec[c] for c in codecs)], "x")
    shape = (5000, 3)
    rows = (np.arange(21) * 3).reshape(7, 3).astype(dt.numpy)
    whole = np.full(shape, fill, dtype=dt.numpy)
    whole[:7] = rows
    cs = ChunkSpec(shape, dt, fill, "x")
    pieces = list(padded.padded_pieces(pipe, rows, shape, dt, fill))
    assert max(len(p) for p in pieces) <= 2 * padded.PIECE
    got = b"".join(pieces)
    assert np.array_equal(np.asarray(pipe.decode(got, cs)), whole)
    if "zstd" not in codecs:
        assert got == pipe.encode(whole, cs)


def test_a_reopen_relands_an_oversized_partial_chunk_in_pieces(tmp_path, monkeypatch):
    """A reopen after a landing whose commit was lost re-encodes the partial chunk with the committed
    rows only (trajectory settle): in pieces too (never padded whole), and the frames read back exact.
    (Reading a row of such a chunk still decodes the whole inner chunk: docs/reliability.md.)"""
    from mrec.zarr.append import ShardedAppender
    path = str(tmp_path / "t.mrec")
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2**23)
    s.declare_column("atoms", "u", "f64", trailing=(3,), precision=1e-3)
    with mrec.TrajectoryWriter.create(path, s) as w:
        w.append({"blocks": {"atoms": {"u": np.ones((3, 3))}}})
        w.flush()
        w.append({"blocks": {"atoms": {"u": np.full((2, 3), 2.0)}}})
    # the second landing's commit lost: the marker back at one frame, the re-encoded copy on disk
    _edit_json(os.path.join(path, "trajectory", "zarr.json"), lambda d: d["attributes"].update(nstep=1))

    small = ShardedAppender._padded

    def whole(self, rows):
        assert not self._large_chunks, "a 192 MiB partial chunk padded whole"
        return small(self, rows)
    monkeypatch.setattr(ShardedAppender, "_padded", whole)
    with mrec.TrajectoryWriter.open(path) as w:
        w.append({"blocks": {"atoms": {"u": np.full((4, 3), 3.0)}}})
    r = mrec.TrajectoryReader(path)
    assert len(r) == 2 and (r[0].blocks["atoms"]["u"] == 1.0).all() and r[1].blocks["atoms"]["u"].shape == (4, 3)
    assert (r[1].blocks["atoms"]["u"] == 3.0).all() and validate(path, deep=True).ok
