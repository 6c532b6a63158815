"""Issue 16 (stop 14): whole inner chunks decoded many at once on several cores, and readers that
keep their files open.

The batch decoder (``CodecPipeline.batch_decoder``: crc32c checks, one zstandard call inflating
many frames, one numpy unshuffle per run) must give exactly the bytes of the one-chunk decode, and
decline (False: the caller's labelled path then decodes and reports) anything that is not the plain
case.  Nothing here is timed (``python -m tools.bench issue16`` measures)."""
from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import zstandard
import pytest
from hypothesis import given, settings, strategies as st

import mrec
from mrec.errors import CorruptionError
from mrec.fs.posix import KeptFiles
from mrec.zarr import parallel
from mrec.zarr.codecs.base import ChunkSpec
from mrec.zarr.codecs.crc32c_ import crc32c
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.pipeline import CodecPipeline

from test_read_fastpaths import _pipeline, damaged_chunk  # noqa: E402  (spec_tests is on sys.path)


DTYPES = ["float64", "uint16", "int32", "int16", "uint8", "int64", "complex128"]


@pytest.fixture(scope="module", autouse=True, params=["libzstd", "stream reader"])
def inflate_with(request):
    """Every test here runs twice: the batch decoder inflating through libzstd (one ctypes call a
    piece, :mod:`mrec.zarr.codecs.zstd_native`) and through zstandard's stream reader (the path
    without a usable libzstd).  Same bytes, same verdicts."""
    from mrec.zarr.codecs import zstd_native
    if request.param == "libzstd":
        assert zstd_native.inflater() is not None, "no usable libzstd: the native path is not tested"
        yield request.param
        return
    mp = pytest.MonkeyPatch()
    mp.setattr(zstd_native, "inflater", lambda: None)
    yield request.param
    mp.undo()


def laid_out(raws, cuts=()):
    """``raws`` as a reader holds chunks read as ranges: memoryviews of a few joined buffers (cut
    before each index in ``cuts``), with the batch decoder's layout ``[(buffer, starts, sizes)]``."""
    views, layout = [], []
    bounds = [0, *sorted(c for c in set(cuts) if 0 < c < len(raws)), len(raws)]
    for lo, hi in zip(bounds, bounds[1:]):
        buf = b"".join(raws[lo:hi])
        sizes = np.array([len(r) for r in raws[lo:hi]], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        mv = memoryview(buf)
        views += [mv[a:a + n] for a, n in zip(starts.tolist(), sizes.tolist())]
        layout.append((buf, starts, sizes))
    return views, layout


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(1, 400), st.integers(1, 140), st.booleans(),
       st.sampled_from([1, 2, 3]), st.booleans(), st.integers(0, 2**32 - 1))
