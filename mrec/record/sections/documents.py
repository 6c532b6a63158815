"""The document sections ``meta``, ``status`` and ``method`` (mrec-notes §1.2, §1.3, §9.3).

A document is one JSON object, stored as the attribute map of an otherwise
empty group.  Keys the chapter names are checked when present; every other
key is the producer's and is kept verbatim (``null`` values included).  A
document holds plain finite JSON only.

Refusals carry ``kind``:

* ``missing_key`` -- a required key is absent (``status.state``,
  ``method.type`` / ``description`` / ``engine.name``, ``creator.name``,
  ``author.name``);
* ``bad_document`` -- a named key of the wrong JSON type, a timestamp
  without an explicit offset, a negative counter, a non-finite number, a
  document that is not an object;
* ``bad_version`` -- ``meta.molrec_version`` present but not the JSON
  integer 1 or 2 (mrec-notes §0: never required; a newer, null, bool,
  float or string version is refused).
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping

from ...errors import RefusalError
from ...zarr.metadata import MAX_JSON_DEPTH, json_depth_exceeds

__all__ = ["DOCUMENTS", "SUPPORTED_VERSIONS", "check_document", "check_meta", "check_status", "check_method",
           "RFC3339"]

#: ``molrec_version`` values a reader accepts (E2 wrote 1, E3 wrote 2, E4 writes none).
SUPPORTED_VERSIONS = (1, 2)
#: RFC 3339 date-time with an explicit offset (``Z`` or ``+hh:mm``).
RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _refuse(kind: str, message: str, where: str | None) -> RefusalError:
    return RefusalError(message, path=where, kind=kind)


def _plain(value: Any, where: str | None, at: str) -> None:
    """Refuse anything that is not plain finite JSON, nesting at most MAX_JSON_DEPTH levels."""
    if json_depth_exceeds(value):
        raise _refuse("bad_document", f"{at} nests deeper than {MAX_JSON_DEPTH} levels (or is cyclic)", where)
    _plain_within(value, where, at)


def _plain_within(value: Any, where: str | None, at: str) -> None:
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _refuse("bad_document", f"{at} is {value!r}: a document holds finite numbers only", where)
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _refuse("bad_document", f"{at} has a non-string key {k!r}", where)
            _plain_within(v, where, f"{at}.{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _plain_within(v, where, f"{at}[{i}]")
        return
    raise _refuse("bad_document", f"{at} is a {type(value).__name__}, not JSON", where)


def _object(doc: Any, name: str, where: str | None) -> dict:
    if not isinstance(doc, Mapping):
        raise _refuse("bad_document", f"the {name} document is a JSON object, found {type(doc).__name__}", where)
    _plain(doc, where, f"the {name} document")
    return dict(doc)


def _string(doc: Mapping, key: str, where: str | None, at: str, *, required: bool = False) -> None:
    if key not in doc or doc[key] is None:
        if required:
            raise _refuse("missing_key", f"{at}.{key} is required", where)
        return
    if not isinstance(doc[key], str):
        raise _refuse("bad_document", f"{at}.{key} must be a string, found {doc[key]!r}", where)


def _each_object(doc: Mapping, key: str, where: str | None, at: str, check) -> None:
    """``doc[key]``, when present, is an object of objects; ``check(value, path)`` each value."""
    v = doc.get(key)
    if v is None:
        return
    if not isinstance(v, Mapping):
        raise _refuse("bad_document", f"{at}.{key} must be an object, found {v!r}", where)
    for name, item in v.items():
        if not isinstance(item, Mapping):
            raise _refuse("bad_document", f"{at}.{key}.{name} must be an object, found {item!r}", where)
        check(item, f"{at}.{key}.{name}")


def _timestamp(doc: Mapping, key: str, where: str | None, at: str) -> None:
    v = doc.get(key)
    if v is None:
        return
    if not isinstance(v, str) or not RFC3339.fullmatch(v):
        raise _refuse("bad_document", f"{at}.{key} must be an RFC 3339 date-time with an explicit offset "
                                      f"(Z or +hh:mm), found {v!r}", where)


def _named(doc: Mapping, key: str, where: str | None, at: str) -> None:
    """``doc[key]``, when present, is an object with a required string ``name``."""
    v = doc.get(key)
    if v is None:
        return
    if not isinstance(v, Mapping):
        raise _refuse("bad_document", f"{at}.{key} must be an object, found {v!r}", where)
    _string(v, "name", where, f"{at}.{key}", required=True)


def check_meta(doc: Any, where: str | None = None) -> dict:
    """The ``meta`` document, checked (mrec-notes §1.3); an empty one is valid."""
    d = _object(doc, "meta", where)
    if "molrec_version" in d:
        v = d["molrec_version"]
        if isinstance(v, bool) or not isinstance(v, int):
            raise _refuse("bad_version", f"meta.molrec_version must be a JSON integer (1 or 2), found {v!r}", where)
        if v not in SUPPORTED_VERSIONS:
            raise _refuse("bad_version", f"meta.molrec_version {v} is not supported (this reader reads 1 and 2; "
                                         "a record without the key is read by the current rules)", where)
    _named(d, "creator", where, "meta")
    _named(d, "author", where, "meta")
    for key in ("version",):
        if isinstance(d.get("creator"), Mapping):
            _string(d["creator"], key, where, "meta.creator")
    if isinstance(d.get("author"), Mapping):
        _string(d["author"], "email", where, "meta.author")
    for key in ("source", "record_id", "content_hash"):
        _string(d, key, where, "meta")
    _timestamp(d, "created_at", where, "meta")
    _each_object(d, "modules", where, "meta", lambda m, at: _string(m, "spec", where, at))
    return d


def _count(doc: Mapping, key: str, where: str | None, at: str) -> None:
    v = doc.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _refuse("bad_document", f"{at}.{key} must be a non-negative integer, found {v!r}", where)


def check_status(doc: Any, where: str | None = None) -> dict:
    """The ``status`` document (mrec-notes §9.3): ``state`` required; custom states kept."""
    d = _object(doc, "status", where)
    _string(d, "state", where, "status", required=True)
    for key in ("stage", "message"):
        _string(d, key, where, "status")
    for key in ("epoch", "global_step"):
        _count(d, key, where, "status")
    for key in ("started_at", "updated_at", "finished_at"):
        _timestamp(d, key, where, "status")
    progress = d.get("progress")
    if progress is not None:
        if not isinstance(progress, Mapping):
            raise _refuse("bad_document", f"status.progress must be an object, found {progress!r}", where)
        for k, v in progress.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _refuse("bad_document", f"status.progress.{k} must be a number, found {v!r}", where)
    err = d.get("error")
    if err is not None:
        if not isinstance(err, Mapping):
            raise _refuse("bad_document", f"status.error must be an object, found {err!r}", where)
        _string(err, "message", where, "status.error", required=True)
        for key in ("type", "traceback"):
            _string(err, key, where, "status.error")
    return d


def _check_method(d: Mapping, where: str | None, at: str) -> None:
    _string(d, "type", where, at, required=True)
    _string(d, "description", where, at, required=True)
    engine = d.get("engine")
    if engine is None:
        raise _refuse("missing_key", f"{at}.engine.name is required", where)
    if not isinstance(engine, Mapping):
        raise _refuse("bad_document", f"{at}.engine must be an object, found {engine!r}", where)
    _string(engine, "name", where, f"{at}.engine", required=True)
    _string(engine, "version", where, f"{at}.engine")
    _each_object(d, "stages", where, at, lambda stage, sat: _check_method(stage, where, sat))
    order = d.get("order")
    if order is not None and (not isinstance(order, list) or not all(isinstance(s, str) for s in order)):
        raise _refuse("bad_document", f"{at}.order must be a list of stage ids, found {order!r}", where)


def check_method(doc: Any, where: str | None = None) -> dict:
    """The ``method`` document (mrec-notes §9.3): ``type``, ``description``, ``engine.name`` required."""
    d = _object(doc, "method", where)
    _check_method(d, where, "method")
    return d


#: section name -> checker
DOCUMENTS: dict[str, Callable[[Any, str | None], dict]] = {
    "meta": check_meta,
    "status": check_status,
    "method": check_method,
}


def check_document(section: str, doc: Any, where: str | None = None) -> dict:
    """Check the document of ``section`` (one of :data:`DOCUMENTS`) and return it as a dict."""
    return DOCUMENTS[section](doc, where)
