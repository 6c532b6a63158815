"""What may name a node and what text a record may hold: the checks every writer and reader runs.

* node names (:func:`check_node_name`, :func:`node_name_problem`): Zarr V3's rules plus what a
  file system and the packed form need;
* the names a frame-shaped group reserves (``box``, ``_validity``) and the conventional
  ``atomi``..``atomm`` row references;
* a block's ``structural_shape`` (:func:`check_structural_shape`) and ``targets``
  (:func:`check_targets`, :data:`TARGET_PATTERN`);
* UTF-8 text (:func:`check_text`, :func:`unencodable`): a lone surrogate is refused before
  anything is written.

Every refusal is a :class:`~mrec.errors.RefusalError` with the kind its caller names.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import RefusalError

__all__ = [
    "FRAME_RESERVED_BLOCKS",
    "FRAME_RESERVED_COLUMNS",
    "ENDPOINT_COLUMNS",
    "TARGET_PATTERN",
    "MAX_NODE_NAME_BYTES",
    "node_name_problem",
    "check_node_name",
    "check_structural_shape",
    "check_targets",
    "unencodable",
    "check_text",
]

#: Children of a frame-shaped group that are not blocks.
FRAME_RESERVED_BLOCKS: frozenset[str] = frozenset({"box"})
#: Children of a block group that are not columns.
FRAME_RESERVED_COLUMNS: frozenset[str] = frozenset({"_validity"})
#: Conventional row references into the ``atoms`` block of the same container.
ENDPOINT_COLUMNS: tuple[str, ...] = ("atomi", "atomj", "atomk", "atoml", "atomm")
#: A ``targets`` value: ``<block>`` or ``/<section>/<block>``, never into ``trajectory``.
TARGET_PATTERN = re.compile(r"(?!/trajectory/)(/[^/]+/[^/]+|[^/]+)")


#: Most UTF-8 bytes of one node name: it is a directory or file name of the live record (NAME_MAX).
MAX_NODE_NAME_BYTES = 255


def node_name_problem(name: Any) -> str | None:
    """Which rule ``name`` breaks as a node name, or None.

    Zarr V3 core ("Node names"): non-empty, no ``/``, not made only of periods (``.``, ``..``,
    ``...``), no leading ``__``.  mrec adds what a file system and the packed form need: no NUL,
    no backslash (a zip entry name separates by ``/`` only), valid UTF-8, at most 255 bytes."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if name == "":
        return "is empty"
    if "/" in name:
        return "contains '/'"
    if name.strip(".") == "":
        return "is made only of periods"
    if name.startswith("__"):
        return "starts with the reserved prefix '__'"
    if "\x00" in name:
        return "contains a NUL character"
    if "\\" in name:
        return "contains a backslash (packed entry names separate by '/' only)"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not encodable as UTF-8 (a lone surrogate)"
    if size > MAX_NODE_NAME_BYTES:
        return f"is {size} bytes of UTF-8, more than the {MAX_NODE_NAME_BYTES} a file name may hold"
    return None


def check_node_name(name: Any, what: str, kind: str, path: str | None = None) -> str:
    """``name`` if it can name a Zarr node (:func:`node_name_problem`), else a refusal of ``kind``."""
    why = node_name_problem(name)
    if why is not None:
        shown = f"{name[:60]!r}... " if isinstance(name, str) and len(name) > 80 else f"{name!r} "
        raise RefusalError(
            f"{what} {shown}is not a valid node name: it {why} (a node name is non-empty, has no '/', "
            "NUL or backslash, is not only periods, does not start with '__', and is at most 255 bytes)",
            path=path, kind=kind,
        )
    return name


def _is_int(n: Any) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))


def check_structural_shape(shape: Any, what: str, path: str | None = None,
                           rows: int | None = None) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (product = ``rows`` when given).

    Any violation is ``structural_shape_mismatch``.
    """
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (list, tuple)) \
            or not all(_is_int(n) and int(n) >= 0 for n in shape):
        raise RefusalError(f"{what}: structural_shape must be a list of non-negative integers, found {shape!r}",
                           path=path, kind="structural_shape_mismatch")
    out = tuple(int(n) for n in shape)
    if rows is not None and math.prod(out) != rows:
        raise RefusalError(f"{what}: structural_shape {list(out)} has {math.prod(out)} rows, the block has {rows}",
                           path=path, kind="structural_shape_mismatch")
    return out


def check_targets(targets: Any, what: str, path: str | None = None) -> dict[str, str]:
    """``targets`` (column -> ``<block>`` | ``/<section>/<block>``) validated; ``bad_reference`` otherwise."""
    if not isinstance(targets, Mapping):
        raise RefusalError(f"{what}: targets must be an object column -> target, found {targets!r}",
                           path=path, kind="bad_reference")
    out: dict[str, str] = {}
    for column, target in targets.items():
        if not isinstance(column, str) or not isinstance(target, str) or not TARGET_PATTERN.fullmatch(target):
            extra = " (a trajectory block is never a target)" if isinstance(target, str) and \
                target.startswith("/trajectory/") else ""
            raise RefusalError(
                f"{what}: target {target!r} of column {column!r} is not '<block>' or '/<section>/<block>'{extra}",
                path=path, kind="bad_reference",
            )
        out[column] = target
    return out


def unencodable(obj: Any, limit: int = 100_000) -> tuple[str, str] | None:
    """(where, the text) of the first string in ``obj`` (a str, or dicts / lists / tuples / numpy
    object arrays of them, keys included) that UTF-8 cannot encode -- a lone surrogate such as
    ``"\\ud800"`` -- else None.  Iterative (no recursion limit); ``limit`` containers at most."""
    stack: list[tuple[str, Any]] = [("", obj)]
    seen = 0
    while stack:
        where, o = stack.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return where, o
        elif isinstance(o, Mapping):
            seen += 1
            for k, v in reversed(list(o.items())):
                stack.append((f"{where}[{k!r}]", v))
                stack.append((f"{where} key", k))
        elif isinstance(o, (list, tuple)) or (isinstance(o, np.ndarray) and o.dtype.kind in "OU"):
            seen += 1
            items = o.ravel().tolist() if isinstance(o, np.ndarray) else o
            if all(type(x) is str for x in items):
                try:                                   # one encode for the common all-valid case
                    "".join(items).encode("utf-8")
                    continue
                except UnicodeEncodeError:
                    pass
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(items))))
        if seen > limit:
            return None
    return None


def check_text(obj: Any, what: str, path: str | None, kind: str = "bad_string") -> None:
    """Refuse (``kind``) text UTF-8 cannot encode anywhere in ``obj``: every name and string of a
    store is UTF-8 (zarr.json, vlen-utf8), and a lone surrogate accepted now fails every later write."""
    bad = unencodable(obj)
    if bad is not None:
        where, text = bad
        raise RefusalError(f"{what}{where}: {text!r} is not encodable as UTF-8 (a lone surrogate); "
                           "strings and names in a record are UTF-8 text", path=path, kind=kind)

