"""A read-only :class:`~mrec.fs.base.FileSystem` over a URL (``s3://``, ``http(s)://``, anything fsspec knows).

The chapter's scope (chunking-and-packing.md, "What the protocol guarantees"):
live append needs a POSIX-like store; "an object store (S3, GCS) has none of
these, so it holds closed records — written elsewhere, then uploaded, or
packed into *.mrec.zip — and is read, never appended to."  So this file
system reads and refuses every write.  It is not a second engine: the
:class:`~mrec.zarr.stores.directory.DirectoryStore` (an uploaded ``*.mrec/`` tree) and
the :class:`~mrec.zarr.stores.zip_read.ZipStore` (a ``*.mrec.zip``) run over it
unchanged, as they run over :class:`~mrec.fs.posix.PosixFileSystem`.

Requests.  Every byte comes from one ranged GET (fsspec ``cat_file`` with
``start``/``end``), counted in :attr:`RemoteFileSystem.requests`.  Since a
closed record does not change, what is fetched is kept (an LRU bounded by
``cache_bytes``) and sizes and listings are asked once:

* a read that starts where an earlier fetch of the same object ended (a
  forward walk: a sequential scan, the chunks after a shard index) fetches at
  least ``readahead`` bytes (1 MiB), so neighbouring chunks arrive together;
* any other read fetches its bytes, and at least 64 KiB (``MIN_FETCH``: the
  local header of a zip entry then brings the shard index after it; a random
  frame is one request per column chunk once its shard index is cached);
* :meth:`prefetch` fetches a range ahead (the opener of a packed record asks
  for the run of ``zarr.json`` entries the packer put first, so opening costs
  the size, the archive's tail and that one range: three requests);
* the directory form lists its whole tree once (one recursive listing), which
  then answers every ``size`` / ``is_dir`` / ``list_dir``.

A fetch that returns fewer or more bytes than the range asked for (a
truncated body) or fails (an HTTP error, a lost connection) raises
:class:`~mrec.errors.StoreError` naming the URL and the range; nothing of it is
returned, so no wrong byte reaches a decoder (which checks every chunk's
crc32c besides).

A server that ignores ``Range`` (issue 28: ``python -m http.server`` answers
200 and the whole file) has its answer read whole when the object's size
(asked first) is within ``storage_options`` ``whole_read_limit``
(:data:`WHOLE_READ_LIMIT`, bytes, or None for no limit): exactly that many
bytes, kept as one block (later reads of the file are answered from it), with
a :class:`~mrec.errors.RangesIgnoredWarning` once per file.  Past the limit it
is a ``StoreError`` naming the URL and the option, before the body is read.

Bounds (issue 27).  Over HTTP every body is read piece by piece
(:mod:`mrec.fs.remote_http`) and refused once it passes what was asked plus
:data:`BODY_MARGIN` (a whole object: its declared length); over S3 a body whose
declared length passes the bound is refused before it is read.  Every request
has a connect and a read timeout (:data:`CONNECT_TIMEOUT`,
:data:`READ_TIMEOUT`; ``storage_options`` ``connect_timeout`` /
``read_timeout``, seconds or None) and a timeout is a ``StoreError`` naming
the URL and the option.  In the directory form a key the listing names is
an object that exists: a 404 for it is a ``StoreError``, never "missing"
(which would read as the fill value).

fsspec (and s3fs for ``s3://``) is the ``remote`` extra: ``pip install
'mrec[remote]'``.  It is imported only when a URL is opened.  What a URL is, the refusal of writes
and the storage options (timeouts included) are :mod:`mrec.fs.urls`.
"""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict

from ..errors import MrecError, RangesIgnoredWarning, StoreError
from .remote_http import PIECE, BodyTooLong, HttpClient, RangeIgnored
from .urls import (fsspec_options, options_for, refuse_remote_write, request_failure, require, take_own_option,
                   take_timeouts)

MiB = 1024 * 1024
READAHEAD = 1 * MiB
MIN_FETCH = 64 * 1024    # no request for less: a zip entry's local header comes with its shard index
CACHE_BYTES = 64 * MiB
BODY_MARGIN = 64 * 1024  # a ranged body is refused once it passes what was asked by this much
#: The largest object read whole from a server that ignores Range (storage_options "whole_read_limit").
WHOLE_READ_LIMIT = 256 * MiB


