"""``mrec repack``: a closed record rewritten with extents sized to what it holds (issue 15, part 1).

The chapter: "a conforming reader opens any chunking".  Every test reads the repacked record back
through mrec (every value bit for bit, ``describe`` = read everything), through the oracles
(zarr-python, zarrs, tensorstore where it has the codecs), and through ``validate(deep=True)``.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

from mrec import Box, TrajectoryReader, TrajectoryWriter
from mrec import pack
from mrec.errors import RefusalError
from mrec.check.fixtures import VALID, describe
from mrec.fs import RecordingFileSystem
from mrec.archive.repack import PROFILES, repack
from mrec.check.validate import validate
from mrec.zarr.array import Array, read_node
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.stores.directory import DirectoryStore
from mrec.zarr.stores.zip_read import ZipStore

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
VALID_NAMES = [v.name for v in VALID]
ZARRS = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}


def tree_digest(path: Path) -> dict[str, str]:
    if path.is_file():
        return {"": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def lammps_like(path: Path, n_atoms=7, n_frames=3, **kw) -> Path:
    """A LAMMPS dump's worth: id, type, x y z, vx vy vz, q for 7 atoms x 3 frames (9 columns)."""
    rng = np.random.default_rng(7)
    frames = []
    for i in range(n_frames):
        cols = {"id": np.arange(1, n_atoms + 1, dtype=np.uint64),
                "type_id": (np.arange(n_atoms) % 3 + 1).astype(np.uint64)}
        cols.update({c: np.round(rng.uniform(0, 10, n_atoms), 4) for c in ("x", "y", "z", "vx", "vy", "vz", "q")})
        frames.append({"blocks": {"atoms": cols}, "box": Box(np.eye(3) * 10.0)})
    with TrajectoryWriter.create(path, frames[0], **kw) as w:
        for i, f in enumerate(frames):
            w.append(f, step=100 * i)
    return path


def without_arrays(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "arrays"}


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "OUT" or b.dtype.kind in "OUT":
        return a.shape == b.shape and [str(x) for x in a.ravel()] == [str(x) for x in b.ravel()]
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def trajectory_arrays(store) -> list[str]:
    return [k[: -len("/zarr.json")] for k in store.list("trajectory")
            if k.endswith("/zarr.json") and isinstance(read_node(store, k[: -len("/zarr.json")]), ArrayMetadata)]


# -- the target: a 7-atom x 3-frame record ----------------------------------------------------------

def test_repack_small_record_is_under_16_kib_with_the_same_values(tmp_path):
    src = lammps_like(tmp_path / "dump.mrec")
    ref_zip = pack(src, keep=True)
    before = tree_digest(src)
    out = repack(src, tmp_path / "small.mrec.zip")
    assert os.path.getsize(out) <= 16 * 1024 < os.path.getsize(ref_zip) // 30
    assert tree_digest(src) == before                           # the original is untouched
    assert describe(out) | {"arrays": None} == describe(src) | {"arrays": None}
    a, b = TrajectoryReader(src), TrajectoryReader(out)
    for i in range(len(a)):
        fa, fb = a[i], b[i]
        for c, v in fa.blocks["atoms"].items():
            assert same(fb.blocks["atoms"][c], v), c
        assert same(fa.box.vectors, fb.box.vectors)
    assert validate(out, deep=True).ok


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("name", VALID_NAMES)
def test_repack_every_fixture_reads_the_same_and_validates(tmp_path, name, profile):
    for i, form in enumerate((f"{name}.mrec", f"{name}.mrec.zip")):
        src = FIXTURES / form
        before = tree_digest(src)
        out = repack(src, tmp_path / f"{name}{i}.mrec.zip", profile=profile)
        assert tree_digest(src) == before
        assert without_arrays(describe(out)) == without_arrays(describe(src)), form
        report = validate(out, deep=True)
        assert report.ok, [str(v) for v in report.violations]
        assert not report.warnings or all(w.rule != "N-4e" for w in report.warnings)


