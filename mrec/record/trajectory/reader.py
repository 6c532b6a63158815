"""Random access to a trajectory's committed frames: :class:`TrajectoryReader`.

A reader opens a record's store (:func:`~mrec.record.trajectory.store.open_store`, its files kept open
until :meth:`~TrajectoryReader.close`: a snapshot), loads the committed layout once
(:func:`~mrec.record.trajectory.layout.load_layout`), checks aligned blocks, and resolves any ordinal to
a :class:`~mrec.record.model.frame.Frame` (``r[i]``, slices, lists of ordinals, iteration).  Its lengths
(``len``, ``steps``, ``times``) come from the layout.  The row reads behind frames and whole columns
are in :mod:`~mrec.record.trajectory.reads` (:class:`~mrec.record.trajectory.reads.RowReads`).
"""
from __future__ import annotations

import os

import numpy as np

from ...errors import RefusalError
from ...zarr import parallel
from ...zarr.read.frame import read_frame
from ..model.box import Box
from ..model.frame import Frame, check_row_references
from ..model.schema import SequenceSchema
from .layout import TRAJ, load_layout, refuse
from .reads import RowReads, meta_value
from .store import open_store


def _reopen_reader(path, storage_options):
    return TrajectoryReader(path, storage_options=storage_options)


class TrajectoryReader(RowReads):
    """Random access to the committed frames of a trajectory (``*.mrec`` or ``*.mrec.zip``)."""

    def __init__(self, path, *, fs=None, store=None, storage_options=None):
        self.path = os.fspath(path) if path is not None else None
        self.storage_options = storage_options
        # a reader is a snapshot: the files it reads are kept open until close() (KeptFiles)
        self.store = store if store is not None else open_store(path, fs=fs, storage_options=storage_options,
                                                                keep_open=True)
        self.layout = load_layout(self.store)
        self._steps: np.ndarray | None = None
        self._times: np.ndarray | None = None
        self._trusted: bool | None = None          # see _frames_trusted
        self._plain_plan: list | bool | None = None  # see _make_plain_plan
        self._read_threads = parallel.read_threads()  # MREC_READ_THREADS, read when the reader opens
        # declared row references within a frame (block -> column -> block), checked on every frame
        # made (the writer's rule; absolute targets name sections, which the writer does not check)
        self._refs = {name: {c: t for c, t in (b.targets or {}).items() if not t.startswith("/")}
                      for name, b in self.layout.schema.blocks.items() if b.targets}
        self._check_alignment()

    # -- basics ----------------------------------------------------------------
    def __len__(self) -> int:
        return self.layout.nstep

    @property
    def nstep(self) -> int:
        return self.layout.nstep

    @property
    def steps(self) -> np.ndarray:
        if self._steps is None:
            self._steps = self.layout.steps()
        return self._steps

    @property
    def times(self) -> np.ndarray | None:
        if self._times is None and self.layout.has_time:
            self._times = self.layout.times()
        return self._times

    @property
    def schema(self) -> SequenceSchema:
        return self.layout.schema

    def close(self) -> None:
        self.store.close()

    def __reduce__(self):
        """Pickled by path or URL + ``storage_options`` (a Dask worker reopens it; nothing read travels)."""
        if self.path is None:
            raise TypeError("a TrajectoryReader opened on a store object cannot be pickled: open it by path or URL")
        return (_reopen_reader, (self.path, self.storage_options))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ordinal(self, i) -> int:
        n = self.layout.nstep
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"frame ordinal {i!r} is not an integer")
        j = int(i) + (n if i < 0 else 0)
        if not 0 <= j < n:
            raise IndexError(f"frame {i} out of range for a trajectory of {n} frames")
        return j

    # -- resolution ------------------------------------------------------------
    def block_update_at(self, block: str, i: int) -> int | None:
        """Index of the update of ``block`` that resolves frame ``i`` (None: absent)."""
        if block not in self.layout.blocks:
            raise KeyError(f"block {block!r} is not declared")
        return self.layout.blocks[block].update_at(self._ordinal(i))

    def box_at(self, i: int) -> Box | None:
        i = self._ordinal(i)
        bl = self.layout.box
        j = bl.update_at(i)
        if j is None:
            return None
        if bl.attr_cell is not None:
            return bl.attr_cell
        vec = bl.vectors.read(slice(j, j + 1))[0]
        origin = bl.origin.read(slice(j, j + 1))[0] if bl.origin is not None else np.zeros(3)
        if bl.boundary is not None:
            boundary = bl.boundary.read(slice(j, j + 1))[0]
        else:
            boundary = np.full(3, bl.defined, dtype=bool)
        return Box(vec, origin, boundary, bl.defined)

    def _frames_trusted(self) -> bool:
        """Whether every frame this reader builds passes Frame's checks by construction (see
        :meth:`Frame._trusted`): the names, dtypes and canonical keys are those of the layout
        checked on open, so they are checked here once instead of in every frame."""
        ok = self._trusted
        if ok is None:
            from ..model.dtypes import NUMPY_DTYPES, check_canonical
            from ..model.names import FRAME_RESERVED_BLOCKS, FRAME_RESERVED_COLUMNS, check_node_name
            ok = True
            try:
                for name, b in self.layout.blocks.items():
                    check_node_name(name, "block", "reserved_block_name")
                    if name in FRAME_RESERVED_BLOCKS:
                        ok = False
                    for col, cdecl in b.decl.columns.items():
                        check_node_name(col, "column", "reserved_column_name")
                        arr = b.columns.get(col)
                        dt = NUMPY_DTYPES.get(cdecl.dtype)
                        if col in FRAME_RESERVED_COLUMNS or cdecl.dtype == "string" or dt is None \
                                or (arr is not None and arr.dtype != dt):
                            ok = False
                        check_canonical(name, col, cdecl.dtype, tuple(cdecl.trailing))
            except RefusalError:
                ok = False
            self._trusted = ok
        return ok

    def __getitem__(self, i):
        if type(i) is not int or not 0 <= i < self.layout.nstep:    # the usual call skips these
            if isinstance(i, slice):
                return list(self._iter_frames(range(*i.indices(len(self)))))
            if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
                return [self[int(k)] for k in self.ordinals(i)]
            i = self._ordinal(i)
        plan = self._plain_plan
        if plan is None:
            plan = self._plain_plan = self._make_plain_plan()
        if plan and self._read_threads < 2:
            # the common layout (regular blocks without masks, no meta, no cell, trusted names and
            # dtypes): each column's rows, straight into a frame -- what the general path below reads
            # and makes of these parts.  A frame of rows inside the array goes to the frame case of
            # the read path (``Array.read``'s first step for these rows, its checks made in the plan)
            blocks = {}
            for name, cols, u, n, framed in plan:
                if n:
                    lo = min(i, n - 1) * u
                    hi = lo + u
                    got = blocks[name] = {}
                    for col, arr in cols:
                        v = read_frame(arr, lo, hi) if framed else None
                        got[col] = v if v is not None else arr.read(slice(lo, hi))
            return Frame._trusted_blocks(blocks)
        blocks, masks = {}, {}
        for name, b in self.layout.blocks.items():
            j = b.update_at(i)
            if j is None:
                continue
            blocks[name], m = self._block_rows(b, j)
            if m:
                masks[name] = m
        meta = {}
        types = {}
        if self.layout.meta:
            tags = self.schema.meta
            for key, arr in self.layout.meta.items():
                tag = types[key] = tags[key].tag
                meta[key] = meta_value(tag, arr.read(slice(i, i + 1))[0], arr.name)
        box = self.box_at(i) if self.layout.box.n_updates else None
        return self._make_frame(blocks, box, meta, masks, types, i)

    def _make_plain_plan(self) -> list | bool:
        """[(block, [(column, array)], rows a frame, updates, framed)] when every frame of this
        reader is read by the plain path of ``__getitem__`` (see there); False otherwise.  ``framed``:
        every frame's rows lie inside every column (rows a frame > 0), so the frame case of the read
        path may take them without ``Array.read``'s range checks.  Made once: the layout of an open
        reader does not change."""
        lay = self.layout
        if lay.meta or lay.box.n_updates or self._refs or not self._frames_trusted():
            return False
        plan = []
        for name, b in lay.blocks.items():
            if b.n_updates and not b.regular:
                return False
            if b.masks or any(b.columns.get(c) is None for c in b.decl.columns):
                return False
            cols = [(c, b.columns[c]) for c in b.decl.columns]
            u, n = b.uniform_rows, b.n_updates
            framed = bool(u) and all(a.meta.ndim >= 1 and a.meta.shape[0] >= n * u for _c, a in cols)
            plan.append((name, cols, u, n, framed))
        return plan

    def _make_frame(self, blocks: dict, box, meta: dict, masks: dict, types: dict, i: int) -> Frame:
        if self._frames_trusted():
            if meta:
                from ..model.typed_json import coerce_meta_document
                meta, types = coerce_meta_document(meta, types)
            f = Frame._trusted(blocks, box, meta, masks, types)
        else:
            f = Frame(blocks=blocks, box=box, meta=meta, masks=masks, meta_types=types)
        if self._refs:
            check_row_references(f, self._refs, path=self.store.describe(TRAJ), where=f"frame {i}: ")
        return f

    def __iter__(self):
        return self._iter_frames(range(len(self)))

    # -- conveniences (issue 14) -------------------------------------------------------
    def ordinals(self, frames) -> np.ndarray:
        """``frames`` as an int64 array of ordinals: an int, a slice, a sequence / array of ints
        (negative ones count from the end) or a boolean mask of ``len(self)`` entries.  Out of
        range is ``IndexError``; anything else ``TypeError``."""
        n = len(self)
        if isinstance(frames, slice):
            return np.arange(*frames.indices(n), dtype=np.int64)
        if isinstance(frames, (int, np.integer)) and not isinstance(frames, (bool, np.bool_)):
            return np.array([self._ordinal(frames)], dtype=np.int64)
        a = np.asarray(frames)
        if a.dtype.kind == "b":
            if a.shape != (n,):
                raise IndexError(f"a boolean frame mask needs {n} entries, found shape {list(a.shape)}")
            return np.flatnonzero(a).astype(np.int64)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"frames {frames!r} are not integers, a slice or a boolean mask")
        a = a.astype(np.int64)
        bad = (a < -n) | (a >= n)
        if bad.any():
            raise IndexError(f"frame {int(a[bad][0])} out of range for a trajectory of {n} frames")
        return np.where(a < 0, a + n, a)

    def __contains__(self, i) -> bool:
        """``i in r``: whether ``r[i]`` names a frame (an integer in ``-len(r) .. len(r) - 1``);
        nothing is read or decoded.  Anything but an integer is never in a reader."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            return False
        return -len(self) <= int(i) < len(self)

    def __repr__(self) -> str:
        from ..model.describe import reader_repr
        return reader_repr(self)

    # -- invariants checked on open --------------------------------------------------
    def _check_alignment(self) -> None:
        blocks = self.layout.blocks
        for name, b in blocks.items():
            target = b.decl.aligned_with
            if not target or target not in blocks:
                continue
            t = blocks[target]
            changes = sorted(set(b.ordinals().tolist()) | set(t.ordinals().tolist()))
            for i in changes:
                j = b.update_at(i)
                if j is None:
                    continue
                k = t.update_at(i)
                rows = b.rows_of(j)
                if k is None:
                    raise refuse("aligned_count_mismatch", f"aligned block {name!r} is present at frame {i} while its target {target!r} is absent",
                                 self.store.describe(f"{TRAJ}/{name}"))
                trows = t.rows_of(k)
                if rows[1] - rows[0] != trows[1] - trows[0]:
                    raise refuse("aligned_count_mismatch",
                                 f"aligned block {name!r} has {rows[1] - rows[0]} rows at frame {i}, its target {target!r} {trows[1] - trows[0]}",
                                 self.store.describe(f"{TRAJ}/{name}"))