class RemoteFileSystem:
    """Read-only byte access to the objects under one URL, through fsspec."""

    remote = True     # every read is a request: a ZipStore checks local headers as it reads them

    def __init__(self, url: str, storage_options: dict | None = None, *, readahead: int = READAHEAD,
                 cache_bytes: int = CACHE_BYTES):
        self.url = url.rstrip("/")
        self.storage_options = options_for(self.url, storage_options)
        self.readahead = readahead
        self.cache_bytes = cache_bytes
        self._connect()

    @property
    def connect_timeout(self) -> float | None:
        return self._timeouts["connect_timeout"]

    @property
    def read_timeout(self) -> float | None:
        return self._timeouts["read_timeout"]

    def _connect(self) -> None:
        fsspec = require("fsspec", "remote")
        options = dict(self.storage_options)
        self._timeouts = take_timeouts(options)
        self.whole_read_limit = take_own_option(options, "whole_read_limit", WHOLE_READ_LIMIT, (int,),
                                            "bytes (an integer > 0)")
        try:
            self._fs, _ = fsspec.core.url_to_fs(self.url, **fsspec_options(self.url, options, self._timeouts))
        except ImportError as exc:
            raise MrecError(f"no fsspec file system for {self.url!r} ({exc}); install the extra: "
                            "pip install 'mrec[remote]'", kind="missing_extra") from None
        except ValueError as exc:
            raise StoreError(f"fsspec does not know this URL: {exc}", path=self.url) from None
        self.requests = 0
        self.bytes_fetched = 0
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._cached = 0
        self._ends: dict[str, set[int]] = {}
        self._sizes: dict[str, int] = {}
        self._tree: dict[str, int | None] | None = None     # rel key -> size (None: a directory)
        self._pages: dict[str, dict[str, bool] | None] = {}    # HTTP: rel dir -> {child: is_dir}
        self._listed = False     # the directory form: size / is_dir / exists answered from listings
        self._read_whole: set[str] = set()     # objects a server ignoring Range sent whole (noted once each)
        self._client = HttpClient(self._fs) if self._http else None     # bounded bodies (issue 27)

    # pickled by URL + options (a Dask worker reconnects; nothing fetched travels)
    def __getstate__(self):
        return {"url": self.url, "storage_options": self.storage_options, "readahead": self.readahead,
                "cache_bytes": self.cache_bytes}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._connect()

    # -- paths -------------------------------------------------------------------------
    def _speaks(self, *protocols: str) -> bool:
        proto = self._fs.protocol
        return bool(set(protocols) & set(proto if isinstance(proto, (tuple, list)) else (proto,)))

    @property
    def _http(self) -> bool:
        return self._speaks("http", "https")

    def _rel(self, path: str) -> str | None:
        path = path.rstrip("/")
        if path == self.url:
            return ""
        if path.startswith(self.url + "/"):
            return path[len(self.url) + 1:]
        return None

    def _remote(self, path: str) -> str:
        """The URL fsspec is given: over HTTP each key component is percent-encoded (a key may hold '%')."""
        rel = self._rel(path)
        if not rel or not self._http:
            return path
        from urllib.parse import quote
        return self.url + "/" + "/".join(quote(part, safe="") for part in rel.split("/"))

    def _load_tree(self) -> dict[str, int | None] | None:
        """One recursive listing of the record's tree (object stores: one request per 1000 keys);
        None over HTTP, where a directory is listed page by page when asked (:meth:`_page`)."""
        if self._tree is not None or self._http:
            return self._tree
        try:
            found = self._fs.find(self.url, withdirs=True, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:      # noqa: BLE001  (any transport failure is a StoreError)
            raise self._failure("listing", exc, self.url) from None
        self.requests += 1
        base = self._fs._strip_protocol(self.url).rstrip("/")
        tree: dict[str, int | None] = {"": None}
        for name, info in found.items():
            n = self._fs._strip_protocol(name).rstrip("/")
            if not n.startswith(base + "/"):
                continue
            rel = n[len(base) + 1:]
            parts = rel.split("/")
            for i in range(1, len(parts)):
                tree["/".join(parts[:i])] = None
            if info.get("type") == "directory":
                tree[rel] = None
            elif tree.get(rel, 0) is not None:
                size = info.get("size")
                tree[rel] = -1 if size is None else int(size)    # -1: sized on first use
        self._tree = tree
        return tree

    def _page(self, rel: str) -> dict[str, bool] | None:
        """An HTTP directory listing page: child name -> is a directory (None: not a listable directory)."""
        if rel in self._pages:
            return self._pages[rel]
        url = self._remote(self.url + "/" + rel if rel else self.url) + "/"
        try:
            page = self._client.links(url)
        except Exception as exc:      # noqa: BLE001
            raise self._failure("listing", exc, url) from None
        finally:
            self.requests += 1
        parent, _, name = rel.rpartition("/")
        if not page and rel and (self._pages.get(parent) or {}).get(name):   # a record has no empty directory
            raise StoreError("the parent's listing names this directory but the server " +
                             ("answers that it does not exist (404)" if page is None else
                              "lists nothing in it (no directory page)") + "; it is not read as missing", path=url)
        self._pages[rel] = page
        return page

    def _kind(self, rel: str) -> str | None:
        """'dir', 'file' or None (absent) from the listings, without a request per file."""
        if rel == "":
            return "dir"
        tree = self._load_tree()
        if tree is not None:
            if rel not in tree:
                return None
            return "dir" if tree[rel] is None else "file"
        parent, _, name = rel.rpartition("/")
        page = self._page(parent)
        if page is None or name not in page:
            return None
        return "dir" if page[name] else "file"

    # -- read ------------------------------------------------------------------------------
    def size(self, path: str) -> int:
        n = self._sizes.get(path)
        if n is not None:
            return n
        rel = self._rel(path)
        if rel is not None and self._listed:
            kind = self._kind(rel)
            if kind is None:
                raise FileNotFoundError(path)
            if kind == "dir":
                raise IsADirectoryError(path)
            v = self._tree.get(rel, -1) if self._tree is not None else -1
            if v is not None and v >= 0:
                self._sizes[path] = v
                return v
        try:
            n = self._ask_size(path)
        except FileNotFoundError:
            raise self._listed_but_missing(path) from None
        except IsADirectoryError:
            raise
        except Exception as exc:      # noqa: BLE001
            raise self._failure("asking the size", exc, path) from None
        finally:
            self.requests += 1
        if n is None:
            raise StoreError("the server does not tell the object's size (no Content-Length); mrec reads "
                             "remote records by byte ranges", path=path)
        self._sizes[path] = int(n)
        return int(n)

    def _ask_size(self, path: str) -> int | None:
        """One request for an object's size (None: the server does not say)."""
        if self._client is not None:
            return self._client.size(self._remote(path))
        info = self._fs.info(self._remote(path))
        if info.get("type") == "directory":
            raise IsADirectoryError(path)
        return info.get("size")

    def _failure(self, what: str, exc: BaseException, path: str) -> StoreError:
        return request_failure(what, exc, path, self._timeouts)

    def _listed_but_missing(self, path: str) -> BaseException:
        """What a 404 for ``path`` is: "missing" (FileNotFoundError), unless the listing names it."""
        rel = self._rel(path)
        if rel is not None and self._listed and self._kind(rel) == "file":
            return StoreError("the record's listing names this object but the server answers that it does not "
                              "exist (404); it is not read as missing (the fill value)", path=path)
        return FileNotFoundError(path)

    def read(self, path: str) -> bytes:
        if path in self._sizes or (self._listed and self._tree is not None):   # sized by the listing
            return self.read_range(path, 0, self.size(path))
        rel = self._rel(path)
        if rel is not None and self._listed and self._kind(rel) != "file":
            raise FileNotFoundError(path) if self._kind(rel) is None else IsADirectoryError(path)
        try:                                   # size unknown: one GET of the whole object
            data = self._get_whole(path)
        except FileNotFoundError:
            raise self._listed_but_missing(path) from None
        except Exception as exc:      # noqa: BLE001
            raise self._failure("reading", exc, path) from None
        finally:
            self.requests += 1
        self._sizes[path] = len(data)
        self.bytes_fetched += len(data)
        with self._lock:
            self._keep(path, 0, data)
        return data

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        size = self.size(path)
        end = min(size, offset + max(0, length))
        if offset >= end:
            return b""
        with self._lock:
            hit = self._lookup(path, offset, end)
            if hit is not None:
                return hit
            head = self._head(path, offset)      # a held block covering the start: fetch only the rest
            start = offset + len(head)
            fetch_end = min(size, max(end, start + MIN_FETCH))
            if start in self._ends.get(path, ()):
                fetch_end = min(size, max(end, start + self.readahead))
        at, data = self._fetch(path, start, fetch_end)
        with self._lock:
            self._keep(path, at, data)
        return head + data[start - at: end - at]

    def prefetch(self, path: str, offset: int, end: int) -> None:
        """Fetch ``[offset, end)`` of ``path`` in one request and keep it (unless already held)."""
        end = min(end, self.size(path))
        if offset >= end:
            return
        with self._lock:
            if self._lookup(path, offset, end) is not None:
                return
        at, data = self._fetch(path, offset, end)
        with self._lock:
            self._keep(path, at, data)

    def holds(self, path: str, offset: int, end: int) -> bool:
        """Whether ``[offset, end)`` of ``path`` is already held (no request needed)."""
        with self._lock:
            return self._lookup(path, offset, end) is not None

    def _lookup(self, path: str, offset: int, end: int) -> bytes | None:
        for (p, start), block in reversed(self._blocks.items()):
            if p == path and start <= offset and end <= start + len(block):
                self._blocks.move_to_end((p, start))
                return block[offset - start: end - start]
        return None

    def _head(self, path: str, offset: int) -> bytes:
        """The held bytes from ``offset`` to the end of a block that covers ``offset`` (b"" if none)."""
        for (p, start), block in self._blocks.items():
            if p == path and start <= offset < start + len(block):
                return block[offset - start:]
        return b""

    def _keep(self, path: str, start: int, data: bytes) -> None:
        key = (path, start)
        old = self._blocks.pop(key, None)
        if old is not None:
            self._cached -= len(old)
        self._blocks[key] = data
        self._cached += len(data)
        self._ends.setdefault(path, set()).add(start + len(data))
        while self._cached > self.cache_bytes and len(self._blocks) > 1:
            (_p, _s), dropped = self._blocks.popitem(last=False)
            self._cached -= len(dropped)

    def _get_whole(self, path: str) -> bytes:
        """A whole object of unknown size, bounded by the length the server declares."""
        if self._client is not None:
            return self._client.get(self._remote(path))[1]
        return bytes(self._fs.cat_file(self._remote(path)))

    def _get_range(self, path: str, start: int, end: int, limit: int, whole: int | None) -> tuple[bytes, bool]:
        """Bytes ``[start, end)``, refused (BodyTooLong) past ``limit`` bytes over HTTP and S3, and whether
        the server ignored Range and sent the whole object instead (HTTP: read up to ``whole`` bytes;
        RangeIgnored when ``whole`` is None)."""
        if self._client is not None:
            status, data = self._client.get(self._remote(path), start, end, limit, whole)
            return data, status == 200
        if self._speaks("s3", "s3a"):
            return self._s3_range(path, start, end, limit), False
        return bytes(self._fs.cat_file(self._remote(path), start=start, end=end)), False

    def _s3_range(self, path: str, start: int, end: int, limit: int) -> bytes:
        from fsspec.asyn import sync
        return sync(self._fs.loop, self._s3_get, path, start, end, limit)

    async def _s3_get(self, path: str, start: int, end: int, limit: int) -> bytes:
        bucket, key, version = self._fs.split_path(path)
        extra = {"VersionId": version} if version else {}
        resp = await self._fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}",
                                       **extra)
        body = resp["Body"]
        try:
            declared = resp.get("ContentLength")
            if declared is not None and declared > limit:
                raise BodyTooLong(declared, limit)
            pieces, got = [], 0
            while piece := await body.read(PIECE):
                got += len(piece)
                if got > limit:
                    raise BodyTooLong(got, limit)
                pieces.append(piece)
            return b"".join(pieces)
        finally:
            body.close()

    def _fetch(self, path: str, start: int, end: int) -> tuple[int, bytes]:
        """The block fetched for ``[start, end)`` of a sized object: ``(start, its bytes)``, or ``(0, the
        whole object)`` from a server that ignores Range (issue 28: ``python -m http.server``)."""
        size = self._sizes[path]
        whole = size if self.whole_read_limit is None or size <= self.whole_read_limit else None
        try:
            data, got_whole = self._get_range(path, start, end, end - start + BODY_MARGIN, whole)
        except FileNotFoundError:
            raise StoreError(f"object vanished while reading bytes {start}..{end}", path=path) from None
        except RangeIgnored:
            raise StoreError(f"the server ignores Range (it answers a ranged request with the whole {size}-byte "
                             "object), and mrec reads an object whole only up to storage_options "
                             f"'whole_read_limit' ({self.whole_read_limit} bytes): raise it, or serve the record "
                             "from a server that honours Range", path=path) from None
        except Exception as exc:      # noqa: BLE001  (any transport failure is a StoreError)
            raise self._failure(f"reading bytes {start}..{end}", exc, path) from None
        finally:
            self.requests += 1
        if got_whole:
            return 0, self._took_whole(path, data, size)
        if len(data) != end - start:
            raise StoreError(f"the server returned {len(data)} bytes for the {end - start}-byte range "
                             f"{start}..{end} (a truncated body, or Range not honoured); nothing of it is used",
                             path=path)
        self.bytes_fetched += len(data)
        return start, bytes(data)

    def _took_whole(self, path: str, data: bytes, size: int) -> bytes:
        """A whole object a server ignoring Range sent: exactly ``size`` bytes, noted once per object."""
        if len(data) != size:
            raise StoreError(f"the server ignores Range and sent {len(data)} bytes of the {size}-byte object "
                             "(a truncated body); nothing of it is used", path=path)
        self.bytes_fetched += len(data)
        with self._lock:
            first = path not in self._read_whole
            self._read_whole.add(path)
        if first:
            warnings.warn(RangesIgnoredWarning(
                f"{path}: the server ignores Range (it answers a ranged request with the whole file): this file "
                f"is read whole, {size} bytes, and kept while the record is open (storage_options "
                f"'whole_read_limit' bounds it: {self.whole_read_limit} bytes)"))
        return bytes(data)

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
            return True
        except IsADirectoryError:
            return True
        except FileNotFoundError:
            return False

    def is_dir(self, path: str) -> bool:
        rel = self._rel(path)
        if rel is not None and self._listed:
            return self._kind(rel) == "dir"
        try:
            return bool(self._fs.isdir(self._remote(path)))
        except Exception as exc:      # noqa: BLE001
            raise self._failure("isdir", exc, path) from None

    def is_link(self, path: str) -> bool:
        return False

    def list_dir(self, path: str) -> list[str]:
        rel = self._rel(path)
        if rel is None:
            raise FileNotFoundError(path)
        kind = self._kind(rel)
        if kind is None:
            raise FileNotFoundError(path)
        if kind == "file":
            raise NotADirectoryError(path)
        tree = self._load_tree()
        if tree is None:
            return sorted(self._page(rel) or {})
        lead = rel + "/" if rel else ""
        return sorted({k[len(lead):].split("/", 1)[0] for k in tree if k and k.startswith(lead)})

    # -- every write is refused -----------------------------------------------------------
    def _refusing(what: str):
        def refused(self, path, *args, **kwargs):
            raise refuse_remote_write(path, what)
        refused.__doc__ = f"Refused: an object store is read, never written ({what})."
        return refused

    write_at = _refusing("write into")
    replace = _refusing("replace a file of")
    rename = _refusing("rename within")
    fsync = _refusing("fsync")
    fsync_dir = _refusing("fsync")
    truncate = _refusing("truncate")
    remove = _refusing("remove from")
    rmdir = _refusing("remove from")
    makedirs = _refusing("create directories in")
    del _refusing
