"""Chapter rules not covered elsewhere, and the chapter-coverage table of docs/conformance.md.

* automatic flush cadence K (chapter "Reference writer: automatic flush");
* live append needs a POSIX-like directory store (never a zip);
* trailing axes never split, extents frozen at creation;
* every statement of chapter-and-packing.md is cited in docs/conformance.md's coverage table,
  and every rule id cited there is a row of the matrix (so the map cannot drift from the spec).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.record import extents as X

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT.parent / "shared" / "spec" / "chunking-and-packing.md"
CONFORMANCE = ROOT / "docs" / "conformance.md"


def schema(n_atoms: int, cols: str = "xyz") -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=n_atoms)
    for c in cols:
        s.declare_column("atoms", c, "f64")
    return s


@pytest.mark.parametrize("n_atoms", [3000, 100, 7, 200_000])
def test_automatic_flush_cadence(tmp_path, n_atoms):
    """K = max(1, ceil(4 MiB / frame_bytes)), rounded up to frames-per-chunk, capped at 4096; no fsync."""
    frame_bytes = n_atoms * 24
    rpc = X.rows_per_chunk(n_atoms, 8)
    fpc = rpc // n_atoms
    k = max(1, math.ceil(4 * 1024 * 1024 / frame_bytes))
    k = min(4096, -(-k // fpc) * fpc)
    with mrec.TrajectoryWriter.create(tmp_path / "k.mrec", schema(n_atoms)) as w:
        assert w.flush_every == k
        if k <= 64:
            f = {"atoms": {c: np.zeros(n_atoms) for c in "xyz"}}
            for _ in range(k - 1):
                w.append(f)
            assert w.committed == 0
            w.append(f)                                     # the K-th frame lands an automatic flush
            assert w.committed == k
            tj = json.loads((tmp_path / "k.mrec/trajectory/zarr.json").read_text())
            assert tj["attributes"]["nstep"] == k


def test_flush_every_overrides(tmp_path):
    with mrec.TrajectoryWriter.create(tmp_path / "o.mrec", schema(4), flush_every=2) as w:
        f = {"atoms": {c: np.zeros(4) for c in "xyz"}}
        w.append(f)
        assert w.committed == 0
        w.append(f)
        assert w.committed == 2
    with pytest.raises(mrec.RefusalError):
        mrec.TrajectoryWriter.create(tmp_path / "bad.mrec", schema(4), flush_every=0)


def test_live_append_needs_a_directory_store(tmp_path):
    p = tmp_path / "a.mrec"
    with mrec.TrajectoryWriter.create(p, schema(2)) as w:
        w.append({"atoms": {c: np.zeros(2) for c in "xyz"}})
    z = mrec.pack(p)
    before = z.read_bytes()
    with pytest.raises(mrec.StoreError) as e:
        mrec.TrajectoryWriter.open(z)
    assert "unpack" in str(e.value) and z.read_bytes() == before


def test_trailing_axes_never_split_and_extents_frozen(tmp_path):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=10)
    s.declare_column("atoms", "pos", "f64", trailing=(3,))
    s.declare_column("atoms", "tensor", "f64", trailing=(3, 3))
    p = tmp_path / "t.mrec"
    with mrec.TrajectoryWriter.create(p, s) as w:
        w.append({"atoms": {"pos": np.zeros((10, 3)), "tensor": np.zeros((10, 3, 3))}})
    doc = json.loads((p / "trajectory/atoms/tensor/zarr.json").read_text())
    inner = doc["codecs"][0]["configuration"]["chunk_shape"]
    assert inner[1:] == [3, 3] and doc["chunk_grid"]["configuration"]["chunk_shape"][1:] == [3, 3]
    pos_inner = json.loads((p / "trajectory/atoms/pos/zarr.json").read_text())["codecs"][0]["configuration"]
    assert pos_inner["chunk_shape"][0] == inner[0]          # one rows_per_chunk for every column of a block
    with mrec.TrajectoryWriter.open(p) as w:                 # much bigger frames: extents stay as created
        w.append({"atoms": {"pos": np.ones((5000, 3)), "tensor": np.ones((5000, 3, 3))}})
    again = json.loads((p / "trajectory/atoms/tensor/zarr.json").read_text())
    assert again["codecs"][0]["configuration"]["chunk_shape"] == inner
    assert again["chunk_grid"]["configuration"]["chunk_shape"] == doc["chunk_grid"]["configuration"]["chunk_shape"]


# -- the chapter-coverage table ---------------------------------------------------------------------

def chapter_statements() -> list[str]:
    """Every statement of the chapter: non-empty lines of four or more words that are not headings."""
    out = []
    for line in CHAPTER.read_text(encoding="utf-8").splitlines():
        text = line.strip().lstrip("•").strip()
        if not text or text.endswith("¶") or len(text.split()) < 4:
            continue
        out.append(text)
    return out


def coverage_table() -> dict[str, list[str]]:
    text = CONFORMANCE.read_text(encoding="utf-8")
    section = text.split("## Chapter coverage", 1)[1]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| statement") and not line.startswith("|--"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = [i.strip() for i in cells[1].split(",") if i.strip()]
    return rows


def prefix(statement: str) -> str:
    return " ".join(statement.split())[:48]


def test_every_chapter_statement_is_mapped_to_rules():
    table = coverage_table()
    matrix_ids = set(re.findall(r"^\| ([A-Za-z0-9.\-]+) \|", CONFORMANCE.read_text(), re.M))
    statements = chapter_statements()
    assert len(statements) > 40
    missing = [prefix(s) for s in statements if prefix(s) not in table]
    assert not missing, "chapter statements without a row in the coverage table:\n" + "\n".join(missing)
    stale = [k for k in table if k not in {prefix(s) for s in statements}]
    assert not stale, f"coverage rows quoting text the chapter no longer has: {stale}"
    for key, ids in table.items():
        assert ids, key
        for i in ids:
            assert i in matrix_ids, f"{key!r} cites {i}, which is not a row of the matrix"
