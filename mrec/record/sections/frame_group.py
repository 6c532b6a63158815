"""Frame-shaped groups on disk: ``frame/`` and ``system/`` (mrec-notes §1.4, §1.5, §2).

::

    <group>/                 attrs = the meta document (typed JSON) + _meta_types
      <block>/               attrs: count, structural_shape?, targets?, producer attrs
        <column>             fixed-size array; attr precision (f64 only)
        _validity/<column>   bool[count] masks
      box/                   attr cell_defined (only when false)
        vectors f64[3,3]; origin f64[3]? ; boundary bool[3]?

:func:`write_frame_group` stores a :class:`~mrec.record.model.frame.Frame` with the
reference extents and codecs of fixed-size arrays (precision columns rounded
on the way); :func:`read_frame_group` returns the Frame plus the keys it did
not understand, so a record can write them back verbatim.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import RefusalError
from ...zarr.array import Array, meta_key, read_node, write_group
from ...zarr.metadata import ArrayMetadata, GroupMetadata
from ..model.dtypes import check_canonical, dtype_from_zarr, dtype_name
from .fixed import write_fixed_array
from ..model.box import Box
from ..model.frame import Frame
from ..model.names import FRAME_RESERVED_BLOCKS
from ..model.typed_json import decode_meta_document, encode_meta_document

__all__ = ["write_frame_group", "read_frame_group", "FrameGroup"]

VALIDITY = "_validity"
BOX = "box"


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


# -- write ------------------------------------------------------------------------

def _write_box(store, path: str, box: Box) -> list[str]:
    attrs = {} if box.defined else {"cell_defined": False}
    write_group(store, path, attrs)
    keys = [meta_key(path)]
    cell = box.to_json()
    keys += write_fixed_array(store, f"{path}/vectors", box.vectors, "f64")
    if "origin" in cell:
        keys += write_fixed_array(store, f"{path}/origin", box.origin, "f64")
    if "boundary" in cell:
        keys += write_fixed_array(store, f"{path}/boundary", box.boundary, "bool")
    return keys


def write_frame_group(store, path: str, frame: Any, *, compression=None,
                      attributes: dict | None = None) -> list[str]:
    """Write ``frame`` (a Frame or anything :meth:`Frame.from_any` takes) as the group ``path``.

    Precision columns are rounded to their grid first (the stored values are
    the rounded ones).  Returns the keys written, each group's ``zarr.json``
    before its children.  The store is expected not to hold ``path`` yet.
    ``attributes`` replaces the typed meta document as the group's attribute
    map (a plain-JSON document such as the force field's; ``frame.meta`` is
    then ignored).
    """
    f = Frame.from_any(frame).rounded()
    if attributes is None:
        attrs, _ = encode_meta_document(f.meta, f.meta_types, store.describe(path))
    else:
        attrs = dict(attributes)
    write_group(store, path, attrs)
    keys = [meta_key(path)]
    for b, cols in f.blocks.items():
        bpath = _join(path, b)
        battrs: dict[str, Any] = {"count": f.counts[b], **f.block_attrs.get(b, {})}
        write_group(store, bpath, battrs)
        keys.append(meta_key(bpath))
        for c, values in cols.items():
            p = f.precision.get(b, {}).get(c)
            # the Frame normalised its columns (an object column holds only str): the dtype is the
            # numpy dtype's, without looking at every string again
            keys += write_fixed_array(store, f"{bpath}/{c}", values, dtype_name(values.dtype),
                                      precision=p is not None, compression=compression,
                                      attributes={"precision": p} if p is not None else None)
        masks = f.masks.get(b)
        if masks:
            vpath = f"{bpath}/{VALIDITY}"
            write_group(store, vpath)
            keys.append(meta_key(vpath))
            for c, m in masks.items():
                keys += write_fixed_array(store, f"{vpath}/{c}", m, "bool")
    if f.box is not None:
        keys += _write_box(store, _join(path, BOX), f.box)
    return keys


# -- read -------------------------------------------------------------------------

class FrameGroup:
    """What :func:`read_frame_group` found: the frame, the keys it did not consume and the
    group's attribute map as stored."""

    def __init__(self, frame: Frame, unknown: list[str], attributes: dict | None = None):
        self.frame = frame
        self.unknown = unknown
        self.attributes = {} if attributes is None else attributes


