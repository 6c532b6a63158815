"""Decoding: fetched inner chunks into the result, verified, serially or on the pool.

The decoder is picked from facts of the plan and of the fetched bytes:

* whole inner chunks lying back to back in an index read as written: the batch decoder
  (:func:`batch_whole`, :func:`batch_runs`: every frame inflated in few GIL-free calls on several
  threads, then unshuffled);
* other whole chunks fetched together: the fused in-place decoder on the pool (:func:`pool`);
* one chunk (:func:`inner_chunk`: the cached chunk, else fetched and decoded): the fused decoder
  (``crc32c`` + ``zstd`` in one step, unshuffled straight into its array) or the plain resolved
  decoder, then the labelled chain (:func:`verified`).

Each chunk is verified (``shardscan.trusted``: its rows are those its index entry promises); a
fast decoder that declines or fails leaves the chunk to the labelled chain, which raises the error
that names the shard and inner chunk (or finds an older copy, ``index.py``).  :class:`Decoders`
holds an array's resolved decoders (the steps bound once per sharding codec and data type).
"""
from __future__ import annotations

import weakref

import numpy as np

from ...errors import CorruptionError
from .. import shardscan
from ..codecs.base import ChunkSpec
from ..codecs.sharding import ShardIndex
from ..parallel import concurrent, decode_all, decode_parts
from . import fetch, plan


class Decoders:
    """The resolved decoders of ``array``'s inner chunks (CodecPipeline.decoder, decoder_into,
    part_decoder, batch_decoder: None where the chain has none), kept while the sharding codec and
    the data type are the same objects."""

    def __init__(self, array):
        # a proxy, not the array: no cycle, so an array (a reader's, its files kept open) is freed
        # as soon as it is dropped, not at the next garbage collection
        self.array = weakref.proxy(array)
        self.slots: dict[str, tuple] = {}

    def _resolved(self, slot: str, make: str, **kw):
        sh, m = self.array.sharding, self.array.meta
        got = self.slots.get(slot)
        if got is None or got[0] is not sh or got[1] is not m.data_type:
            got = (sh, m.data_type, getattr(sh.codecs, make)(ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, ""), **kw))
            self.slots[slot] = got
        return got[2]

    def plain(self):
        """``raw -> array`` (CodecPipeline.decoder), or None."""
        return self._resolved("dec", "decoder")

    def into(self, release_gil: bool = False, many: bool = False):
        """The in-place decoder (CodecPipeline.decoder_into), or None; ``release_gil``: the variant
        for decodes on several threads at once; ``many``: the one decoding a list of chunks."""
        slot = ("into", "into_mt", "many", "many_mt")[2 * many + release_gil]
        return self._resolved(slot, "decoder_into", release_gil=release_gil, many=many)

    def part(self):
        """The part decoder (CodecPipeline.part_decoder), or None."""
        return self._resolved("part", "part_decoder")

    def batch(self):
        """The batch decoder (CodecPipeline.batch_decoder), or None."""
        return self._resolved("batch", "batch_decoder")


def inner_chunk(array, key: str, index: ShardIndex, coord, b: int, where: str | None, keep: bool = True,
                raw=False, dest: np.ndarray | None = None, span: tuple | None = None) -> np.ndarray:
    """Inner chunk ``coord`` (non-empty in ``index``) of shard ``key``, decoded and verified for its
    first ``b`` rows; the last one decoded is cached.  ``span``: its index entry (offset, bytes)
    when the caller has read it already; ``raw``: its bytes when fetched already (False: fetched
    here, unless the cache holds the chunk)."""
    off, n = span if span is not None else (int(index.offsets[coord]), int(index.nbytes[coord]))
    ck = (key, coord, off, n)
    cache = array.cache
    cached = cache.chunk
    if cached is not None and cached[0] == ck and (cached[2] >= b or (
            cached[3] and shardscan.trusted(index, coord, cached[1], b, array.meta.fill_value))):
        # the same verified bytes.  A chunk decoded from these bytes (not an older copy, which
        # holds only the rows it was checked for) serves more rows after the same check the
        # decode path makes: a frame-by-frame read walks forward through the chunk
        if cached[2] < b:
            cache.chunk = (ck, cached[1], b, True)
        return cached[1]
    if raw is False:                       # not prefetched
        raw = fetch.entry(array.store, key, off, n)
    return verified(array, index, coord, b, where, keep, raw, dest, ck)