def _oracle_reads(d: Path, z: Path, path: str, chain: str, string: bool):
    out = {"zarr-python": zarr.open_array(str(d / path), mode="r")[...]}
    zs = zarr.storage.ZipStore(str(z), mode="r")
    try:
        out["zarr-python zip"] = zarr.open_array(store=zs, path=path, mode="r")[...]
    finally:
        zs.close()
    if not string:
        with zarr.config.set(ZARRS):
            za = zarr.open_array(str(d / path), mode="r")
            assert "zarrs" in type(za._async_array.codec_pipeline).__module__
            out["zarrs"] = za[...]
    if not string and "numcodecs.shuffle" not in chain:      # tensorstore has no numcodecs.shuffle
        out["tensorstore"] = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(d / path)}},
                                     open=True).result().read().result()
        out["tensorstore zip"] = ts.open({"driver": "zarr3", "kvstore": {
            "driver": "zip", "base": {"driver": "file", "path": str(z)}, "path": path + "/"}},
            open=True).result().read().result()
    return out


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("name", VALID_NAMES)
def test_oracles_read_every_repacked_array_identically(tmp_path, name, profile):
    d = repack(FIXTURES / f"{name}.mrec", tmp_path / f"{name}.mrec", profile=profile)
    z = repack(FIXTURES / f"{name}.mrec", tmp_path / f"{name}.mrec.zip", profile=profile)
    store = DirectoryStore(str(d))
    readers = set()
    paths = trajectory_arrays(store)
    for path in paths:
        ours = Array.open(store, path).read()
        doc = json.loads((d / path / "zarr.json").read_text(encoding="utf-8"))
        for oracle, got in _oracle_reads(d, z, path, json.dumps(doc["codecs"]), doc["data_type"] == "string").items():
            assert same(got, ours), (oracle, path)
            readers.add(oracle)
    if paths:
        assert {"zarr-python", "zarr-python zip"} <= readers
    if paths and name != "strings":
        assert "zarrs" in readers
    if profile == "small" and name in ("whole_record", "block_ragged", "masks"):
        assert "tensorstore" in readers                 # no precision column shuffled: all three oracles


def test_archive_random_frame_is_one_chunk_per_column(tmp_path):
    src = lammps_like(tmp_path / "long.mrec", n_atoms=50, n_frames=100)
    out = repack(src, tmp_path / "long.archive.mrec", profile="archive")
    store = DirectoryStore(str(out))
    for path in trajectory_arrays(store):
        if path.endswith(("/x", "/q")):
            arr = Array.open(store, path)
            assert arr.sharding.chunk_shape[0] % 50 == 0 and arr.sharding.chunk_shape[0] >= 32 * 50
    rec = RecordingFileSystem(record_reads=True)
    r = TrajectoryReader(out, fs=rec)
    rec.ops.clear()
    f = r[60]
    reads: dict[str, list] = {}
    for op in rec.ops:
        if op.kind == "read_range" and "/c/" in op.path:
            reads.setdefault(op.path, []).append((op.offset, op.length))
    assert len(reads) == 9                        # the 9 columns' shards (steps are a progression)
    for path, got in reads.items():
        assert len(got) == 2, (path, got)         # its index, then the one chunk holding the frame
    assert same(f.blocks["atoms"]["x"], TrajectoryReader(src)[60].blocks["atoms"]["x"])


def test_repack_refuses_and_changes_nothing(tmp_path):
    src = lammps_like(tmp_path / "a.mrec")
    (tmp_path / "taken.mrec.zip").write_bytes(b"x")
    with pytest.raises(RefusalError) as e:
        repack(src, tmp_path / "taken.mrec.zip")
    assert e.value.kind == "exists" and (tmp_path / "taken.mrec.zip").read_bytes() == b"x"
    with pytest.raises(RefusalError) as e:
        repack(src, tmp_path / "b.mrec", profile="tiny")
    assert e.value.kind == "bad_profile"
    with pytest.raises(RefusalError) as e:
        repack(src, src)
    assert e.value.kind in ("exists", "bad_target")
    w = TrajectoryWriter.open(src)                   # a live writer: repack is no compaction of it
    try:
        before = tree_digest(src)
        with pytest.raises(RefusalError) as e:
            repack(src, tmp_path / "c.mrec")
        assert e.value.kind == "live_writer" and tree_digest(src) == before
        assert not (tmp_path / "c.mrec").exists()
    finally:
        w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mrec", "taken.mrec.zip"]


