"""The force-field section in a store: written and read as a frame-shaped group whose attributes
are the document (``typed_meta=False``) and whose blocks are the style tables."""
from __future__ import annotations

from typing import Any

from ..frame_group import read_frame_group, write_frame_group
from .model import ForceField
from .vocabulary import SECTION

__all__ = ["write_forcefield", "read_forcefield"]


def write_forcefield(store, ff: Any, *, path: str = SECTION, compression=None) -> list[str]:
    """Write ``ff`` (a :class:`ForceField` or what :meth:`ForceField.from_any` takes) at ``path``."""
    ff = ForceField.from_any(ff)
    return write_frame_group(store, path, ff.tables, compression=compression, attributes=ff.document())


def read_forcefield(store, path: str = SECTION) -> tuple[ForceField, list[str]]:
    """(the force field at ``path``, keys not consumed); every rule checked, refusals name the group."""
    where = store.describe(path)
    g = read_frame_group(store, path, typed_meta=False, cell=False)
    return ForceField.from_document(g.attributes, g.frame, where), g.unknown
