"""The ``metrics`` section, closed/dense form (mrec-notes §6.2, §6.3).

::

    metrics/                 attrs = catalog: series {key: {type, count, latest_step,
                             latest_timestamp}}, wal? {lines, bytes}, producer keys
      series/<safe>          f64[n]     values (after the duplicate-step rule)
      steps/<safe>           i64[n]     only when the series has steps
      wall_time/<safe>       string[n]  RFC 3339 times
      metrics.jsonl          the live WAL: a plain file, kept verbatim

Events are ``{"type": "scalar", "key": "train/loss", "step": 120,
"wall_time": "2026-08-04T12:00:00Z", "value": 0.42, "tags": {...}}``.  A
series is the events of one key in log order; the same ``step`` twice keeps
the **later** value (at the position of the first occurrence); events
without a step are never merged.  Only ``scalar`` series have a dense form
(a custom type stays in the WAL).  Reading applies WAL lines past the
catalog's ``wal`` watermark under the same rule.  Refusals: ``bad_metrics``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ...errors import CorruptionError, RefusalError
from ...zarr.array import Array, meta_key, read_node, write_group
from ...zarr.metadata import ArrayMetadata, GroupMetadata
from .documents import RFC3339, _plain
from .fixed import write_fixed_array
from ..model.equality import EqualByValue

__all__ = ["MetricSeries", "Metrics", "safe_name", "unsafe_name", "SECTION", "WAL"]

SECTION = "metrics"
WAL = "metrics/metrics.jsonl"
_KIND = "bad_metrics"
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _refuse(message: str, where: str | None = None) -> RefusalError:
    return RefusalError(message, path=where, kind=_KIND)


def safe_name(key: str) -> str:
    """The node name of series ``key``: bytes outside ``[A-Za-z0-9._-]`` as ``%XX``.

    ``.`` / ``..`` / a leading ``__`` get their first byte escaped too, so
    every key maps to a legal, distinct node name and back.
    """
    if not isinstance(key, str) or not key:
        raise _refuse(f"a metrics key is a non-empty string, found {key!r}")
    out = "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in key.encode("utf-8"))
    if out in (".", ".."):
        out = "%2E" + out[1:]
    elif out.startswith("__"):
        out = "%5F" + out[1:]
    if len(out) > 255:
        raise _refuse(f"metrics key {key[:60]!r}... names a node of {len(out)} bytes (escaped), more than the 255 "
                      "a file name may hold")
    return out


def unsafe_name(name: str) -> str:
    """Inverse of :func:`safe_name`."""
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "%" and i + 2 < len(name) + 0 and all(c in "0123456789ABCDEFabcdef" for c in name[i + 1:i + 3]):
            raw.append(int(name[i + 1:i + 3], 16))
            i += 3
        else:
            raw += name[i].encode("utf-8")
            i += 1
    return raw.decode("utf-8")


@dataclass(eq=False)
class MetricSeries:
    """One dense series: ``values`` f64[n], ``steps`` i64[n] or None, ``wall_time`` list of n strings or None."""

    key: str
    values: Any
    steps: Any = None
    wall_time: Any = None
    type: str = "scalar"

    def __post_init__(self) -> None:
        at = f"metrics series {self.key!r}"
        safe_name(self.key)
        if self.type != "scalar":
            raise _refuse(f"{at}: only scalar series have a dense form, found type {self.type!r}")
        v = np.asarray(self.values)
        if v.ndim != 1 or v.dtype.kind not in "iuf" or (v.dtype.kind == "f" and v.dtype.itemsize != 8):
            raise _refuse(f"{at}: values are a 1-d f64 array, found {v.dtype} {list(v.shape)}")
        self.values = np.array(v, dtype="<f8")
        n = len(self.values)
        if self.steps is not None:
            s = np.asarray(self.steps)
            if s.shape != (n,) or (s.size and s.dtype.kind not in "iu"):
                raise _refuse(f"{at}: steps are i64[{n}], found {s.dtype} {list(s.shape)}")
            self.steps = np.array(s, dtype="<i8")
        if self.wall_time is not None:
            w = [str(t) for t in self.wall_time] if isinstance(self.wall_time, np.ndarray) else list(self.wall_time)
            if len(w) != n:
                raise _refuse(f"{at}: wall_time has {len(w)} entries for {n} values")
            for t in w:
                if not isinstance(t, str) or not RFC3339.fullmatch(t):
                    raise _refuse(f"{at}: wall_time {t!r} is not RFC 3339 with an explicit offset")
            self.wall_time = w

    def __len__(self) -> int:
        return len(self.values)

    def equals(self, other: "MetricSeries") -> bool:
        def same(a, b):
            return (a is None) == (b is None) and (a is None or np.asarray(a).tobytes() == np.asarray(b).tobytes())
        return (self.key == other.key and self.type == other.type and same(self.values, other.values)
                and same(self.steps, other.steps) and (self.wall_time or None) == (other.wall_time or None))

    def catalog_entry(self) -> dict:
        return {"type": self.type, "count": len(self),
                "latest_step": int(self.steps.max()) if self.steps is not None and len(self) else None,
                "latest_timestamp": self.wall_time[-1] if self.wall_time else None}


class _Builder:
    """Accumulates one key's events under the duplicate-step rule."""

    def __init__(self, key: str, type_: str):
        self.key, self.type = key, type_
        self.values: list[float] = []
        self.steps: list[int | None] = []
        self.times: list[str | None] = []
        self.at_step: dict[int, int] = {}

    def add(self, step, value: float, wall_time) -> None:
        if step is not None and step in self.at_step:
            i = self.at_step[step]
            self.values[i], self.times[i] = value, wall_time
            return
        if step is not None:
            self.at_step[step] = len(self.values)
        self.values.append(value)
        self.steps.append(step)
        self.times.append(wall_time)

    def series(self) -> MetricSeries:
        has = [s is not None for s in self.steps]
        if any(has) and not all(has):
            raise _refuse(f"metrics series {self.key!r}: some events have a step and some do not")
        times = self.times if all(t is not None for t in self.times) and self.times else None
        return MetricSeries(self.key, np.array(self.values, dtype="<f8"),
                            np.array(self.steps, dtype="<i8") if self.steps and all(has) else None,
                            times, self.type)


