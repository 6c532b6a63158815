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
