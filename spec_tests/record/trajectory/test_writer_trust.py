"""The trajectory writer under bad luck and bad input (issues 17.4-17.6, 13.2, 13.3).

* fsync / ENOSPC / EIO during a flush: the writer refuses every further call with a
  :class:`~mrec.errors.WriteError` naming the file and the array (errno kept, the OSError
  chained); the store stays at its last commit and reopen recovers it, no block lost;
* strings that cannot be encoded (lone surrogates) are refused at ``append`` / ``extend`` /
  declaration, naming column and frame, the buffer untouched;
* the ``_validity`` subgroup of a nullable trajectory column has its ``zarr.json``;
* a canonical key stored at another dtype is ``canonical_dtype``.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import mrec
from mrec.errors import RefusalError
from mrec.record.model.dtypes import CANONICAL_DTYPES, EXACT_U64_COLUMNS, dtype_name
from mrec.check.validate import validate


def _null_schema():
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    s.declare_column("atoms", "q", "f64", nullable=True)
    return s


def _null_frame(i):
    return {"blocks": {"atoms": {"x": np.arange(3.0) + i, "q": np.array([1.0, 2.0, 3.0]) * (i + 1)}},
            "masks": {"atoms": {"q": np.array([True, i % 2 == 0, False])}}}


def _write_nullable(p, n=4):
    with mrec.TrajectoryWriter.create(p, _null_schema(), flush_every=2) as w:
        for i in range(n):
            w.append(_null_frame(i))


# -- 13.2: the _validity subgroup ----------------------------------------------------------------

def test_validity_group_has_zarr_json_and_zarr_python_sees_the_masks(tmp_path):
    p = tmp_path / "n.mrec"
    _write_nullable(p)
    assert (p / "trajectory/atoms/_validity/zarr.json").is_file()
    doc = json.loads((p / "trajectory/atoms/_validity/zarr.json").read_text())
    assert doc["node_type"] == "group" and doc["attributes"] == {}
    g = zarr.open_group(str(p), mode="r")
    assert "_validity" in list(g["trajectory/atoms"].group_keys())
    masks = g["trajectory/atoms/_validity"]
    assert list(masks.array_keys()) == ["q"]
    want = np.concatenate([_null_frame(i)["masks"]["atoms"]["q"] for i in range(4)])
    assert np.array_equal(masks["q"][:], want)
    r = mrec.TrajectoryReader(p)
    for i in range(4):
        assert np.array_equal(r[i].mask("atoms", "q"), _null_frame(i)["masks"]["atoms"]["q"])
    assert validate(p, deep=True).ok


def _one_column(p, block, column, values):
    """A one-frame trajectory of one column (declared at the values' dtype)."""
    s = mrec.SequenceSchema()
    s.declare_block(block, rows=len(values))
    s.declare_column(block, column, dtype_name(values.dtype))
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"blocks": {block: {column: values}}})


def test_no_validity_group_without_a_nullable_column(tmp_path):
    p = tmp_path / "plain.mrec"
    _one_column(p, "atoms", "x", np.zeros(2))
    assert not (p / "trajectory/atoms/_validity").exists()


def test_validate_deep_flags_a_group_directory_without_zarr_json(tmp_path):
    p = tmp_path / "n.mrec"
    _write_nullable(p)
    (p / "trajectory/atoms/_validity/zarr.json").unlink()
    r = validate(p, deep=True)
    hits = [v for v in r.violations if v.rule == "N-4g"]
    assert len(hits) == 1 and hits[0].path.endswith("trajectory/atoms/_validity/zarr.json"), r.violations
    # the same for a frame block's mask subgroup and any intermediate directory
    q = mrec.write_record(tmp_path / "f.mrec", frame={"blocks": {"a": {"x": np.arange(3.0)}},
                                                       "masks": {"a": {"x": np.array([True, False, True])}}})
    assert validate(q, deep=True).ok
    os.unlink(os.path.join(q, "frame", "a", "_validity", "zarr.json"))
    assert [v.rule for v in validate(q, deep=True).violations] == ["N-4g"]


