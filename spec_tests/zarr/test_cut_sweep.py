"""Issue 27, section 2, first item: a shard cut at any offset never reads committed rows wrong.

A closed store whose shard file was cut 1-30 bytes into the newest copy of its last inner chunk
(an uncompressed column whose copy begins with zero bytes) read the committed last frame as 0.0
with no error, no StandInWarning, only a torn index from ``validate --deep`` and no word from
``mrec repair``. docs/reliability.md ("Issue 27: a cut at any offset") states the rules; the sweep
(``tools/cutsweep.py``, also the ``cut`` target of ``python -m tools.fuzz``) checks them at every byte
offset of the last two copies of each shard of each array kind.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import warnings

import numpy as np
import pytest

import mrec
from mrec.errors import CorruptionError, StandInWarning
from mrec.record.trajectory.reader import TrajectoryReader
from mrec.check.repair import repair
from mrec.check.validate import validate
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore


def _cutsweep():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "cutsweep.py")
    spec = importlib.util.spec_from_file_location("cutsweep", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cutsweep"] = mod          # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


cutsweep = _cutsweep()


def _issue_store(root) -> tuple[str, int, int]:
    """The issue's store: an uncompressed column, frames 0..11 of [0.0, i] (every copy begins with
    zero bytes), flushed at 6 and 12: the newest copy of the chunk holds frames 6..11 alone."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=2)
    s.declare_column("atoms", "x", "f64")
    with mrec.TrajectoryWriter.create(root, s, compression=None) as w:
        for i in range(12):
            w.append({"blocks": {"atoms": {"x": np.array([0.0, float(i)])}}})
            if i == 5:
                w.flush()
    key = "trajectory/atoms/x/c/0"
    index = Array.open(DirectoryStore(root), "trajectory/atoms/x", appended=True).shard_index(key)
    return key, int(index.offsets[0]), int(index.nbytes[0])


@pytest.mark.parametrize("into", [1, 2, 7, 8, 16, 29, 30])
def test_the_issue_cut_into_a_copy_beginning_with_zeros_is_corruption(tmp_path, into):
    src = tmp_path / "src.mrec"
    key, off, nb = _issue_store(src)
    root = tmp_path / "cut.mrec"
    shutil.copytree(src, root)
    os.truncate(root / key, off + into)
    r = TrajectoryReader(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StandInWarning)     # a cut inside the newest copy is no stand-in
        for i in range(1, 6):                              # rows the copy before it holds
            assert r[i].blocks["atoms"]["x"].tobytes() == np.array([0.0, float(i)]).tobytes()
        try:                    # [0.0, 0.0]: the fill value, as the padding; vouched for when the cut
            assert r[0].blocks["atoms"]["x"].tobytes() == bytes(16)     # leaves its 16 bytes
        except CorruptionError:
            assert into < 16
        with pytest.raises(CorruptionError, match="atoms/x/c/0"):
            r[11]                                          # was [0.0, 0.0], silently
        with pytest.raises(CorruptionError, match="atoms/x/c/0"):
            r.column("atoms", "x")
    rep = validate(root, deep=True)
    assert any(v.rule == "N-4e" and "atoms/x" in v.path for v in rep.violations), [v.rule for v in rep.violations]
    before = (root / key).read_bytes()
    rep = repair(root)
    assert not rep.ok and rep.unrecoverable[0][0].endswith(key)
    assert "unrecoverable" in rep.summary()
    assert (root / key).read_bytes() == before             # nothing written: the loss never becomes fill
    with pytest.raises(CorruptionError):
        TrajectoryReader(root)[11]


@pytest.mark.parametrize("kind", cutsweep.KINDS)
def test_every_cut_of_the_last_two_copies_reads_exactly_or_says_so(tmp_path, kind):
    """Every byte offset from the start of the second-last copy of the last two shards to one byte
    short of the end: reader (r[i] and column), validate --deep and repair keep the documented rules
    (tools/cutsweep.py lists them), and the written values are those the clean store reads."""
    seed = cutsweep.build(str(tmp_path), kind)
    clean = np.array(cutsweep.VALUES, dtype=np.float64)
    if kind == "dense":
        assert len(seed.frames) == len(clean)
    else:
        got = np.frombuffer(b"".join(seed.frames), dtype=np.float64).reshape(clean.shape)
        if kind == "shuffled":                              # the declared precision's grid
            assert np.allclose(got, clean, atol=1e-3, equal_nan=True)
        else:
            assert got.tobytes() == clean.tobytes()
    checked, found = 0, []
    for shard in seed.shards[-2:]:          # a full chunk's newest copy, and the partial tail's
        assert len(shard.copies) >= 2
        for cut in shard.cuts(2):
            found += cutsweep.check_cut(seed, shard, cut)
            checked += 1
    assert checked >= 50 and not found, found[:10]


def test_a_cut_inside_the_newest_copy_is_never_a_stand_in(tmp_path):
    """The newest copy's entry gives its extent, so a file ending strictly inside it is a cut
    (no crash leaves one): the rows only it holds raise, whatever its first bytes are; a file
    ending exactly where it begins is the power-loss state and may be a (warned) stand-in."""
    seed = cutsweep.build(str(tmp_path), "uncompressed")
    shard = seed.shards[-1]
    off, nb = shard.copies[-1]
    for cut in (off, off + 1, off + nb // 2, off + nb - 1):
        with open(seed.file(shard), "wb") as f:
            f.write(shard.original[:cut])
        out = cutsweep.Outcome()
        cutsweep._read(seed, out)
        assert not out.violations, out.violations
        if cut == off:
            assert out.warned and not out.raised
        else:
            assert not out.warned and len(seed.frames) - 1 in out.raised, (cut, out)
    with open(seed.file(shard), "wb") as f:
        f.write(shard.original)
