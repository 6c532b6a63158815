"""``transpose``: permute the axes of a chunk (any order)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import MetadataError
from .base import ArrayArrayCodec, ChunkSpec


@dataclass(frozen=True)
class TransposeCodec(ArrayArrayCodec):
    name = "transpose"
    keeps_size = True
    order: tuple[int, ...] | str = ()

    @classmethod
    def from_config(cls, config, where):
        order = (config or {}).get("order")
        if order in ("C", "F"):
            # transpose v1.0, as accepted with ZEP 1: "The order configuration parameter no longer
            # supports the constants "C" or "F" and must instead always be specified as an explicit
            # permutation" (a Zarr V2 leftover)
            raise MetadataError(f"transpose order {order!r} is a Zarr V2 memory order; Zarr V3 takes an explicit "
                                "permutation (e.g. [1, 0])", path=where)
        if not isinstance(order, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in order) \
                or sorted(order) != list(range(len(order))):
            raise MetadataError(f"transpose order {order!r} is not a permutation", path=where)
        return cls(tuple(order))

    def to_json(self):
        order = self.order if isinstance(self.order, str) else list(self.order)
        return {"name": "transpose", "configuration": {"order": order}}

    def _perm(self, ndim: int, where: str) -> tuple[int, ...]:
        if self.order == "C":
            return tuple(range(ndim))
        if self.order == "F":
            return tuple(reversed(range(ndim)))
        if len(self.order) != ndim:
            raise MetadataError(f"transpose order {list(self.order)} does not match {ndim} dimensions", path=where)
        return self.order

    def resolve(self, spec):
        perm = self._perm(len(spec.shape), spec.where)
        return spec.with_shape(tuple(spec.shape[i] for i in perm))

    def encode(self, arr, spec):
        return np.ascontiguousarray(np.transpose(arr, self._perm(arr.ndim, spec.where)))

    def decode(self, arr, spec):
        perm = self._perm(arr.ndim, spec.where)
        return np.transpose(arr, np.argsort(perm))