def test_reopen_of_a_store_without_validity_zarr_json_adds_it(tmp_path):
    """A store written before the fix (no _validity/zarr.json) opens; the next commit adds the file."""
    p = tmp_path / "old.mrec"
    _write_nullable(p)
    (p / "trajectory/atoms/_validity/zarr.json").unlink()
    assert mrec.TrajectoryReader(p)[1].mask("atoms", "q") is not None      # mrec reads masks by path
    with mrec.TrajectoryWriter.open(p) as w:
        assert w.committed == 4
        w.append(_null_frame(4))
    assert (p / "trajectory/atoms/_validity/zarr.json").is_file()
    r = mrec.TrajectoryReader(p)
    assert len(r) == 5
    for i in range(5):
        assert np.array_equal(r[i].mask("atoms", "q"), _null_frame(i)["masks"]["atoms"]["q"])
    assert validate(p, deep=True).ok


# -- 13.3: canonical keys keep their kind -------------------------------------------------------

_WRONG = {"f64": [np.int64], "u64": [np.int64, np.int32], "i64": [np.uint64],
          "i32": [np.int64, np.uint32], "bool": [np.uint8], "string": [np.int64]}
# issue 14: an integer array converts to an integer key's dtype when every value fits (exact input
# conversion), so the integer cases carry a value that does not fit
_LOSSY = {"u64": [-1, 2], "i64": [2**63, 2], "i32": [2**31, 2]}


@pytest.mark.parametrize("key", sorted(CANONICAL_DTYPES))
def test_canonical_key_at_another_dtype_is_refused_as_canonical_dtype_at_append(tmp_path, key):
    canon = CANONICAL_DTYPES[key]
    s = mrec.SequenceSchema()
    s.declare_block("blk", rows=2)
    s.declare_column("blk", key, canon)
    w = mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s)
    wrong = [np.array(_LOSSY.get(canon, [1, 2]), dtype=t) for t in _WRONG[canon]]
    if canon == "u64":
        wrong.append([-1, 2])                                   # signed: no u64 reading exists
    for a in wrong:
        for call in (lambda f: w.append(f), lambda f: w.extend([f])):
            with pytest.raises(RefusalError) as e:
                call({"blocks": {"blk": {key: a}}})
            assert e.value.kind == "canonical_dtype", (key, a, e.value)
            assert repr(key) in str(e.value)
        with pytest.raises(RefusalError) as e:                  # and at declaration
            t = mrec.SequenceSchema()
            t.declare_block("blk", rows=2)
            t.declare_column("blk", key, dtype_name(np.asarray(a).dtype))
        assert e.value.kind == "canonical_dtype"
    assert w.nframes == 0
    w.close()


def _retype(p, array, data_type):
    doc_path = p / array / "zarr.json"
    doc = json.loads(doc_path.read_text())
    doc["data_type"] = data_type
    doc["fill_value"] = 0
    doc_path.write_text(json.dumps(doc))


@pytest.mark.parametrize("key", sorted(EXACT_U64_COLUMNS))
@pytest.mark.parametrize("stored", ["int64", "uint32", "int32"])
def test_stored_narrow_or_signed_identifier_is_canonical_dtype(tmp_path, key, stored):
    """A trajectory whose u64 identifier / endpoint array is stored signed or narrower (another
    writer's store) is refused as canonical_dtype by the reader and by reopen (mrec-notes §7.1)."""
    p = tmp_path / "t.mrec"
    _one_column(p, "blk", key, np.array([0, 1], np.uint64))
    _retype(p, f"trajectory/blk/{key}", stored)
    for opener in (mrec.TrajectoryReader, mrec.TrajectoryWriter.open):
        with pytest.raises(RefusalError) as e:
            opener(p)
        assert e.value.kind == "canonical_dtype", e.value
        assert key in str(e.value) and "u64" in str(e.value)
    assert any(v.kind == "canonical_dtype" for v in validate(p).violations)


