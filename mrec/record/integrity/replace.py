"""Putting a directory under its name: create, and replace recoverably.

The directory is a whole record ``<dir>/<name>`` or a group at any depth inside
one (``write_section``, ``write_frame(group=...)``: ``<dir>`` is then the parent
group's directory); one protocol and one recovery serve both.  It is built
under a *build* name, fsynced, then moved under its name.  The names, all in
``<dir>``:

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

Inside a record, :func:`recover` (and :func:`recover_within`) also walks the
record's groups -- never an array's chunks -- and applies the same rule to
every group an interrupted replace left ``new`` / ``old`` siblings of, in
each group's own directory under its lock; writers, repair and pack also
remove builds whose builder died (readers leave them: nothing reads them).
So every entry point that reads or writes the record (``read_record``,
``read_frame``, ``read_group``, ``sections``, ``write_section`` /
``write_frame``, the trajectory writer, ``mrec repair``, ``mrec pack``,
``mrec repack``) finds each group complete, old or new (a read walks only
what it reads).  :func:`interrupted` lists the leftovers without changing
anything (``mrec validate``, ``mrec repair --dry-run``).

Writers and recovery of one ``<dir>`` serialise the renames with a ``flock`` on
``<dir>`` (held for the renames only, never while a record is built), so a
reader's recovery never races a writer's swap.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import stat

from ...errors import StoreError
from ...fs import refuse_link, remove_tree
from ...fs.posix import TEMP_MARK
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


def _ours(fs, path: str) -> bool:
    """A sibling an overwrite may have left: present and not a symbolic link (mrec never makes one
    under those names, so a link there is left alone: never removed, renamed or followed)."""
    return not fs.is_link(path) and fs.exists(path)


def discard(fs, path: str) -> None:
    """Remove a file, a link (never what it points at) or a directory tree."""
    if fs.is_link(path) or not fs.is_dir(path):
        fs.remove(path)
    else:
        remove_tree(fs, path)


#: real paths of the :class:`OwnedTemp` directories this process holds: their ``flock`` is the one a
#: :class:`DirLock` takes, held for the owner's life, so a DirLock of one here is already held
_OWNED: set[str] = set()


class DirLock:
    """The ``flock`` on a record's parent directory that serialises renames (a context manager)."""

    def __init__(self, fs, parent: str):
        self.fs, self.parent = fs, parent
        self.held = None

    def __enter__(self):
        if not (_OWNED and os.path.realpath(self.parent or ".") in _OWNED):
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
            if _ours(fs, old):
                discard(fs, old)
            if fs.is_link(old):                           # not ours to replace: the old record goes now
                discard(fs, final)
            else:
                fs.rename(final, old)
        fs.rename(new, final)
        fs.fsync_dir(parent)
        if _ours(fs, old):
            discard(fs, old)
            fs.fsync_dir(parent)
        return "rolled forward"
    if _ours(fs, new):                                    # not a directory: never ours to promote
        discard(fs, new)
        fs.fsync_dir(parent)
    if _ours(fs, old):
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
    return any(_ours(fs, p) for p in names(final))


def recover(fs, final: str, *, within: bool = True, builds: bool = True, node: str = "") -> str | None:
    """Finish or undo an interrupted overwrite of ``final`` (see the module doc) and, when ``final`` is
    a directory and ``within``, of every group inside it (:func:`recover_within`, ``builds`` and
    ``node`` passed on); what was done."""
    done = None
    if pending(fs, final):
        try:
            with DirLock(fs, os.path.dirname(final)):
                done = _recover_locked(fs, final)
        except OSError as exc:
            raise StoreError(f"an interrupted overwrite left {', '.join(p for p in names(final) if _present(fs, p))}"
                             f"; recovering it failed: {exc}", path=final) from None
    if within and fs.is_dir(final) and not fs.is_link(final):
        inner = recover_within(fs, final, builds=builds, node=node)
        if inner:
            done = "; ".join(([done] if done else []) + inner)
    return done


# -- groups inside a record ----------------------------------------------------------

_SIBLING = re.compile(re.escape(TEMP_MARK) + r"(new|old)-(.+)\Z", re.DOTALL)
_BUILD = re.compile(re.escape(TEMP_MARK) + r"(.+)\.[0-9a-f]{8}\Z", re.DOTALL)


