"""Cut a trajectory shard at every byte offset of its last copies and check what every reader says.

Issue 27 (section 2): a closed store whose shard file is cut *inside* the newest copy of an
inner chunk must never read a committed frame wrong without a word. For each cut the rules of
docs/reliability.md ("Shard-index trust, missing chunks and truncated chunks", "Issue 27: a cut
at any offset") are checked:

* the reader (``r[i]`` and ``column``) returns exactly the bits the clean store returns, or
  raises :class:`mrec.CorruptionError`, or warns :class:`mrec.StandInWarning` — never a value
  that differs without one of them; a cut strictly inside the newest copy never warns (it is
  no power-loss state), a cut exactly at its start never refuses;
* ``validate --deep`` reports a violation naming the array (N-4e) wherever the reader raised,
  and RT-6 wherever it warned;
* ``mrec repair`` reports the shard unrecoverable and leaves its bytes as they were when the
  reader raised; names a stand-in (a ``note``) when it warned; and afterwards the record reads
  every frame it keeps exactly (or, after a note, as the note said).

One writer run per array kind (:data:`KINDS`: uncompressed bytes + crc32c, zstd, shuffle +
zstd, dense gzip), each a few tiny frames an inner chunk, flushed at every frame so each shard
holds several copies of its chunk; the cuts copy nothing but the shard's bytes.

Used by ``spec_tests/zarr/test_cut_sweep.py`` (every offset) and ``tools/fuzz/`` (target ``cut``).
"""
from __future__ import annotations

import os
import shutil
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import mrec  # noqa: E402
from mrec.errors import CorruptionError, StandInWarning  # noqa: E402
from mrec.record.trajectory.reader import TrajectoryReader  # noqa: E402
from mrec.zarr import shardscan  # noqa: E402
from mrec.zarr.array import Array  # noqa: E402
from mrec.zarr.codecs.base import ChunkSpec  # noqa: E402
from mrec.zarr.stores.directory import DirectoryStore  # noqa: E402

KINDS = ("uncompressed", "zstd", "shuffled", "dense")
PER_CHUNK = 3               # frames an inner chunk (and a shard): 8 frames make two full shards and a partial one
ROWS = 2
# first values zero (a copy beginning with zero bytes: the case), real rows equal to the
# fill value, -0.0 and a NaN (compared bit for bit)
VALUES = [[0.0, 0.0], [0.0, 1.5], [-0.0, 2.25], [0.0, 0.0], [0.0, 4.5], [np.nan, 0.0], [0.0, 0.0], [0.0, 7.75]]


@dataclass
class Shard:
    """One shard file of the swept array: its bytes and its chunk copies."""
    key: str                         # relative to the record
    original: bytes
    copies: list                     # (offset, bytes) of every chunk copy, in file order

    def cuts(self, copies: int = 2) -> range:
        """Every cut offset from the start of the last ``copies`` copies to one byte short of the end."""
        return range(self.copies[-min(copies, len(self.copies))][0], len(self.original))


@dataclass
class Seed:
    """A clean store of one kind, the shards of the array swept and what the clean store reads."""
    kind: str
    path: str
    field: str                       # "x" (the atoms column) or "time" (a dense array)
    shards: list = field(default_factory=list)
    frames: list = field(default_factory=list)      # what the clean store reads, frame by frame

    def file(self, shard: Shard) -> str:
        return os.path.join(self.path, *shard.key.split("/"))