def test_batch_decoder_gives_each_chunks_plain_decode(dtype, rows, chunks, shuffle, threads, strided, seed):
    """Every chunk of a batch (more than one zstandard call's worth when ``chunks`` is large) lands in
    its row of the destination with exactly the bytes ``decode`` returns, contiguous or strided (one
    lane of an interleaved result), on one thread or several."""
    dt = DATA_TYPES[dtype]
    spec = ChunkSpec((rows,), dt, 0, "x")
    pipe = _pipeline(dt.numpy.itemsize, shuffle)
    batch = pipe.batch_decoder(spec)
    assert batch is not None
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (chunks, rows * dt.numpy.itemsize), dtype=np.uint8).view(dt.numpy)
    raws = [pipe.encode(data[i], spec) for i in range(chunks)]
    if strided:
        full = np.zeros((chunks, rows, 3), dtype=dt.numpy)
        dest = full[:, :, 1]
    else:
        dest = np.zeros((chunks, rows), dtype=dt.numpy)
    assert batch(raws, dest, threads) is True
    for i in range(chunks):
        assert dest[i].tobytes() == pipe.decode(raws[i], spec).tobytes() == data[i].tobytes()
    # the same chunks read as ranges of one or a few buffers (the frame headers checked at once)
    dest[...] = 0
    views, layout = laid_out(raws, cuts=(chunks // 3, chunks // 2))
    assert batch(views, dest, threads, layout) is True
    for i in range(chunks):
        assert dest[i].tobytes() == pipe.decode(raws[i], spec).tobytes() == data[i].tobytes()
    if strided:
        assert not full[:, :, [0, 2]].any()                    # nothing beside the lane written


def test_batch_decoder_declines_other_pipelines():
    """Only crc32c over one zstd frame (optionally behind a shuffle of the element size) has a batch
    form; gzip, a shuffle of another element size, no checksum: None (the per-chunk paths decode)."""
    spec = ChunkSpec((16,), DATA_TYPES["float64"], 0.0, "x")
    for codecs in ([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}},
                    {"name": "crc32c"}],
                   [{"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                    {"name": "zstd", "configuration": {"level": 3, "checksum": False}}, {"name": "crc32c"}],
                   [{"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]):
        assert CodecPipeline.from_json(codecs, "x").batch_decoder(spec) is None


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("damage", ["flip body", "flip crc", "trailing frame", "trailing bytes", "short",
                                    "no content size", "wrong content size", "short content", "empty"])
def test_batch_decoder_declines_what_is_not_plain(damage, threads):
    """One chunk of a batch whose checksum fails, whose frame does not inflate to exactly the chunk's
    size, or that has bytes after its frame: the batch is declined (False), and the labelled decode
    of that chunk raises (a frame without its size: the batch declines; the labelled path decodes)."""
    spec = ChunkSpec((64,), DATA_TYPES["float64"], 0.0, "x")
    pipe = _pipeline(8)
    good, raw = damaged_chunk(damage, pipe, spec, np.arange(64, dtype=np.float64))
    batch = pipe.batch_decoder(spec)
    raws = [good] * 5 + [raw] + [good] * 5
    assert batch(raws, np.zeros((len(raws), 64)), threads) is False
    assert batch([good] * 11, np.zeros((11, 64)), threads) is True
    # read as ranges of buffers (the headers checked at once, the checksums by the threads): the same
    # verdicts, wherever the damaged chunk lies (first of its buffer, inside, last of all)
    for at in (0, 5, 10):
        raws = [good] * 11
        raws[at] = raw
        for cuts in ((), (5,), (6,)):
            views, layout = laid_out(raws, cuts)
            assert batch(views, np.zeros((11, 64)), threads, layout) is False, (at, cuts)
    views, layout = laid_out([good] * 11, (4,))
    assert batch(views, np.zeros((11, 64)), threads, layout) is True
    if damage == "no content size":
        assert pipe.decode(raw, spec).tobytes() == np.arange(64, dtype=np.float64).tobytes()
        return
    with pytest.raises(CorruptionError):
        pipe.decode(raw, spec)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["float64", "uint8", "int32"]), st.integers(1, 300), st.integers(2, 40), st.booleans(),
       st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 2**31),
                          st.sampled_from(["flip", "cut", "grow", "tail byte", "tail frame"])),
                max_size=3),
       st.lists(st.integers(1, 39), max_size=3), st.sampled_from([1, 2]), st.booleans())