def test_stored_non_canonical_column_at_another_dtype_stays_declaration_mismatch(tmp_path):
    p = tmp_path / "t.mrec"
    _one_column(p, "blk", "n", np.array([0, 1], np.uint64))
    _retype(p, "trajectory/blk/n", "int64")
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryReader(p)
    assert e.value.kind == "declaration_mismatch"


# -- 17.6: text UTF-8 cannot encode --------------------------------------------------------------

SURROGATE = "a\ud800b"


def _tree(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def _str_schema():
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "el", "string")
    s.declare_column("atoms", "x", "f64")
    s.declare_meta("tag", "string", fill="")
    s.declare_meta("j", "json", fill=None)
    return s


def _str_frame(i):
    return {"blocks": {"atoms": {"el": np.array([f"H{i}", "O\u00e9\U0001F600"], dtype=object), "x": np.arange(2.0) + i}},
            "meta": {"tag": f"t{i}", "j": {"i": i, "s": "\u2603"}}}


_BAD_FRAMES = {
    "column": ({"blocks": {"atoms": {"el": np.array(["H", SURROGATE], dtype=object), "x": np.zeros(2)}}},
               ["column 'el'", "row[1]"]),
    "numpy_str_column": ({"blocks": {"atoms": {"el": np.array(["H", SURROGATE]), "x": np.zeros(2)}}},
                         ["column 'el'", "row[1]"]),
    "string_meta": ({"blocks": {"atoms": {"el": np.array(["H", "O"], dtype=object), "x": np.zeros(2)}},
                     "meta": {"tag": SURROGATE}}, ["meta key 'tag'"]),
    "json_meta_value": ({"blocks": {"atoms": {"el": np.array(["H", "O"], dtype=object), "x": np.zeros(2)}},
                         "meta": {"j": {"k": [1, SURROGATE]}}}, ["meta key 'j'"]),
    "json_meta_key": ({"blocks": {"atoms": {"el": np.array(["H", "O"], dtype=object), "x": np.zeros(2)}},
                       "meta": {"j": {SURROGATE: 1}}}, ["meta key 'j'"]),
}


@pytest.mark.parametrize("how", ["append", "extend"])
@pytest.mark.parametrize("case", sorted(_BAD_FRAMES))
def test_lone_surrogate_refused_at_append_store_and_buffer_untouched(tmp_path, case, how):
    p = tmp_path / "s.mrec"
    w = mrec.TrajectoryWriter.create(p, _str_schema(), flush_every=4)
    for i in range(6):                      # one automatic flush (4 frames), 2 frames buffered
        w.append(_str_frame(i))
    before = _tree(p)
    bad, names = _BAD_FRAMES[case]
    with pytest.raises(RefusalError) as e:
        if how == "append":
            w.append(bad)
        else:
            w.extend([_str_frame(6), bad, _str_frame(99)])
    assert e.value.kind == "bad_string"
    frame = 6 if how == "append" else 7
    for n in [f"frame {frame}"] + names:
        assert n in str(e.value), (n, str(e.value))
    assert w.nframes == (6 if how == "append" else 7)
    if how == "append":
        assert _tree(p) == before               # nothing written by the refusal
    w.append(_str_frame(w.nframes))
    w.close()
    r = mrec.TrajectoryReader(p)
    n = len(r)
    assert n == (7 if how == "append" else 8)
    for i in range(n):
        f, want = r[i], _str_frame(i)
        assert list(f.blocks["atoms"]["el"]) == list(want["blocks"]["atoms"]["el"])
        assert f.blocks["atoms"]["x"].tobytes() == want["blocks"]["atoms"]["x"].tobytes()
        assert f.meta["tag"] == want["meta"]["tag"] and f.meta["j"] == want["meta"]["j"]
    assert validate(p, deep=True).ok


