"""``repack --frames-per-chunk N``: the trade between bytes and random access made a knob (issue 29,
target 5).  A random frame decodes the whole chunk holding it in each column, so the profiles' many
frames a chunk are the fewest bytes and a few frames the fastest random frame; the knob cuts chunks
of N frames of the widest per-frame array (narrower arrays: as many rows as fit those bytes), with
the profile's codecs, every value bit for bit.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from test_repack import ROOT, lammps_like, same, trajectory_arrays

from mrec import Box, TrajectoryReader, TrajectoryWriter
from mrec.archive.repack import MAX_CHUNK_BYTES, PROFILES, repack, with_frames_per_chunk
from mrec.check.validate import validate
from mrec.errors import RefusalError
from mrec.fs import RecordingFileSystem
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore

ATOMS, FRAMES = 50, 100


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return lammps_like(tmp_path_factory.mktemp("src") / "long.mrec", n_atoms=ATOMS, n_frames=FRAMES)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """x and charge of 50 atoms, an energy a frame, a box that moves (times and steps: progressions)."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.mrec"
    rng = np.random.default_rng(3)
    frames = [{"blocks": {"atoms": {"x": rng.normal(size=ATOMS), "charge": rng.normal(size=ATOMS).astype(np.float32)}},
               "meta": {"energy": float(rng.normal())}, "box": Box(np.eye(3) * (10.0 + i))} for i in range(FRAMES)]
    with TrajectoryWriter.create(path, frames[0], durable=False) as w:
        for i, f in enumerate(frames):
            w.append(f, step=10 * i, time=0.5 * i)
    return path


def inner_rows(out) -> dict[str, int]:
    store = DirectoryStore(str(out))
    return {p: Array.open(store, p).sharding.chunk_shape[0] for p in trajectory_arrays(store)}


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("n", [1, 3])
def test_frames_per_chunk_cuts_chunks_of_n_frames_with_the_same_values(tmp_path, source, profile, n):
    out = repack(source, tmp_path / "k.mrec", profile=profile, frames_per_chunk=n)
    rows = inner_rows(out)
    assert set(rows.values()) == {n * ATOMS}          # every column 8 bytes a row: n frames each
    a, b = TrajectoryReader(source), TrajectoryReader(out)
    for i in (0, 1, n, 57, FRAMES - 1):
        for c, v in a[i].blocks["atoms"].items():
            assert same(b[i].blocks["atoms"][c], v), (i, c)
        assert same(a[i].box.vectors, b[i].box.vectors)
    assert validate(out, deep=True).ok


def test_narrower_arrays_hold_the_same_bytes_in_more_rows(tmp_path, mixed):
    n = 2
    out = repack(mixed, tmp_path / "k.mrec", profile="archive", frames_per_chunk=n)
    rows = inner_rows(out)
    widest = n * ATOMS * 8                            # n frames of x
    assert rows["trajectory/atoms/x"] == rows["trajectory/atoms/charge"] == n * ATOMS
    for path in ("trajectory/meta/energy", "trajectory/box/step_index"):
        assert rows[path] == widest // 8, (path, rows)                # 8 bytes a frame: 50 n frames
    assert rows["trajectory/box/vectors"] == widest // 72
    a, b = TrajectoryReader(mixed), TrajectoryReader(out)
    for i in (0, 3, 57, FRAMES - 1):
        fa, fb = a[i], b[i]
        for c, v in fa.blocks["atoms"].items():
            assert same(fb.blocks["atoms"][c], v), (i, c)
        assert fa.meta == fb.meta and same(fa.box.vectors, fb.box.vectors)
    assert same(a.times, b.times) and same(a.steps, b.steps)
    assert validate(out, deep=True).ok


def test_a_random_frame_decodes_n_frames_a_column(tmp_path, source):
    out = repack(source, tmp_path / "k.mrec", profile="archive", frames_per_chunk=2)
    rec = RecordingFileSystem(record_reads=True)
    r = TrajectoryReader(out, fs=rec)
    rec.ops.clear()
    f = r[61]
    shards = sorted({op.path for op in rec.ops if op.kind == "read_range" and "/c/" in op.path})
    assert len(shards) == 9                           # one shard a column
    for path in shards:                               # its index, then the one chunk holding the frame
        assert sum(op.kind == "read_range" and op.path == path for op in rec.ops) == 2, path
    assert same(f.blocks["atoms"]["x"], TrajectoryReader(source)[61].blocks["atoms"]["x"])


def test_more_frames_than_the_run_is_one_chunk_and_the_default_is_the_profiles(tmp_path, source):
    big = inner_rows(repack(source, tmp_path / "big.mrec", profile="archive", frames_per_chunk=10_000))
    assert big["trajectory/atoms/x"] == FRAMES * ATOMS
    plain = inner_rows(repack(source, tmp_path / "a.mrec", profile="archive"))
    none = inner_rows(repack(source, tmp_path / "b.mrec", profile="archive", frames_per_chunk=None))
    assert plain == none


def test_the_knob_stays_within_the_largest_chunk():
    prof = PROFILES["archive"]
    assert with_frames_per_chunk(prof, None, 100) is prof
    assert with_frames_per_chunk(prof, 4, 1000).chunk_bytes == 4000
    assert with_frames_per_chunk(prof, 10**6, 1000).chunk_bytes == MAX_CHUNK_BYTES
    assert with_frames_per_chunk(prof, 2, 2 * MAX_CHUNK_BYTES).chunk_bytes == 2 * MAX_CHUNK_BYTES  # one frame
    assert with_frames_per_chunk(prof, 3, 10).zstd_level == prof.zstd_level


@pytest.mark.parametrize("bad", [0, -2, True, 1.5, "2"])
def test_a_bad_frames_per_chunk_is_refused_and_nothing_written(tmp_path, source, bad):
    with pytest.raises(RefusalError) as e:
        repack(source, tmp_path / "k.mrec", frames_per_chunk=bad)
    assert e.value.kind == "bad_argument"
    assert not (tmp_path / "k.mrec").exists()


def test_cli_frames_per_chunk_and_its_help_state_the_trade(tmp_path, source):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    h = subprocess.run([sys.executable, "-m", "mrec", "repack", "--help"], capture_output=True, text=True, env=env)
    assert h.returncode == 0 and "--frames-per-chunk" in h.stdout
    text = " ".join(h.stdout.split())
    assert "random" in text and "bytes" in text
    out = tmp_path / "k.mrec.zip"
    p = subprocess.run([sys.executable, "-m", "mrec", "repack", str(source), str(out), "--profile", "archive",
                        "--frames-per-chunk", "4"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert "4 frames a chunk" in p.stdout
    assert validate(out, deep=True).ok
