"""Repair of shard indexes a power loss tore or dropped (the work behind :mod:`mrec.check.repair`).

The writer rewrites each shard's index (``index_location: start``) in place at
every landing.  A write torn by power loss leaves an index whose crc32c fails
although the chunks it names are intact; a dropped one leaves an index older
than the chunks after it (the file does not end where the index says).  Both are
detected cheaply — one index read and one size per shard — and rebuilt from
the inner chunks that verify (:mod:`mrec.zarr.shardscan`), keeping only what lies
below the array's logical length (the reopen rule, from ``nstep``).

How the rewrite is made safe enough, without copying a shard (shards target
256 MiB): chunk bytes are never touched; the rebuilt index is written at offset
0 with one positional write and fsynced; then, if the file holds uncommitted
bytes past the last chunk the index keeps, it is truncated there and fsynced.
A crash during the repair can tear the index again — the next open detects it
the same way and rebuilds the *same* index from the same chunk bytes (the
rebuild is a pure function of them), so the repair is idempotent, and readers
in between rebuild it in memory.  A shard where a chunk below the logical length
has no copy that verifies is left untouched and reported unrecoverable: writing
an index without it would make lost rows read as the fill value.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

import numpy as np

from ...errors import MrecError
from ...zarr import shardscan
from ...zarr.array import Array, read_node
from ...zarr.codecs.base import ChunkSpec
from ...zarr.codecs.sharding import EMPTY
from ...zarr.metadata import ArrayMetadata
from .layout import TRAJ, load_layout


@dataclass
class ShardRepair:
    key: str
    reason: str
    chunks: int                 # inner chunks the rebuilt index names
    cleared: int                # entries at or past the logical length emptied
    truncated_to: int | None    # new file size, when an uncommitted tail was cut


@dataclass
class RepairReport:
    path: str
    dry_run: bool
    shards_checked: int = 0
    repaired: list[ShardRepair] = field(default_factory=list)
    unrecoverable: list[tuple[str, str]] = field(default_factory=list)
    #: (shard, what): an older chunk copy stands in for a newest copy wholly past the end of the file
    #: and its last needed row is the fill value — a power loss and a cut file look alike there
    stand_ins: list[tuple[str, str]] = field(default_factory=list)
    removed_temps: list[str] = field(default_factory=list)      # temp files of an atomic replace a crash left
    #: interrupted overwrites of the record or of groups inside it, recovered (dry run: found)
    recovered: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unrecoverable

    def summary(self) -> str:
        verb = "would repair" if self.dry_run else "repaired"
        lines = [f"{self.path}: {self.shards_checked} shard indexes checked, {len(self.repaired)} {verb}, "
                 f"{len(self.unrecoverable)} unrecoverable"]
        for r in self.repaired:
            tail = f", truncated to {r.truncated_to} bytes" if r.truncated_to is not None else ""
            lines.append(f"  {verb} {r.key}: {r.reason} -> {r.chunks} inner chunks, {r.cleared} stale entries cleared{tail}")
        for key, why in self.unrecoverable:
            lines.append(f"  unrecoverable {key}: {why}")
        for key, what in self.stand_ins:
            lines.append(f"  note {key}: {what}")
        if self.recovered:
            verb_r = "would recover" if self.dry_run else "recovered"
            lines.append(f"  {verb_r} {len(self.recovered)} interrupted overwrite(s): {'; '.join(self.recovered)}")
        if self.removed_temps:
            verb_t = "would remove" if self.dry_run else "removed"
            shown = ", ".join(self.removed_temps[:5]) + (" ..." if len(self.removed_temps) > 5 else "")
            lines.append(f"  {verb_t} {len(self.removed_temps)} temporary file(s) a crash left: {shown}")
        return "\n".join(lines)


def _arrays(store) -> list[Array]:
    out = []
    for key in store.list(TRAJ):
        if posixpath.basename(key) != "zarr.json":
            continue
        path = posixpath.dirname(key)
        try:
            node = read_node(store, path)
        except MrecError:
            continue                      # a broken zarr.json is not this repair's business
        if isinstance(node, ArrayMetadata) and node.codecs.sharding is not None and node.ndim:
            arr = Array(store, path, node)
            arr.appended = True               # trajectory/ arrays are written by appending
            out.append(arr)
    return out


def _logical_lengths(store) -> dict[str, int]:
    """Array path -> logical length by the reopen rule (empty when the layout does not load)."""
    try:
        lay = load_layout(store)
    except MrecError:
        return {}
    n = lay.nstep
    out = {}
    for a in (lay.step_array, lay.time_array, *lay.meta.values()):
        if a is not None:
            out[a.path] = n
    bx = lay.box
    committed = bx.n_updates if bx.vectors is not None else 0    # vectors lands last: without it the
    for a in (bx.vectors, bx.origin, bx.boundary):                # other box arrays are uncommitted
        if a is not None:
            out[a.path] = committed
    out[f"{TRAJ}/box/step_index"] = committed
    for b in lay.blocks.values():
        total = b.total_rows
        for a in (*b.columns.values(), *b.masks.values()):
            out[a.path] = total
        committed = b.n_updates if b.step_index is not None else 0   # no step_index: offset is uncommitted
        out[f"{TRAJ}/{b.name}/step_index"] = committed
        out[f"{TRAJ}/{b.name}/offset"] = committed + 1 if committed else 0   # the leading 0 with the first update
    return out


def _suspect(arr: Array, key: str, grid) -> str | None:
    sh = arr.sharding
    st = arr.store
    isize = sh.index_size(grid)
    raw = st.get_range(key, 0, isize)
    size = st.size(key)
    if raw is None or size is None:
        return None
    if len(raw) < isize:
        return f"shard of {len(raw)} bytes is shorter than its {isize}-byte index"
    try:
        index = sh.decode_index(raw, grid, st.describe(key))
    except MrecError:
        return "shard index fails its crc32c"
    end = max(index.data_end(), isize)
    if end > size:
        return f"index names bytes up to {end}, the file holds {size}"
    if end < size:
        return f"index ends at byte {end}, the file at {size}: older than the chunks after it"
    return None


def repair_store(store, *, dry_run: bool = False) -> RepairReport:
    """Check every shard index under ``trajectory/`` of a writable store; rebuild those that fail."""
    import warnings
    from ...errors import StandInWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StandInWarning)     # reported as stand_ins instead
        return _repair_store(store, dry_run)


def _repair_store(store, dry_run: bool) -> RepairReport:
    report = RepairReport(store.describe(""), dry_run)
    lengths = None
    for arr in _arrays(store):
        sh = arr.sharding
        try:
            grid = sh.grid(arr.meta.chunk_shape, arr.name)
        except MrecError:
            continue
        if not shardscan.rebuildable(sh, grid):
            continue
        shard_rows, inner = arr.meta.chunk_shape[0], sh.chunk_shape[0]
        for s in range(arr.meta.chunk_grid_shape[0]):
            key = arr.chunk_key((s,) + (0,) * (arr.meta.ndim - 1))
            if not store.exists(key):
                continue
            report.shards_checked += 1
            why = _suspect(arr, key, grid)
            if why is None:
                continue
            if lengths is None:
                lengths = _logical_lengths(store)
            logical = min(lengths.get(arr.path, arr.shape[0]), arr.shape[0])
            rows_here = min(max(logical - s * shard_rows, 0), shard_rows)
            needed = -(-rows_here // inner)
            data = store.get(key) or b""
            isize = sh.index_size(grid)
            entries = shardscan.raw_entries(sh, data[:isize], grid) if len(data) >= isize else None
            spec = ChunkSpec(sh.chunk_shape, arr.meta.data_type, arr.meta.fill_value, store.describe(key))
            try:
                index, _ = shardscan.rebuild(sh, grid, spec, data, entries)
            except shardscan.Contradiction as exc:
                report.unrecoverable.append((store.describe(key), f"{why}; {exc.detail}"))
                continue
            tail = (len(grid) - 1) * (0,)
            lost = [c for c in range(needed) if index.is_empty((c,) + tail)]
            for c, *_ in sorted(getattr(index, "degraded", {})):
                if c < needed and c not in lost:          # an older copy: does it hold the logical rows?
                    off, nb = int(index.offsets[(c,) + tail]), int(index.nbytes[(c,) + tail])
                    chunk = np.asarray(sh.codecs.decode(data[off:off + nb], spec))
                    need = min(rows_here - c * inner, inner)
                    if not shardscan.trusted(index, (c,) + tail, chunk, need, arr.meta.fill_value):
                        lost.append(c)
                    elif index.degraded[(c,) + tail] == shardscan.PAST_END \
                            and not shardscan.holds_rows(chunk, need, arr.meta.fill_value):
                        lo = s * shard_rows + c * inner
                        report.stand_ins.append((store.describe(key), (
                            f"inner chunk {[c]}: its newest copy lies past the end of the file; rows "
                            f"{lo}..{lo + need - 1} are taken from the copy before it, and the last of them is "
                            "the fill value. Right after a power loss they are as committed; if the file was "
                            "cut instead, they were lost")))
            if lost:
                report.unrecoverable.append((store.describe(key), f"{why}; no copy of inner chunks {lost} verifies"))
                continue
            cleared = int(np.count_nonzero(index.offsets[needed:] != EMPTY))
            index.offsets[needed:] = EMPTY
            index.nbytes[needed:] = EMPTY
            end = max(index.data_end(), isize) if needed else 0
            truncate = end if end < len(data) else None
            report.repaired.append(ShardRepair(store.describe(key), why, needed, cleared, truncate))
            if dry_run:
                continue
            if needed == 0:
                store.truncate(key, 0)            # nothing committed here: an uncommitted leftover
            else:
                store.write_at(key, 0, sh.encode_index(index, store.describe(key)))
                store.fsync(key)
                if truncate is not None:
                    store.truncate(key, truncate)
            store.fsync(key)
    return report