_BAD_DECLS = {
    "block_name": (lambda s: s.declare_block(SURROGATE), "reserved_block_name"),
    "column_name": (lambda s: (s.declare_block("b"), s.declare_column("b", SURROGATE, "f64")), "reserved_column_name"),
    "meta_key": (lambda s: s.declare_meta(SURROGATE, "f64"), "reserved_meta_key"),
    "string_fill": (lambda s: s.declare_meta("k", "string", fill=SURROGATE), "meta_tag_mismatch"),
    "json_fill": (lambda s: s.declare_meta("k", "json", fill={"a": [SURROGATE]}), "meta_tag_mismatch"),
    "block_extra": (lambda s: s.declare_block("b", extra={"note": SURROGATE}), "declaration_mismatch"),
    "block_extra_key": (lambda s: s.declare_block("b", extra={SURROGATE: 1}), "declaration_mismatch"),
    "column_extra": (lambda s: (s.declare_block("b"), s.declare_column("b", "v", "f64", extra={"u": SURROGATE})),
                     "declaration_mismatch"),
    "targets": (lambda s: s.declare_block("b", targets={"r": SURROGATE}), "bad_reference"),
    "from_json": (lambda s: mrec.SequenceSchema.from_json({"blocks": {"b": {"columns": {SURROGATE: {"dtype": "f64"}}}}}),
                  "reserved_column_name"),
}


@pytest.mark.parametrize("case", sorted(_BAD_DECLS))
def test_lone_surrogate_refused_at_declaration(case):
    fn, kind = _BAD_DECLS[case]
    with pytest.raises(RefusalError) as e:
        fn(mrec.SequenceSchema())
    assert e.value.kind == kind and "UTF-8" in str(e.value)


def test_lone_surrogate_in_a_directly_edited_schema_or_meta_document_refused_before_writing(tmp_path):
    s = _str_schema()
    s.blocks["atoms"].extra["note"] = SURROGATE               # an edit behind declare_*: validate() sees it
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryWriter.create(tmp_path / "a.mrec", s)
    assert e.value.kind == "declaration_mismatch"
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryWriter.create(tmp_path / "b.mrec", _str_schema(), meta={"title": SURROGATE})
    assert e.value.kind == "bad_string" and "meta document" in str(e.value)
    assert not (tmp_path / "b.mrec").exists()


@settings(max_examples=40)
@given(st.lists(st.lists(st.text(max_size=6), min_size=2, max_size=2), min_size=1, max_size=6),
       st.data())
def test_strings_with_and_without_surrogates(tmp_path_factory, rows, data):
    """Hypothesis: a frame is refused exactly when one of its strings holds a lone surrogate; every
    accepted frame reads back equal, whatever came before."""
    p = tmp_path_factory.mktemp("h") / "h.mrec"
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "el", "string")
    kept = []
    with mrec.TrajectoryWriter.create(p, s, flush_every=2) as w:
        for row in rows:
            if data.draw(st.booleans()):
                k = data.draw(st.integers(0, 1))
                cut = data.draw(st.integers(0, len(row[k])))
                row = list(row)
                row[k] = row[k][:cut] + chr(data.draw(st.integers(0xD800, 0xDFFF))) + row[k][cut:]
            bad = any(0xD800 <= ord(ch) <= 0xDFFF for x in row for ch in x)
            frame = {"blocks": {"atoms": {"el": np.array(row, dtype=object)}}}
            if bad:
                with pytest.raises(RefusalError) as e:
                    w.append(frame)
                assert e.value.kind == "bad_string"
            else:
                w.append(frame)
                kept.append(row)
    r = mrec.TrajectoryReader(p)
    assert len(r) == len(kept)
    for i, row in enumerate(kept):
        assert list(r[i].blocks["atoms"]["el"]) == row