def _event_value(ev: Mapping, at: str) -> float:
    v = ev.get("value", ev.get("v"))
    if isinstance(v, str) and v in _NON_FINITE:
        return _NON_FINITE[v]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _refuse(f"{at}: a scalar value is a number, found {v!r}")
    return float(v)


def _apply(builders: dict[str, _Builder], events: Iterable[Mapping], where: str | None) -> None:
    for n, ev in enumerate(events):
        at = f"metrics event {n}"
        if not isinstance(ev, Mapping):
            raise _refuse(f"{at}: an event is an object, found {type(ev).__name__}", where)
        type_ = ev.get("type", ev.get("t", "scalar"))
        key = ev.get("key", ev.get("k"))
        step = ev.get("step", ev.get("s"))
        wall = ev.get("wall_time", ev.get("w"))
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise _refuse(f"{at}: step must be an integer, found {step!r}", where)
        if wall is not None and (not isinstance(wall, str) or not RFC3339.fullmatch(wall)):
            raise _refuse(f"{at}: wall_time {wall!r} is not RFC 3339 with an explicit offset", where)
        safe_name(key)
        if type_ != "scalar":
            continue                                   # custom types have no dense form
        b = builders.setdefault(key, _Builder(key, type_))
        b.add(step, _event_value(ev, at), wall)