def test_a_laid_out_batch_gives_the_verdict_and_bytes_of_the_chunk_list(dtype, rows, chunks, shuffle, damage, cuts,
                                                                      threads, reseal):
    """Differential: chunks read as ranges (the layout form: headers checked at once, checksums on the
    threads) and the same chunks as a list (the per-chunk loop) get the same verdict under any damage
    — a flipped byte anywhere (header, block header, body, checksum), a chunk cut short or grown by a
    byte, a byte or a whole frame after its frame, each with its checksum left or made to match the
    damaged bytes — and the same bytes when they decode."""
    dt = DATA_TYPES[dtype]
    spec = ChunkSpec((rows,), dt, 0, "x")
    pipe = _pipeline(dt.numpy.itemsize, shuffle)
    batch = pipe.batch_decoder(spec)
    rng = np.random.default_rng(rows * 1000 + chunks)
    data = rng.integers(0, 256, (chunks, rows * dt.numpy.itemsize), dtype=np.uint8).view(dt.numpy)
    raws = [bytearray(pipe.encode(data[i], spec)) for i in range(chunks)]
    for which, where, how in damage:
        raw = raws[which % chunks]
        if how == "flip" and raw:
            raw[where % len(raw)] ^= 1 << (where % 8)
        elif how == "cut" and raw:
            del raw[where % len(raw):]
        elif how == "grow":
            raw.insert(where % (len(raw) + 1), where % 256)
        elif how == "tail byte":               # a byte after the frame, before the checksum
            raw[-4:-4] = bytes([where % 256])
        elif how == "tail frame":              # a second (valid) frame after the first
            raw[-4:-4] = zstandard.ZstdCompressor().compress(bytes(where % 7))
        if reseal and len(raw) >= 4:          # the checksum made to match: only the frame checks see it
            raw[-4:] = crc32c(bytes(raw[:-4])).to_bytes(4, "little")
    raws = [bytes(r) for r in raws]
    listed = np.zeros((chunks, rows), dtype=dt.numpy)
    verdict = batch(raws, listed, threads)
    laid = np.zeros((chunks, rows), dtype=dt.numpy)
    views, layout = laid_out(raws, cuts)
    assert batch(views, laid, threads, layout) is verdict
    if verdict:
        assert laid.tobytes() == listed.tobytes()


def test_batch_decoder_declines_a_destination_of_another_shape_or_dtype():
    spec = ChunkSpec((64,), DATA_TYPES["float64"], 0.0, "x")
    pipe = _pipeline(8)
    raw = pipe.encode(np.arange(64.0), spec)
    batch = pipe.batch_decoder(spec)
    assert batch([raw, raw], np.zeros((2, 63)), 2) is False
    assert batch([raw, raw], np.zeros((2, 64), dtype=np.int64), 2) is False
    assert batch([raw], np.zeros((2, 64)), 2) is False
    assert batch([], np.zeros((0, 64)), 2) is False


def _record(path, frames: int = 400, atoms: int = 100):
    rng = np.random.default_rng(3)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=1e-3)
    pos = np.cumsum(rng.normal(0, 0.05, (frames, atoms, 3)), axis=0)
    w = mrec.TrajectoryWriter.create(path, s, durable=False)
    w.extend([{"atoms": {"x": p[:, 0], "y": p[:, 1], "z": p[:, 2]}} for p in pos])
    w.close()


@pytest.mark.parametrize("threads", ["1", "2"])
def test_reads_on_several_cores_are_the_serial_reads(tmp_path, monkeypatch, threads):
    """Iteration, positions(slice) and whole columns read with MREC_THREADS=2 (batch decoder, columns
    on separate threads, parts on the pool) give the bits of a serial read."""
    path = tmp_path / "t.mrec"
    _record(path)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_DECODE", 0)
    import mrec.record.trajectory.reads as tr
    monkeypatch.setattr(tr, "PARALLEL_READ_BYTES", 0)
    monkeypatch.setattr(tr, "BATCH_READ_BYTES", 64 * 1024)       # several batches
    monkeypatch.setenv("MREC_THREADS", "1")
    with mrec.TrajectoryReader(path) as r:
        want_frames = [r[i] for i in range(len(r))]
        want_pos = np.stack([f.blocks["atoms"][c] for f in want_frames for c in "xyz"]).reshape(len(r), 3, -1)
    monkeypatch.setenv("MREC_THREADS", threads)
    with mrec.TrajectoryReader(path) as r:
        got = list(r)
        pos = r.positions(slice(0, len(r)))
        cols = {c: r.layout.blocks["atoms"].columns[c].read(threads=int(threads)) for c in "xyz"}
    assert len(got) == len(want_frames)
    for a, b in zip(got, want_frames):
        for c in "xyz":
            assert a.blocks["atoms"][c].tobytes() == b.blocks["atoms"][c].tobytes()
    assert pos.tobytes() == np.ascontiguousarray(want_pos.transpose(0, 2, 1)).tobytes()
    for k, c in enumerate("xyz"):
        assert cols[c].tobytes() == np.ascontiguousarray(want_pos[:, k, :]).reshape(-1).tobytes()


