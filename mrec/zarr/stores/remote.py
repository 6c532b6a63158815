"""Stores over a URL: a ``ZipStore`` or a read-only ``DirectoryStore`` on a :class:`~mrec.fs.remote.RemoteFileSystem`.

The file system (layer 1) knows bytes and listings; which store a URL is, and the one request that
holds a packed record's metadata, are decided here (layer 2).
"""
from __future__ import annotations

from ...errors import StoreError
from ...fs.remote import RemoteFileSystem


def open_remote_store(url: str, storage_options: dict | None = None):
    """A read-only store for a record at ``url``: a ``*.zip`` URL is a packed record, anything else an
    uploaded ``*.mrec`` directory (its tree listed once)."""
    from .directory import DirectoryStore
    from .zip_read import ZipStore
    url = url.rstrip("/")
    fs = RemoteFileSystem(url, storage_options)
    if url.endswith(".zip"):
        try:
            store = ZipStore(url, fs=fs)
        except FileNotFoundError:
            raise StoreError("no such record at this URL", path=url) from None
        _prefetch_metadata(store, fs)
        # the local headers the open already holds (the zarr.json run, the archive's tail) are checked
        # now; the others before an entry's first byte is used (ZipStore, issue 27)
        store.check_local_headers(held=lambda offset, end: fs.holds(store.root, offset, end))
        return store
    fs._listed = True
    if fs._kind("zarr.json") != "file":
        raise StoreError("no such record at this URL (no zarr.json listed under it; a packed record's URL "
                         "ends in .zip)", path=url)
    return DirectoryStore(url, fs=fs, readonly=True)


def _prefetch_metadata(store, fs: RemoteFileSystem) -> None:
    """One request for the leading run of ``zarr.json`` entries (mrec pack puts every one first), so
    the metadata a reader opens with is already held."""
    entries = sorted(store.entries, key=lambda e: e.header_offset)
    if not entries or not entries[0].name.rsplit("/", 1)[-1] == "zarr.json":
        return
    end = entries[0].header_offset
    for e in entries:
        if e.name.rsplit("/", 1)[-1] != "zarr.json":
            end = e.header_offset
            break
        end = e.limit
    fs.prefetch(store.root, entries[0].header_offset, end)
