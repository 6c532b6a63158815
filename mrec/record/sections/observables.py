"""The ``observables`` section (mrec-notes §6.1): named arrays with a meta document each.

::

    observables/
      <name>          data array: any shape (0-d allowed), any of the 13 column dtypes
      meta/<name>/    group attributes: kind, description, time_dependent, unit?, axes?,
                      sampling?, domain?, target?, producer keys (kept verbatim)

The pairing is mandatory: an array without its meta group, or a meta group
without its array, is malformed.  Unknown ``kind`` values are carried through.
Refusals are kind ``bad_observable`` (``unknown_dtype`` / ``narrow_float``
for the data's dtype).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ...errors import RefusalError
from ...zarr.array import Array, meta_key, read_node, write_group
from ...zarr.metadata import ArrayMetadata, GroupMetadata
from .documents import _plain
from ..model.dtypes import dtype_from_zarr, dtype_of_array
from .fixed import write_fixed_array
from ..model.names import check_node_name
from ..model.equality import EqualByValue

__all__ = ["Observable", "check_observables", "write_observables", "read_observables", "SECTION"]

SECTION = "observables"
META = "meta"
_KIND = "bad_observable"
_STRINGS = ("unit", "sampling", "domain", "target")


def _refuse(message: str, where: str | None = None, kind: str = _KIND) -> RefusalError:
    return RefusalError(message, path=where, kind=kind)


def check_observable_meta(meta: Any, name: str, where: str | None = None) -> dict:
    """The meta document of observable ``name``, checked; returned as a plain dict."""
    at = f"observable {name!r}"
    if not isinstance(meta, Mapping):
        raise _refuse(f"{at}: the meta document is an object, found {type(meta).__name__}", where)
    d = dict(meta)
    try:
        _plain(d, where, at)
    except RefusalError as exc:
        raise _refuse(exc.detail, where) from None
    for key in ("kind", "description", "time_dependent"):
        if key not in d:
            raise _refuse(f"{at}: {key!r} is required", where)
    if not isinstance(d["kind"], str) or not d["kind"]:
        raise _refuse(f"{at}: kind must be a non-empty string, found {d['kind']!r}", where)
    if not isinstance(d["description"], str):
        raise _refuse(f"{at}: description must be a string, found {d['description']!r}", where)
    if not isinstance(d["time_dependent"], bool):
        raise _refuse(f"{at}: time_dependent must be a bool, found {d['time_dependent']!r}", where)
    for key in _STRINGS:
        if d.get(key) is not None and not isinstance(d[key], str):
            raise _refuse(f"{at}: {key} must be a string, found {d[key]!r}", where)
    axes = d.get("axes")
    if axes is not None and (not isinstance(axes, list) or not all(isinstance(a, str) for a in axes)):
        raise _refuse(f"{at}: axes must be a list of strings, found {axes!r}", where)
    return d


@dataclass(eq=False)
class Observable(EqualByValue):
    """One observable: ``data`` (numpy array, 0-d allowed) and its ``meta`` document.

    Build one as ``Observable(data, {"kind": "scalar", "description": "...",
    "time_dependent": False, "unit": "eV"})``; :meth:`from_any` also takes
    ``{"data": ..., "meta": {...}}`` or ``{"data": ..., "kind": ..., ...}``.
    """

    data: Any
    meta: dict = field(default_factory=dict)
    name: str = "observable"

    def __post_init__(self) -> None:
        a = self.data if isinstance(self.data, np.ndarray) else np.asarray(self.data)
        if a.dtype.kind in ("U", "T"):
            a = a.astype(object)
        self.dtype = dtype_of_array(a, what=f"observable {self.name!r}")
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        self.data = a
        self.meta = check_observable_meta(self.meta, self.name)
        if self.meta["time_dependent"] and a.ndim < 1:
            raise _refuse(f"observable {self.name!r}: a time-dependent observable has a leading "
                          "(trajectory) axis, found a 0-d array")

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def description(self) -> str:
        return self.meta["description"]

    @property
    def time_dependent(self) -> bool:
        return self.meta["time_dependent"]

    @classmethod
    def from_any(cls, obj: Any, name: str = "observable") -> "Observable":
        if isinstance(obj, Observable):
            return obj if obj.name == name else Observable(obj.data, obj.meta, name)
        if not isinstance(obj, Mapping) or "data" not in obj:
            raise _refuse(f"observable {name!r}: expected an Observable or a mapping with 'data', "
                          f"found {type(obj).__name__}")
        if "meta" in obj and set(obj) <= {"data", "meta"}:
            return cls(obj["data"], dict(obj["meta"]), name)
        return cls(obj["data"], {k: v for k, v in obj.items() if k != "data"}, name)

    def equals(self, other: "Observable") -> bool:
        a, b = self.data, other.data
        same = (a.shape == b.shape and a.dtype == b.dtype
                and (a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()))
        return same and self.meta == other.meta


def check_observables(observables: Any) -> dict[str, Observable]:
    """``{name: Observable}`` from a mapping of names to observables (names checked)."""
    if not isinstance(observables, Mapping):
        raise _refuse(f"observables are a mapping of names, found {type(observables).__name__}")
    out: dict[str, Observable] = {}
    for name, obs in observables.items():
        check_node_name(name, "observable", _KIND)
        if name == META:
            raise _refuse("an observable may not be named 'meta' (it holds the meta documents)")
        out[name] = Observable.from_any(obs, name)
    return out


def write_observables(store, observables: Mapping[str, Observable], *, compression=None,
                      attributes: dict | None = None, path: str = SECTION) -> list[str]:
    """Write the section: the group, ``meta/``, then each array and its meta group."""
    write_group(store, path, attributes or {})
    keys = [meta_key(path)]
    write_group(store, f"{path}/{META}")
    keys.append(meta_key(f"{path}/{META}"))
    for name, obs in observables.items():
        keys += write_fixed_array(store, f"{path}/{name}", obs.data, obs.dtype, compression=compression)
        write_group(store, f"{path}/{META}/{name}", obs.meta)
        keys.append(meta_key(f"{path}/{META}/{name}"))
    return keys


def read_observables(store) -> tuple[dict[str, Observable], dict, list[str]]:
    """(observables, the section group's attributes, keys not consumed) of a store's section."""
    where = store.describe(SECTION)
    group = read_node(store, SECTION)
    if not isinstance(group, GroupMetadata):
        raise _refuse("the observables section is a group", where)
    consumed = {meta_key(SECTION), meta_key(f"{SECTION}/{META}")}
    arrays: dict[str, ArrayMetadata] = {}
    metas: dict[str, GroupMetadata] = {}
    for name in sorted(store.list_dir(SECTION)):
        if name == META:
            continue
        node = read_node(store, f"{SECTION}/{name}")
        if isinstance(node, ArrayMetadata):
            arrays[name] = node
    meta_group = read_node(store, f"{SECTION}/{META}")
    if meta_group is not None and not isinstance(meta_group, GroupMetadata):
        raise _refuse("observables/meta is a group of meta documents, found an array",
                      store.describe(f"{SECTION}/{META}"))
    for name in sorted(store.list_dir(f"{SECTION}/{META}")):
        node = read_node(store, f"{SECTION}/{META}/{name}")
        if isinstance(node, GroupMetadata):
            metas[name] = node
    for name in sorted(set(arrays) ^ set(metas)):
        if name in arrays:
            raise _refuse(f"observable {name!r} has a data array but no meta group (observables/meta/{name})",
                          store.describe(f"{SECTION}/{name}"))
        raise _refuse(f"observable {name!r} has a meta group but no data array (observables/{name})",
                      store.describe(f"{SECTION}/{META}/{name}"))
    out: dict[str, Observable] = {}
    for name, node in arrays.items():
        apath = f"{SECTION}/{name}"
        dtype_from_zarr(node.data_type.name, store.describe(apath))
        data = Array(store, apath, node).read()
        try:
            out[name] = Observable(data, dict(metas[name].attributes), name)
        except RefusalError as exc:
            raise RefusalError(exc.detail, path=store.describe(f"{SECTION}/{META}/{name}"), kind=exc.kind) from None
        consumed.add(meta_key(f"{SECTION}/{META}/{name}"))
    prefixes = tuple(f"{SECTION}/{n}/" for n in arrays)
    unknown = [k for k in store.list(SECTION) if k not in consumed and not k.startswith(prefixes)]
    return out, dict(group.attributes), unknown
