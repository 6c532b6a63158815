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
from mrec.validate import validate
from mrec.zarr.array import Array
from mrec.zarr.store import DirectoryStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _edit_json(path, edit) -> None:
    with open(path) as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


# -- a frame that is no frame ----------------------------------------------------------------------

def _writer(tmp_path, **kw):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    return mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s, **kw)


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
    import mrec.mdanalysis  # noqa: F401
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
    path = str(tmp_path / "t.mrec")
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(path, s) as w:
        w.append({"blocks": {"atoms": {"x": np.arange(3.0)}}})
    assert not os.path.exists(os.path.join(path, "trajectory", "box"))
    assert mrec.TrajectoryReader(path)[0].box is None and validate(path, deep=True).ok
    w = mrec.TrajectoryWriter.create(str(tmp_path / "c.mrec"), s)
    w.close()
    os.makedirs(os.path.join(tmp_path, "c.mrec", "trajectory", "box"))
    with open(os.path.join(tmp_path, "c.mrec", "trajectory", "box", ".mrec-tmp-zarr.json.0123abcd"), "wb") as f:
        f.write(b'{"zarr_format": 3, "node_type": "group", "attributes": {"vectors"')
    assert len(mrec.TrajectoryReader(str(tmp_path / "c.mrec"))) == 0
