"""A whole record, and the doors into any store.

* ``record`` -- :class:`Record` (a record in memory), the checks across its sections and
  :func:`write_record` / :meth:`Record.write` (a new record directory);
* ``read`` -- :func:`read_record`, :func:`read_frame`, :func:`read_group`, :func:`sections`;
* ``add`` -- :func:`write_frame` (a frame-shaped group at any path of a store) and
  :func:`write_section` (one root section added to a record directory);
* ``build`` -- new stores and groups built under a temporary name, fsynced and moved into place.
"""
from .add import write_frame, write_section
from .read import read_frame, read_group, read_record, sections
from .record import (KNOWN_SECTIONS, PIECE, SUBSTANTIVE_SECTIONS, Record, check_system_alignment,
                     write_record)

__all__ = ["Record", "write_record", "read_record", "read_frame", "sections", "check_system_alignment",
           "KNOWN_SECTIONS", "SUBSTANTIVE_SECTIONS", "PIECE", "write_frame", "write_section", "read_group"]
