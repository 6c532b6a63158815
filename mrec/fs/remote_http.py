"""Bounded HTTP requests for :mod:`mrec.fs.remote` (issue 27), over the aiohttp session of an fsspec
``HTTPFileSystem`` (so its ``client_kwargs`` and request options — auth, headers, TLS — still apply).

fsspec reads every body whole before anything looks at its length, so a server that ignores ``Range``
or streams without end would be buffered without bound.  Here a body is read piece by piece and
refused (:class:`BodyTooLong`) as soon as it passes the bound the caller gives: what was asked plus
a margin for a range, the declared ``Content-Length`` (or :data:`UNSIZED_LIMIT` without one) for a
whole object, :data:`UNSIZED_LIMIT` for a directory page.  Errors are the caller's to name: a 404 is ``FileNotFoundError``,
any other status ``HttpStatusError``, a timeout the transport's own exception.
"""
from __future__ import annotations

import re
from urllib.parse import unquote, urljoin

#: Bytes read at a time from a body.
PIECE = 256 * 1024
#: A whole object whose server declares no length, and any directory page, is read up to this.
UNSIZED_LIMIT = 64 * 1024 * 1024

_HREF = re.compile(r"""<a\s+(?:[^>]*?\s+)?href=["']([^"']+)""", re.IGNORECASE)


class BodyTooLong(Exception):
    """The body passed its bound (``got`` bytes read so far, or the length the server declared)."""

    def __init__(self, got: int, limit: int):
        super().__init__(f"{got} bytes, more than the {limit} asked for")
        self.got = got
        self.limit = limit


class RangeIgnored(Exception):
    """The server answered a ranged GET with 200 (the whole object, ``declared`` bytes if it said) and
    the caller allowed no whole read."""

    def __init__(self, declared: int | None):
        super().__init__(f"Range ignored (200, {declared} bytes)")
        self.declared = declared


class HttpStatusError(Exception):
    """An HTTP error status other than 404."""

    def __init__(self, status: int, reason: str | None):
        super().__init__(f"HTTP {status} {reason or ''}".rstrip())
        self.status = status


class HttpClient:
    """``head`` / ``get`` / ``links`` with bounded bodies, through ``fs`` (an fsspec HTTPFileSystem)."""

    def __init__(self, fs):
        self._fs = fs

    def _run(self, coro_fn, *args):
        from fsspec.asyn import sync
        return sync(self._fs.loop, coro_fn, *args)

    def _options(self, headers: dict[str, str]) -> dict:
        kw = dict(self._fs.kwargs)
        merged = dict(kw.pop("headers", None) or {})
        merged.update(headers)
        merged["Accept-Encoding"] = "identity"     # lengths are the object's bytes
        kw["headers"] = merged
        return kw

    def size(self, url: str) -> int | None:
        """The object's length from a HEAD (a GET's headers when HEAD says nothing); None if undeclared."""
        return self._run(self._size, url)

    async def _size(self, url: str) -> int | None:
        session = await self._fs.set_session()
        for method in (session.head, session.get):
            async with method(self._fs.encode_url(url), allow_redirects=True, **self._options({})) as r:
                if r.status in (405, 501) and method == session.head:
                    continue
                _raise_for(r, url)
                if r.content_length is not None and r.headers.get("Content-Encoding", "identity") == "identity":
                    return r.content_length
        return None

    def get(self, url: str, start: int | None = None, end: int | None = None,
            limit: int | None = None, whole: int | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of a GET of ``[start, end)`` (the whole object when None), the body refused
        past ``limit`` bytes (None: the declared length, else :data:`UNSIZED_LIMIT`).  A server answering
        a ranged GET with 200 ignores Range: its body (the whole object) is then read up to ``whole``
        bytes, or :class:`RangeIgnored` is raised unread when ``whole`` is None."""
        headers = {} if start is None else {"Range": f"bytes={start}-{end - 1}"}
        return self._run(self._get, url, headers, limit, whole)

    async def _get(self, url: str, headers: dict[str, str], limit: int | None,
                   whole: int | None = None) -> tuple[int, bytes]:
        session = await self._fs.set_session()
        async with session.get(self._fs.encode_url(url), **self._options(headers)) as r:
            _raise_for(r, url)
            if "Range" in headers and r.status == 200:        # Range ignored: the whole object follows
                if whole is None:
                    raise RangeIgnored(r.content_length)
                limit = whole
            bound = limit if limit is not None else (r.content_length if r.content_length is not None
                                                     else UNSIZED_LIMIT)
            if r.content_length is not None and r.content_length > bound:
                raise BodyTooLong(r.content_length, bound)
            pieces, got = [], 0
            async for piece in r.content.iter_chunked(PIECE):
                got += len(piece)
                if got > bound:
                    raise BodyTooLong(got, bound)
                pieces.append(piece)
            return r.status, b"".join(pieces)

    def links(self, url: str) -> dict[str, bool] | None:
        """The children a directory page at ``url`` (ending in '/') links to: name -> is a directory;
        None when there is no such page (404)."""
        try:
            _, body = self.get(url, limit=UNSIZED_LIMIT)      # a page is bounded whatever length it declares
        except FileNotFoundError:
            return None
        page: dict[str, bool] = {}
        for href in _HREF.findall(body.decode("utf-8", "replace")):
            target = urljoin(url, href)
            if not target.startswith(url):
                continue
            child = target[len(url):].split("?", 1)[0].split("#", 1)[0]
            is_dir = child.endswith("/")
            child = unquote(child.rstrip("/"))
            if child and "/" not in child:
                page[child] = is_dir
        return page


def _raise_for(r, url: str) -> None:
    if r.status == 404:
        raise FileNotFoundError(url)
    if r.status >= 400:
        raise HttpStatusError(r.status, r.reason)