def verified(array, index: ShardIndex, coord, b: int, where: str | None, keep: bool, raw,
             dest: np.ndarray | None, ck: tuple) -> np.ndarray:
    """Inner chunk ``coord`` (``ck``: its shard key, coord and index entry) decoded from its fetched
    bytes ``raw`` and verified for its first ``b`` rows; kept as the array's last chunk when
    ``keep``.  ``dest``: a whole chunk's rows of the result, decoded in place when the codecs allow
    (then never kept)."""
    sh, m = array.sharding, array.meta
    key, _coord, off, n = ck
    if dest is None and raw is not None and len(raw) == n:
        # the resolved decoder (no per-chunk labels); any failure is decoded again below through
        # the labelled path, which raises the error to report.  The in-place one (crc32c and zstd
        # fused, unshuffled into a fresh array) when the codecs allow, else the plain one
        chunk = None
        into = array.decoders.into()
        if into is not None:
            chunk = np.empty(sh.chunk_shape, dtype=m.data_type.numpy)
            try:
                if not into(raw, chunk):
                    chunk = None
            except Exception:
                chunk = None
        else:
            fast = array.decoders.plain()
            try:
                chunk = fast(raw) if fast is not None else None
            except Exception:
                chunk = None
        if chunk is not None and shardscan.trusted(index, coord, chunk, b, m.fill_value):
            if keep:
                array.cache.chunk = (ck, chunk, b, True)
            return chunk
    if where is None:
        where = array.store.describe(key)
    inner_spec = ChunkSpec(sh.chunk_shape, m.data_type, m.fill_value, where)
    label = f"{where} inner chunk {list(coord)}"
    direct = True
    try:
        chunk = _labelled(array, coord, where, raw, dest, (off, n), inner_spec.at(label))
        keep = keep and chunk is not dest
        if not shardscan.trusted(index, coord, chunk, b, m.fill_value):
            raise CorruptionError(f"{array.indexes.reason(key)}; the newest copy of inner chunk {list(coord)} does "
                                  f"not verify and the copy before it does not provably hold "
                                  f"row {b - 1}", path=where)
    except CorruptionError as exc:
        chunk = array.indexes.older_copy(key, coord, b, inner_spec.at(label), exc)
        direct = False
    # remember how many rows were verified (and how): a later read needing more re-checks
    if keep:
        array.cache.chunk = (ck, chunk, b, direct)
    return chunk


def _labelled(array, coord, where: str, raw, dest, span: tuple, spec: ChunkSpec) -> np.ndarray:
    """The chunk decoded through the labelled chain (its errors name the shard and inner chunk;
    ``dest``: decoded in place when the codecs allow, the result then ``dest``)."""
    sh = array.sharding
    off, n = span
    if raw is None or len(raw) != n:
        got = 0 if raw is None else len(raw)
        raise CorruptionError(f"truncated shard: inner chunk {list(coord)} needs bytes "
                              f"{off}..{off + n}, got {got}", path=where)
    try:
        if dest is None:
            chunk = sh.codecs.decode(raw, spec)
        else:                          # decoded in place when the codecs allow: never cached
            chunk = sh.codecs.decode_into(raw, spec, dest)
    except CorruptionError as exc:
        # the entry is as suspect as the bytes: say which range it named
        raise CorruptionError(f"{exc.detail}; its shard index entry {list(coord)} names bytes "
                              f"{off}..{off + n} (offset {off}, {n} bytes): the entry or the bytes "
                              "it names are damaged", path=exc.path or where) from None
    return chunk


