"""The scripted writer sessions the checker records: their schema, actions and frames.

``Plan`` is a session of small frames (a regular block, a ragged one, masks, a changing box, meta);
``MdPlan`` one of an engine's frames (the writer's batch path: steps, times, a cell, energies);
``LargePlan`` one of large frames (every block's frame one inner chunk), which ``--reopen`` adds.
"""
from __future__ import annotations

import numpy as np

import mrec
from mrec.record.model.precision import round_to_precision


PREC = 1e-3


# -- sessions ------------------------------------------------------------------------

def schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=4)
    s.declare_column("atoms", "x", "f64", precision=PREC)
    s.declare_column("atoms", "y", "f64")
    s.declare_block("ions")                                   # ragged
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_column("ions", "id", "u64")
    s.declare_meta("pe", "f64")
    s.declare_meta("tag", "string", fill="")
    return s


class Plan:
    """A scripted session: actions and the frames they append, with the model of each frame."""

    make_schema = staticmethod(schema)     # the schema the session creates the trajectory with
    compression = None                     # TrajectoryWriter.create(compression=...)

    def __init__(self, name: str, seed: int, nframes: int, *, flush_every: int, explicit_every: int,
                 reopen_at=(), ragged=True, box_every=0, irregular_from=None):
        self.name = name
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.flush_every = flush_every
        self.ragged, self.box_every = ragged, box_every
        self.actions: list = [("create",)]
        step, t = 0, 0.0
        for i in range(nframes):
            frame = self.make_frame(rng, i)
            if irregular_from is not None and i >= irregular_from:
                step += int(rng.integers(1, 5))
                t += float(rng.choice([0.5, 0.25, 1.0]))
            else:
                step += 2
                t += 0.5
            self.actions.append(("append", frame, step, t))
            if explicit_every and (i + 1) % explicit_every == 0:
                self.actions.append(("flush",))
            if i + 1 in reopen_at:
                self.actions.append(("close",))
                self.actions.append(("open",))
        self.actions.append(("close",))

    def make_frame(self, rng, i: int) -> dict:
        ragged, box_every = self.ragged, self.box_every
        blocks = {}
        masks = {}
        if i == 0 or rng.random() < 0.7:
            blocks["atoms"] = {"x": rng.normal(size=4), "y": rng.normal(size=4)}
            if rng.random() < 0.2:
                blocks["atoms"]["y"][rng.integers(4)] = -0.0
        if ragged and (i == 0 or rng.random() < 0.6):
            k = int(rng.integers(0, 6))
            q = rng.normal(size=k)
            if k and rng.random() < 0.3:
                q[rng.integers(k)] = np.nan
            blocks["ions"] = {"q": q, "id": rng.integers(0, 1000, size=k).astype(np.uint64)}
            if k and rng.random() < 0.4:
                m = rng.random(k) < 0.7
                masks["ions"] = {"q": m}
        frame = {"blocks": blocks, "meta": {"pe": float(rng.normal())}}
        if rng.random() < 0.3:
            frame["meta"]["tag"] = f"t{i}"
        if masks:
            frame["masks"] = masks
        if box_every and i % box_every == 0:
            origin = np.zeros(3) if i % (2 * box_every) else np.array([0.5, -0.0, 1.0])
            frame["box"] = mrec.Box(np.eye(3) * (10.0 + i), origin, np.ones(3, bool), True)
        return frame

    @staticmethod
    def extra_frame(k: int) -> dict:
        """The k-th frame check_state appends after reopening a state."""
        return {"blocks": {"atoms": {"x": np.full(4, 0.5 + k), "y": np.full(4, -1.5 - k)},
                           "ions": {"q": np.arange(k + 1, dtype=float), "id": np.arange(k + 1, dtype=np.uint64)}},
                "box": mrec.Box(np.eye(3) * 99.0, np.zeros(3), np.ones(3, bool), True),
                "meta": {"pe": -7.0 - k, "tag": "re"}}


def md_schema() -> mrec.SequenceSchema:
    """Frames as a simulation hands them: a fixed block of moving atoms, scalar f64 meta (energies)."""
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=4, fixed=True)
    s.declare_column("atoms", "x", "f64", precision=PREC)
    s.declare_column("atoms", "y", "f64")
    s.declare_meta("pe", "f64")
    s.declare_meta("ke", "f64")
    return s