def _refuse(kind: str, message: str, where: str) -> RefusalError:
    return RefusalError(message, path=where, kind=kind)


def _child_nodes(store, path: str) -> list[tuple[str, Any]]:
    """(name, parsed zarr.json) of every child node of ``path``, sorted by name."""
    out = []
    for name in sorted(store.list_dir(path)):
        node = read_node(store, _join(path, name))
        if node is not None:
            out.append((name, node))
    return out


def _read_column(store, apath: str, meta: ArrayMetadata, count: int) -> np.ndarray:
    where = store.describe(apath)
    dtype_from_zarr(meta.data_type.name, where)          # narrow floats, fixed strings ... refused
    if not meta.shape:
        raise _refuse("row_count_mismatch", "a column is an array with a leading (row) axis, found a 0-d array",
                      where)
    if meta.shape[0] != count:
        raise _refuse("row_count_mismatch", f"the column has {meta.shape[0]} rows but its block's count is {count}",
                      where)
    return Array(store, apath, meta).read()


def _read_box(store, path: str, group: GroupMetadata, consumed: set[str]) -> Box:
    where = store.describe(path)
    defined = group.attributes.get("cell_defined", True)
    if not isinstance(defined, bool):
        raise _refuse("bad_box", f"cell_defined must be a bool, found {defined!r}", where)
    parts: dict[str, np.ndarray] = {}
    for name in ("vectors", "origin", "boundary"):
        apath = f"{path}/{name}"
        node = read_node(store, apath)
        if node is None:
            continue
        if not isinstance(node, ArrayMetadata):
            raise _refuse("bad_box", f"{name} must be an array, found a group", store.describe(apath))
        dtype = dtype_from_zarr(node.data_type.name, store.describe(apath))
        want = "bool" if name == "boundary" else "f64"
        if dtype != want:
            raise _refuse("bad_box", f"{name} must be {want}, found {dtype}", store.describe(apath))
        parts[name] = Array(store, apath, node).read()
        consumed.add(apath + "/")
    if defined and "vectors" not in parts:
        raise _refuse("bad_box", "a defined cell needs its vectors array", where)
    try:
        return Box(parts.get("vectors") if defined else None, parts.get("origin"), parts.get("boundary"), defined)
    except RefusalError as exc:
        raise _refuse(exc.kind, exc.detail, where) from None