def pool(array, index: ShardIndex, raws: dict, out: np.ndarray, r_lo: int, first: int, last: int,
         threads: int | None) -> set:
    """Decode the prefetched whole inner chunks of rows [first, last) (inner-chunk rows of a shard
    whose inner chunks span every trailing axis) straight into their rows of ``out``, on the
    pool (:func:`decode_all`); returns the coords done.  Only the plain case is done here: the
    bytes fetched in full, decoded in place and verified as :func:`verified` verifies them.
    Anything else (a failing decode or check, a short read, a decode that cannot go in place)
    is left to the serial loop, which decodes it again through the labelled path and raises
    exactly the error a serial read raises, at the same chunk."""
    sh, m = array.sharding, array.meta
    ir = sh.chunk_shape[0]
    tail = (0,) * (m.ndim - 1)
    jobs = []
    sizes = index.nbytes.reshape(index.nbytes.shape[0], -1)[first:last, 0].tolist()   # one cell a row
    for i0, size in zip(range(first, last), sizes):
        lo0 = i0 * ir
        if lo0 < r_lo or lo0 + ir > r_lo + len(out):
            continue
        coord = (i0, *tail)
        raw = raws.get(coord)
        if raw is None or raw is False or len(raw) != size:
            continue
        jobs.append((coord, raw, out[lo0 - r_lo:lo0 - r_lo + ir]))
    if len(jobs) < 2:
        return set()
    nbytes = len(jobs) * out[:ir].nbytes
    parts = decode_parts(len(jobs), nbytes, threads)
    if parts > 1 or concurrent():
        # on several threads, or on one beside others (a read ahead): few long GIL-free calls
        done = batch_runs(array, index, jobs, out, r_lo, ir, parts)
        if done is not None:
            for coord in done:
                raws.pop(coord, None)
            return done
    # on several threads, the unshuffle that runs without the GIL
    into = array.decoders.into(release_gil=parts > 1, many=True)
    if into is None:
        return set()
    fill = m.fill_value
    trusted = shardscan.trusted

    def decode(part) -> list:
        try:
            got = into([(raw, dest) for _c, raw, dest in part])
            return [g and trusted(index, coord, dest, ir, fill) for g, (coord, _r, dest) in zip(got, part)]
        except Exception:          # noqa: BLE001 - the serial loop decodes them again and reports
            return [False] * len(part)
    ok = decode_all(decode, jobs, nbytes, threads, per_part=True)
    done = {job[0] for job, good in zip(jobs, ok) if good}
    for coord in done:
        raws.pop(coord, None)
    return done


def batch_runs(array, index: ShardIndex, jobs: list, out: np.ndarray, r_lo: int, ir: int,
               threads: int) -> set | None:
    """:func:`pool`'s jobs decoded by the pipeline's batch decoder (every frame inflated in C on
    ``threads`` threads, then unshuffled on the pool), one run of consecutive inner-chunk rows at a
    time; the coords done (each verified as :func:`verified` verifies it), or None when there is no
    batch decoder or a run does not decode (the caller's per-chunk path then decodes them again
    and reports)."""
    batch = array.decoders.batch()
    if batch is None:
        return None
    fill, trusted = array.meta.fill_value, shardscan.trusted
    done = set()
    s = 0
    while s < len(jobs):
        e = s + 1
        while e < len(jobs) and jobs[e][0][0] == jobs[e - 1][0][0] + 1:
            e += 1
        run = jobs[s:e]
        lo = run[0][0][0] * ir - r_lo
        dest = out[lo:lo + len(run) * ir].view()
        try:
            dest.shape = (len(run), -1)            # a view (any strides), never a copy
        except AttributeError:
            return None if not done else done
        if not batch([raw for _c, raw, _d in run], dest, threads):
            return None if not done else done
        for coord, _raw, d in run:
            if trusted(index, coord, d, ir, fill):
                done.add(coord)
        s = e
    return done