class MdPlan(Plan):
    """A session of an engine's frames — every frame's atoms moving, a cell (the same ``Box`` object
    until it changes), explicit steps and times, energies as per-step meta — all on the writer's
    batch path (``batch_plan``): the commit protocol's guarantees there too."""

    make_schema = staticmethod(md_schema)

    def __init__(self, name: str, seed: int, nframes: int, **kw):
        self._cell = None
        super().__init__(name, seed, nframes, ragged=False, **kw)

    def make_frame(self, rng, i: int) -> dict:
        if self._cell is None or (self.box_every and i % self.box_every == 0):
            self._cell = mrec.Box(np.eye(3) * (20.0 + i))
        return {"blocks": {"atoms": {"x": rng.normal(size=4), "y": rng.normal(size=4)}}, "box": self._cell,
                "meta": {"pe": float(rng.normal()), "ke": float(rng.random())}}

    @staticmethod
    def extra_frame(k: int) -> dict:
        return {"blocks": {"atoms": {"x": np.full(4, 0.5 + k), "y": np.full(4, -1.5 - k)}},
                "box": mrec.Box(np.eye(3) * 99.0), "meta": {"pe": -7.0 - k, "ke": 1.0 + k}}


def plans(quick: bool) -> list[Plan]:
    if quick:
        return [Plan("quick", 1, 5, flush_every=2, explicit_every=3, reopen_at=(4,), box_every=2,
                     irregular_from=3),
                MdPlan("md-quick", 2, 6, flush_every=2, explicit_every=5, box_every=4, irregular_from=4)]
    return [
        MdPlan("md-frames", 15, 24, flush_every=3, explicit_every=7, reopen_at=(12,), box_every=6,
               irregular_from=16),
        Plan("regular-auto", 11, 24, flush_every=3, explicit_every=0, ragged=False),
        Plan("ragged-explicit", 12, 20, flush_every=4, explicit_every=3, box_every=5),
        Plan("reopen-irregular", 13, 24, flush_every=2, explicit_every=7, reopen_at=(8, 15), box_every=3,
             irregular_from=10),
        Plan("per-frame-flush", 14, 12, flush_every=1, explicit_every=4, reopen_at=(6,), irregular_from=3),
    ]


def chosen(candidates: list[Plan], only: list[str] | None) -> list[Plan]:
    """The plans ``--plan`` names (every one without it)."""
    return [p for p in candidates if not only or p.name in only]


# -- large frames (--reopen) ---------------------------------------------------------------

LARGE_COL_ROWS = 2048     # 1-d f64, 16 KiB a frame: one inner chunk a frame (extents.COLUMN_CHUNK_TARGET)
LARGE_ATOMS = 1400        # positions f64 [3] at precision 1e-3 (shuffle + zstd: variable size), one chunk a frame


def large_schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("col", rows=LARGE_COL_ROWS)
    s.declare_column("col", "x", "f64")
    s.declare_block("mol", rows=LARGE_ATOMS)
    s.declare_column("mol", "pos", "f64", trailing=(3,), precision=PREC)
    s.declare_meta("pe", "f64")
    s.declare_meta("tag", "string", fill="")
    return s


class LargePlan(Plan):
    """A session of large frames: every block's frame is one inner chunk, so each landing writes
    whole chunks at the shard's tail and rewrites a 64 KiB index, and leading values repeat between
    frames (what a rebuild matching first rows is fooled by)."""

    make_schema = staticmethod(large_schema)

    def __init__(self, name: str, seed: int, nframes: int, *, compression=None, **kw):
        self.compression = compression
        super().__init__(name, seed, nframes, ragged=False, **kw)

    def make_frame(self, rng, i: int) -> dict:
        blocks = {}
        if i == 0 or rng.random() < 0.8:
            x = rng.normal(size=LARGE_COL_ROWS)
            if rng.random() < 0.6:
                x[0] = float(rng.integers(0, 2))                  # a first row other frames share
            blocks["col"] = {"x": x}
        if i == 0 or rng.random() < 0.7:
            pos = rng.normal(size=(LARGE_ATOMS, 3)) * 10.0
            if rng.random() < 0.6:
                pos[0] = (1.0, 2.0, 3.0)
            pos = round_to_precision(pos, PREC)              # on the grid already: what reads back
            blocks["mol"] = {"pos": pos}
        frame = {"blocks": blocks, "meta": {"pe": float(rng.normal())}}
        if rng.random() < 0.3:
            frame["meta"]["tag"] = f"t{i}"
        return frame

    @staticmethod
    def extra_frame(k: int) -> dict:
        return {"blocks": {"col": {"x": np.full(LARGE_COL_ROWS, 0.5 + k)},
                           "mol": {"pos": np.full((LARGE_ATOMS, 3), -1.5 - k)}},
                "meta": {"pe": -7.0 - k, "tag": "re"}}


def reopen_plans(quick: bool) -> list[Plan]:
    large = [LargePlan("large-quick", 31, 5, flush_every=2, explicit_every=3)] if quick else [
        LargePlan("large", 31, 12, flush_every=2, explicit_every=5, reopen_at=(7,)),
        LargePlan("large-zstd", 32, 10, flush_every=3, explicit_every=4, compression="zstd", irregular_from=4),
    ]
    return large + plans(quick)
