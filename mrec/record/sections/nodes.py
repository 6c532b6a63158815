"""Plain Zarr node trees: the form of a section mrec does not model (mrec-notes §1.1, [IMPL]).

The reference keeps an unknown root section as a verbatim node tree:
attributes, arrays with their attributes, child groups.  :class:`Group` is
that tree in memory, so a producer can *create* such a section (a vendor
section, ``x_analysis/``) through the public API, and read one back with
:func:`read_group_tree`.  Arrays take any of the 13 column dtypes and any
shape (0-d included); they are written with the fixed-size extents and
codecs (``mrec/record/sections/fixed.py``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import RefusalError
from ...zarr.array import Array, meta_key, read_node, write_group
from ...zarr.metadata import ArrayMetadata, GroupMetadata
from .documents import _plain
from ..model.dtypes import dtype_from_zarr, dtype_of_array
from .fixed import write_fixed_array
from ..model.names import check_node_name
from ..model.equality import EqualByValue

__all__ = ["Group", "write_group_tree", "read_group_tree"]

_KIND = "bad_layout"


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def _as_array(value: Any, what: str) -> np.ndarray:
    a = value if isinstance(value, np.ndarray) else np.asarray(value)
    if a.dtype.kind in ("U", "T"):
        a = a.astype(object)
    dtype_of_array(a, what=what)                       # narrow floats, bytes, mixed objects refused
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a


@dataclass(eq=False)
class Group(EqualByValue):
    """A Zarr group: ``attributes`` (plain JSON), ``arrays`` (name -> numpy array),
    ``groups`` (name -> Group), ``array_attributes`` (name -> attributes of that array).

    Nested mappings are accepted for ``groups`` (``{"attributes": ..., "arrays": ...,
    "groups": ...}``).  Names are node names (no ``/``, not ``.``/``..``, no leading
    ``__``) and an array and a group never share one (kind ``bad_layout``).
    """

    attributes: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    array_attributes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _plain(dict(self.attributes), None, "group attributes")
        self.attributes = dict(self.attributes)
        arrays = {}
        for name, v in dict(self.arrays).items():
            check_node_name(name, "array", _KIND)
            arrays[name] = _as_array(v, f"array {name!r}")
        groups = {}
        for name, g in dict(self.groups).items():
            check_node_name(name, "group", _KIND)
            if name in arrays:
                raise RefusalError(f"{name!r} names both an array and a group", kind=_KIND)
            groups[name] = Group.from_any(g)
        attrs = {}
        for name, a in dict(self.array_attributes).items():
            if name not in arrays:
                raise RefusalError(f"array_attributes names {name!r}, which is no array of the group", kind=_KIND)
            _plain(dict(a), None, f"attributes of array {name!r}")
            attrs[name] = dict(a)
        self.arrays, self.groups, self.array_attributes = arrays, groups, attrs

    @classmethod
    def from_any(cls, obj: Any) -> "Group":
        if isinstance(obj, Group):
            return obj
        if isinstance(obj, Mapping) and set(obj) <= {"attributes", "arrays", "groups", "array_attributes"}:
            return cls(**dict(obj))
        raise RefusalError(f"a group is a Group or a mapping of attributes / arrays / groups / array_attributes, "
                           f"found {type(obj).__name__}", kind=_KIND)

    def equals(self, other: "Group") -> bool:
        def same(a: np.ndarray, b: np.ndarray) -> bool:
            return a.shape == b.shape and a.dtype == b.dtype and (
                a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes())
        return (self.attributes == other.attributes and self.array_attributes == other.array_attributes
                and set(self.arrays) == set(other.arrays) and set(self.groups) == set(other.groups)
                and all(same(a, other.arrays[n]) for n, a in self.arrays.items())
                and all(g.equals(other.groups[n]) for n, g in self.groups.items()))


def write_group_tree(store, path: str, group: Any, *, compression=None) -> list[str]:
    """Write ``group`` (a :class:`Group` or its mapping form) at ``path``; returns the keys written."""
    g = Group.from_any(group)
    write_group(store, path, g.attributes)
    keys = [meta_key(path)]
    for name, a in g.arrays.items():
        keys += write_fixed_array(store, _join(path, name), a, dtype_of_array(a), compression=compression,
                                  attributes=g.array_attributes.get(name))
    for name, sub in g.groups.items():
        keys += write_group_tree(store, _join(path, name), sub, compression=compression)
    return keys


def read_group_tree(store, path: str) -> Group:
    """The node tree at ``path`` (any group of the store); nodes without a ``zarr.json`` are skipped."""
    node = read_node(store, path)
    if not isinstance(node, GroupMetadata):
        raise RefusalError("expected a group" if node is not None else "no zarr.json: the group does not exist",
                           path=store.describe(path), kind="bad_layout" if node is not None else "missing_section")
    arrays, attrs, groups = {}, {}, {}
    for name in sorted(store.list_dir(path)):
        cpath = _join(path, name)
        child = read_node(store, cpath)
        if isinstance(child, ArrayMetadata):
            dtype_from_zarr(child.data_type.name, store.describe(meta_key(cpath)))
            arrays[name] = Array(store, cpath, child).read()
            if child.attributes:
                attrs[name] = dict(child.attributes)
        elif isinstance(child, GroupMetadata):
            groups[name] = read_group_tree(store, cpath)
    return Group(dict(node.attributes), arrays, groups, attrs)