#: consecutive runs of a shard's whole inner chunks decoded by one batch call: up to this many times
#: ``plan.COALESCE_BYTES`` of stored bytes (each run still one range read).  A call's tail (one thread
#: finishing its last piece alone) and hand-out are paid once for them: x, y, z of 1000 frames of
#: 3000 atoms on two threads 92.5 -> 90.3 ms (zstd + crc32c copies 126.5 -> 122.1), best of 9 alternated
GROUP_RUNS = 4


def batch_whole(array, key: str, index: ShardIndex, out: np.ndarray, r_lo: int, r_hi: int,
                threads: int | None) -> range:
    """The whole inner chunks of rows [r_lo, r_hi) of shard ``key`` (inner chunks spanning the
    trailing axes) decoded straight into their rows of ``out`` by the batch decoder, without
    per-chunk bookkeeping: the inner-chunk rows done, one run (``range``: the caller's leftovers
    are then found without a pass over every chunk of the shard, which cost ~10 % of a
    two-thread whole-column read).  Only the plain case: an index read as written (not rebuilt),
    entries back to back in the file (as an appender lands them), bytes read whole, and a batch
    that decodes; anything else is left (from the first run that is not plain) to the general
    path, which decodes it again and raises the error a serial read raises.  Runs (one range read
    each, :func:`fetch.run`) are fetched a group at a time (:data:`GROUP_RUNS`) right before the
    group is decoded: nothing is read past a group holding a failing run."""
    if not array.indexes.as_written(key, index):
        return range(0)
    batch = array.decoders.batch()
    if batch is None:
        return range(0)
    ir = array.sharding.chunk_shape[0]
    _first, _last, a, b = plan.inner_rows(ir, r_lo, r_hi)    # the inner chunks wholly inside the rows
    entries = plan.plain_entries(index, a, b) if b - a >= 2 else None
    if entries is None:
        return range(0)
    offs, sizes = entries
    place = (out, (a * ir) - r_lo, ir, threads)
    done = 0                                       # runs are decoded in order: rows [a, a + done)
    for group in plan.run_groups(plan.run_cuts(offs, sizes), sizes, GROUP_RUNS * plan.COALESCE_BYTES):
        fetched = []
        for lo, hi in group:                       # runs of entries back to back: one range read each
            got = fetch.run(array.store, key, offs[lo:hi], sizes[lo:hi])
            if got is None:
                break
            fetched.append((lo, hi, got))
        done = group[0][0] + _decode_runs(batch, fetched, place)
        if done < group[-1][1]:
            break
    return range(a, a + done)


def _decode_runs(batch, fetched: list, place: tuple) -> int:
    """How many inner chunks from the first of the ``fetched`` runs (``(lo, hi, (pieces, segment))``,
    consecutive) decode into their rows (``place``: see :func:`_decode_span`): all by one batch call,
    else (a run that does not decode) run by run up to the first that does not."""
    if not fetched:
        return 0
    first, last = fetched[0][0], fetched[-1][1]
    if len(fetched) > 1 and _decode_span(batch, [p for *_r, got in fetched for p in got[0]],
                                         [got[1] for *_r, got in fetched], first, last, place):
        return last - first
    for lo, hi, (pieces, segment) in fetched:
        if not _decode_span(batch, pieces, [segment], lo, hi, place):
            return lo - first
    return last - first


def _decode_span(batch, pieces: list, layout: list, lo: int, hi: int, place: tuple) -> bool:
    """Inner chunks ``lo .. hi - 1`` (counted from the first whole one) decoded by one batch call
    into their rows of ``out`` (``place``: ``(out, row of the first whole chunk in out, rows a chunk,
    threads)``)."""
    out, r0, ir, threads = place
    dest = out[r0 + lo * ir:r0 + hi * ir].view()
    try:
        dest.shape = (hi - lo, -1)                # a view (any strides), never a copy
    except AttributeError:
        return False
    return batch(pieces, dest, decode_parts(hi - lo, dest.nbytes, threads), layout)
