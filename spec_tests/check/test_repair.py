"""Torn / dropped shard-index rewrites: detection, rebuild, mrec.repair, and the landing-order analysis."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

import mrec
from mrec.record import extents as X
from mrec.check.repair import add_repair_command, repair
from mrec.zarr.append import ShardedAppender
from mrec.zarr.array import Array, write_group
from mrec.zarr.dtypes import DATA_TYPES
from mrec.zarr.metadata import ArrayMetadata
from mrec.zarr.stores.directory import DirectoryStore

SECTOR = 512


from test_traj_engine import tree_hash as tree  # noqa: E402  (spec_tests is on sys.path under pytest)


def _store(tmp_path, n=7, flush=True):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    s.declare_meta("pe", "f64")
    p = tmp_path / "t.mrec"
    frames = []
    with mrec.TrajectoryWriter.create(p, s, flush_every=1) as w:
        for i in range(n):
            f = {"blocks": {"atoms": {"x": np.arange(3.0) + i}}, "meta": {"pe": float(i)}}
            w.append(f)
            frames.append(f)
    return p, frames


def _check(p, frames):
    r = mrec.TrajectoryReader(p)
    assert len(r) == len(frames)
    for i, f in enumerate(frames):
        assert r[i].blocks["atoms"]["x"].tobytes() == f["blocks"]["atoms"]["x"].tobytes()
        assert r[i].meta["pe"] == f["meta"]["pe"]


def test_torn_index_repaired_in_place(tmp_path):
    p, frames = _store(tmp_path)
    shard = p / "trajectory" / "meta" / "pe" / "c" / "0"
    raw = bytearray(shard.read_bytes())
    raw[4096] ^= 0xFF                                  # the index's trailing crc32c (its own sector)
    shard.write_bytes(bytes(raw))
    _check(p, frames)                                  # readers rebuild in memory
    before = tree(p)
    rep = repair(p, dry_run=True)
    assert [r.key.endswith("meta/pe/c/0") for r in rep.repaired] == [True] and rep.ok
    assert "crc32c" in rep.repaired[0].reason and tree(p) == before     # a dry run changes nothing
    rep = repair(p)
    assert len(rep.repaired) == 1 and "repaired" in rep.summary()
    assert tree(p) != before
    a = Array.open(DirectoryStore(p), "trajectory/meta/pe", appended=True)
    a.read()
    assert a.unverified_indexes == set()               # the rewritten index verifies again
    assert repair(p).repaired == []                    # idempotent
    _check(p, frames)


def test_dropped_index_rewrite_is_detected_and_rebuilt(tmp_path):
    """The old index (its crc intact) over newer chunks and a newer zarr.json: a rewrite the disk dropped."""
    p, frames = _store(tmp_path, n=4)
    shard = p / "trajectory" / "atoms" / "x" / "c" / "0"
    isize = 4096 * 16 + 4
    old_index = shard.read_bytes()[:isize]
    with mrec.TrajectoryWriter.open(p) as w:
        for i in range(4, 6):
            f = {"blocks": {"atoms": {"x": np.arange(3.0) * -i}}, "meta": {"pe": float(i)}}
            w.append(f)
            frames.append(f)
    raw = bytearray(shard.read_bytes())
    raw[:isize] = old_index
    shard.write_bytes(bytes(raw))
    _check(p, frames)                                  # would read fill values without the end-of-file check
    rep = repair(p)
    assert [os.path.basename(os.path.dirname(os.path.dirname(r.key))) for r in rep.repaired] == ["x"]
    assert "older than the chunks" in rep.repaired[0].reason
    _check(p, frames)


def test_unrecoverable_shard_reported_and_refused_by_writer(tmp_path):
    p, frames = _store(tmp_path, n=3)
    shard = p / "trajectory" / "meta" / "pe" / "c" / "0"
    raw = bytearray(shard.read_bytes())
    raw[4096] ^= 0xFF                                  # index crc
    for off in range(4100, len(raw)):                 # and every copy of the chunk
        raw[off] ^= 0x55
    shard.write_bytes(bytes(raw))
    before = tree(p)
    rep = repair(p)
    assert not rep.ok and rep.unrecoverable[0][0].endswith("meta/pe/c/0")
    assert tree(p) == before                           # never writes an index that would read lost rows as fill
    with pytest.raises(mrec.CorruptionError, match="meta/pe/c/0"):
        mrec.TrajectoryWriter.open(p)
    with pytest.raises(mrec.CorruptionError, match="meta/pe/c/0"):
        mrec.TrajectoryReader(p)[0]


def test_writer_open_runs_repair(tmp_path):
    p, frames = _store(tmp_path)
    shard = p / "trajectory" / "atoms" / "x" / "c" / "0"
    raw = bytearray(shard.read_bytes())
    raw[16 * 4096] ^= 0x01
    shard.write_bytes(bytes(raw))
    w = mrec.TrajectoryWriter.open(p)
    assert [r.key.endswith("atoms/x/c/0") for r in w.repair_report.repaired] == [True]
    f = {"blocks": {"atoms": {"x": np.ones(3)}}, "meta": {"pe": 9.0}}
    w.append(f)
    w.close()
    _check(p, frames + [f])


def test_repair_entry_points(tmp_path):
    p, _ = _store(tmp_path, n=2)
    out = subprocess.run([sys.executable, "-m", "mrec.repair", str(p)], capture_output=True, text=True)
    assert out.returncode == 0 and "0 repaired" in out.stdout
    out = subprocess.run([sys.executable, "-m", "mrec.repair", str(tmp_path / "nope.mrec")], capture_output=True, text=True)
    assert out.returncode == 2 and "nope.mrec" in out.stderr
    import argparse
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers()
    add_repair_command(sub)
    args = ap.parse_args(["repair", str(p), "--dry-run"])
    assert args.func(args) == 0


# -- the landing order and the torn index ------------------------------------------------------

INNER, CHUNKS = 4, 64           # index: 64 entries = 1024 bytes (sectors 0, 1), crc alone in sector 2


def _array(store):
    codecs = X.sharded((INNER,), X.inner_pipeline("f64", []), "start")
    return Array.create(store, "x", ArrayMetadata.create((0,), DATA_TYPES["float64"], (INNER * CHUNKS,), codecs))


def test_a_landing_changes_only_its_entries_sectors_and_the_crc_sector(tmp_path):
    """Unchanged entries are rewritten byte-identical, so a torn sector holding only them is harmless;
    the sectors that do change are those of the entries the landing sets (and the crc's)."""
    store = DirectoryStore(tmp_path / "s")
    write_group(store, "")
    arr = _array(store)
    ap = ShardedAppender(arr)
    shard = tmp_path / "s" / "x" / "c" / "0"
    isize = arr.sharding.index_size((CHUNKS,))
    rng = np.random.default_rng(3)
    rows = 0
    for k in range(60):
        n = int(rng.integers(1, 9))
        old = shard.read_bytes()[:isize] if shard.exists() else bytes(isize)
        first = rows // INNER
        ap.append(rng.normal(size=n))
        ap.land()
        rows += n
        last = -(-rows // INNER)
        new = shard.read_bytes()[:isize]
        changed = {i // SECTOR for i in range(isize) if old[i] != new[i]}
        allowed = {(16 * c) // SECTOR for c in range(first, last)} | {(16 * c + 15) // SECTOR for c in range(first, last)}
        allowed.add((isize - 4) // SECTOR)
        if k == 0:
            allowed |= set(range(-(-isize // SECTOR)))     # the first landing writes the whole index
        assert changed <= allowed, (k, changed, allowed)
        if rows >= INNER * CHUNKS - 8:
            break


def test_every_torn_combination_reads_committed_rows(tmp_path):
    """Exhaustive over one in-place rewrite: each changed sector old or new, the new chunk copy on disk
    or not, the published length old or new. Committed rows always read back exactly; a state that
    claims rows whose only copy is missing raises, never reads fill."""
    src = tmp_path / "src"
    store = DirectoryStore(src)
    write_group(store, "")
    arr = _array(store)
    ap = ShardedAppender(arr)
    data = np.random.default_rng(5).normal(size=INNER * 33 + 2)          # a partial chunk 33 (sector 1)
    ap.append(data[:INNER * 33 + 1])
    ap.land()
    arr.write_metadata()
    shard = src / "x" / "c" / "0"
    before = shard.read_bytes()
    ap.append(data[INNER * 33 + 1:])
    ap.land()                                          # re-encodes chunk 33 at the tail, rewrites its entry
    after = shard.read_bytes()
    isize = arr.sharding.index_size((CHUNKS,))
    sectors = [s for s in range(-(-isize // SECTOR)) if before[s * SECTOR:(s + 1) * SECTOR] != after[s * SECTOR:min((s + 1) * SECTOR, isize)]]
    assert sectors == [1, 2]
    states = 0
    for choice in itertools.product([False, True], repeat=len(sectors)):
        for blob_on_disk in (False, True):
            img = bytearray(after if blob_on_disk else before)
            for s, new in zip(sectors, choice):
                lo, hi = s * SECTOR, min((s + 1) * SECTOR, isize)
                img[lo:hi] = (after if new else before)[lo:hi]
            for published in (len(data) - 1, len(data)):
                d = tmp_path / f"st{states}"
                states += 1
                st = DirectoryStore(d)
                write_group(st, "")
                a = _array(st)
                a.set_shape((published,))
                (d / "x" / "c").mkdir(parents=True)
                (d / "x" / "c" / "0").write_bytes(bytes(img))
                b = Array.open(DirectoryStore(d), "x", appended=True)
                if published == len(data) - 1 or blob_on_disk:
                    assert b.read().tobytes() == data[:published].tobytes()
                else:
                    # a length published although the chunk copy holding its last row never reached
                    # the disk: the commit protocol rules this out (the zarr.json is written after the
                    # chunk, and a journaling file system orders that write before the rename); if it
                    # happens anyway the earlier rows still read exactly (docs/reliability.md)
                    try:
                        got = b.read()
                    except mrec.CorruptionError:
                        continue
                    assert got[:-1].tobytes() == data[:-1].tobytes()
    assert states == 16


def test_mrec_repair_command_repairs_a_torn_index(tmp_path):
    p, frames = _store(tmp_path)
    shard = p / "trajectory" / "atoms" / "x" / "c" / "0"
    raw = bytearray(shard.read_bytes())
    raw[16 * 4096] ^= 0x01                                        # the index's trailing crc32c
    shard.write_bytes(bytes(raw))
    dry = subprocess.run([sys.executable, "-m", "mrec", "repair", str(p), "--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0 and shard.read_bytes() == bytes(raw)
    out = subprocess.run([sys.executable, "-m", "mrec", "repair", str(p)], capture_output=True, text=True)
    assert out.returncode == 0 and "1 repaired" in out.stdout, out.stdout + out.stderr
    from mrec.check.validate import validate
    assert validate(p, deep=True).ok
    _check(p, frames)
    missing = subprocess.run([sys.executable, "-m", "mrec", "repair", str(tmp_path / "nope.mrec")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_torn_string_copy_trusts_the_agreeing_items_of_the_older_copy():
    """A re-encoded string chunk torn by power loss: the older copy's leading items that equal the
    newer copy's (in sectors that were written) are trusted, an empty string included; an
    unwritten (zero) sector never vouches for one."""
    import struct
    from mrec.zarr.shardscan import ALL, _trust_strings

    def vlen(items):
        body = struct.pack("<I", len(items)) + b"".join(struct.pack("<I", len(x)) + x.encode() for x in items)
        return body + b"\x01\x02\x03\x04"                               # stands for the crc32c

    old = vlen(["a", "", "", ""])               # committed: "a", "" (an empty last row), then fill padding
    new = vlen(["a", "", "b" * 600, "c"])       # the re-encoded copy with two more rows
    o_off, n_off = 512, 1024
    data = bytearray(2048 + len(new))
    data[o_off:o_off + len(old)] = old
    torn = bytearray(new)
    torn[512 - (n_off % 512):] = bytes(len(torn) - (512 - (n_off % 512)))   # only its first sector landed
    data[n_off:n_off + len(new)] = torn
    assert _trust_strings(bytes(data), (o_off, len(old)), (n_off, len(new)), 1) == 2
    data[n_off:n_off + len(new)] = new                                       # fully landed (crc aside)
    assert _trust_strings(bytes(data), (o_off, len(old)), (n_off, len(new)), 1) == 2   # "b"*600 differs
    same = vlen(["a", "", "", ""])
    data[n_off:n_off + len(same)] = same
    assert _trust_strings(bytes(data), (o_off, len(old)), (n_off, len(same)), 1) == ALL
    zero = bytes(len(new))                                                   # nothing of it landed
    data[n_off:n_off + len(new)] = zero
    assert _trust_strings(bytes(data), (o_off, len(old)), (n_off, len(new)), 1) == 0


def test_torn_compressed_copy_whose_first_sector_part_was_dropped(tmp_path):
    """The crashcheck's open states: a re-encoded gzip'd string chunk (the writer's dense meta
    arrays) begins inside the sector that ends the previous copy.  Power loss keeps the older
    version of that sector (the new copy's first bytes zero, however few) and the newer version of
    the sectors after it; the index is torn.  The new copy then fails its crc32c, but it never
    landed, so the older copy's committed rows (the last of them the fill "") are read."""
    from mrec.record.trajectory.land import _dense_meta
    hits = 0
    rng = np.random.default_rng(5)
    for pad in range(0, 1100, 7):
        store = DirectoryStore(tmp_path / f"s{pad}")
        write_group(store, "")
        arr = Array.create(store, "t", _dense_meta("string"))
        ap = ShardedAppender(arr)
        shard = tmp_path / f"s{pad}" / "t" / "c" / "0"
        noise = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz0123456789"), pad))   # gzip keeps ~5/8
        committed = [noise, ""]                 # a durable flush of two rows, the last the fill ""
        ap.append(np.array(committed, dtype=object))
        ap.land()
        before = shard.read_bytes()
        start = len(before)
        part = -start % SECTOR                  # the new copy's bytes inside the old last sector
        if not 0 < part < 32:
            continue
        hits += 1
        if hits > 2:
            break
        ap.append(np.array(["later"], dtype=object))
        ap.land()                               # re-encodes inner chunk [0] at the file's end
        after = shard.read_bytes()
        assert after[start] == 0x1F             # a gzip member
        img = bytearray(after)
        img[start:start + part] = bytes(part)   # the in-place part of the copy's write dropped
        isize = arr.sharding.index_size(arr.sharding.grid(arr.meta.chunk_shape, "t"))
        img[SECTOR:isize] = before[SECTOR:isize]        # the index torn: its first sector new only
        shard.write_bytes(bytes(img))
        b = Array.open(DirectoryStore(tmp_path / f"s{pad}"), "t", appended=True)
        b.set_shape((2,))                       # the durable length (the later zarr.json never landed)
        assert list(Array.open(b.store, "t", appended=True).read()) == committed
        with pytest.raises(mrec.CorruptionError):
            img[start + part + 7] ^= 0xFF       # a written copy that fails: not "never landed"
            img[start:start + part] = after[start:start + part]
            shard.write_bytes(bytes(img))
            c = Array.open(DirectoryStore(tmp_path / f"s{pad}"), "t", appended=True)
            c.read()
    assert hits == 3, hits


def test_named_copy_past_a_torn_copy_is_found(tmp_path):
    """Three copies of one gzip'd string chunk; the middle one torn (its first sector part never
    written), the newest whole, named by an index whose crc fails.  The walk stops at the torn
    copy, so the rebuild also checks the copies entries name beyond it: the newest is read."""
    from mrec.record.trajectory.land import _dense_meta
    store = DirectoryStore(tmp_path / "s")
    write_group(store, "")
    arr = Array.create(store, "t", _dense_meta("string"))
    ap = ShardedAppender(arr)
    shard = tmp_path / "s" / "t" / "c" / "0"
    starts = []
    rows = [["a", ""], ["b"], [""]]
    for r in rows:
        starts.append(shard.stat().st_size if shard.exists() else 4100)
        ap.append(np.array(r, dtype=object))
        ap.land()
    img = bytearray(shard.read_bytes())
    img[starts[1]:starts[1] + 3] = bytes(3)             # the middle copy torn at its start
    img[4096] ^= 0x01                                   # the index's crc32c fails (entries new)
    shard.write_bytes(bytes(img))
    b = Array.open(DirectoryStore(tmp_path / "s"), "t", appended=True)
    b.set_shape((4,))
    assert list(Array.open(b.store, "t", appended=True).read()) == ["a", "", "b", ""]