# -- 17.4 / 17.5: a failed write or fsync poisons the writer; reopen recovers ---------------------

def _rich_schema():
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "v", "f64", trailing=(3,))
    s.declare_column("atoms", "q", "f64", nullable=True)
    s.declare_block("ions")                                  # ragged
    s.declare_column("ions", "id", "u64")
    s.declare_column("ions", "el", "string")
    s.declare_block("late", rows=1)                          # first present at frame 6
    s.declare_column("late", "w", "f64")
    s.declare_meta("pe", "f64")
    s.declare_meta("tag", "string", fill="")
    return s


def _rich_frame(i):
    rng = np.random.default_rng(i)
    k = 1 + i % 3
    f = {"blocks": {"atoms": {"x": rng.normal(size=3), "v": rng.normal(size=(3, 3)), "q": rng.normal(size=3)},
                    "ions": {"id": np.arange(k, dtype=np.uint64) + i, "el": np.array([f"e{i}"] * k, dtype=object)}},
         "masks": {"atoms": {"q": np.array([True, i % 2 == 0, True])}},
         "meta": {"pe": float(i) / 3, "tag": f"t{i}"},
         "box": mrec.Box(np.eye(3) * (10.0 + (i >= 7)), np.array([0.5, 0.0, 0.0]) if i >= 8 else np.zeros(3))}
    if i >= 6:
        f["blocks"]["late"] = {"w": np.array([float(i)])}
    return f


def _frame_bits(f):
    """Everything a frame holds, as bytes (bit-identity, NaN and -0.0 included)."""
    out = []
    for b in sorted(f.blocks):
        for c in sorted(f.blocks[b]):
            a = np.asarray(f.blocks[b][c])
            out.append((b, c, a.dtype.str, a.shape, list(a.ravel()) if a.dtype == object else a.tobytes()))
        for c, m in sorted((f.masks or {}).get(b, {}).items()):
            out.append((b, "mask", c, np.asarray(m).tobytes()))
    if f.box is not None:
        out.append(("box", np.asarray(f.box.vectors).tobytes(), np.asarray(f.box.origin).tobytes(),
                    np.asarray(f.box.boundary).tobytes()))
    out.append(("meta", json.dumps(f.meta, sort_keys=True)))
    return out


_NFRAMES = 12


@pytest.fixture
def shm_path(tmp_path):
    """A scratch directory in memory when the machine has one (fsync is free there: these tests
    count injection points, not disk latency)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="mrec-wt-", dir="/dev/shm")
        yield Path(d)
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same frames written with no fault: what every reported-committed frame must read as."""
    p = tmp_path_factory.mktemp("ref") / "ref.mrec"
    with mrec.TrajectoryWriter.create(p, _rich_schema(), flush_every=100) as w:
        for i in range(_NFRAMES):
            w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    r = mrec.TrajectoryReader(p)
    return [(_frame_bits(r[i]), int(r.steps[i]), float(r.times[i])) for i in range(_NFRAMES)]


def _check_against(p, reference, n):
    r = mrec.TrajectoryReader(p)
    assert len(r) == n
    for i in range(n):
        assert (_frame_bits(r[i]), int(r.steps[i]), float(r.times[i])) == reference[i], f"frame {i}"


def _create(p, fs, durable):
    return mrec.TrajectoryWriter.create(p, _rich_schema(), fs=fs, flush_every=100, durable=durable)


def _session(w):
    """Frames 0-4 and a flush (the regular block's markers, the first index, the box attributes),
    then frames 5-9 (an index materialised, the box migrating to arrays, a block's first update)
    and a flush; the frames 0-4 are reported committed between the two."""
    for i in range(5):
        w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    w.flush()
    for i in range(5, 10):
        w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    w.flush()


