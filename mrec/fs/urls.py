"""A URL before a byte of it is read: what a URL is, the refusal of every write to one, its storage options.

``is_url`` tells ``scheme://...`` from a local path; ``refuse_remote_write`` / ``refuses_urls`` are the
``remote_read_only`` refusal every write entry point raises for one, quoting the chapter's scope
(``SCOPE``: an object store holds closed records, read, never appended to).  ``options_for`` /
``resolve_options`` narrow ``storage_options`` (or ``MREC_STORAGE_OPTIONS``,
``storage_options_from_env``) to the URL's protocol; mrec's own options (``OWN_OPTIONS``: the
``connect_timeout`` / ``read_timeout`` of every request, ``whole_read_limit``) are taken out and the
timeouts handed to fsspec's HTTP or S3 client; ``request_failure`` is the ``StoreError`` of a failed request
(a timeout names its option).  ``require`` imports the optional extra (fsspec: ``mrec[remote]``).
Used by :mod:`mrec.fs.remote` and by every entry point that takes a path.
"""
from __future__ import annotations

import re

from ..errors import MrecError, RefusalError, StoreError
from .remote_http import BodyTooLong

CONNECT_TIMEOUT = 10.0   # seconds to connect (storage_options "connect_timeout")
READ_TIMEOUT = 30.0      # seconds without a byte from the server (storage_options "read_timeout")
TIMEOUT_OPTIONS = {"connect_timeout": CONNECT_TIMEOUT, "read_timeout": READ_TIMEOUT}

SCOPE = ("an object store holds closed records, written elsewhere and then uploaded or packed into "
         "*.mrec.zip, and is read, never appended to (chunking-and-packing.md: live append needs a "
         "POSIX-like store)")

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_url(path) -> bool:
    """True for ``scheme://...`` (a str); a local path or ``os.PathLike`` is not a URL."""
    return isinstance(path, str) and bool(_URL.match(path))


def refuse_remote_write(url: str, action: str) -> RefusalError:
    """The refusal every write entry point raises for a URL."""
    return RefusalError(f"cannot {action} a URL: {SCOPE}; write or append to a local *.mrec directory, "
                        "then upload it or pack it", path=url, kind="remote_read_only")


#: mrec's own options (not fsspec's): they apply to every protocol.
OWN_OPTIONS = ("connect_timeout", "read_timeout", "whole_read_limit")
#: The sections a URL's scheme takes, the general one first (an ``https://`` URL: "http", then "https").
_SECTIONS = {"https": ("http", "https"), "s3a": ("s3", "s3a"), "gs": ("gcs", "gs"), "gcs": ("gs", "gcs")}


def _protocols() -> set[str]:
    try:
        import fsspec
    except ImportError:
        return set(_SECTIONS) | {"http", "s3"}
    return set(fsspec.available_protocols()) | set(_SECTIONS)


def options_for(url: str, options: dict | None, *, from_env: bool = False) -> dict:
    """The storage options for ``url`` out of ``options`` (issue 28: options apply to the protocol they
    are for).  A key naming a protocol (``"s3"``, ``"http"``, ``"gcs"``, ... any fsspec knows) with an
    object as its value is that protocol's section: the URL's own section (for ``https://`` the
    ``"http"`` section, then ``"https"``) is merged over the other keys, which apply to every
    protocol; other sections are dropped.  Options without any section are used as given, except
    those from ``MREC_STORAGE_OPTIONS`` (``from_env``): that flat form is for object stores, so an
    ``http(s)://`` URL takes from it only mrec's own options (:data:`OWN_OPTIONS`).  Idempotent."""
    options = dict(options or {})
    names = _protocols()
    sections = {k: v for k, v in options.items() if k in names and isinstance(v, dict)}
    out = {k: v for k, v in options.items() if k not in sections}
    scheme = url.split("://", 1)[0].lower()
    if not sections and from_env and scheme in ("http", "https"):
        return {k: v for k, v in out.items() if k in OWN_OPTIONS}
    for name in _SECTIONS.get(scheme, (scheme,)):
        out.update(sections.get(name, {}))
    return out


def resolve_options(url: str, storage_options: dict | None) -> dict:
    """The options a read of ``url`` uses: ``storage_options`` when given, else ``MREC_STORAGE_OPTIONS``,
    each narrowed to the URL's protocol (:func:`options_for`)."""
    if storage_options is not None:
        return options_for(url, storage_options)
    return options_for(url, storage_options_from_env(), from_env=True)


