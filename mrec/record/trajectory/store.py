"""Which store reads a record: a ``*.mrec`` directory, a ``*.mrec.zip`` archive, or either at a URL.

:func:`open_store` is how every reader opens a record (:class:`~mrec.record.trajectory.reader.TrajectoryReader`,
:func:`~mrec.record.whole.read.read_record`, the validator, repack, ``mrec.dask``): the directory store, the
zip store (random access) or, for a URL, a read-only store over :mod:`mrec.fs.remote`.
"""
from __future__ import annotations

import os

from ...errors import StoreError
from ...zarr.stores.directory import DirectoryStore


def open_store(path, *, fs=None, readonly=True, storage_options=None, keep_open=False):
    """A store for a ``*.mrec`` directory or a ``*.mrec.zip`` archive, local or at a URL.

    A URL (``s3://``, ``http(s)://``, anything fsspec knows; ``storage_options`` go to fsspec, or
    JSON in ``MREC_STORAGE_OPTIONS``, narrowed to the URL's protocol: ``fs.urls.options_for``)
    opens read-only through :mod:`mrec.fs.remote`: a URL ending in ``.zip`` is a packed record,
    any other an uploaded directory.  ``keep_open``: a local store
    read through descriptors kept open until its ``close()`` (a reader's snapshot, KeptFiles).
    """
    from ...fs.urls import is_url, resolve_options
    from ...zarr.stores.remote import open_remote_store
    if is_url(path):
        if not readonly:
            from ...fs.urls import refuse_remote_write
            raise refuse_remote_write(path, "open for writing")
        return open_remote_store(path, resolve_options(path, storage_options))
    p = os.fspath(path)
    if os.path.isdir(p):
        return DirectoryStore(p, fs=fs, readonly=readonly, keep_open=keep_open)
    if os.path.isfile(p):
        from ...zarr.stores.zip_read import ZipStore
        return ZipStore(p, keep_open=keep_open, **({"fs": fs} if fs is not None else {}))
    raise StoreError("no such record (neither a *.mrec directory nor a *.mrec.zip file)", path=p)
