"""The public surface re-exported by ``import mrec``."""
from .record.forcefield import ForceField
from .record.metrics import Metrics, MetricSeries
from .record.model import Box, Frame
from .record.nodes import Group
from .record.observables import Observable
from .record.record import (Record, read_frame, read_group, read_record, sections, write_frame, write_record,
                            write_section)
from .record.schema import ABSENT, SequenceSchema
from .record.trajectory_read import TrajectoryReader
from .record.trajectory_write import TrajectoryWriter
from .pack import pack, unpack

__all__ = ["Box", "Frame", "SequenceSchema", "ABSENT", "TrajectoryReader", "TrajectoryWriter", "pack", "unpack",
           "Record", "write_record", "read_record", "read_frame", "sections", "Observable", "Metrics",
           "MetricSeries", "ForceField", "Group", "write_frame", "write_section", "read_group"]
