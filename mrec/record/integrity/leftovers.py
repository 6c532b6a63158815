"""What a writer checks in a record before it writes: links to refuse, leftovers to clean.

* Symbolic links.  A record holds files, not links: positional writes and
  truncates follow a link, so a writer (or ``mrec repair``) appending to a
  record holding one would change a file outside the record.  Writers, repair
  and pack refuse such a record (kind ``bad_layout``, naming the link);
  ``mrec validate`` reports it.
* Temporary files of an atomic replace (``.mrec-tmp-<name>.<8 hex>``, the
  names :meth:`mrec.fs.posix.PosixFileSystem.replace` gives them) that a crash
  between the temp file's creation and its rename left behind.  Nothing ever
  reads them; they only make ``pack`` refuse.  Whoever holds the store's
  writer lock (so no replace of this store is in flight) removes exactly those
  names — regular files only, never a link or a directory, never any other
  ``.mrec-tmp-`` name.
"""
from __future__ import annotations

import os

from ...errors import RefusalError
from ...fs.posix import REPLACE_TEMP


def scan(fs, root: str) -> tuple[list[str], list[str]]:
    """(links, replace temp files) under the directory ``root``, as ``/`` keys, never following a link."""
    links: list[str] = []
    temps: list[str] = []

    def walk(directory: str, prefix: str) -> None:
        for name in fs.list_dir(directory):
            child = os.path.join(directory, name)
            if fs.is_link(child):
                links.append(prefix + name)
            elif fs.is_dir(child):
                walk(child, f"{prefix}{name}/")
            elif REPLACE_TEMP.match(name):
                temps.append(prefix + name)

    walk(root, "")
    return sorted(links), sorted(temps)


def link_refusal(root: str, links: list[str], action: str) -> RefusalError:
    shown = ", ".join(links[:5]) + (" ..." if len(links) > 5 else "")
    return RefusalError(f"a record holds files, not symbolic links: {action} through {shown} would change "
                        "a file outside the record (replace the link by the file)",
                        path=os.path.join(root, *links[0].split("/")), kind="bad_layout")


def prepare_for_writing(fs, root: str, action: str = "writing") -> list[str]:
    """Refuse links under ``root``; remove the replace temp files. Call with the writer lock held.

    Returns the keys of the temp files removed.
    """
    links, temps = scan(fs, root)
    if links:
        raise link_refusal(root, links, action)
    for key in temps:
        fs.remove(os.path.join(root, *key.split("/")))
    for d in sorted({os.path.dirname(k) for k in temps}):
        fs.fsync_dir(os.path.join(root, *d.split("/")) if d else root)
    return temps