@pytest.fixture(scope="module")
def shard_bytes(tmp_path_factory):
    """A record whose column ``x`` is one shard of 20 inner chunks (a whole-column read takes the batch
    decoder's layout form), and that shard's bytes."""
    path = tmp_path_factory.mktemp("shard") / "t.mrec"
    _record(path, frames=400)
    arr = mrec.zarr.array.Array.open(mrec.zarr.stores.directory.DirectoryStore(str(path)), "trajectory/atoms/x")
    assert -(-arr.meta.shape[0] // arr.sharding.chunk_shape[0]) == 20
    index_end = arr.sharding.index_size(arr.sharding.grid(arr.meta.chunk_shape, "x"))   # the index comes first
    return path, (path / "trajectory/atoms/x/c/0").read_bytes(), index_end


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["flip", "overwrite", "cut", "extend"]), st.integers(0, 2**31),
                          st.integers(0, 255)), min_size=1, max_size=3), st.sampled_from([1, 2]))
def test_a_damaged_shard_reads_as_it_does_without_the_batch_decoder(shard_bytes, monkeypatch_session, damage,
                                                                   threads):
    """A whole column read through the batch decoder (one thread or two) over a shard damaged in its
    chunk bytes — bits flipped, bytes overwritten, the file cut or grown — gives exactly what the
    per-chunk path gives without it: the same values, or the same error (type and text)."""
    path, good, index_end = shard_bytes
    shard = path / "trajectory/atoms/x/c/0"
    b = bytearray(good)
    for how, at, value in damage:
        at = index_end + at % (len(b) - index_end)
        if how == "flip":
            b[at] ^= 1 << (value % 8)
        elif how == "overwrite":
            b[at:at + 1 + value % 8] = bytes([value]) * (1 + value % 8)
        elif how == "cut":
            del b[max(index_end, len(b) - 1 - value):]
        else:
            b += bytes([value]) * (1 + value % 16)
    shard.write_bytes(bytes(b))

    def read(batch: bool):
        if not batch:
            monkeypatch_session.setattr("mrec.zarr.codecs.batch.batch_decoder", lambda *a, **k: None)
        try:
            arr = mrec.zarr.array.Array.open(mrec.zarr.stores.directory.DirectoryStore(str(path)), "trajectory/atoms/x",
                                             appended=True)
            try:
                return ("values", arr.read(threads=threads if batch else 1).tobytes())
            except mrec.MrecError as exc:
                return (type(exc).__name__, str(exc))
        finally:
            monkeypatch_session.undo()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # a stand-in warning is the same on both paths
            assert read(True) == read(False)
    finally:
        shard.write_bytes(good)


@pytest.fixture(scope="module")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_call_all_marks_its_first_call_concurrent():
    """concurrent() is true inside every call of a call_all of several (the first runs on the calling
    thread beside the pool's), false outside, and restored after."""
    seen = []
    assert parallel.concurrent() is False
    parallel.call_all([lambda: seen.append(parallel.concurrent()), lambda: seen.append(parallel.concurrent())])
    assert seen == [True, True] and parallel.concurrent() is False
    parallel.call_all([lambda: seen.append(parallel.concurrent())])
    assert seen[-1] is False


# -- readers keep their files open ---------------------------------------------------------------

