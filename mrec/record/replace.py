"""Putting a whole record directory under its name: create, and replace recoverably.

A record ``<dir>/<name>`` is built under a *build* name, fsynced, then moved
under its name.  The names, all in ``<dir>``:

* ``.mrec-tmp-<name>.<8 hex>`` — a build in progress; its builder holds a
  ``flock`` on the directory while building, so a build whose lock nobody holds
  is abandoned (its process died) and is removed by the next write of ``<name>``;
* ``.mrec-tmp-new-<name>`` — a complete, fsynced replacement: **the commit point
  of an overwrite** is its rename to this name and the ``fsync`` of ``<dir>``;
* ``.mrec-tmp-old-<name>`` — the replaced record, until removed.

An overwrite runs: build, fsync the tree; rename build -> new, fsync ``<dir>``
(committed); rename ``<name>`` -> old; rename new -> ``<name>``; fsync ``<dir>``;
remove old; fsync ``<dir>``.  At every instant (process crash) and in every
power-loss state (all the renames are in one directory, so they survive as a
prefix) ``<name>`` holds the complete old or the complete new record, or it is
absent and the new one sits complete under the ``new`` name.  Recovery
(:func:`recover`) is deterministic: **a committed new record always wins** —
it is moved under ``<name>`` (the old one, wherever it is, removed); an old
record without a new one is removed when ``<name>`` exists and put back under
``<name>`` when it does not.  Recovery runs on the next :func:`write_record`
of the name, :func:`read_record`, ``TrajectoryWriter.create`` / ``open`` and
``mrec repair`` of it.

Writers and recovery of one ``<dir>`` serialise the renames with a ``flock`` on
``<dir>`` (held for the renames only, never while a record is built), so a
reader's recovery never races a writer's swap.
"""
from __future__ import annotations

import os
import re
import secrets

from ..errors import StoreError
from ..fs import remove_tree
from ..fs.posix import TEMP_MARK
from .lock import _locker


def names(final: str) -> tuple[str, str]:
    """(new, old): the well-known sibling names of an overwrite of ``final``."""
    parent, name = os.path.split(final)
    return (os.path.join(parent, f"{TEMP_MARK}new-{name}"), os.path.join(parent, f"{TEMP_MARK}old-{name}"))


def build_name(final: str) -> str:
    parent, name = os.path.split(final)
    return os.path.join(parent, f"{TEMP_MARK}{name}.{secrets.token_hex(4)}")


def _present(fs, path: str) -> bool:
    is_link = getattr(fs, "is_link", None)
    return fs.exists(path) or bool(is_link and is_link(path))


def discard(fs, path: str) -> None:
    """Remove a file, a link (never what it points at) or a directory tree."""
    if fs.is_link(path) or not fs.is_dir(path):
        fs.remove(path)
    else:
        remove_tree(fs, path)


class DirLock:
    """The ``flock`` on a record's parent directory that serialises renames (a context manager)."""

    def __init__(self, fs, parent: str):
        self.fs, self.parent = fs, parent
        self.held = None

    def __enter__(self):
        self.held = _locker(self.fs)(self.parent or ".", directory=True, blocking=True)
        return self

    def __exit__(self, *exc):
        if self.held is not None:
            self.held.release()
            self.held = None


def _recover_locked(fs, final: str) -> str | None:
    parent = os.path.dirname(final)
    new, old = names(final)
    if fs.is_dir(new) and not fs.is_link(new):            # committed: roll forward
        if _present(fs, final):
            if _present(fs, old):
                discard(fs, old)
            fs.rename(final, old)
        fs.rename(new, final)
        fs.fsync_dir(parent)
        if _present(fs, old):
            discard(fs, old)
            fs.fsync_dir(parent)
        return "rolled forward"
    if _present(fs, new):                                 # not a directory: never ours to promote
        discard(fs, new)
        fs.fsync_dir(parent)
    if _present(fs, old):
        if _present(fs, final):                           # the replace finished but for the removal
            discard(fs, old)
            fs.fsync_dir(parent)
            return "removed the replaced record"
        fs.rename(old, final)                             # no new record: roll back
        fs.fsync_dir(parent)
        return "rolled back"
    return None


def pending(fs, final: str) -> bool:
    """Whether an interrupted overwrite of ``final`` left a sibling to recover from (two stats)."""
    return any(_present(fs, p) for p in names(final))


def recover(fs, final: str) -> str | None:
    """Finish or undo an interrupted overwrite of ``final`` (see the module doc); what was done."""
    if not pending(fs, final):
        return None
    try:
        with DirLock(fs, os.path.dirname(final)):
            return _recover_locked(fs, final)
    except OSError as exc:
        raise StoreError(f"an interrupted overwrite left {', '.join(p for p in names(final) if _present(fs, p))}; "
                         f"recovering it failed: {exc}", path=final) from None


def _abandoned_builds(fs, final: str) -> None:
    """Remove builds of ``final`` whose builder died (nobody holds their lock). Parent lock held."""
    parent, name = os.path.split(final)
    pattern = re.compile(re.escape(f"{TEMP_MARK}{name}.") + r"[0-9a-f]{8}\Z")
    lock = _locker(fs)
    for entry in fs.list_dir(parent or "."):
        path = os.path.join(parent, entry)
        if not pattern.match(entry) or fs.is_link(path) or not fs.is_dir(path):
            continue
        try:
            held = lock(path, directory=True)
        except OSError:
            continue
        if held is None:
            continue                                      # a live build
        try:
            remove_tree(fs, path)
        finally:
            held.release()


class Build:
    """A record directory being built under a build name, locked by this process."""

    def __init__(self, fs, final: str):
        self.fs, self.final = fs, final
        self.parent = os.path.dirname(final)
        self.path = build_name(final)
        self.held = None

    def start(self) -> str:
        with DirLock(self.fs, self.parent):
            _recover_locked(self.fs, self.final)
            _abandoned_builds(self.fs, self.final)
            self.fs.makedirs(self.path)
            self.held = _locker(self.fs)(self.path, directory=True)
        return self.path

    def commit(self, *, overwrite: bool, refuse_exists) -> None:
        """Move the complete, fsynced build under its name (replacing an existing record if
        ``overwrite``; else ``refuse_exists()`` is raised when the name is taken meanwhile)."""
        fs, final, parent = self.fs, self.final, self.parent
        new, old = names(final)
        with DirLock(fs, parent):
            _recover_locked(fs, final)
            if not _present(fs, final):
                fs.rename(self.path, final)
                fs.fsync_dir(parent)
            elif not overwrite:
                raise refuse_exists()
            else:
                fs.rename(self.path, new)
                fs.fsync_dir(parent)                      # committed: recovery rolls forward from here
                fs.rename(final, old)
                fs.rename(new, final)
                fs.fsync_dir(parent)
                discard(fs, old)
                fs.fsync_dir(parent)
        self.release()

    def abort(self) -> None:
        try:
            if _present(self.fs, self.path):
                discard(self.fs, self.path)
        finally:
            self.release()

    def release(self) -> None:
        if self.held is not None:
            self.held.release()
            self.held = None
