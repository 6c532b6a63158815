"""Crash-consistency checker for the trajectory writer (ALICE / CrashMonkey style).

Records writer sessions operation by operation (``mrec.fs.RecordingFileSystem``
with payloads), then materialises the store a crash would leave after *every*
prefix of the operations (``mrec.fs.faulty.CrashSimulator``) and checks it:

* process crash (every operation before the cut reached the OS): the store
  opens with ``TrajectoryReader`` at exactly the last ``nstep`` the OS received;
* power loss (only fsync'd data and fsync'd directory entries are sure; other
  writes dropped, reordered or torn at 512-byte sectors — sampled seeds plus the
  two extremes per cut): the store opens with at least the frames of the last
  completed explicit flush and never more than the last nstep issued;

and, for every state: every visible frame (blocks, masks, box, meta, step, time)
is bit-identical to what was appended; ``TrajectoryWriter.open`` reopens the
store (running the torn-index repair, removing replace temp files), appends two
frames and closes, the result reads back, and ``pack`` would not refuse it.  A
state with a temp file left inside an atomic replace is also given, on a copy,
to ``mrec repair`` alone, after which it must hold no temp file and pack.

The ``overwrite`` session records ``write_record(old)`` then
``write_record(new, overwrite=True)`` in one directory (directory renames
included) and cuts it at every op under both models: after recovery — by a
read, ``mrec repair`` or the next write, in turn — the path holds exactly the
complete old or the complete new record (the new one once its commit rename is
issued / durable), no well-known sibling is left, and a further overwrite
leaves nothing beside the record.

The ``nested-overwrite`` sessions do the same inside a record: a section
(``write_section(frame, overwrite=True)``) and a group (``write_frame(group=
"a/b", overwrite=True)``) replaced, every op of the overwrite cut under both
models, each state given in turn to one entry point of the record (a read of
the record, the frame or the group tree, a write of another section, a
trajectory writer's create, ``mrec repair``, ``pack``): the group holds
exactly the complete old or new version (new once its commit rename is issued /
durable), the rest of the record is intact, no ``.mrec-tmp-`` sibling is left
(nothing at all after a writer, repair or pack) and pack archives none.

With ``--faults`` it checks write errors instead of crashes: each session is
replayed once per injection point (every write, replace, rename, truncate,
remove, mkdir, fsync and directory fsync the writer issues after create /
open; ``mrec.fs.faulty.FaultyFileSystem``), that call failing once with ENOSPC
and once with EIO (a short write first, as a full disk does).  The failing
call must raise ``mrec.WriteError`` carrying the errno and naming a file of
the store; the retries (flush, append, close) must all refuse; the store must
hold every frame the writer reported committed, bit-identically, with no block
vanished, at an nstep the writer issued; and reopen must continue from it.
``--tmpfs`` runs sessions on really full file systems (small tmpfs mounts,
root only), then grows the mount and checks the same.

    python -m tools.crashcheck            # the full run (every session, every cut)
    python -m tools.crashcheck --quick    # a short run (the CI test)
    python -m tools.crashcheck --seeds 16 --strict-metadata --durable-always
    python -m tools.crashcheck --faults [--quick] [--tmpfs]
    python -m tools.crashcheck --reopen [--quick] [--strict-metadata] [--s1-states N] [--cuts N]

``--reopen`` runs a second writer session (``TrajectoryWriter.open``, and ``open(truncate_after_step=...)``)
on sampled crash states of the first -- large-frame sessions (one frame an inner chunk) included --
and checks every cut of it, large writes torn between pages among them (docs/reliability.md,
"Reopen mode").

Prints the states checked per model and every violation; exits 1 on any.

The parts: ``plans`` (the scripted sessions), ``recording`` (a session recorded, the states the
simulator cuts from it), ``checks`` (one state checked; the summary), ``crashes`` (the plain run and
``--truncate``), ``overwrite`` (the overwrite sessions), ``faults`` (``--faults``), ``reopen``
(``--reopen``); this module holds the command line.
"""
from __future__ import annotations

