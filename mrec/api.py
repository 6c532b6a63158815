"""The public surface re-exported by ``import mrec``."""
from .record.model import Box, Frame
from .record.schema import ABSENT, SequenceSchema
from .record.trajectory_read import TrajectoryReader
from .record.trajectory_write import TrajectoryWriter
from .pack import pack, unpack

__all__ = ["Box", "Frame", "SequenceSchema", "ABSENT", "TrajectoryReader", "TrajectoryWriter", "pack", "unpack"]
