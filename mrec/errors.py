"""One error family for everything mrec refuses or cannot read.

Every error mrec raises on purpose is an :class:`MrecError`.  Refusals of
input that breaks a format rule are :class:`RefusalError` and carry a
``kind`` drawn from the refusal vocabulary of the specification
(mrec-notes §8.2) plus a few of mrec's own (``unsupported_codec``,
``bad_metadata`` ...).  Errors always name *where* (``path``) and *what*.
"""
from __future__ import annotations


class MrecError(Exception):
    """Base of every error mrec raises deliberately."""

    kind: str = "error"

    def __init__(self, message: str, *, path: str | None = None, kind: str | None = None):
        if kind is not None:
            self.kind = kind
        self.path = path
        self.detail = message
        text = f"{path}: {message}" if path else message
        super().__init__(text)


class RefusalError(MrecError, ValueError):
    """Input (a frame, a declaration, a store) breaks a rule of the format."""

    kind = "refused"


class MetadataError(RefusalError):
    """A ``zarr.json`` document is malformed or uses something unsupported."""

    kind = "bad_metadata"


class UnsupportedError(RefusalError):
    """A valid Zarr feature outside what the mrec format admits (codec, dtype, grid)."""

    kind = "unsupported"


class CorruptionError(MrecError):
    """Stored bytes fail a check (checksum, truncated shard, impossible index)."""

    kind = "corrupt"


class StandInWarning(UserWarning):
    """Rows were read from an older copy of an inner chunk whose newest copy lies past the end of
    its shard file, and the last of them is the fill value: a power loss before the newest copy
    was written (the rows are as committed) or a file cut there (the rows are padding).  The two
    leave the same bytes (docs/reliability.md, "Shard-index trust"); ``mrec validate --deep``
    reports it as RT-6."""


class RangesIgnoredWarning(UserWarning):
    """A server ignores ``Range`` (``python -m http.server`` does): the file named is read whole, once,
    bounded by ``storage_options`` ``whole_read_limit`` (docs/user-guide.md, "Records in the cloud").
    Given once per file an open record reads."""


class StoreError(MrecError):
    """A key or file is missing or cannot be read or written."""

    kind = "store"


class WriteError(StoreError):
    """A write, replace or fsync failed (ENOSPC, EIO ...): ``errno`` is the OS error number and the
    :class:`OSError` is chained as ``__cause__``.  A trajectory writer that raised one refuses every
    further call with one; reopening the store re-establishes its state from what is on disk."""

    kind = "write_failed"

    def __init__(self, message: str, *, path: str | None = None, kind: str | None = None,
                 errno: int | None = None):
        super().__init__(message, path=path, kind=kind)
        self.errno = errno


class ZipFormatError(RefusalError):
    """A ``*.mrec.zip`` archive breaks a packing rule or is not a readable zip."""

    kind = "bad_zip"


#: errno values of creating a path that the caller's input causes (the machine's own failures,
#: ENOSPC, EIO, stay OSError)
_PATH_ERRNOS = {20: "a component of the path is a regular file, not a directory",        # ENOTDIR
                17: "a file of that name exists where a directory is needed",           # EEXIST
                21: "a directory exists where a file is needed",                        # EISDIR
                36: "a name in the path is longer than the file system allows",         # ENAMETOOLONG
                40: "the path has a symbolic link loop"}                                # ELOOP


def path_refusal(exc: BaseException, path: str) -> BaseException:
    """A :class:`StoreError` naming ``path`` for a path the file system cannot create as asked (a
    parent that is a regular file, a name too long, an embedded NUL); any other exception as it is."""
    import errno
    if isinstance(exc, ValueError) and not isinstance(exc, MrecError):      # os.* on an embedded NUL
        return StoreError(f"cannot create it: {exc}", path=path)
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS and errno.errorcode.get(exc.errno):
        return StoreError(f"cannot create it: {_PATH_ERRNOS[exc.errno]} ({exc.strerror})", path=path)
    return exc


__all__ = [
    "StandInWarning",
    "RangesIgnoredWarning",
    "MrecError",
    "RefusalError",
    "MetadataError",
    "UnsupportedError",
    "CorruptionError",
    "StoreError",
    "WriteError",
    "ZipFormatError",
    "path_refusal",
]
