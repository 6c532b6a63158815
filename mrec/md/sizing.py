"""What the MD surfaces choose for the user: right-sized records (issue 28, part 1).

``mrec convert``, the MDAnalysis writer and the ASE writer build closed records whose length they
know, so they choose what the chapter's reference writer leaves to its knobs:

* **compression** -- exact float columns (positions, velocities, forces of DCD / TRR / LAMMPS / ASE
  sources, and the topology's masses and charges) and integer columns (ids, residue numbers, bond
  indices) are byte-shuffled then zstd-compressed (``shuffle+zstd:5``; ``shuffle+zstd:19`` under
  the compact profile, its own level), except in inner chunks under 512 bytes (a tiny record),
  which keep the reference codecs: a compressor gains nothing there and its description costs
  bytes in every ``zarr.json``.  Values are stored exactly: the codecs are lossless and of the
  must-decode set.  A source with a known precision (XTC) declares it on ``x y z`` (shuffle + zstd,
  the chapter's precision pipeline);
* **the size hint** -- ``expected_frames`` is the number of frames to be written, so the chunks,
  the shard indexes and the dense arrays are sized for them (a 3-frame record has no 64 KiB
  indexes);
* **compact documents** -- the ``zarr.json`` documents of the finished record are rewritten
  without indentation, without an empty ``attributes`` and with the default chunk key encoding's
  configuration left to its default (both optional in Zarr V3: the same metadata) before it is
  moved or packed into place.

``compression=None`` or ``"none"`` stores floats uncompressed (the reference writer's default);
any other value is the writer's knob as given.
"""
from __future__ import annotations

__all__ = ["AUTO", "MD_COMPRESSION", "COMPACT_COMPRESSION", "md_compression", "frames_hint", "finish_record",
           "compact_unsynced"]

#: the default of the MD surfaces' ``compression``: they choose
AUTO = "auto"
#: what they choose under the reference profile, and under the compact one
MD_COMPRESSION = "shuffle+zstd:5"
COMPACT_COMPRESSION = "shuffle+zstd:19"
#: an inner chunk smaller than this keeps the reference codecs (floats uncompressed)
MIN_CHUNK_BYTES = 512


def md_compression(compression, profile: str = "reference"):
    """The writer's ``compression`` for an MD surface given ``compression`` (``"auto"``: choose)."""
    from dataclasses import replace
    from ..record.extents import Compression
    if isinstance(compression, str) and compression == AUTO:
        chosen = Compression.parse(COMPACT_COMPRESSION if profile == "compact" else MD_COMPRESSION)
        return replace(chosen, min_chunk_bytes=MIN_CHUNK_BYTES)
    if isinstance(compression, str) and compression == "none":
        return None
    return compression


def frames_hint(n) -> int | None:
    """``expected_frames`` for a run of ``n`` frames (None when unknown or empty)."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def finish_record(target, live: str) -> None:
    """Compact the documents of the complete record at ``live`` (a :class:`~mrec.archive.pack.NewRecord`'s
    path), then move or pack it into place."""
    from ..archive.pack import ARCHIVE_SUFFIX
    from ..archive.repack import compact_documents
    compact_documents(live, fsync=not target.out.endswith(ARCHIVE_SUFFIX), minimal=True)
    target.finish()


def compact_unsynced(directory: str) -> None:
    """Rewrite the ``zarr.json`` documents under ``directory`` compact, without fsync: what
    :func:`finish_record` does to the whole record, done early on a group whose writer fsyncs it next
    (:meth:`~mrec.record.whole.system_last.PendingSystem.write`), so its documents are fsynced once,
    compact, and :func:`finish_record` finds nothing left to rewrite there."""
    from ..archive.repack import compact_documents
    compact_documents(directory, fsync=False, minimal=True)
