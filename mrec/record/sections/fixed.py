"""Fixed-size arrays: the columns of ``frame/`` and ``system/``, ``observables/`` and ``metrics/``.

Extents (chapter, "Reference writer: extents", fixed-size arrays) -- cut
along the leading axis only::

    rows   = min(N, max(1, floor(512 KiB / row_bytes)))
    chunks = ceil(N / rows)

At most :data:`~mrec.record.extents.FIXED_MAX_CHUNKS` (4) chunks are stored
as plain chunks; more are packed into **one shard spanning the whole array**
(``rows * chunks`` rows, inner chunks of ``rows``, the shard index at the
end).  A string array, an empty leading axis and a 0-d array are one chunk
holding the whole array.  A zero-length trailing axis still needs a
positive chunk extent (Zarr chunk shapes are positive), so it is 1.

Codecs follow the column rule of the chapter: ``bytes`` (``vlen-utf8`` for
strings), then ``numcodecs.shuffle`` + ``zstd`` 3 for a precision column,
nothing for other floats (unless the Compression knob says otherwise),
``gzip`` 1 for everything else, then ``crc32c``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...zarr.array import Array
from ...zarr.dtypes import DATA_TYPES
from ...zarr.metadata import ArrayMetadata
from .. import extents as X
from ..model.dtypes import row_bytes, zarr_data_type

__all__ = ["FixedLayout", "fixed_layout", "fixed_array_meta", "write_fixed_array"]


@dataclass(frozen=True)
class FixedLayout:
    """How one fixed-size array is cut: ``chunk_shape`` of the array's grid, and
    ``inner`` (the inner chunk shape) when the array is one shard."""

    chunk_shape: tuple[int, ...]
    inner: tuple[int, ...] | None

    @property
    def sharded(self) -> bool:
        return self.inner is not None


def fixed_layout(dtype: str, shape: tuple[int, ...]) -> FixedLayout:
    """The reference extents of a fixed-size array of mrec dtype ``dtype`` and ``shape``."""
    shape = tuple(int(s) for s in shape)
    whole = tuple(max(1, s) for s in shape)
    if not shape or dtype == "string" or shape[0] == 0:
        return FixedLayout(whole, None)
    n, trailing = shape[0], shape[1:]
    rb = row_bytes(dtype, trailing)
    rows, chunks = X.fixed_extent(n, max(1, rb))
    tail = tuple(max(1, t) for t in trailing)
    if chunks <= X.FIXED_MAX_CHUNKS:
        return FixedLayout((rows, *tail), None)
    return FixedLayout((rows * chunks, *tail), (rows, *tail))


def fixed_array_meta(dtype: str, shape, *, precision: bool = False, compression=None,
                     attributes: dict | None = None) -> ArrayMetadata:
    """The ``zarr.json`` of a fixed-size array, reference extents and codecs."""
    shape = tuple(int(s) for s in shape)
    layout = fixed_layout(dtype, shape)
    chunk_bytes = int(np.prod(layout.inner or layout.chunk_shape)) * row_bytes(dtype, ())
    bb = X.bytes_to_bytes(dtype, precision=precision, dense=False, compression=X.Compression.parse(compression),
                          chunk_bytes=chunk_bytes)
    inner = X.inner_pipeline(dtype, bb)
    codecs = X.sharded(layout.inner, inner, "end") if layout.sharded else inner
    return ArrayMetadata.create(shape, DATA_TYPES[zarr_data_type(dtype)], layout.chunk_shape, codecs,
                                attributes=attributes)


def write_fixed_array(store, path: str, values: np.ndarray, dtype: str, *, precision: bool = False,
                      compression=None, attributes: dict | None = None) -> list[str]:
    """Create the array at ``path`` and write ``values``; returns the keys written (zarr.json first)."""
    meta = fixed_array_meta(dtype, np.shape(values), precision=precision, compression=compression,
                            attributes=attributes)
    arr = Array.create(store, path, meta)
    keys = [f"{path}/zarr.json"]
    keys += arr.write(values)
    return keys
