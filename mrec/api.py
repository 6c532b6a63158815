"""The public surface re-exported by ``import mrec``."""
from .record.sections.forcefield import ForceField
from .record.sections.metrics import Metrics, MetricSeries
from .record.model.box import Box
from .record.model.frame import Frame
from .record.sections.nodes import Group
from .record.sections.observables import Observable
from .record.whole import (Record, read_frame, read_group, read_record, sections, write_frame, write_record,
                           write_section)
from .record.model.declarations import ABSENT
from .record.model.schema import SequenceSchema
from .record.trajectory.reader import TrajectoryReader
from .record.trajectory.writer import TrajectoryWriter
from .archive.pack import pack, unpack

__all__ = ["Box", "Frame", "SequenceSchema", "ABSENT", "TrajectoryReader", "TrajectoryWriter", "pack", "unpack",
           "Record", "write_record", "read_record", "read_frame", "sections", "Observable", "Metrics",
           "MetricSeries", "ForceField", "Group", "write_frame", "write_section", "read_group"]
