"""Landing: the glue between the writer and one :class:`~mrec.zarr.array.ShardedAppender` per array.

The third stage of :class:`~mrec.record.trajectory.writer.TrajectoryWriter`.  :class:`_Writer`
wraps an array under ``trajectory/`` with its appender (``ahead=True``: complete inner chunks of
>= 96 KiB are encoded on the pool as rows arrive) and knows whether its ``zarr.json`` must be
published; the buffer holds one per array and appends rows to it.  A :class:`Lander` does what
happens to the appenders at a commit and in between: :meth:`Lander.hand_over` gives a pipelined
writer's held rows to them (rounded: :func:`settled`), :meth:`Lander.land` writes the buffered rows
of the arrays a commit lands (chunk bytes at each shard's end, then its index:
``ShardedAppender.land``), telling the committer what it is doing for the commit's error message,
and :meth:`Lander.failed_encode` watches the encodes ahead (a chunk that failed on a worker
becomes the writer's :class:`~mrec.errors.WriteError`, :meth:`Lander.encode_error`).  The metadata
of the arrays a writer creates (extents, codecs) is built by :func:`_array_meta` / :func:`_dense_meta`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from ...errors import WriteError
from ...zarr.append import ShardedAppender
from ...zarr.array import Array, meta_key, read_node
from ...zarr.dtypes import DATA_TYPES
from ...zarr.metadata import ArrayMetadata
from .. import extents as X
from ..model.dtypes import zarr_data_type
from ..model.precision import rounded


class Unrounded:
    """Rows a pipelined writer's ``append`` buffered before rounding them to their declared
    precision ``p`` (its own copy of the caller's values): the committer thread rounds them
    (:func:`settled`) as it hands them to the appender, so the rounding's passes over the frame
    are not ``append``'s.  Never anywhere but in a :attr:`_Writer.held` list."""

    __slots__ = ("raw", "p")

    def __init__(self, raw, p):
        self.raw, self.p = raw, p

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes


def settled(rows: list) -> list:
    """``rows`` (a :attr:`_Writer.held` list) with every :class:`Unrounded` entry rounded (fresh
    arrays: the raw copy stays as it is, the writer's change detection may still read it)."""
    return [rounded(r.raw, r.p) if type(r) is Unrounded else r for r in rows]


class _Writer:
    """An array under trajectory/ with its appender; knows whether it must be published."""

    def __init__(self, array: Array, rows: int, *, new: bool):
        self.array = array
        self.appender = ShardedAppender(array, rows, ahead=True)      # encodes on the pool as rows arrive
        self.new = new          # zarr.json not yet on disk
        self.meta_dirty = new
        self.held: list | None = None   # a pipelined writer's rows since its last queued commit

    @property
    def path(self) -> str:
        return self.array.path

    @property
    def rows(self) -> int:
        return self.appender.total_rows

    def append(self, rows) -> None:
        if self.held is not None:       # pipelined: the committer thread hands them to the appender
            self.held.append(rows)
        else:
            self.appender.append(rows)

    @property
    def dirty(self) -> bool:
        return self.meta_dirty or self.appender.pending_rows > 0 or bool(self.held)

    def shard_key(self) -> str:
        """The shard file the next landing writes first (for error messages)."""
        ap = self.appender
        first = ap.rows - (len(ap.tail) if ap.tail is not None else 0)
        return self.array.chunk_key((first // ap.shard_rows,) + (0,) * (self.array.meta.ndim - 1))

    def land(self) -> list[str]:
        keys = self.appender.land()
        if keys:
            self.meta_dirty = True
        return keys

    def publish(self, fsync: bool = False) -> str | None:
        if not self.meta_dirty:
            return None
        self.array.write_metadata(fsync=fsync)
        self.new = self.meta_dirty = False
        return meta_key(self.path)


def _array_meta(dtype: str, trailing, extent: X.Extent, bb: list, attributes=None) -> ArrayMetadata:
    trailing = tuple(int(t) for t in trailing)
    chunk_trailing = tuple(max(1, t) for t in trailing)
    codecs = X.sharded((extent.inner_rows, *chunk_trailing), X.inner_pipeline(dtype, bb), "start")
    return ArrayMetadata.create((0, *trailing), DATA_TYPES[zarr_data_type(dtype)],
                                (extent.shard_rows, *chunk_trailing), codecs, attributes=attributes)


def _dense_meta(dtype: str, trailing=(), attributes=None, extent: X.Extent = X.DENSE_EXTENT) -> ArrayMetadata:
    return _array_meta(dtype, trailing, extent, X.bytes_to_bytes(dtype, precision=False, dense=True,
                                                                          compression=X.Compression()), attributes)


def read_arr(store, path) -> Array | None:
    node = read_node(store, path)
    return Array(store, path, node) if isinstance(node, ArrayMetadata) else None


class Lander:
    """The third stage: hands rows over to the appenders, lands them, and watches their encodes ahead.

    ``arrays`` lists every array of the writer (the buffer's ``writers``); the appenders known at
    the last commit are the ones :meth:`failed_encode` checks (cached until :meth:`landed`)."""

    def __init__(self, store, arrays: Callable[[], Iterable[_Writer]]):
        self.store = store
        self.arrays = arrays
        self._ahead_apps: list[ShardedAppender] | None = None

    @staticmethod
    def hand_over(moves: list) -> None:
        """A pipelined writer's held rows, ``[(array, rows)]``, given to the appenders (rounded)."""
        for w, rows in moves:
            w.appender.append_many(settled(rows))

    @staticmethod
    def land(order: list, note: Callable[[str, str], None]) -> list[str]:
        """Land the buffered rows of ``order``'s arrays, in that order, each announced to ``note``
        (what, key) first; the shard files written."""
        data_keys: list[str] = []
        for w in order:
            note(f"landing rows of array {w.path} into", w.shard_key())
            data_keys += w.land()
        return data_keys

    def landed(self) -> None:
        """A commit completed: the next check looks at the arrays as they are now."""
        self._ahead_apps = None

    def failed_encode(self) -> ShardedAppender | None:
        """The first appender whose inner chunk, encoded ahead on a worker (ShardedAppender
        ahead=True), failed; None while none did.  The appenders known at the last commit are
        checked here; a newer one's failure surfaces at its landing."""
        apps = self._ahead_apps
        if apps is None:
            apps = self._ahead_apps = [w.appender for w in self.arrays()]
        for ap in apps:
            if ap.ahead_error is not None:
                return ap
        return None

    def encode_error(self, ap: ShardedAppender, committed: int) -> WriteError:
        """The writer's error for ``ap``'s failed encode: it poisons the writer at its next call, as a
        failed landing does (docs/reliability.md, "Write errors"): nothing of the chunk was written,
        the store is at its last commit (``committed`` frames)."""
        exc = ap.ahead_error
        err = WriteError(
            f"encoding rows of array {ap.array.path} on a worker thread failed ({type(exc).__name__}: "
            f"{exc}); this writer refuses further work: frames {committed} and later were not "
            "reported committed, reopen the store (TrajectoryWriter.open) to continue from what is on disk",
            path=self.store.describe(ap.array.path))
        err.__cause__ = exc
        return err
