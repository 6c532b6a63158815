"""What the MD surfaces choose for the user: right-sized records (issue 28, part 1).

``mrec convert``, the MDAnalysis writer and the ASE writer build closed records whose length they
know, so they choose what the chapter's reference writer leaves to its knobs:

* **compression** -- exact float columns (positions, velocities, forces of DCD / TRR / LAMMPS / ASE
  sources, and the topology's masses and charges) are byte-shuffled then zstd-compressed
  (``shuffle+zstd:5``; ``shuffle+zstd:19`` under the compact profile, its own level).  Values are
  stored exactly: the codecs are lossless and of the must-decode set.  A source with a known
  precision (XTC) declares it on ``x y z`` (shuffle + zstd, the chapter's precision pipeline);
* **the size hint** -- ``expected_frames`` is the number of frames to be written, so the chunks,
  the shard indexes and the dense arrays are sized for them (a 3-frame record has no 64 KiB
  indexes);
* **compact documents** -- the ``zarr.json`` documents of the finished record are rewritten
  without indentation before it is moved or packed into place (the same JSON).

``compression=None`` or ``"none"`` stores floats uncompressed (the reference writer's default);
any other value is the writer's knob as given.
"""
from __future__ import annotations

__all__ = ["AUTO", "MD_COMPRESSION", "COMPACT_COMPRESSION", "md_compression", "frames_hint", "finish_record"]

#: the default of the MD surfaces' ``compression``: they choose
AUTO = "auto"
#: what they choose under the reference profile, and under the compact one
MD_COMPRESSION = "shuffle+zstd:5"
COMPACT_COMPRESSION = "shuffle+zstd:19"


def md_compression(compression, profile: str = "reference"):
    """The writer's ``compression`` for an MD surface given ``compression`` (``"auto"``: choose)."""
    if isinstance(compression, str) and compression == AUTO:
        return COMPACT_COMPRESSION if profile == "compact" else MD_COMPRESSION
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
    """Compact the documents of the complete record at ``live`` (a :class:`~mrec.pack.NewRecord`'s
    path), then move or pack it into place."""
    from ..pack import ARCHIVE_SUFFIX
    from ..repack import compact_documents
    compact_documents(live, fsync=not target.out.endswith(ARCHIVE_SUFFIX))
    target.finish()