def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_kept_files_read_the_file_they_opened_until_closed(tmp_path):
    """A kept descriptor reads the file it opened: a write in place is seen, a file put in its place
    by rename is not (the snapshot's file); close() releases every descriptor and later reads go by
    path again."""
    p = tmp_path / "f"
    p.write_bytes(b"abcdefgh")
    before = _open_fds()
    kept = KeptFiles()
    assert kept.read_range(str(p), 2, 3) == b"cde"
    assert _open_fds() == before + 1
    with open(p, "r+b") as f:                  # in place: the same inode
        f.seek(2)
        f.write(b"XY")
    assert kept.read_range(str(p), 2, 3) == b"XYe"
    tmp = tmp_path / "g"
    tmp.write_bytes(b"01234567")
    os.replace(tmp, p)                         # a new file under the name
    assert kept.read_range(str(p), 2, 3) == b"XYe"
    assert kept.read_range(str(p), 6, 10) == b"gh"          # short at the end, as by path
    kept.close()
    assert _open_fds() == before
    assert kept.read_range(str(p), 2, 3) == b"234"
    assert _open_fds() == before
    with pytest.raises(FileNotFoundError):
        KeptFiles().read_range(str(tmp_path / "absent"), 0, 1)


def test_kept_files_bound_their_descriptors_and_close_when_collected(tmp_path):
    import gc
    paths = []
    for i in range(5):
        q = tmp_path / f"f{i}"
        q.write_bytes(bytes([i]) * 4)
        paths.append(str(q))
    before = _open_fds()
    kept = KeptFiles(limit=2)
    for i, q in enumerate(paths):
        assert kept.read_range(q, 1, 2) == bytes([i]) * 2
    assert _open_fds() == before + 2           # two kept, the rest read by path
    del kept
    gc.collect()
    assert _open_fds() == before