def _points(tmp_path, durable, kinds):
    from mrec.fs.faulty import FaultyFileSystem
    fs = FaultyFileSystem(kinds=kinds)
    w = _create(tmp_path / "count.mrec", fs, durable)
    fs.arm(None)
    _session(w)
    n = fs.count
    w.close()
    return n


_SWEEPS = {
    "enospc-durable": (errno.ENOSPC, None, True),          # every mutating call of the session
    "enospc-lazy": (errno.ENOSPC, None, False),
    "eio-fsync": (errno.EIO, ("fsync", "fsync_dir"), True),   # every fsync: the fsyncgate case
    "eio-writes": (errno.EIO, ("write_at", "replace"), False),
}


@pytest.mark.parametrize("sweep", sorted(_SWEEPS))
def test_every_failing_write_of_a_flush_poisons_the_writer_and_reopen_recovers(shm_path, reference, sweep):
    """Every write / replace / fsync / ... of the flush fails in turn (once: a retry would succeed):
    the flush raises WriteError (errno kept, OSError chained, the file and the array named), every
    later call refuses, the store holds the reported-committed frames bit-identically (or 5 more
    when the failure came after the commit marker), reopen continues and no block is lost."""
    from mrec.fs.faulty import MUTATING, FaultyFileSystem
    err, kinds, durable = _SWEEPS[sweep]
    kinds = kinds or MUTATING
    tmp_path = shm_path
    n = _points(tmp_path, durable, kinds)
    assert n > 20
    for k in range(n):
        p = tmp_path / f"{k}.mrec"
        fs = FaultyFileSystem(kinds=kinds)
        w = _create(p, fs, durable)
        fs.arm(k, err)
        with pytest.raises(mrec.WriteError) as e:
            _session(w)
        assert len(fs.failures) == 1
        committed = w.committed
        assert e.value.errno == err and isinstance(e.value.__cause__, OSError)
        assert e.value.kind == "write_failed" and str(p) in str(e.value) and os.strerror(err) in str(e.value)
        kind, failed_path = fs.failures[0]
        rel = os.path.relpath(failed_path, p)
        if kind != "fsync_dir":
            assert rel in str(e.value), (rel, str(e.value))      # names the file (and so the array)
        assert committed in (0, 5)
        # the retry that lost a block before: every call refuses, naming the failure
        for call in (w.flush, lambda: w.append(_rich_frame(10), step=30, time=5.0),
                     lambda: w.extend([_rich_frame(10)]), w.close):
            with pytest.raises(mrec.WriteError) as again:
                call()
            assert again.value.errno == err and "reopen" in str(again.value)
        w.close()                                               # closed now: idempotent
        assert w.committed == committed
        r = mrec.TrajectoryReader(p)
        assert len(r) in (committed, committed + 5)      # + 5: the failure came after the commit marker
        _check_against(p, reference, len(r))
        with mrec.TrajectoryWriter.open(p) as w2:               # reopen: the state from disk
            assert w2.committed == len(r)
            for i in range(len(r), _NFRAMES):
                w2.append(_rich_frame(i), step=3 * i, time=0.5 * i)
        _check_against(p, reference, _NFRAMES)
        if k % 4 == 0:
            assert validate(p, deep=True).ok, k
        shutil.rmtree(p)


def test_fsync_failure_is_not_forgotten(tmp_path, reference):
    """17.4: after EIO from fsync in flush(), a second flush() does not report the frames committed."""
    from mrec.fs.faulty import FaultyFileSystem
    p = tmp_path / "f.mrec"
    fs = FaultyFileSystem()
    w = _create(p, fs, True)
    for i in range(5):
        w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    w.flush()
    for i in range(5, 10):
        w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    fs.arm(0, errno.EIO, kinds=("fsync",))
    with pytest.raises(mrec.WriteError) as e:
        w.flush()
    assert e.value.errno == errno.EIO and "fsync" in str(e.value) and "trajectory/" in str(e.value)
    with pytest.raises(mrec.WriteError):
        w.flush()
    assert w.committed == 5
    with pytest.raises(mrec.WriteError):
        w.close()
    with mrec.TrajectoryWriter.open(p) as w2:
        assert w2.committed == len(mrec.TrajectoryReader(p)) == 5
        for i in range(5, _NFRAMES):
            w2.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    _check_against(p, reference, _NFRAMES)