@dataclass(eq=False)
class Metrics(EqualByValue):
    """The dense series plus the catalog's other keys and the WAL bytes (verbatim)."""

    series: dict[str, MetricSeries] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    wal: bytes | None = None

    @classmethod
    def from_events(cls, events: Iterable[Mapping]) -> "Metrics":
        builders: dict[str, _Builder] = {}
        _apply(builders, events, None)
        return cls({k: b.series() for k, b in builders.items()})

    @classmethod
    def from_any(cls, obj: Any) -> "Metrics":
        if isinstance(obj, Metrics):
            return obj
        if isinstance(obj, Mapping):
            series = {}
            for k, s in obj.items():
                series[k] = s if isinstance(s, MetricSeries) else MetricSeries(k, **dict(s)) \
                    if isinstance(s, Mapping) else MetricSeries(k, s)
            return cls(series)
        return cls.from_events(obj)

    def catalog(self) -> dict:
        attrs = {k: v for k, v in self.attrs.items() if k != "series"}
        attrs["series"] = {k: s.catalog_entry() for k, s in self.series.items()}
        return attrs

    def equals(self, other: "Metrics") -> bool:
        return (set(self.series) == set(other.series)
                and all(s.equals(other.series[k]) for k, s in self.series.items()))


    # -- store ---------------------------------------------------------------------
    def write(self, store, path: str = SECTION) -> list[str]:
        """Write the section at ``path`` (``metrics``; another path when built under a temporary name)."""
        attrs = self.catalog()
        _plain(attrs, store.describe(path), "metrics catalog")
        write_group(store, path, attrs)
        keys = [meta_key(path)]
        if self.series:
            for sub in ("series", "steps", "wall_time"):
                if sub == "series" or any(getattr(s, "steps" if sub == "steps" else sub) is not None
                                          for s in self.series.values()):
                    write_group(store, f"{path}/{sub}")
                    keys.append(meta_key(f"{path}/{sub}"))
        for key, s in self.series.items():
            name = safe_name(key)
            keys += write_fixed_array(store, f"{path}/series/{name}", s.values, "f64")
            if s.steps is not None:
                keys += write_fixed_array(store, f"{path}/steps/{name}", s.steps, "i64")
            if s.wall_time is not None:
                keys += write_fixed_array(store, f"{path}/wall_time/{name}",
                                          np.array(s.wall_time, dtype=object), "string")
        if self.wal is not None:
            store.set(f"{path}/metrics.jsonl", self.wal)
            keys.append(f"{path}/metrics.jsonl")
        return keys

    @classmethod
    def read(cls, store) -> tuple["Metrics", list[str]]:
        """(the section, keys not consumed); WAL lines past the watermark are applied."""
        where = store.describe(SECTION)
        group = read_node(store, SECTION)
        if not isinstance(group, GroupMetadata):
            raise _refuse("the metrics section is a group", where)
        attrs = dict(group.attributes)
        catalog = attrs.get("series", {})
        if not isinstance(catalog, Mapping):
            raise _refuse("the catalog's series is an object of keys", where)
        consumed = {meta_key(SECTION), WAL}
        builders: dict[str, _Builder] = {}
        for key, entry in catalog.items():
            name = safe_name(key)
            type_ = entry.get("type", "scalar") if isinstance(entry, Mapping) else "scalar"
            if type_ != "scalar":
                continue
            parts = {}
            for sub, want in (("series", "float64"), ("steps", "int64"), ("wall_time", "string")):
                apath = f"{SECTION}/{sub}/{name}"
                node = read_node(store, apath)
                consumed.add(meta_key(f"{SECTION}/{sub}"))
                if node is None:
                    continue
                if not isinstance(node, ArrayMetadata) or node.data_type.name != want or len(node.shape) != 1:
                    raise _refuse(f"metrics {sub} of {key!r} must be a 1-d {want} array", store.describe(apath))
                parts[sub] = Array(store, apath, node).read()
                consumed.add(apath + "/")
            if "series" not in parts:
                raise _refuse(f"the catalog names series {key!r} but metrics/series/{name} is missing", where)
            n = len(parts["series"])
            for sub in ("steps", "wall_time"):
                if sub in parts and len(parts[sub]) != n:
                    raise _refuse(f"metrics {sub}/{name} has {len(parts[sub])} entries, series has {n}", where)
            b = builders.setdefault(key, _Builder(key, type_))
            steps = parts.get("steps")
            times = parts.get("wall_time")
            for i in range(n):
                b.add(int(steps[i]) if steps is not None else None, float(parts["series"][i]),
                      str(times[i]) if times is not None else None)
        wal = store.get(WAL)
        mark = attrs.get("wal")
        if wal is not None and isinstance(mark, Mapping):
            _apply(builders, _wal_events(wal, mark.get("bytes", 0), store.describe(WAL)), store.describe(WAL))
        m = cls({k: b.series() for k, b in builders.items()}, {k: v for k, v in attrs.items() if k != "series"}, wal)
        unknown = [k for k in store.list(SECTION) if k not in consumed
                   and not any(k.startswith(c) for c in consumed if c.endswith("/"))]
        return m, unknown


def _wal_events(raw: bytes, start: Any, where: str) -> list[dict]:
    """Complete lines of the WAL from byte ``start`` on (an unterminated tail is ignored)."""
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(raw):
        raise _refuse(f"the wal watermark bytes={start!r} is not within the WAL ({len(raw)} bytes)", where)
    body = raw[start:]
    end = body.rfind(b"\n")
    out = []
    for n, line in enumerate(body[:end + 1].split(b"\n")[:-1] if end >= 0 else []):
        if not line.strip():
            continue
        try:
            ev = json.loads(line.decode("utf-8"))
        except RecursionError:
            raise CorruptionError(f"WAL line {n + 1} past the watermark nests too deeply", path=where) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorruptionError(f"WAL line {n + 1} past the watermark is not one JSON object ({exc})",
                                  path=where) from None
        if not isinstance(ev, dict):
            raise CorruptionError(f"WAL line {n + 1} past the watermark is not a JSON object", path=where)
        out.append(ev)
    return out