import argparse

import mrec

from .checks import tree_digest
from .crashes import run, run_truncation
from .faults import run_faults
from .plans import plans, reopen_plans
from .recording import commit_points, durable_tree_ops, materialise_torn, record, torn_prefixes
from .reopen import run_reopen, session1_states

__all__ = ["PIPELINE", "commit_points", "durable_tree_ops", "main", "materialise_torn", "record", "reopen_plans",
           "session1_states", "torn_prefixes", "tree_digest"]

#: ``--pipeline`` as the last :func:`main` read it: the writer sessions recorded with
#: TrajectoryWriter(pipeline=True) (automatic commits on the committer thread, inner chunks encoded
#: ahead while appends go on): the same cuts are checked
PIPELINE = False


def main(argv=None) -> int:
    import warnings
    # a power-loss state whose committed rows end in fill values reads with a StandInWarning (it
    # cannot be told from a file cut there: docs/reliability.md); the rows are checked bit for bit
    warnings.simplefilter("ignore", mrec.StandInWarning)
    ap = argparse.ArgumentParser(prog="python -m tools.crashcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short session (a few seconds)")
    ap.add_argument("--seeds", type=int, default=None, help="sampled power-loss states per cut (default 6, quick 2)")
    ap.add_argument("--strict-metadata", action="store_true",
                    help="power loss without journal ordering: directory changes survive per directory, "
                         "only fsync orders anything")
    ap.add_argument("--cuts", type=int, default=None, help="check about this many evenly spaced cuts, not every one")
    ap.add_argument("--plan", action="append", default=None,
                    help="check only this session (repeatable): " + ", ".join(p.name for p in plans(False))
                    + ", overwrite (write_record(overwrite=True)), nested-overwrite "
                    "(write_section / write_frame(group=...) with overwrite=True); with --reopen also large, "
                    "large-zstd, large-quick")
    ap.add_argument("--durable-always", action="store_true",
                    help="record the sessions with TrajectoryWriter(durable='always'): every flush fsynced "
                         "(what --strict-metadata needs for every commit to be durable)")
    ap.add_argument("--faults", action="store_true",
                    help="write errors instead of crashes: ENOSPC / EIO at every write and fsync, then retry, "
                         "close and reopen")
    ap.add_argument("--tmpfs", action="store_true", help="with --faults: also fill real tmpfs mounts (root only)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--truncate", action="store_true",
                    help="check the restart truncation (TrajectoryWriter.open(truncate_after_step=...)) at every cut")
    ap.add_argument("--reopen", action="store_true",
                    help="a second session (reopen, or reopen with truncate_after_step, then appends) on sampled "
                         "crash states of the first, large-frame sessions included; its own cuts checked")
    ap.add_argument("--s1-states", type=int, default=None,
                    help="with --reopen: session-1 crash states per session (default 12; quick: 4 of the "
                         "large-frame session, 1 of the small)")
    ap.add_argument("--pipeline", action="store_true",
                    help="record the writer sessions with pipeline=True (commits on the committer thread); "
                         "the plain and --reopen checks")
    a = ap.parse_args(argv)
    global PIPELINE
    PIPELINE = a.pipeline
    if a.faults:
        return run_faults(a.quick, a.verbose, a.cuts, a.plan, a.tmpfs)
    seeds = a.seeds if a.seeds is not None else (2 if a.quick else 6)
    if a.truncate:
        return run_truncation(seeds, not a.strict_metadata, a.verbose)
    if a.reopen:
        return run_reopen(a.quick, seeds, not a.strict_metadata, a.verbose, a.cuts, a.plan,
                          "always" if a.durable_always else True, a.s1_states, PIPELINE)
    return run(a.quick, seeds, not a.strict_metadata, a.verbose, a.cuts, a.plan,
               "always" if a.durable_always else True, PIPELINE)