def refuses_urls(**actions: str):
    """Decorator for a write entry point: a URL in an argument named here (``path="append to"``) is
    refused (:func:`refuse_remote_write`, kind ``remote_read_only``) before anything else is looked at,
    whatever else comes with it -- the ``storage_options=`` a reader takes included (issue 28: never a
    ``TypeError``)."""
    import functools
    import inspect

    def wrap(fn):
        names = list(inspect.signature(fn).parameters)
        where = {name: names.index(name) for name in actions}

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for name, action in actions.items():
                value = kwargs[name] if name in kwargs else args[where[name]] if len(args) > where[name] else None
                if is_url(value):
                    raise refuse_remote_write(value, action)
            return fn(*args, **kwargs)
        return call
    return wrap


def storage_options_from_env() -> dict:
    """``MREC_STORAGE_OPTIONS`` (a JSON object) for the command line; {} when unset."""
    import json
    import os
    raw = os.environ.get("MREC_STORAGE_OPTIONS")
    if not raw:
        return {}
    try:
        opts = json.loads(raw)
    except ValueError as exc:
        raise RefusalError(f"MREC_STORAGE_OPTIONS is not JSON: {exc}", kind="bad_storage_options") from None
    if not isinstance(opts, dict):
        raise RefusalError("MREC_STORAGE_OPTIONS is not a JSON object", kind="bad_storage_options")
    return opts


def take_own_option(options: dict, key: str, default, kinds: tuple, what: str):
    """One of mrec's own options taken out of ``options``: a number > 0 of ``kinds``, or None (no limit)."""
    value = options.pop(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, kinds) or not value > 0):
        raise RefusalError(f"storage option {key!r} is {value!r}: {what} or None (no limit)",
                           kind="bad_storage_options")
    return value


def take_timeouts(options: dict) -> dict[str, float | None]:
    """mrec's own ``connect_timeout`` / ``read_timeout`` taken out of ``options`` (defaults filled in)."""
    out: dict[str, float | None] = {}
    for key, default in TIMEOUT_OPTIONS.items():
        value = take_own_option(options, key, default, (int, float), "seconds (a number > 0)")
        out[key] = None if value is None else float(value)
    return out


def fsspec_options(url: str, options: dict, timeouts: dict[str, float | None]) -> dict:
    """The options fsspec is given: the timeouts placed where its HTTP (aiohttp) or S3 (botocore) client
    takes them, unless the caller set that client's own."""
    scheme = url.split("://", 1)[0].lower()
    options = dict(options)
    if scheme in ("http", "https"):
        import aiohttp
        client = dict(options.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=timeouts["connect_timeout"],
                                                           sock_read=timeouts["read_timeout"]))
        options["client_kwargs"] = client
    elif scheme in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        for key, value in timeouts.items():
            if value is not None:
                config.setdefault(key, value)
        options["config_kwargs"] = config
    return options


def request_failure(what: str, exc: BaseException, path: str, timeouts: dict[str, float | None]) -> StoreError:
    """The StoreError for a failed request: a timeout names the option that bounds it."""
    if isinstance(exc, BodyTooLong):
        return StoreError(f"{what} failed: the server sent {exc.got} bytes or more where at most {exc.limit} "
                          "were asked for (Range not honoured, or a body without end); refused there, nothing "
                          "of it is used", path=path)
    chain, cause = [type(exc).__name__], exc
    while cause.__cause__ is not None and len(chain) < 8:   # fsspec raises FSTimeoutError from aiohttp's
        cause = cause.__cause__
        chain.append(type(cause).__name__)
    name = next((n for n in chain if "Timeout" in n and n != "FSTimeoutError"), chain[0])
    if "Timeout" in name:
        key = "connect_timeout" if "Connect" in name else "read_timeout"
        return StoreError(f"{what} failed: no answer within the {key} of {timeouts.get(key)} s ({name}; "
                          f"storage_options {key!r} sets it)", path=path)
    return StoreError(f"{what} failed: {name}: {exc}", path=path)


def require(module: str, extra: str):
    """Import an optional dependency or raise an MrecError naming the extra that brings it."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MrecError(f"{module} is needed for this ({exc}); install the extra: pip install 'mrec[{extra}]'",
                        kind="missing_extra") from None