def build(root: str, kind: str, values=None, flushes=None) -> Seed:
    """One writer run: the frames ``values`` (``ROWS`` numbers each; default :data:`VALUES`),
    flushed after each frame in ``flushes`` (default every one: a new copy of the partial chunk
    each time) and at the end, ``PER_CHUNK`` frames an inner chunk and a shard."""
    assert kind in KINDS, kind
    values = VALUES if values is None else values
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=ROWS)
    s.declare_column("atoms", "x", "f64", precision=1e-3 if kind == "shuffled" else None)
    path = os.path.join(root, f"{kind}.mrec")
    with mrec.TrajectoryWriter.create(path, s, compression="zstd" if kind == "zstd" else None,
                                      expected_frames=PER_CHUNK) as w:
        for i, x in enumerate(values):
            # irregular times (a stored array) from the third frame on, zero (the fill value) where x is
            kw = {"step": i * i, "time": 0.0 if x[1] == 0 and i != 1 else 0.5 * i * i} if kind == "dense" else {}
            w.append({"blocks": {"atoms": {"x": np.array(x, dtype=np.float64)}}}, **kw)
            if flushes is None or i in flushes:
                w.flush()
    name = "time" if kind == "dense" else "atoms/x"
    seed = Seed(kind, path, "time" if kind == "dense" else "x")
    arr = Array.open(DirectoryStore(path), f"trajectory/{name}", appended=True)
    sh = arr.sharding
    isize = sh.index_size(sh.grid(arr.meta.chunk_shape, arr.name))
    for s_ in range(-(-arr.meta.shape[0] // arr.meta.chunk_shape[0])):
        key = arr.chunk_key((s_,) + (0,) * (arr.meta.ndim - 1))
        with open(os.path.join(path, *key.split("/")), "rb") as f:
            data = f.read()
        spec = ChunkSpec(sh.chunk_shape, arr.meta.data_type, arr.meta.fill_value, key)
        copies = [(b.offset, b.nbytes) for b in shardscan.scan(sh, spec, data, isize)]
        assert copies and copies[-1][0] + copies[-1][1] == len(data), (key, copies)
        seed.shards.append(Shard(key, data, copies))
    seed.frames = read_frames(path, seed.field)
    return seed


def _bits(v) -> bytes:
    return np.ascontiguousarray(v).tobytes()


def read_frames(path: str, what: str) -> list:
    """The swept field of every frame, one ``r[i]`` at a time: bytes, or an exception."""
    r = TrajectoryReader(path)
    out = []
    for i in range(len(r)):
        try:
            f = r[i]
            out.append(_bits(f.blocks["atoms"]["x"] if what == "x" else np.float64(r.times[i])))
        except CorruptionError as exc:
            out.append(exc)
    return out


@dataclass
class Outcome:
    raised: set = field(default_factory=set)        # frames whose read raised CorruptionError
    warned: bool = False                            # a StandInWarning was given
    differs: set = field(default_factory=set)       # frames read as something else than written
    violations: list = field(default_factory=list)


def _read(seed: Seed, out: Outcome) -> None:
    """Every frame through ``r[i]`` and the whole column through ``column`` (another read path)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        try:
            frames = read_frames(seed.path, seed.field)
        except CorruptionError:
            frames = [CorruptionError("open")] * len(seed.frames)
        if seed.field == "x":
            try:
                col = TrajectoryReader(seed.path).column("atoms", "x")
                out.differs |= {("column", i) for i, want in enumerate(seed.frames) if _bits(col[i]) != want}
            except CorruptionError:
                pass
    out.warned = any(issubclass(w.category, StandInWarning) for w in got)
    for i, (want, have) in enumerate(zip(seed.frames, frames)):
        if isinstance(have, CorruptionError):
            out.raised.add(i)
        elif have != want:
            out.differs.add(i)
    if out.differs and not out.warned:
        out.violations.append(f"frames {sorted(out.differs, key=str)} read wrong with no error and no StandInWarning")


def _where(shard: Shard, cut: int, out: Outcome) -> None:
    """The rules that depend on where the cut falls: strictly inside the newest copy (its entry
    gives its extent) is a cut, never a stand-in; exactly at its start is the power-loss state,
    whose committed rows the copy before it holds (read, warned when they end in fill)."""
    off, nb = shard.copies[-1]
    if off < cut < off + nb and out.warned:
        out.violations.append("a cut inside the newest copy was read as a stand-in (StandInWarning)")
    if cut == off and len(shard.copies) > 1 and out.raised:
        out.violations.append(f"a cut exactly at the newest copy refused frames {sorted(out.raised)}")


def _validate(seed: Seed, shard: Shard, out: Outcome) -> None:
    from mrec.check.validate import validate
    rep = validate(seed.path, deep=True)
    array = shard.key.rsplit("/c/", 1)[0]
    errors = [v for v in rep.violations if v.rule != "N-12"]
    stand = [w for w in rep.warnings if w.rule == "RT-6"]
    if out.raised and not any(v.rule == "N-4e" and array in v.path for v in errors):
        out.violations.append(f"the reader raised but validate --deep gave no N-4e for {array}: "
                              f"{[(v.rule, v.path) for v in rep.violations]}")
    if not out.raised and errors:
        out.violations.append(f"validate --deep reports {[(v.rule, v.message) for v in errors]} for a store that reads")
    if out.warned and not stand:
        out.violations.append("the reader warned a stand-in but validate --deep gave no RT-6")
    if stand and not out.warned and not out.raised:
        out.violations.append("validate --deep gave RT-6 but the reader read without a StandInWarning")


def _repair(seed: Seed, shard: Shard, out: Outcome, cut: int) -> None:
    from mrec.check.repair import repair
    rep = repair(seed.path)
    if out.raised:
        if rep.ok or not any(k.endswith(shard.key) for k, _ in rep.unrecoverable):
            out.violations.append(f"the reader raised but repair did not report {shard.key} unrecoverable")
        with open(seed.file(shard), "rb") as f:
            if f.read() != shard.original[:cut]:
                out.violations.append("repair changed a shard it reported unrecoverable")
        return
    if not rep.ok:
        out.violations.append(f"repair reports {rep.unrecoverable} for a store that reads")
    if out.warned != bool(rep.stand_ins):
        out.violations.append(f"the reader {'warned' if out.warned else 'did not warn'} a stand-in, "
                              f"repair's notes: {rep.stand_ins}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", StandInWarning)      # repaired: nothing stands in any more
        after = read_frames(seed.path, seed.field)
    for i, (want, have) in enumerate(zip(seed.frames, after)):
        if isinstance(have, CorruptionError):
            out.violations.append(f"after repair frame {i} raises: {have}")
        elif have != want and not (out.warned and i in out.differs):
            out.violations.append(f"after repair frame {i} reads wrong (not one the note named)")


def check_cut(seed: Seed, shard: Shard, cut: int) -> list[str]:
    """Cut the shard at ``cut`` (bytes ``[0, cut)`` kept), check reader, validate and repair;
    the violations found (empty: the rules hold). The shard is restored afterwards."""
    try:
        with open(seed.file(shard), "wb") as f:
            f.write(shard.original[:cut])
        out = Outcome()
        _read(seed, out)
        _where(shard, cut, out)
        _validate(seed, shard, out)
        _repair(seed, shard, out, cut)
        return [f"{seed.kind} {shard.key} cut at {cut}: {v}" for v in out.violations]
    finally:
        with open(seed.file(shard), "wb") as f:
            f.write(shard.original)


def sweep(root: str, kinds=KINDS, copies: int = 2) -> tuple[int, list[str]]:
    """Every cut of the last ``copies`` copies of each shard of each kind: (cuts checked, violations)."""
    n, bad = 0, []
    for kind in kinds:
        seed = build(root, kind)
        for shard in seed.shards:
            for cut in shard.cuts(copies):
                bad += check_cut(seed, shard, cut)
                n += 1
        shutil.rmtree(seed.path)
    return n, bad


if __name__ == "__main__":
    import tempfile
    import time
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        count, found = sweep(d)
    print(f"cutsweep: {count} cuts in {time.time() - t0:.1f} s; violations {len(found)}")
    for v in found[:40]:
        print("  " + v)
    sys.exit(1 if found else 0)