def read_frame_group(store, path: str, *, typed_meta: bool = True, cell: bool = True) -> FrameGroup:
    """Read the frame-shaped group at ``path`` (refusals name the offending node).

    ``path`` may be any group of the store, ``""`` (the root) included.  With
    ``typed_meta=False`` the attributes are a plain document (the force
    field's): they are not decoded into ``frame.meta`` but returned verbatim as
    ``attributes``.  With ``cell=False`` a child group named ``box`` is not the
    cell: it is left unread (unknown content).
    """
    where = store.describe(path)
    group = read_node(store, path)
    if group is None:
        raise _refuse("missing_section", "no zarr.json: the group does not exist", where)
    if not isinstance(group, GroupMetadata):
        raise _refuse("bad_layout", "a frame-shaped section is a group, found an array", where)
    consumed: set[str] = {meta_key(path)}
    meta, tags = decode_meta_document(group.attributes, where) if typed_meta else ({}, {})
    blocks: dict[str, dict[str, np.ndarray]] = {}
    masks: dict[str, dict[str, np.ndarray]] = {}
    counts: dict[str, int] = {}
    precision: dict[str, dict[str, float]] = {}
    block_attrs: dict[str, dict[str, Any]] = {}
    box: Box | None = None
    stored: dict[str, dict[str, str]] = {}            # block -> column -> stored mrec dtype
    for name, node in _child_nodes(store, path):
        cpath = _join(path, name)
        if not isinstance(node, GroupMetadata):
            continue                                  # an array beside the blocks: not ours, kept verbatim
        if name in FRAME_RESERVED_BLOCKS:
            if not cell:
                continue                              # not a cell here: kept verbatim
            box = _read_box(store, cpath, node, consumed)
            consumed.add(meta_key(cpath))
            continue
        bwhere = store.describe(cpath)
        attrs = dict(node.attributes)
        if "count" not in attrs:
            raise _refuse("row_count_mismatch", "a block must carry its count attribute", bwhere)
        n = attrs.pop("count")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise _refuse("row_count_mismatch", f"count must be a non-negative integer, found {n!r}", bwhere)
        counts[name] = n
        consumed.add(meta_key(cpath))
        cols: dict[str, np.ndarray] = {}
        stored[name] = {}
        children = _child_nodes(store, cpath)
        for cname, cnode in children:                 # columns first: a count mismatch is named as such
            apath = f"{cpath}/{cname}"
            if isinstance(cnode, GroupMetadata):
                continue                              # _validity is read below; other groups are not columns
            cols[cname] = _read_column(store, apath, cnode, n)
            # a reader hands back the stored dtype or refuses: the Frame constructor converts an exact
            # integer array to its canonical / row-reference dtype, which is for a producer's input,
            # never for what is on disk (the stored dtype is its hint: a canonical column or a row
            # reference stored at another dtype is refused, not widened)
            stored[name][cname] = dtype_from_zarr(cnode.data_type.name)
            check_canonical(name, cname, stored[name][cname], cols[cname].shape[1:], store.describe(apath))
            consumed.add(apath + "/")
            p = cnode.attributes.get("precision")
            if p is not None:
                precision.setdefault(name, {})[cname] = p
        if any(cname == VALIDITY and isinstance(cnode, GroupMetadata) for cname, cnode in children):
            masks[name] = _read_masks(store, f"{cpath}/{VALIDITY}", n, consumed)
        blocks[name] = cols
        if attrs:
            block_attrs[name] = attrs
    for b, ms in masks.items():
        for c in ms:
            if c not in blocks[b]:
                raise _refuse("bad_validity", f"mask {c!r} names no column of block {b!r}",
                              store.describe(f"{_join(path, b)}/{VALIDITY}/{c}"))
    try:
        frame = Frame(blocks=blocks, box=box, meta=meta, masks=masks, meta_types=tags, counts=counts,
                      precision=precision, block_attrs=block_attrs, dtype_hints=stored)
    except RefusalError as exc:
        raise _refuse(exc.kind, exc.detail, where) from None
    unknown = [k for k in store.list(path) if k not in consumed and not any(
        k.startswith(c) for c in consumed if c.endswith("/"))]
    return FrameGroup(frame, unknown, dict(group.attributes))


def _read_masks(store, vpath: str, count: int, consumed: set[str]) -> dict[str, np.ndarray]:
    consumed.add(meta_key(vpath))
    out: dict[str, np.ndarray] = {}
    for cname, node in _child_nodes(store, vpath):
        apath = f"{vpath}/{cname}"
        w = store.describe(apath)
        if not isinstance(node, ArrayMetadata):
            continue
        if node.data_type.name != "bool":
            raise _refuse("bad_validity", f"a validity mask is bool, found {node.data_type.name}", w)
        if node.shape != (count,):
            raise _refuse("bad_validity", f"a validity mask has shape [{count}] (one flag per row), "
                                          f"found {list(node.shape)}", w)
        out[cname] = Array(store, apath, node).read()
        consumed.add(apath + "/")
    return out