def test_kept_files_on_many_threads(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(bytes(range(256)) * 64)
    kept = KeptFiles()
    errors = []

    def reader(k):
        try:
            for i in range(200):
                off = (k * 37 + i * 11) % 16000
                assert kept.read_range(str(p), off, 7) == (bytes(range(256)) * 64)[off:off + 7]
        except Exception as exc:   # noqa: BLE001
            errors.append(exc)
    ts = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    kept.close()
    assert not errors


@pytest.mark.parametrize("packed", [False, True])
def test_a_reader_keeps_its_snapshot_and_releases_it_on_close(tmp_path, packed):
    """A TrajectoryReader reads through descriptors it keeps: the same frames while it is open, its
    descriptors released by close() (a directory record or a packed one)."""
    path = tmp_path / "t.mrec"
    _record(path, frames=50)
    if packed:
        path = mrec.pack(path)
    before = _open_fds()
    r = mrec.TrajectoryReader(path)
    first = [r[i].blocks["atoms"]["x"].copy() for i in (0, 17, 49)]
    assert _open_fds() > before
    assert [r[i].blocks["atoms"]["x"].tobytes() for i in (0, 17, 49)] == [a.tobytes() for a in first]
    r.close()
    assert _open_fds() == before


def flip_inner_chunk(record, col: str, i: int) -> None:
    """Flip one bit in the middle of inner chunk ``i`` of shard 0 of ``trajectory/atoms/<col>``."""
    from mrec.zarr.array import Array
    from mrec.zarr.stores.directory import DirectoryStore
    arr = Array.open(DirectoryStore(str(record)), f"trajectory/atoms/{col}")
    index = arr.shard_index(arr.chunk_key((0,)))
    off, n = int(index.offsets[i]), int(index.nbytes[i])
    shard = record / "trajectory" / "atoms" / col / "c" / "0"
    raw = bytearray(shard.read_bytes())
    raw[off + n // 2] ^= 0x40
    shard.write_bytes(bytes(raw))


@pytest.mark.parametrize("atoms", [3000, 100])
def test_random_whole_chunk_frames_read_their_values_and_report_a_damaged_chunk(tmp_path, atoms):
    """Frames read in random order through Array._whole_chunk — one inner chunk each (3000 atoms), or
    21 frames a chunk (100 atoms: the chunk cached for its neighbours): the values written; a frame
    whose chunk is damaged raises CorruptionError naming the shard and chunk, as the general path
    does, and the frames around it still read."""
    path = tmp_path / "t.mrec"
    rng = np.random.default_rng(5)
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64")
    per = 1 if atoms == 3000 else 21                 # frames an inner chunk
    pos = rng.normal(size=(40 * per, atoms, 3))
    w = mrec.TrajectoryWriter.create(path, s, durable=False)
    w.extend([{"atoms": {"x": p[:, 0], "y": p[:, 1], "z": p[:, 2]}} for p in pos])
    w.close()
    with mrec.TrajectoryReader(path) as r:
        assert r.layout.blocks["atoms"].columns["y"].sharding.chunk_shape[0] == per * atoms
    flip_inner_chunk(path, "y", 17)
    with mrec.TrajectoryReader(path) as r:
        for i in [33, 3, 17, 18, 16, 39, 0, 17, 4, 5, 3]:
            i *= per
            if i // per == 17:
                with pytest.raises(CorruptionError, match=r"atoms/y/c/0.*inner chunk \[17\]"):
                    r[i + per // 2]
                continue
            i += (i // per) % per                    # some frame inside the chunk
            f = r[i]
            for k, c in enumerate("xyz"):
                assert f.blocks["atoms"][c].tobytes() == pos[i, :, k].tobytes()


def test_a_kept_range_reader_reads_the_bytes_and_survives_close(tmp_path):
    """DirectoryStore(keep_open=True).range_reader(key): the bytes get_range returns; after the
    store is closed it reads by path (never a closed descriptor); None for an absent key or a store
    that keeps nothing open."""
    from mrec.zarr.stores.directory import DirectoryStore
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "k").write_bytes(bytes(range(200)))
    store = DirectoryStore(tmp_path, readonly=True, keep_open=True)
    read = store.range_reader("a/k")
    assert read(10, 5) == store.get_range("a/k", 10, 5) == bytes(range(10, 15))
    assert store.range_reader("a/absent") is None
    assert DirectoryStore(tmp_path, readonly=True).range_reader("a/k") is None
    store.close()
    assert read(190, 20) == bytes(range(190, 200))


@pytest.mark.parametrize("threads", [1, 2])
def test_columns_read_together_are_the_columns_read_alone(tmp_path, threads):
    """read_together (the columns of a block by one batch call): each column's rows as Array.read
    returns them, for whole inner chunks of one shard; None for anything else (a range not on
    chunk boundaries, columns of different pipelines, a damaged chunk: each array is then read
    alone, which raises)."""
    from mrec.zarr.array import read_together
    path = tmp_path / "t.mrec"
    _record(path, frames=200)
    with mrec.TrajectoryReader(path) as r:
        cols = [r.layout.blocks["atoms"].columns[c] for c in "xyz"]
        ir = cols[0].sharding.chunk_shape[0]
        for lo, hi in ((0, ir), (ir, 5 * ir), (0, 9 * ir)):
            got = read_together(cols, lo, hi, threads)
            assert got is not None and len(got) == 3
            for a, g in zip(cols, got):
                assert g.tobytes() == a.read(slice(lo, hi)).tobytes()
        assert read_together(cols, 1, ir + 1, threads) is None
        assert read_together(cols[:1], 0, ir, threads) is None
        assert read_together(cols, 0, 200 * 100 + ir, threads) is None          # past the shape
        key = cols[1].chunk_key((0,))
        off, n = int(cols[1].shard_index(key).offsets[2]), int(cols[1].shard_index(key).nbytes[2])
    shard = path / "trajectory" / "atoms" / "y" / "c" / "0"
    raw = bytearray(shard.read_bytes())
    raw[off + n // 2] ^= 0x08
    shard.write_bytes(bytes(raw))
    with mrec.TrajectoryReader(path) as r:
        cols = [r.layout.blocks["atoms"].columns[c] for c in "xyz"]
        assert read_together(cols, 0, 9 * ir, threads) is None
        assert read_together(cols, 3 * ir, 9 * ir, threads) is not None      # chunk 2 not in the range
        with pytest.raises(CorruptionError, match="inner chunk"):
            list(r)
