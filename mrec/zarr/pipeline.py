"""The codec pipeline of an array, built from the ``codecs`` list of ``zarr.json``.

:class:`CodecPipeline` is a :class:`~mrec.zarr.codecs.chain.CodecChain` (array→array codecs,
exactly one array→bytes codec, bytes→bytes codecs; encode and decode) parsed by the codec
registry (:func:`~mrec.zarr.codecs.registry.parse_codecs`: only the must-decode set), every
nested chain of a ``sharding_indexed`` codec a :class:`CodecPipeline` too.  It adds the resolved
encoders and decoders the read and append paths use per chunk (``codecs/fused.py``) and the batch
decoder (``codecs/batch.py``).
"""
from __future__ import annotations

import functools

import numpy as np

from .codecs import batch, fused
from .codecs.base import ChunkSpec
from .codecs.chain import CodecChain
from .codecs.registry import parse_codecs


class CodecPipeline(CodecChain):
    """A codec chain as ``zarr.json`` declares it, with its resolved encoders and decoders."""

    @classmethod
    def from_json(cls, entries, where: str) -> "CodecPipeline":
        return parse_codecs(entries, where, cls)

    def encoder(self, spec: ChunkSpec):
        """``arr -> bytes`` for chunks of ``spec``, the same bytes as :meth:`encode`, or None (see
        :func:`mrec.zarr.codecs.fused.encoder`)."""
        return fused.encoder(self, spec)

    @functools.cached_property
    def _into_plan(self):
        return fused.into_plan(self)

    def decode_into(self, data, spec: ChunkSpec, dest: np.ndarray) -> np.ndarray:
        """:meth:`decode` of one chunk, straight into ``dest`` where the chain allows (see
        :func:`mrec.zarr.codecs.fused.decode_into`)."""
        return fused.decode_into(self, self._into_plan, data, spec, dest)

    def decoder_into(self, spec: ChunkSpec, *, release_gil: bool = False, many: bool = False):
        """``(raw, dest) -> bool`` (``many``: ``jobs -> list[bool]``), or None (see
        :func:`mrec.zarr.codecs.fused.decoder_into`)."""
        return fused.decoder_into(self, self._into_plan, spec, release_gil, many)

    def part_decoder(self, spec: ChunkSpec):
        """``(inflate, rows, place)`` for some rows of a chunk, or None (see
        :func:`mrec.zarr.codecs.fused.part_decoder`)."""
        return fused.part_decoder(self, self._into_plan, spec)

    def batch_decoder(self, spec: ChunkSpec):
        """Whole inner chunks of ``spec`` decoded many at once on several cores, or None (see
        :func:`mrec.zarr.codecs.batch.batch_decoder`)."""
        return batch.batch_decoder(self, spec)

    def decoder(self, spec: ChunkSpec):
        """``raw -> array`` for chunks of ``spec``, the values of :meth:`decode`, or None (see
        :func:`mrec.zarr.codecs.fused.decoder`)."""
        return fused.decoder(self, spec)
