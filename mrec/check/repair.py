"""``mrec repair PATH``: rebuild shard indexes a power loss tore or dropped.

``repair(path, dry_run=False)`` checks every shard index under ``trajectory/``
of a ``*.mrec`` directory (its crc32c, and that it ends where the file ends),
rebuilds each one that fails from the inner chunks that verify — each ends with
its own crc32c — up to the logical lengths the reopen rule gives from
``nstep``, and rewrites it in place (one positional write of the index, fsync;
see :mod:`mrec.record.trajectory.repair` for why that is safe and idempotent).
``TrajectoryWriter.open`` runs it before appending.

Like a writer, repair takes the store's writer lock (a live writer, pack or
another repair is refused, kind ``live_writer``), refuses a record holding a
symbolic link (kind ``bad_layout``: its writes would follow it out of the
record) and removes the temporary files a crash inside an atomic replace
left (``.mrec-tmp-<name>.<8 hex>``, see :mod:`mrec.record.integrity.leftovers`), which
would otherwise make ``pack`` refuse.  ``--dry-run`` takes no lock and
removes nothing: it lists them.

Command line: ``python -m mrec.repair PATH [--dry-run]``; for the ``mrec``
command, :func:`add_repair_command` registers the same sub-command.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import MrecError, StoreError
from ..record.integrity.leftovers import link_refusal, prepare_for_writing, scan
from ..fs import DEFAULT_FS, refuse_link
from ..fs.urls import refuses_urls
from ..record.integrity.lock import lock_store
from ..record.integrity.replace import interrupted, names, recover, recover_within
from ..record.trajectory.repair import RepairReport, ShardRepair, repair_store
from ..zarr.stores.directory import DirectoryStore

__all__ = ["repair", "RepairReport", "ShardRepair", "add_repair_command", "main"]


@refuses_urls(path="repair")
def repair(path, *, dry_run: bool = False, fs=None) -> RepairReport:
    """Check and repair the shard indexes of the trajectory in the ``*.mrec`` directory ``path``."""
    p = os.fspath(path)
    refuse_link(fs or DEFAULT_FS, p, "repair")     # its truncates and removals would follow it (bad_target)
    recovered: list[str] = []
    if not dry_run:            # overwrites a crash interrupted, of the record and of groups in it (mrec.record.integrity.replace)
        done = recover(fs or DEFAULT_FS, os.path.abspath(p), within=False)
        recovered = [f"the record: {done}"] if done else []
        if os.path.isdir(p):
            recovered += recover_within(fs or DEFAULT_FS, os.path.abspath(p))
    else:
        recovered = [f"the record: {os.path.basename(s)} left" for s in names(os.path.abspath(p))
                     if (fs or DEFAULT_FS).exists(s)]
        if os.path.isdir(p):
            found: dict[str, list[str]] = {}
            for what, group, leftover in interrupted(fs or DEFAULT_FS, p):
                if what != "unknown":
                    found.setdefault(group, []).append(leftover)
            recovered += [f"{group}: {', '.join(left)} left" for group, left in found.items()]
    if not os.path.isdir(p):
        raise StoreError("repair works on a *.mrec directory (a packed *.mrec.zip is never appended to)", path=p)
    store = DirectoryStore(p, fs=fs, readonly=dry_run)
    if dry_run:                          # reads only: no lock; links refused all the same
        links, temps = scan(store.fs, p)
        if links:
            raise link_refusal(p, links, "repairing")
        report = repair_store(store, dry_run=True)
        report.removed_temps = temps
        report.recovered = recovered
        return report
    held = lock_store(store.fs, p, "repair")          # a live writer or pack: live_writer
    try:
        removed = prepare_for_writing(store.fs, p, "repairing")   # links refused, temp leftovers removed
        report = repair_store(store)
        report.removed_temps = removed
        report.recovered = recovered
        return report
    finally:
        held.release()


def _run(args) -> int:
    report = repair(args.path, dry_run=args.dry_run)
    print(report.summary())
    return 0 if report.ok else 1


def add_repair_command(subparsers) -> argparse.ArgumentParser:
    """Register ``repair PATH [--dry-run]`` on an argparse sub-parsers object (for ``mrec.cli``).

    The parser's ``func`` default is a callable taking the parsed args and returning
    the exit status (0: clean or repaired, 1: something unrecoverable).
    """
    p = subparsers.add_parser(
        "repair", help="rebuild shard indexes a power loss tore or dropped",
        description="Check the trajectory of a *.mrec directory and rebuild, from the chunks that verify, "
        "the shard indexes a power loss tore or dropped; finish or roll back an interrupted overwrite. "
        "Exit 0 when the record is clean or repaired, 1 when something cannot be recovered (reported). "
        "A live writer's record is refused. See docs/reliability.md.")
    p.add_argument("path", help="a *.mrec directory")
    p.add_argument("--dry-run", action="store_true", help="report, change nothing")
    p.set_defaults(func=_run)
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mrec.repair", description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except MrecError as exc:
        print(f"mrec repair: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
