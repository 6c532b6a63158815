"""Lazy ``dask.array`` views of trajectory columns (the ``dask`` extra: ``pip install 'mrec[dask]'``).

* :func:`column` — any column of a trajectory block: ``(frames, rows, *trailing)`` for a regular block
  updated at every frame, else the block's rows ``(total_rows, *trailing)`` (the CSR values; frame ``i``
  is ``offset[update_at(i)] : offset[update_at(i) + 1]`` of :class:`~mrec.TrajectoryReader`).
* :func:`positions` — ``(frames, rows, 3)`` from the x, y, z columns of a regular block.
* :func:`concatenate` — the frames of many records, one after the other, as one lazy array.

Chunks are the array's inner chunks (a dask chunk is a whole number of them, the smallest such run
when a chunk does not hold whole frames), so no inner chunk is decoded twice; building the array reads
only metadata, and nothing else is read until it is computed.  A task carries the record's path or URL
and its ``storage_options`` — never a file handle or fetched bytes — and opens the record in the worker
(once per worker process: opened stores are kept), so the graph runs on a ``dask.distributed`` cluster
whose workers reach the same URL.
"""
from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict

import numpy as np

from .errors import RefusalError
from .fs.urls import require

_OPEN: "OrderedDict[tuple, object]" = OrderedDict()     # (path, options) -> store, per process
_OPEN_MAX = 64
_LOCK = threading.Lock()
_LOCAL = threading.local()


def _dask_array():
    require("dask", "dask")
    return require("dask.array", "dask")


def _store(path: str, options_json: str):
    from .record.trajectory.store import open_store
    key = (path, options_json)
    with _LOCK:
        st = _OPEN.get(key)
        if st is not None:
            _OPEN.move_to_end(key)
            return st
    st = open_store(path, storage_options=json.loads(options_json) or None)
    with _LOCK:
        _OPEN[key] = st
        while len(_OPEN) > _OPEN_MAX:
            _OPEN.popitem(last=False)
    return st


def _array(path: str, options_json: str, array_path: str):
    """The worker's Array for one record array (one per thread: an Array keeps per-read caches)."""
    from .zarr.array import Array
    cache = getattr(_LOCAL, "arrays", None)
    if cache is None:
        cache = _LOCAL.arrays = {}
    key = (path, options_json, array_path)
    arr = cache.get(key)
    if arr is None:
        arr = cache[key] = Array.open(_store(path, options_json), array_path, appended=True)
    return arr


def _read_rows(path: str, options_json: str, array_path: str, lo: int, hi: int, shape: tuple) -> np.ndarray:
    return _array(path, options_json, array_path).read(slice(lo, hi)).reshape(shape)


def _read_xyz(path: str, options_json: str, array_paths: tuple, lo: int, hi: int, shape: tuple) -> np.ndarray:
    return np.stack([_read_rows(path, options_json, p, lo, hi, shape[:-1]) for p in array_paths], axis=-1)


def _source(src, storage_options):
    """(path, options JSON, reader) of a path, URL or TrajectoryReader."""
    from .record.trajectory.reader import TrajectoryReader
    if isinstance(src, TrajectoryReader):
        if src.path is None:
            raise RefusalError("a reader opened on a store object has no path to reopen in a worker: open it "
                               "by path or URL", kind="not_reopenable")
        reader, path = src, src.path
        storage_options = storage_options if storage_options is not None else src.storage_options
    else:
        path = os.fspath(src)
        reader = TrajectoryReader(path, storage_options=storage_options)
    return path, json.dumps(storage_options or {}, sort_keys=True), reader


def _chunk_rows(arr) -> int:
    sh = arr.sharding
    return (sh.chunk_shape if sh is not None else arr.meta.chunk_shape)[0]


def _bounds(total: int, step: int) -> list[tuple[int, int]]:
    return [(lo, min(total, lo + step)) for lo in range(0, total, step)] if total else []


