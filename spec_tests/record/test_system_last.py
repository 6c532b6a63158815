"""A record whose trajectory is written before its system (mrec.record.whole.system_last, issue 29
target 6): the same record as write_record + TrajectoryWriter, byte for byte, with write_record's
refusals at the start and the 1:1 rule checked when the system is added."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mrec import Box, SequenceSchema, TrajectoryWriter
from mrec.errors import RefusalError
from mrec.record.whole import write_record
from mrec.record.whole.system_last import begin_record

N = 40


def _system(names=None) -> dict:
    names = names if names is not None else [f"A{i % 7}" for i in range(N)]
    return {"blocks": {"atoms": {"name": np.array(names, dtype=object), "mass": np.linspace(1, 2, N),
                                 "res_id": np.arange(N, dtype=np.uint64) // 4},
                       "bonds": {"atomi": np.arange(N - 1, dtype=np.uint64),
                                 "atomj": np.arange(1, N, dtype=np.uint64)}},
            "meta": {"units": {"length": "Angstrom"}}}


def _schema(rows: int = N, id_column: bool = False) -> SequenceSchema:
    s = SequenceSchema()
    s.declare_block("atoms", rows=rows)
    for c in ("x", "y", "z") + (("id",) if id_column else ()):
        s.declare_column("atoms", c, "u64" if c == "id" else "f64")
    return s


def _frames(rows: int = N):
    rng = np.random.default_rng(7)
    for i in range(5):
        yield {"blocks": {"atoms": {c: rng.normal(size=rows) for c in "xyz"}},
               "box": Box.from_dimensions(30.0, 30.0, 30.0, 90.0, 90.0, 90.0)}, 10 * i, 0.5 * i


def _trajectory(path: Path, rows: int = N) -> None:
    with TrajectoryWriter.create(str(path), _schema(rows), compression="shuffle+zstd:5") as w:
        for frame, step, t in _frames(rows):
            w.append(frame, step=step, time=t)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_record_as_system_first(tmp_path):
    first, last = tmp_path / "first.mrec", tmp_path / "last.mrec"
    write_record(first, meta={"creator": {"name": "t"}}, system=_system(), compression="shuffle+zstd:5")
    _trajectory(first)
    pending = begin_record(last, meta={"creator": {"name": "t"}}, system=_system(), schema=_schema(),
                           compression="shuffle+zstd:5")
    assert not (last / "system").exists()
    _trajectory(last)
    pending.write()
    assert _tree(first) == _tree(last)


def test_refusals_at_the_start_are_write_records(tmp_path):
    bad = _system(["ok"] * (N - 1) + ["\ud800"])
    with pytest.raises(RefusalError) as old:
        write_record(tmp_path / "a.mrec", meta={}, system=bad)
    with pytest.raises(RefusalError) as new:
        begin_record(tmp_path / "b.mrec", meta={}, system=bad, schema=_schema())
    assert (old.value.kind, old.value.detail) == (new.value.kind, new.value.detail)
    assert new.value.kind == "bad_string"
    assert not (tmp_path / "b.mrec").exists()
    (tmp_path / "c.mrec").mkdir()
    with pytest.raises(RefusalError) as exists:
        begin_record(tmp_path / "c.mrec", meta={}, system=_system(), schema=_schema())
    assert exists.value.kind == "exists"


def test_id_columns_are_refused(tmp_path):
    system = _system()
    system["blocks"]["atoms"]["id"] = np.arange(N, dtype=np.uint64)
    with pytest.raises(RefusalError) as exc:
        begin_record(tmp_path / "a.mrec", meta={}, system=system, schema=_schema(id_column=True))
    assert exc.value.kind == "bad_argument"
    begin_record(tmp_path / "b.mrec", meta={}, system=system, schema=_schema())       # no id in the frames


def test_rows_checked_when_the_system_is_added(tmp_path):
    path = tmp_path / "a.mrec"
    pending = begin_record(path, meta={}, system=_system(), schema=_schema(N + 1))
    _trajectory(path, rows=N + 1)
    with pytest.raises(RefusalError) as exc:
        pending.write()
    assert exc.value.kind == "row_count_mismatch"
    assert not (path / "system").exists()


def test_without_a_trajectory(tmp_path):
    path = tmp_path / "a.mrec"
    begin_record(path, meta={}, system=_system(), schema=_schema()).write()
    ref = tmp_path / "ref.mrec"
    write_record(ref, meta={}, system=_system())
    assert _tree(path) == _tree(ref)


def test_documents_compacted_before_the_fsyncs(tmp_path):
    """The MD surfaces compact the system's documents inside write (then finish_record finds them
    compact): the record is the one compacted after the fact."""
    from mrec.archive.repack import compact_documents
    from mrec.md.sizing import compact_unsynced
    ref, path = tmp_path / "ref.mrec", tmp_path / "a.mrec"
    write_record(ref, meta={}, system=_system())
    _trajectory(ref)
    compact_documents(ref, minimal=True)
    pending = begin_record(path, meta={}, system=_system(), schema=_schema())
    _trajectory(path)
    seen = []
    pending.write(documents=lambda d: (seen.append(d), compact_unsynced(d)))
    assert seen == [str(path / "system")]
    assert compact_documents(path, minimal=True) > 0          # the trajectory's, not the system's
    assert _tree(path) == _tree(ref)