def test_failure_in_an_automatic_flush_surfaces_from_append(tmp_path, reference):
    from mrec.fs.faulty import FaultyFileSystem
    p = tmp_path / "a.mrec"
    fs = FaultyFileSystem()
    w = mrec.TrajectoryWriter.create(p, _rich_schema(), fs=fs, flush_every=4)
    for i in range(3):
        w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    fs.arm(2, errno.ENOSPC)
    with pytest.raises(mrec.WriteError) as e:
        w.append(_rich_frame(3), step=9, time=1.5)           # the fourth frame flushes
    assert e.value.errno == errno.ENOSPC and w.committed == 0
    with pytest.raises(mrec.WriteError):
        w.append(_rich_frame(4), step=12, time=2.0)
    # a with-block: the failure propagates once, the lock is released, reopen works
    with pytest.raises(mrec.WriteError):
        with w:
            w.flush()
    assert not (p / ".mrec-writer.lock").exists()
    with mrec.TrajectoryWriter.open(p) as w2:
        assert w2.committed == 0
        for i in range(_NFRAMES):
            w2.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    _check_against(p, reference, _NFRAMES)


def _store_with_tail(p):
    """Three committed frames and an uncommitted tail of two (arrays longer than nstep: the state a
    crash between a flush's landings and its commit marker leaves)."""
    with _create(p, None, True) as w:
        for i in range(3):
            w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    marker = (p / "trajectory" / "zarr.json").read_bytes()
    with mrec.TrajectoryWriter.open(p) as w:
        for i in range(3, 5):
            w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
    (p / "trajectory" / "zarr.json").write_bytes(marker)


def test_failing_create_or_open_raises_write_error_and_can_be_repeated(shm_path, reference):
    from mrec.fs.faulty import FaultyFileSystem
    probe = FaultyFileSystem()
    w = _create(shm_path / "probe.mrec", probe, True)
    n_create = probe.count
    w.close()
    # open writes nothing to a clean store (the writer lock is an OS lock, not a file write), so
    # its injection points are those of a store with an uncommitted tail, which open shrinks
    _store_with_tail(shm_path / "tail.mrec")
    probe.arm(None)
    w = mrec.TrajectoryWriter.open(shm_path / "tail.mrec", fs=probe)
    n_open = probe.count
    w.close()
    assert n_create > 20 and n_open >= 1
    for k in range(n_create):
        p = shm_path / f"c{k}.mrec"
        fs = FaultyFileSystem()
        fs.arm(k, errno.ENOSPC)
        with pytest.raises(mrec.WriteError) as e:
            _create(p, fs, True)
        assert e.value.errno == errno.ENOSPC and str(p) in str(e.value)
        if (p / "trajectory" / "zarr.json").exists():
            w = mrec.TrajectoryWriter.open(p)
        else:
            w = _create(p, None, True)
        with w:
            for i in range(3):
                w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
        _check_against(p, reference, 3)
        shutil.rmtree(p)
    for k in range(n_open):
        p = shm_path / f"o{k}.mrec"
        _store_with_tail(p)
        fs = FaultyFileSystem()
        fs.arm(k, errno.EIO)
        with pytest.raises(mrec.WriteError) as e:
            mrec.TrajectoryWriter.open(p, fs=fs)
        assert e.value.errno == errno.EIO
        with mrec.TrajectoryWriter.open(p) as w:
            assert w.committed == 3
            for i in range(3, 6):
                w.append(_rich_frame(i), step=3 * i, time=0.5 * i)
        _check_against(p, reference, 6)
        shutil.rmtree(p)