def classify(fs, directory: str, entry: str, entries) -> tuple[str, str] | None:
    """What the ``.mrec-tmp-`` directory ``entry`` of ``directory`` (whose entries are ``entries``) is:

    * ``("replace", name)`` -- a ``new`` / ``old`` sibling of an interrupted replace of ``name``;
    * ``("build", name)`` -- a build of ``name`` (live while its builder holds its lock);
    * ``("unknown", entry)`` -- a name both could make (``.mrec-tmp-old-<x>.<8 hex>``, as the former
      rename-aside protocol named the group it moved away) without the partner a sibling always has
      (``<name>`` or the other sibling): recovery leaves it, ``mrec validate`` reports it, pack refuses it;

    None for anything else (a file, a link: an atomic replace's temp files are
    :mod:`mrec.record.integrity.leftovers`' business).
    """
    path = os.path.join(directory, entry)
    if not entry.startswith(TEMP_MARK) or fs.is_link(path) or not fs.is_dir(path):
        return None
    sib, build = _SIBLING.match(entry), _BUILD.match(entry)
    if sib:
        name = sib.group(2)
        other = f"{TEMP_MARK}{'old' if sib.group(1) == 'new' else 'new'}-{name}"
        if not build or name in entries or other in entries:
            return "replace", name
        return "unknown", entry
    if build:
        return "build", build.group(1)
    return "unknown", entry


def _is_array(fs, directory: str) -> bool:
    """Whether ``directory`` holds an array's ``zarr.json`` (its subdirectories are chunks, not nodes)."""
    try:
        doc = json.loads(fs.read(os.path.join(directory, "zarr.json")))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("node_type") == "array"


def _walk(fs, root: str, visit, node: str = "") -> None:
    """Call ``visit(directory, entries)`` for the directory of the group ``node`` of the record ``root``
    and every group directory under it (links never followed, ``.mrec-tmp-`` directories and arrays'
    chunk directories never entered), after calling it for each ancestor's directory (whose other
    children it does not enter); ``visit`` returns the entries to go on with (it may change the
    directory first)."""
    def listing(directory: str) -> list[str] | None:
        try:
            return fs.list_dir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def walk(directory: str) -> None:
        entries = listing(directory)
        if entries is None:
            return
        entries = visit(directory, entries)
        subdirs = [os.path.join(directory, e) for e in entries if e != "zarr.json" and not e.startswith(TEMP_MARK)]
        subdirs = [d for d in subdirs if fs.is_dir(d) and not fs.is_link(d)]
        if subdirs and "zarr.json" in entries and _is_array(fs, directory):
            return
        for d in subdirs:
            walk(d)

    directory = root
    for part in node.split("/") if node else ():
        entries = listing(directory)
        if entries is None:
            return
        visit(directory, entries)
        directory = os.path.join(directory, part)
        if fs.is_link(directory):
            return
    walk(directory)


def _key(root: str, directory: str, name: str) -> str:
    rel = os.path.relpath(directory, root).replace(os.sep, "/")
    return name if rel == "." else f"{rel}/{name}"


def interrupted(fs, root: str) -> list[tuple[str, str, str]]:
    """(what, group key, leftover key) of every leftover of an interrupted group replace inside the
    record directory ``root`` (``what`` as :func:`classify` says), changing nothing."""
    out: list[tuple[str, str, str]] = []

    def visit(directory: str, entries: list[str]) -> list[str]:
        for e in entries:
            got = classify(fs, directory, e, entries)
            if got is not None:
                out.append((got[0], _key(root, directory, got[1]), _key(root, directory, e)))
        return entries

    _walk(fs, root, visit)
    return sorted(out)


def recover_within(fs, root: str, *, builds: bool = True, node: str = "") -> list[str]:
    """Recover every group replace a crash interrupted inside the record directory ``root``: the
    module doc's rule for each group, in its directory under that directory's lock, outermost first
    (so a group put back is walked in turn); with ``builds``, builds whose builder died are removed
    too (readers leave them: they never read them).  With ``node`` (``a/b``), only what a read of
    that group depends on: its ancestors' directories and its own subtree.  What was done, one line
    a group."""
    done: list[str] = []

    def visit(directory: str, entries: list[str]) -> list[str]:
        found = [c for e in entries for c in [classify(fs, directory, e, entries)] if c is not None]
        finals = sorted({n for what, n in found if what == "replace" or (builds and what == "build")})
        if not finals:
            return entries
        try:
            with DirLock(fs, directory):
                for name in finals:
                    final = os.path.join(directory, name)
                    what = _recover_locked(fs, final)
                    if what:
                        done.append(f"{_key(root, directory, name)}: {what}")
                    if builds and _abandoned_builds(fs, final):
                        done.append(f"{_key(root, directory, name)}: removed an abandoned build")
        except OSError as exc:
            raise StoreError(f"an interrupted replace of a group left {', '.join(finals)} in {directory}; "
                             f"recovering it failed: {exc}", path=directory) from None
        return fs.list_dir(directory)

    _walk(fs, root, visit, node)
    return done


def _abandoned_builds(fs, final: str) -> int:
    """Remove builds of ``final`` whose builder died (nobody holds their lock). Parent lock held.
    Returns how many."""
    parent, name = os.path.split(final)
    pattern = re.compile(re.escape(f"{TEMP_MARK}{name}.") + r"[0-9a-f]{8}\Z")
    return len(remove_abandoned(fs, parent, pattern, directory=True))


