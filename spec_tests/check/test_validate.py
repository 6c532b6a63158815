"""``mrec validate``: valid stores pass, each broken rule is reported with its rule id and path,
several problems are reported together, ``--deep`` finds what only decoding finds, and the
command line prints one line per violation and exits non-zero.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.check.validate import KIND_RULES, RULES, validate
from mrec.zarr.stores.directory import DirectoryStore

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT.parent / "shared" / "spec"
CORE = SPEC / "vectors" / "fixtures" / "schema" / "core"


def zjson(root, node) -> dict:
    return json.loads((Path(root) / node / "zarr.json").read_text())


def set_zjson(root, node, doc) -> None:
    (Path(root) / node / "zarr.json").write_text(json.dumps(doc))


def edit_attrs(root, node, **changes) -> None:
    d = zjson(root, node)
    for k, v in changes.items():
        if v is _DELETE:
            d["attributes"].pop(k, None)
        else:
            d["attributes"][k] = v
    set_zjson(root, node, d)


_DELETE = object()


def make_record(path: Path, frames: int = 6) -> Path:
    p = mrec.write_record(
        path, meta={"creator": {"name": "t"}}, status={"state": "running"},
        method={"type": "classical", "description": "d", "engine": {"name": "e"}},
        system={"atoms": {"id": np.arange(3, dtype="u8"), "element": ["O", "H", "H"]}},
        frame={"blocks": {"atoms": {"x": np.array([0.5, 1.25, 2.0]), "q": [0.1, 0.2, 0.3]},
                          "ions": {"r": np.array([0, 2], "u8")}},
               "masks": {"atoms": {"q": [True, False, True]}}, "precision": {"atoms": {"x": 1e-3}},
               "block_attrs": {"ions": {"targets": {"r": "/system/atoms"}}}, "box": np.eye(3) * 5},
        observables={"e": {"data": [1.0, 2.0], "kind": "scalar", "description": "e", "time_dependent": True}},
        metrics=[{"type": "scalar", "key": "loss", "step": 1, "wall_time": "2026-01-01T00:00:00Z", "value": 1.0}])
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_block("ions")
    s.declare_column("ions", "v", "f64")
    with mrec.TrajectoryWriter.create(p, s) as w:
        for i in range(frames):
            w.append({"atoms": {"x": np.arange(3.0) + i}, "ions": {"v": np.arange(float(i % 3 + 1))}}, step=i * 2)
    return p


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return make_record(tmp_path_factory.mktemp("v") / "good.mrec")


def fresh(good: Path, tmp_path: Path) -> Path:
    p = tmp_path / "t.mrec"
    shutil.copytree(good, p)
    return p


def rules_of(report) -> set[str]:
    return {v.rule for v in report.violations}


def test_valid_record_passes_shallow_and_deep(good, tmp_path):
    for deep in (False, True):
        r = validate(good, deep=deep)
        assert r.ok and r.violations == [] and r.warnings == [], r.violations
    z = mrec.pack(fresh(good, tmp_path), keep=True)
    r = validate(z, deep=True)
    assert r.ok, r.violations
    assert r.checked["frames"] == 6 and r.checked["chunks"] > 10 and r.checked["arrays"] >= 15


def test_demo_and_trajectory_only_records_pass(tmp_path):
    from mrec.demo import run_demo
    z = run_demo(tmp_path, echo=lambda *a: None)
    assert validate(z, deep=True).ok
    xyz = _cli("cat", z, "--frame", "-1", "--format", "extxyz")
    lines = xyz.stdout.splitlines()
    assert xyz.returncode == 0 and lines[0] == "300" and "Lattice=" in lines[1] and "step=19900" in lines[1]
    assert lines[2].split()[0] == "O" and len(lines) == 302          # species from the system block
    s = mrec.SequenceSchema()
    s.declare_block("a", rows=1)
    s.declare_column("a", "x", "f64")
    with mrec.TrajectoryWriter.create(tmp_path / "t.mrec", s) as w:
        w.append({"a": {"x": [1.0]}})
    assert validate(tmp_path / "t.mrec", deep=True).ok


def _narrow(p):
    d = zjson(p, "frame/atoms/x")
    d["data_type"] = "float32"
    set_zjson(p, "frame/atoms/x", d)


def _codec(p):
    d = zjson(p, "frame/atoms/q")
    d["codecs"].insert(1, {"name": "blosc", "configuration": {}})
    set_zjson(p, "frame/atoms/q", d)


def _offset(p):
    from mrec.zarr.array import Array
    a = Array.open(DirectoryStore(str(p)), "trajectory/ions/offset")
    v = a.read()
    v[2] = v[1] - 1 if v[1] > 0 else 5
    v[3:] = np.maximum(v[3:], v[2])
    a.write(v)


def _step_index(p):
    from mrec.zarr.array import Array
    a = Array.open(DirectoryStore(str(p)), "trajectory/ions/step_index")
    v = a.read()
    v[2] = v[1]
    a.write(v)


def _mask(p):
    d = zjson(p, "frame/atoms/_validity/q")
    d["data_type"] = "uint8"
    d["fill_value"] = 0
    set_zjson(p, "frame/atoms/_validity/q", d)


def _nstep(p):
    edit_attrs(p, "trajectory", nstep=-1)


def _schema(p):
    d = zjson(p, "trajectory")
    d["attributes"]["sequence_schema"]["blocks"]["atoms"]["columns"]["x"]["trailing"] = "three"
    set_zjson(p, "trajectory", d)


def _reserved_column(p):
    os.rename(p / "frame/atoms/x", p / "frame/atoms/_validity_tmp")
    shutil.rmtree(p / "frame/atoms/_validity")
    os.rename(p / "frame/atoms/_validity_tmp", p / "frame/atoms/_validity")
    edit_attrs(p, "frame/atoms")


def _system_rows(p):
    from mrec.record.sections.frame_group import write_frame_group
    shutil.rmtree(p / "system")
    write_frame_group(DirectoryStore(str(p)), "system", mrec.Frame(blocks={"atoms": {"id": np.arange(2, dtype="u8")}}))


def _big_endian(p):
    d = zjson(p, "observables/e")
    d["codecs"][0]["configuration"]["endian"] = "big"
    set_zjson(p, "observables/e", d)


def _no_meta(p):
    shutil.rmtree(p / "meta")


CASES = [
    (_narrow, "N-1.6", "frame/atoms/x"),
    (_codec, "C-CODEC-1", "frame/atoms/q"),
    (_offset, "N-3.8r", "trajectory/ions/offset"),
    (_step_index, "N-3.3", "trajectory/ions/step_index"),
    (_mask, "N-1.4c", "frame/atoms/_validity/q"),
    (_nstep, "N-3.3", "trajectory"),
    (_schema, "N-3.6", "trajectory"),
    (_reserved_column, "N-1.4b", "frame/atoms/_validity"),
    (_system_rows, "N-3.1s", "trajectory"),
    (_big_endian, "N-1.6e", "observables/e"),
    (lambda p: edit_attrs(p, "meta", molrec_version=3), "N-0", "meta"),
    (lambda p: edit_attrs(p, "status", state=_DELETE), "N-1.2", "status"),
    (lambda p: edit_attrs(p, "frame/atoms", count=4), "N-1.4c", "frame/atoms"),
    (lambda p: edit_attrs(p, "frame/ions", targets={"r": "/trajectory/atoms"}), "N-2.6a", "frame"),
    (lambda p: edit_attrs(p, "frame/box", cell_defined="false"), "N-2.4f", "frame/box"),
    (lambda p: edit_attrs(p, "observables/meta/e", kind=_DELETE), "N-6.1", "observables/meta/e"),
    (lambda p: edit_attrs(p, "metrics", series={"other": {"type": "scalar"}}), "N-6.2", "metrics"),
    (lambda p: edit_attrs(p, "frame", _meta_types={"x": "i64x6"}, x=[1] * 6), "N-1.5", "frame"),
    (lambda p: edit_attrs(p, "frame/ions", structural_shape=[3]), "N-1.4a", "frame"),
]


@pytest.mark.parametrize("tamper,rule,where", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_is_reported_with_its_id_and_path(good, tmp_path, tamper, rule, where):
    p = fresh(good, tmp_path)
    tamper(p)
    r = validate(p)
    assert not r.ok
    assert rule in rules_of(r), [str(v) for v in r.violations]
    hit = [v for v in r.violations if v.rule == rule]
    assert any(where in v.path or where in v.message for v in hit), [str(v) for v in hit]
    assert all(v.rule in RULES for v in r.violations)


def test_missing_meta_is_a_warning(good, tmp_path):
    p = fresh(good, tmp_path)
    _no_meta(p)
    r = validate(p)
    assert r.ok and [w.rule for w in r.warnings] == ["N-1.1b"]


def test_golden_fixtures_valid_pass_and_invalid_fail():
    """Every valid fixture of the catalogue validates (deep), every invalid one is reported."""
    root = ROOT / "fixtures"
    valid = sorted(root.glob("*.mrec")) + sorted(root.glob("*.mrec.zip"))
    invalid = sorted((root / "invalid").glob("*.mrec")) + sorted((root / "invalid").glob("*.mrec.zip"))
    assert len(valid) > 40 and len(invalid) > 40
    for p in valid:
        assert validate(p, deep=True).ok, p.name
    for p in invalid:
        assert not validate(p, deep=True).ok, p.name


def test_several_problems_are_reported_together(good, tmp_path):
    p = fresh(good, tmp_path)
    _narrow(p)
    _codec(p)
    edit_attrs(p, "status", state=_DELETE)
    _offset(p)
    r = validate(p)
    assert {"N-1.6", "C-CODEC-1", "N-1.2", "N-3.8r"} <= rules_of(r), [str(v) for v in r.violations]


def _flip_in_trajectory_chunk(p) -> str:
    shard = p / "trajectory/atoms/x/c/0"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0x40                                           # inside the last inner chunk
    shard.write_bytes(bytes(raw))
    return "trajectory/atoms/x"


def test_deep_finds_a_flipped_bit_in_a_trajectory_chunk(good, tmp_path):
    p = fresh(good, tmp_path)
    where = _flip_in_trajectory_chunk(p)
    assert validate(p).ok                                      # shallow: metadata only for trajectory chunks
    r = validate(p, deep=True)
    assert "N-4e" in rules_of(r) and any(where in v.path for v in r.violations), [str(v) for v in r.violations]


def test_deep_reports_a_torn_shard_index(good, tmp_path):
    p = fresh(good, tmp_path)
    shard = p / "trajectory/atoms/x/c/0"
    raw = bytearray(shard.read_bytes())
    n_chunks = json.loads((p / "trajectory/atoms/x/zarr.json").read_text())
    n_chunks = n_chunks["chunk_grid"]["configuration"]["chunk_shape"][0] // \
        n_chunks["codecs"][0]["configuration"]["chunk_shape"][0]
    raw[16 * n_chunks] ^= 0xFF                                 # the index's trailing crc32c
    shard.write_bytes(bytes(raw))
    r = validate(p, deep=True)
    assert "N-12" in rules_of(r), [str(v) for v in r.violations]


def test_uncommitted_tail_is_not_a_violation(good, tmp_path):
    p = fresh(good, tmp_path)
    edit_attrs(p, "trajectory", nstep=4)                       # arrays longer than nstep: a crash leftover
    r = validate(p, deep=True)
    assert r.ok, [str(v) for v in r.violations]
    assert r.checked["frames"] == 4


def test_deep_warns_off_grid_precision_values(good, tmp_path):
    p = fresh(good, tmp_path)
    from mrec.zarr.array import Array
    a = Array.open(DirectoryStore(str(p)), "frame/atoms/x")
    a.write(np.array([0.1, 0.2, 0.3]))
    r = validate(p, deep=True)
    assert r.ok and any(w.rule == "N-2.3" for w in r.warnings)


def test_zip_rules(good, tmp_path):
    files = {str(q.relative_to(good)).replace(os.sep, "/"): q.read_bytes() for q in good.rglob("*") if q.is_file()}
    bad = tmp_path / "bad.mrec.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        for k, v in files.items():
            zf.writestr(k, v, compress_type=zipfile.ZIP_DEFLATED if k.endswith("c/0") else zipfile.ZIP_STORED)
        zf.writestr("meta/", b"")
    r = validate(bad)
    assert "C-ZIP-1" in rules_of(r), [str(v) for v in r.violations]
    z = mrec.pack(fresh(good, tmp_path), keep=True)
    raw = z.read_bytes()
    trunc = tmp_path / "trunc.mrec.zip"
    trunc.write_bytes(raw[:-30])
    r = validate(trunc)
    assert not r.ok and rules_of(r) & {"C-ZIP-2", "C-ZIP-1"}


def test_not_a_record(tmp_path):
    (tmp_path / "x.mrec").mkdir()
    r = validate(tmp_path / "x.mrec")
    assert rules_of(r) == {"N-1.1a"}
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    r = validate(tmp_path / "y")
    assert {w.rule for w in r.warnings} == {"N-1.1n", "N-1.1b"} and "N-1.1b" in rules_of(r)


# -- the published vectors, embodied in stores ------------------------------------------------------

VECTOR_TAMPERS = {
    "column/invalid-narrow-float.json": (_narrow, "N-1.6"),
    "column/invalid-precision-on-i64.json": (lambda p: edit_attrs(p, "frame/ions/r", precision=0.001), "N-2.3"),
    "column/invalid-zero-precision.json": (lambda p: edit_attrs(p, "frame/atoms/x", precision=0.0), "N-2.3"),
    "meta/invalid-newer-version.json": (lambda p: edit_attrs(p, "meta", molrec_version=3), "N-0"),
    "meta/invalid-null-version.json": (lambda p: edit_attrs(p, "meta", molrec_version=None), "N-0"),
    "meta/invalid-creator-without-name.json": (lambda p: edit_attrs(p, "meta", creator={"version": "0.1.0"}),
                                               "N-1.2"),
    "status/invalid-no-state.json": (lambda p: edit_attrs(p, "status", state=_DELETE), "N-1.2"),
    "method/invalid-no-engine.json": (lambda p: edit_attrs(p, "method", engine=_DELETE), "N-1.2"),
    "block/invalid-target-into-trajectory.json": (
        lambda p: edit_attrs(p, "frame/ions", targets={"r": "/trajectory/atoms"}), "N-2.6a"),
    "box/invalid-string-flag.json": (lambda p: edit_attrs(p, "frame/box", cell_defined="false"), "N-2.4f"),
}


@pytest.mark.parametrize("vector", sorted(VECTOR_TAMPERS))
def test_invalid_vectors_fail(good, tmp_path, vector):
    assert (CORE / vector).exists(), vector
    tamper, rule = VECTOR_TAMPERS[vector]
    p = fresh(good, tmp_path)
    tamper(p)
    assert rule in rules_of(validate(p)), vector


@pytest.mark.parametrize("section", ["meta", "status", "method"])
def test_valid_document_vectors_pass(tmp_path, section):
    for f in sorted((CORE / section).glob("valid-*.json")):
        doc = json.loads(f.read_text())
        extra = {} if section == "status" else {"status": {"state": "running"}}
        p = mrec.write_record(tmp_path / f"{f.stem}.mrec", **{section: doc}, **extra)
        assert validate(p, deep=True).ok, f.name


# -- the rule ids and the command line ---------------------------------------------------------------

def test_every_rule_id_is_in_the_conformance_matrix():
    text = (ROOT / "docs" / "conformance.md").read_text()
    ids = set(re.findall(r"^\| ([A-Za-z0-9.\-]+) \|", text, re.M))
    assert set(RULES) <= ids, sorted(set(RULES) - ids)
    assert set(KIND_RULES.values()) <= set(RULES)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "mrec", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_cli_validate(good, tmp_path):
    ok = _cli("validate", good, "--deep")
    assert ok.returncode == 0 and "valid" in ok.stdout and ok.stderr == ""
    p = fresh(good, tmp_path)
    _narrow(p)
    _codec(p)
    bad = _cli("validate", p)
    assert bad.returncode == 1
    lines = [ln for ln in bad.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) >= 2 and any(ln.startswith("[N-1.6]") and "frame/atoms/x" in ln for ln in lines)
    js = _cli("validate", p, "--json")
    doc = json.loads(js.stdout)
    assert js.returncode == 1 and doc["valid"] is False
    assert {"rule", "path", "message", "kind", "severity"} <= set(doc["violations"][0])
    missing = _cli("validate", tmp_path / "nothing.mrec")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr


def test_cli_info_cat_pack_unpack(good, tmp_path):
    p = fresh(good, tmp_path)
    info = _cli("info", p, "--json")
    doc = json.loads(info.stdout)
    assert info.returncode == 0 and doc["trajectory"]["frames"] == 6
    assert doc["sections"][0] == "meta" and doc["trajectory"]["blocks"]["ions"]["state"] == "ragged"
    assert all({"dtype", "shape", "codecs", "bytes", "ratio"} <= set(a) for a in doc["arrays"])
    text = _cli("info", p)
    assert text.returncode == 0 and "trajectory: 6 frames" in text.stdout
    cat = _cli("cat", p, "--frame", "2")
    frame = json.loads(cat.stdout)
    assert frame["step"] == 4 and frame["blocks"]["atoms"]["x"] == [2.0, 3.0, 4.0]
    xyz = _cli("cat", p, "--frame", "-1", "--format", "extxyz")          # atoms here has x only
    assert xyz.returncode == 2 and "x, y, z" in xyz.stderr and "Traceback" not in xyz.stderr
    out = _cli("cat", p, "--frame", "99")
    assert out.returncode == 2 and "out of range" in out.stderr and "Traceback" not in out.stderr
    packed = _cli("pack", p)
    assert packed.returncode == 0 and Path(packed.stdout.strip()).name == "t.mrec.zip" and not p.exists()
    again = _cli("pack", p)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    unpacked = _cli("unpack", tmp_path / "t.mrec.zip")
    assert unpacked.returncode == 0 and validate(p, deep=True).ok


@pytest.mark.parametrize("name", ["valid-cmaps.json", "valid-pair-overrides.json", "valid-typed-meta.json",
                                  "valid-water.json"])
def test_valid_frame_vectors_written_and_validated(tmp_path, name):
    """The published frame models, stored by mrec (as frame/ and as system/), pass the validator and
    read back as the same model."""
    from test_vectors_sequence_schema import frame_from_model
    frame = frame_from_model(json.loads((CORE / "frame" / name).read_text()))
    p = mrec.write_record(tmp_path / "f.mrec", frame=frame, system=frame)
    assert validate(p, deep=True).ok
    back = mrec.read_record(p)
    assert back.frame == frame.rounded() and back.system == frame.rounded()


def test_valid_record_vector_written_and_validated(tmp_path):
    from test_vectors_sequence_schema import frame_from_model
    doc = json.loads((CORE / "record" / "valid-structure.json").read_text())
    kw = {k: frame_from_model(doc[k]) for k in ("frame", "system") if doc.get(k)}
    kw.update({k: doc[k] for k in ("meta", "status", "method") if doc.get(k) is not None})
    p = mrec.write_record(tmp_path / "r.mrec", **kw)
    assert validate(p, deep=True).ok


def test_progress_bar_draws_only_on_a_terminal(good, tmp_path):
    import io
    from mrec.progress import Bar
    out = io.StringIO()
    with Bar("pack", stream=out, enabled=True) as bar:
        mrec.pack(fresh(good, tmp_path), keep=True, progress=bar)
    text = out.getvalue()
    assert text.startswith("\rpack [") and "100.0%" in text and text.endswith("\n")
    quiet = io.StringIO()                                   # a StringIO is not a terminal
    with Bar("validate", stream=quiet, unit="arrays") as bar:
        validate(good, deep=True, progress=bar)
    assert quiet.getvalue() == ""
    cli = _cli("pack", fresh(good, tmp_path / "x"))
    assert cli.returncode == 0 and cli.stderr == ""           # a pipe gets no bar
