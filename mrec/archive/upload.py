"""Layer 4: ``pack(run.mrec, out="s3://bucket/run.mrec.zip")`` — stream a closed record up as its archive.

The archive is the one :func:`mrec.archive.pack.pack` writes (same entry order: every ``zarr.json`` first; same
deterministic headers), produced front to back into a file object of the URL's fsspec file system — for
S3 a multipart upload, parts of ``block_size`` bytes — with no temporary file anywhere.  A stored zip
entry's local header carries its CRC-32, so each file larger than one piece is read twice (its CRC
first, then its bytes); a local record is cheap to read twice, an upload is not cheap to patch.

The upload is then reopened through :mod:`mrec.fs.remote` and its central directory compared with the
plan (entries, sizes); only then is the source removed (unless ``keep``).  A failure aborts the upload
(``discard``: s3fs aborts the multipart upload) and leaves the source as it was.
"""
from __future__ import annotations

import os
import zlib

from ..errors import CorruptionError, RefusalError, StoreError
from ..fs import DEFAULT_FS, remove_tree
from ..zarr.stores.zip_format import PIECE_SIZE
from ..zarr.stores.zip_write import ZipWriter, local_header


class _Sink:
    """The one FileSystem method ZipWriter needs, front to back into a writable file object."""

    def __init__(self, fobj, url: str):
        self.f = fobj
        self.url = url
        self.pos = 0

    def exists(self, path) -> bool:
        return False

    def write_at(self, path, offset, data) -> None:
        if offset != self.pos:
            raise StoreError(f"an upload is written front to back (write at {offset}, at {self.pos})", path=self.url)
        if data:
            self.f.write(data)
            self.pos += len(data)


class _StreamingZipWriter(ZipWriter):
    """ZipWriter whose large entries get their CRC-32 before their header (nothing patched afterwards)."""

    def add_file_streaming(self, name, src_path, src_fs=None, *, on_bytes=None):
        src = os.fspath(src_path)
        src_fs = src_fs if src_fs is not None else DEFAULT_FS
        size = src_fs.size(src)
        if size <= self.piece_size:
            return super().add_file_streaming(name, src, src_fs, on_bytes=on_bytes)
        crc = 0
        for done in range(0, size, self.piece_size):
            crc = zlib.crc32(self._read_exact(src_fs, src, done, min(self.piece_size, size - done)), crc)
        self._claim(name)
        self._flush()
        entry = self._entry(name, crc, size, self.position)
        self._emit(local_header(name, crc, size, sizes64=entry.sizes64, version=entry.version))
        self._flush()
        check = 0
        for done in range(0, size, self.piece_size):
            piece = self._read_exact(src_fs, src, done, min(self.piece_size, size - done))
            check = zlib.crc32(piece, check)
            self.fs.write_at(self.path, self._buf_start, piece)
            self._buf_start += len(piece)
            if on_bytes is not None:
                on_bytes(len(piece))
        if check != crc:
            raise StoreError("file changed while being packed (its CRC-32 differs between two reads)", path=src)
        self.entries.append(entry)
        return entry


def pack_to_url(plan, url: str, *, storage_options=None, keep: bool = False, meter=None,
                zip64_threshold: int = 0xFFFFFFFF, fs=None) -> str:
    """Stream the planned archive to ``url``; verify it there; remove the source unless ``keep``."""
    from ..fs.remote import RemoteFileSystem
    from ..fs.urls import OWN_OPTIONS, options_for, require
    fsspec = require("fsspec", "remote")
    fs = fs if fs is not None else DEFAULT_FS
    if not url.endswith(".zip"):
        raise RefusalError("a packed record's URL ends in .mrec.zip", path=url, kind="bad_target")
    storage_options = options_for(url, storage_options)
    try:
        rfs, _ = fsspec.core.url_to_fs(url, **{k: v for k, v in storage_options.items() if k not in OWN_OPTIONS})
        exists = rfs.exists(url)
    except Exception as exc:      # noqa: BLE001  (any transport failure is a StoreError)
        raise StoreError(f"cannot reach the target: {type(exc).__name__}: {exc}", path=url) from None
    if exists:
        raise RefusalError("archive already exists at this URL", path=url, kind="exists")
    fobj = rfs.open(url, "wb")
    writer = _StreamingZipWriter(url, _Sink(fobj, url), zip64_threshold, piece_size=PIECE_SIZE)
    try:
        for key, _size in plan.entries:
            writer.add_file_streaming(key, os.path.join(plan.root, *key.split("/")), fs,
                                      on_bytes=meter.add if meter is not None else None)
        writer.close()
        fobj.close()                                    # completes the (multipart) upload
    except BaseException as exc:
        try:
            fobj.discard()                              # s3fs: abort the multipart upload
        except Exception:                               # noqa: BLE001
            pass
        if isinstance(exc, Exception) and not isinstance(exc, (StoreError, RefusalError)):
            raise StoreError(f"upload failed: {type(exc).__name__}: {exc}", path=url) from None
        raise
    from ..zarr.stores.zip_read import ZipStore
    store = ZipStore(url, fs=RemoteFileSystem(url, storage_options))
    got = [(e.name, e.size) for e in store.entries]
    if got != list(plan.entries):
        raise CorruptionError("the uploaded archive does not match the record", path=url)
    if not keep:
        remove_tree(fs, plan.root)
        fs.fsync_dir(os.path.dirname(os.path.abspath(plan.root)))
    return url


__all__ = ["pack_to_url"]