def _regular(reader, block: str):
    b = reader.layout.blocks.get(block)
    if b is None:
        raise KeyError(f"block {block!r} is not declared")
    return b if b.regular and b.n_updates == reader.nstep and b.uniform_rows else None


def _frames_per_task(arrs, u: int) -> int:
    """Frames per dask chunk: the fewest whole inner chunks (of every column given) holding whole frames."""
    rows = u
    for a in arrs:
        rows = math.lcm(rows, _chunk_rows(a))
    return rows // u


def column(src, block: str, name: str, *, storage_options=None):
    """A lazy dask array of one trajectory column (see the module docstring for its shape)."""
    da = _dask_array()
    import dask
    path, opts, reader = _source(src, storage_options)
    b = reader.layout.blocks.get(block)
    if b is None or name not in b.decl.columns:
        raise KeyError(f"{block}/{name} is not declared")
    arr = b.columns.get(name)
    dtype = np.dtype(arr.dtype) if arr is not None else np.dtype("f8")
    trailing = tuple(arr.shape[1:]) if arr is not None else tuple(b.decl.columns[name].trailing)
    apath = f"trajectory/{block}/{name}"
    reg = _regular(reader, block)
    parts = []
    if reg is not None:
        u = reg.uniform_rows
        fpt = _frames_per_task([arr], u)
        for f0, f1 in _bounds(reader.nstep, fpt):
            shape = (f1 - f0, u, *trailing)
            d = dask.delayed(_read_rows, pure=True)(path, opts, apath, f0 * u, f1 * u, shape)
            parts.append(da.from_delayed(d, shape, dtype=dtype))
        empty = (0, u, *trailing)
    else:
        total = b.total_rows
        for r0, r1 in _bounds(total, _chunk_rows(arr) if arr is not None else 1):
            shape = (r1 - r0, *trailing)
            d = dask.delayed(_read_rows, pure=True)(path, opts, apath, r0, r1, shape)
            parts.append(da.from_delayed(d, shape, dtype=dtype))
        empty = (0, *trailing)
    return da.concatenate(parts, axis=0) if parts else da.zeros(empty, dtype=dtype)


def positions(src, block: str = "atoms", columns=("x", "y", "z"), *, storage_options=None):
    """A lazy ``(frames, rows, 3)`` float64 dask array of a regular block's coordinates."""
    da = _dask_array()
    import dask
    path, opts, reader = _source(src, storage_options)
    b = _regular(reader, block)
    if b is None:
        raise RefusalError(f"block {block!r} is not a regular block updated at every frame: positions() needs "
                           "one row count (use column() for the block's rows)", kind="row_count_mismatch")
    arrs = [b.columns[c] for c in columns]
    u = b.uniform_rows
    fpt = _frames_per_task(arrs, u)
    apaths = tuple(f"trajectory/{block}/{c}" for c in columns)
    parts = []
    for f0, f1 in _bounds(reader.nstep, fpt):
        shape = (f1 - f0, u, len(columns))
        d = dask.delayed(_read_xyz, pure=True)(path, opts, apaths, f0 * u, f1 * u, shape)
        parts.append(da.from_delayed(d, shape, dtype=np.float64))
    return da.concatenate(parts, axis=0) if parts else da.zeros((0, u, len(columns)))


def concatenate(sources, block: str = "atoms", columns=("x", "y", "z"), *, storage_options=None):
    """The frames of many records (paths or URLs, in order) as one lazy ``(frames, rows, 3)`` array
    (with one column name in ``columns``: that column's ``(frames, rows, *trailing)``)."""
    da = _dask_array()
    if isinstance(columns, str):
        arrays = [column(s, block, columns, storage_options=storage_options) for s in sources]
    else:
        arrays = [positions(s, block, columns, storage_options=storage_options) for s in sources]
    return da.concatenate(arrays, axis=0)


__all__ = ["column", "positions", "concatenate"]