def test_cli_repack_then_validate_deep(tmp_path):
    src = lammps_like(tmp_path / "dump.mrec")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "dump.archive.mrec.zip"
    p = subprocess.run([sys.executable, "-m", "mrec", "repack", str(src), str(out), "--profile", "archive"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert str(out) in p.stdout and out.is_file()
    p = subprocess.run([sys.executable, "-m", "mrec", "validate", "--deep", str(out)], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0 and "valid" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-m", "mrec", "repack", str(src), str(out)], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 2 and "already exists" in p.stderr


# -- the live writer's size hint ------------------------------------------------------------------

def test_expected_frames_sizes_shards_for_a_short_run(tmp_path):
    ref = pack(lammps_like(tmp_path / "ref.mrec"), keep=True)
    hinted_dir = lammps_like(tmp_path / "hint.mrec", expected_frames=3)
    hinted = pack(hinted_dir, keep=True)
    assert os.path.getsize(hinted) <= 16 * 1024 < os.path.getsize(ref) // 30
    assert describe(hinted) | {"arrays": None} == describe(ref) | {"arrays": None}
    store = ZipStore(str(hinted))
    x = Array.open(store, "trajectory/atoms/x")
    assert x.sharding.chunk_shape[0] == 21 and x.meta.chunk_shape[0] == 21     # 3 frames x 7 rows, one chunk
    assert validate(hinted, deep=True).ok


def test_expected_frames_is_a_hint_more_frames_still_land(tmp_path):
    path = lammps_like(tmp_path / "over.mrec", n_frames=10, expected_frames=2)
    r = TrajectoryReader(path)
    assert len(r) == 10 and list(r.steps) == [100 * i for i in range(10)]
    assert describe(path) | {"arrays": None} == describe(lammps_like(tmp_path / "plain.mrec", n_frames=10)) \
        | {"arrays": None}
    with TrajectoryWriter.open(path) as w:            # reopened: the frozen extents go on
        w.append(r[0], step=1000)
    assert len(TrajectoryReader(path)) == 11
    assert validate(path, deep=True).ok
    for bad in (0, -1, 2.5, True):
        with pytest.raises(RefusalError) as e:
            lammps_like(tmp_path / f"bad{bad}.mrec", expected_frames=bad)
        assert e.value.kind == "bad_expected_frames"


def test_repack_keeps_a_zero_width_trailing_axis(tmp_path):
    s = __import__("mrec").SequenceSchema()
    s.declare_block("atoms", rows=4)
    s.declare_column("atoms", "v", "f64", trailing=(0,))
    s.declare_column("atoms", "x", "f64")
    with TrajectoryWriter.create(tmp_path / "a.mrec", s) as w:
        for i in range(5):
            w.append({"blocks": {"atoms": {"v": np.zeros((4, 0)), "x": np.arange(4.0) + i}}}, step=i)
    for profile in sorted(PROFILES):
        out = repack(tmp_path / "a.mrec", tmp_path / f"b-{profile}.mrec.zip", profile=profile)
        assert without_arrays(describe(out)) == without_arrays(describe(tmp_path / "a.mrec"))
        assert validate(out, deep=True).ok


# -- property: any record repacks to the same values ---------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=12)
@given(atoms=st.integers(1, 40), frames=st.integers(0, 45), precision=st.sampled_from([None, 1e-2, 1e-3]),
       ragged=st.lists(st.integers(0, 9), min_size=0, max_size=45), hinted=st.booleans(),
       profile=st.sampled_from(sorted(PROFILES)), seed=st.integers(0, 2**16))
def test_any_record_repacks_to_the_same_values(tmp_path_factory, atoms, frames, precision, ragged, hinted,
                                               profile, seed):
    import mrec
    tmp = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(seed)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    s.declare_column("atoms", "x", "f64", precision=precision)
    s.declare_column("atoms", "n", "i32", trailing=(2,))
    s.declare_block("ions", rows=4)
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_meta("pe", "f64")
    kw = {"expected_frames": max(1, frames // 2)} if hinted else {}
    with TrajectoryWriter.create(tmp / "r.mrec", s, durable=False, flush_every=7, **kw) as w:
        for i in range(frames):
            blocks = {"atoms": {"x": rng.normal(size=atoms) * 20,
                                "n": rng.integers(-9, 9, size=(atoms, 2)).astype(np.int32)}}
            masks = {}
            if i < len(ragged) and (i == 0 or ragged[i] != ragged[i - 1]):
                k = ragged[i]
                blocks["ions"] = {"q": rng.normal(size=k)}
                masks = {"ions": {"q": rng.random(k) > 0.3}}
            w.append({"blocks": blocks, "masks": masks, "meta": {"pe": float(rng.normal())},
                      "box": Box(np.eye(3) * (10.0 + i % 3))}, step=3 * i + (i > 5))
    out = repack(tmp / "r.mrec", tmp / "r.small.mrec.zip", profile=profile)
    assert without_arrays(describe(out)) == without_arrays(describe(tmp / "r.mrec"))
    assert validate(out, deep=True).ok
