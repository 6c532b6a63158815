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

import numpy as np
import pytest
import zarr

import mrec
from mrec.errors import RefusalError
from mrec.record.dtypes import CANONICAL_DTYPES, EXACT_U64_COLUMNS
from mrec.validate import validate


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


def test_no_validity_group_without_a_nullable_column(tmp_path):
    p = tmp_path / "plain.mrec"
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"blocks": {"atoms": {"x": np.zeros(2)}}})
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

_WRONG = {"f64": [np.int64], "u64": [np.uint32, np.int64, np.int32, np.uint8], "i64": [np.int32, np.uint64],
          "i32": [np.int64, np.uint32], "bool": [np.uint8], "string": [np.int64]}


@pytest.mark.parametrize("key", sorted(CANONICAL_DTYPES))
def test_canonical_key_at_another_dtype_is_refused_as_canonical_dtype_at_append(tmp_path, key):
    canon = CANONICAL_DTYPES[key]
    s = mrec.SequenceSchema()
    s.declare_block("blk", rows=2)
    s.declare_column("blk", key, canon)
    w = mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s)
    wrong = [np.array([1, 2], dtype=t) for t in _WRONG[canon]]
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
            t.declare_column("blk", key, mrec.record.dtypes.dtype_name(np.asarray(a).dtype))
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
    s = mrec.SequenceSchema()
    s.declare_block("blk", rows=2)
    s.declare_column("blk", key, "u64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"blocks": {"blk": {key: np.array([0, 1], np.uint64)}}})
    _retype(p, f"trajectory/blk/{key}", stored)
    for opener in (mrec.TrajectoryReader, mrec.TrajectoryWriter.open):
        with pytest.raises(RefusalError) as e:
            opener(p)
        assert e.value.kind == "canonical_dtype", e.value
        assert key in str(e.value) and "u64" in str(e.value)
    assert any(v.kind == "canonical_dtype" for v in validate(p).violations)


def test_stored_non_canonical_column_at_another_dtype_stays_declaration_mismatch(tmp_path):
    p = tmp_path / "t.mrec"
    s = mrec.SequenceSchema()
    s.declare_block("blk", rows=2)
    s.declare_column("blk", "n", "u64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"blocks": {"blk": {"n": np.array([0, 1], np.uint64)}}})
    _retype(p, "trajectory/blk/n", "int64")
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryReader(p)
    assert e.value.kind == "declaration_mismatch"