def _regular(path: str) -> bool:
    """A regular file (not a directory, a FIFO, a device: opening those to lock them could block)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def remove_abandoned(fs, parent: str, pattern: re.Pattern, *, directory: bool) -> list[str]:
    """Remove the entries of ``parent`` that ``pattern`` names, are of the kind their maker makes (a
    directory, or a regular file; never a link, never the other kind) and whose maker died (nobody
    holds the ``flock`` it takes on them for its life); a directory's links are unlinked, never
    entered.  Call with ``parent``'s :class:`DirLock` held.  The names removed."""
    lock = _locker(fs)
    removed: list[str] = []
    for entry in fs.list_dir(parent or "."):
        path = os.path.join(parent, entry)
        if not pattern.match(entry) or fs.is_link(path) or not (fs.is_dir(path) if directory else _regular(path)):
            continue
        try:
            held = lock(path, directory=directory)
        except OSError:
            continue
        if held is None:
            continue                                      # its maker is alive
        try:
            discard(fs, path)
            removed.append(entry)
        finally:
            held.release(remove=False)
    return removed


# -- temporary siblings a run owns: pack, unpack, repack ------------------------------

def sibling_pattern(target: str, suffix: str = "") -> re.Pattern:
    """The names :class:`OwnedTemp` gives temporary siblings of ``target``: ``.<name>.mrec-tmp-<8 hex><suffix>``."""
    name = os.path.basename(target)
    return re.compile(re.escape(f".{name}{TEMP_MARK}") + r"[0-9a-f]{8}" + re.escape(suffix) + r"\Z", re.DOTALL)


def _sweep_locked(fs, target: str, directory: bool, suffix: str = "") -> list[str]:
    return remove_abandoned(fs, os.path.dirname(target), sibling_pattern(target, suffix), directory=directory)


def sweep_siblings(fs, target: str, *, directory: bool, suffix: str = "") -> list[str]:
    """Remove the temporary siblings of ``target`` (:class:`OwnedTemp`'s names, of that kind) whose
    maker died, under the parent's lock; the names removed (none where locks cannot be had)."""
    try:
        with DirLock(fs, os.path.dirname(target)):
            return _sweep_locked(fs, target, directory, suffix)
    except OSError:
        return []


class OwnedTemp:
    """A temporary sibling ``.<name>.mrec-tmp-<8 hex><suffix>`` of ``target`` (a directory, or a file)
    that this run makes and owns: under the parent's :class:`DirLock`, the siblings of that shape a
    killed run left (their maker's ``flock`` is free) are removed, then a fresh one is made and
    ``flock``-ed until :meth:`release`.  So the next run for the same target removes exactly what a
    killed one made -- never a link, never the other kind, never a live run's, never another name."""

    def __init__(self, fs, target: str, *, directory: bool, suffix: str = ""):
        self.fs, self.target, self.directory, self.suffix = fs, target, directory, suffix
        self.parent = os.path.dirname(target)
        self.path = ""
        self.removed: list[str] = []
        self.held = None

    def start(self, make=None):
        """Make the temporary (``make(path)``, default: a directory, or an empty file, made exclusively)
        and lock it; what ``make`` returned."""
        fs = self.fs
        if make is None:
            make = fs.makedirs if self.directory else fs.create_exclusive
        with DirLock(fs, self.parent):
            self.removed = _sweep_locked(fs, self.target, self.directory, self.suffix)
            path = ""
            while not path or _present(fs, path):
                path = os.path.join(self.parent, f".{os.path.basename(self.target)}{TEMP_MARK}"
                                                 f"{secrets.token_hex(4)}{self.suffix}")
            made = make(path)
            self.path = path
            self.held = self._lock(path)
        if self.held is not None and self.directory:
            _OWNED.add(os.path.realpath(path))
        return made

    def _lock(self, path: str):
        try:
            return _locker(self.fs)(path, directory=self.directory)
        except OSError:            # no lock to be had (a file system refusing them): owned, unmarked
            return None

    def discard(self) -> None:
        """Remove the temporary (if still there) and let it go."""
        try:
            if self.path and _present(self.fs, self.path):
                discard(self.fs, self.path)
        finally:
            self.release()

    def release(self) -> None:
        if self.held is not None:
            _OWNED.discard(os.path.realpath(self.path))
            self.held.release(remove=False)
            self.held = None


class Build:
    """A record directory being built under a build name, locked by this process (or, given ``path``,
    one built elsewhere by its caller -- inside an :class:`OwnedTemp` -- that only :meth:`commit` moves)."""

    def __init__(self, fs, final: str, path: str | None = None):
        self.fs, self.final = fs, final
        self.parent = os.path.dirname(final)
        self.path = path or build_name(final)
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
                for sibling in (new, old):                # a link there is not ours to replace
                    refuse_link(fs, sibling, "replace a record through")
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
