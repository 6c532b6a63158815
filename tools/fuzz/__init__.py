"""Fuzz the readers: mutated zarr.json, shard and zip bytes of real stores.

Builds a few small real records (regular and ragged blocks, masks, a changing box,
meta, irregular steps; one packed to ``*.mrec.zip``), then for each input mutates
one file — a ``zarr.json`` (bit flips, byte edits, truncation, splices of hostile
JSON values: huge, negative, fractional, nested), a shard (bit flips, byte runs,
truncation, extension) or the zip archive (the same, anywhere in it) — and opens
and reads everything with ``mrec.TrajectoryReader``. The only exceptions allowed
are ``mrec.MrecError``; anything else (and any input that takes over 5 s) is a
failure, saved under ``--out`` for reproduction.

Two more targets take the hostile classes of issue 17: ``bounds`` plants untrusted
sizes (gzip / zstd bombs, a frame stating a huge content size, a vlen-utf8 count far
beyond its chunk, a 1 KB zarr.json declaring ~2^40 chunks, declared rows far beyond
the frames, zip entry names of thousands of components; since issue 27 also real stores whose
zarr.json claims what their files do not hold -- a frame column of 2^28..2^33 rows over one
chunk, nstep 2^31..2^62 over one frame -- each under a 200 MiB allocation bound) and reads them
with the array reader, the record readers and ``validate --deep``; ``inputs`` calls the writers with what a user
can get wrong (node names with NUL, '/', a backslash, only periods, 300 bytes or a
lone surrogate; JSON documents nested thousands deep; targets inside a regular file).

Target ``cut`` (issue 27) cuts a trajectory shard at a random byte offset of a store written
with random values and flushes (``tools/cutsweep.py``, four array kinds) and checks that the
reader returns the written bits or raises ``CorruptionError`` or warns ``StandInWarning``,
and that ``validate --deep`` and ``mrec repair`` say the documented thing; a breach is a failure.

Target ``links`` (issue 27) puts a symbolic link -- to a directory, a record, a file, or dangling --
where a writer, pack, unpack, repack or repair writes, inside a record it replaces, or beside it
under the names of mrec's leftovers, and checks that it is refused (``bad_target``, naming it) or
unlinked / left alone, and that nothing it leads to changes; a breach is a failure.

Target ``remote`` (issue 27) serves the seed directory and archive from a hostile HTTP server on
127.0.0.1 (``spec_tests/servers.py``; loopback only, started once a run, stopped at its end) that
misbehaves on one or two of its files or directory pages per input: a 404 for what the listing names,
``Range`` ignored, a flood or an endless body, a stall inside a body, a slow answer, a flipped bit, a
500, a body cut short or a short body. Every input reads the whole record at the URL (timeouts of
0.25 s through ``MREC_STORAGE_OPTIONS``): the same content as the local record, or an ``MrecError``.

    python -m tools.fuzz --n 100000            # the long run
    python -m tools.fuzz --n 300 --seed 1      # a short run (the CI test)

Prints inputs run per target, outcomes (read cleanly / refused) and failures; exits 1
on any failure.

The parts: ``mutate`` (the seed records; targets zarr.json, shard, zip), ``bounds``, ``inputs``,
``cut``, ``remote``, ``links`` (one target each), ``runner`` (the run and its summary); this module
holds the command line.
"""
from __future__ import annotations

import argparse

from .runner import run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="inputs to run (default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder for reproducers of failures")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    return run(a.n, a.seed, a.out, a.verbose)

