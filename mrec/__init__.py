"""mrec — independent Python reference engine for the mrec molecular record format.

A record is a Zarr V3 hierarchy (a live ``<stem>.mrec/`` directory, packed at
rest into ``<stem>.mrec.zip``).  mrec is written from scratch: numpy,
zstandard, crc32c and numcodecs are its only run-time dependencies.
"""
from .errors import (CorruptionError, MetadataError, MrecError, RefusalError, RangesIgnoredWarning,
                     StandInWarning, StoreError,
                     UnsupportedError, WriteError, ZipFormatError)

from .api import (ABSENT, Box, ForceField, Frame, Group, Metrics, MetricSeries, Observable, Record, SequenceSchema,
                  TrajectoryReader, TrajectoryWriter, pack, read_frame, read_group, read_record, sections, unpack,
                  write_frame, write_record, write_section)

from .version import __version__

__all__ = ["MrecError", "RefusalError", "MetadataError", "UnsupportedError", "CorruptionError",
           "StoreError", "WriteError", "ZipFormatError", "StandInWarning", "RangesIgnoredWarning",
           "__version__",
           "Box", "Frame", "SequenceSchema", "ABSENT", "TrajectoryReader", "TrajectoryWriter", "pack", "unpack",
           "Record", "write_record", "read_record", "read_frame", "sections", "Observable", "Metrics", "MetricSeries",
           "ForceField", "Group", "write_frame", "write_section", "read_group"]
