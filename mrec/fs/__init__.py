"""Layer 1: POSIX I/O — the only code in mrec that touches files.

Everything above this layer reaches the file system through a
:class:`FileSystem` object, so tests can swap in :class:`RecordingFileSystem`
(logs every operation in order) or a fault-injecting one.
"""
from .base import FileSystem, Op, refuse_link, remove_tree
from .posix import PosixFileSystem
from .recording import RecordingFileSystem

DEFAULT_FS = PosixFileSystem()

__all__ = ["FileSystem", "Op", "PosixFileSystem", "RecordingFileSystem", "DEFAULT_FS", "refuse_link", "remove_tree"]
