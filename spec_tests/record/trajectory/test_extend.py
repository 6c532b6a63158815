"""TrajectoryWriter.extend: the batch path writes exactly the store that append() one by one writes.

Same bytes (tree hashes), same automatic flush points, same refusals (kind), same writer state after a
refusal; the frames before a refused frame stay appended, as in the loop ``for f in frames: append(f)``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mrec
from mrec.errors import RefusalError
from mrec.record.model.precision import round_to_precision
from mrec.record.trajectory.writer import TrajectoryWriter

SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-300, -1e300, 0.0015, 2.5e-4]


from test_traj_engine import tree_hash  # noqa: E402  (spec_tests is on sys.path under pytest)


def schema(meta: bool = False):
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64", precision=1e-3)
    s.declare_column("atoms", "y", "f64")
    s.declare_column("atoms", "id", "u64")
    s.declare_block("ions")
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_column("ions", "v", "f64", trailing=(3,), precision=1e-2)
    if meta:
        s.declare_meta("pe", "f64", fill=0.0)
    return s


def floats(n):
    return st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from(SPECIAL)),
                    min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.float64))


@st.composite
def atoms(draw):
    return {"x": draw(floats(3)), "y": draw(floats(3)),
            "id": np.array(draw(st.lists(st.integers(0, 5), min_size=3, max_size=3)), np.uint64)}


@st.composite
def ions(draw, k=None):
    k = draw(st.sampled_from([2, 2, 2, 2, 1])) if k is None else k
    return {"q": draw(floats(k)), "v": draw(floats(3 * k)).reshape(k, 3)}


@st.composite
def frame(draw, prev):
    """Mostly frames the batch path takes (often repeating the previous block: carry-forward), some it
    hands to append (masks, box, lists, Frame objects, zero rows), some append refuses."""
    kind = draw(st.sampled_from(["regular"] * 16 + ["box"] * 6 + ["repeat", "atoms", "ions", "frame", "masked", "box", "lists",
                                                   "zero", "bad_col", "bad_dtype", "bad_rows", "bad_block",
                                                   "bad_trailing", "meta"]))
    blocks = {"atoms": draw(atoms()), "ions": draw(ions())}
    if kind == "repeat" and prev is not None:
        return prev
    if kind == "atoms":
        return {"blocks": {"atoms": blocks["atoms"]}}
    if kind == "ions":
        return {"ions": blocks["ions"]}                              # a dict of blocks
    if kind == "frame":
        return mrec.Frame(blocks=blocks)
    if kind == "masked":
        k = len(blocks["ions"]["q"])
        return {"blocks": blocks, "masks": {"ions": {"q": np.array([False] + [True] * (k - 1))}}}
    if kind == "box":
        box = draw(st.sampled_from(["same", "same", "same", "diag", "undefined", "list", "mapping", "bad", "none"]))
        if box == "same":
            box = mrec.Box(np.eye(3) * 4.0)
        elif box == "diag":
            box = mrec.Box(np.diag(draw(floats(3))), origin=draw(floats(3)))
        elif box == "undefined":
            box = mrec.Box(defined=False)                           # a cell_defined change: refused
        elif box == "list":
            box = (np.eye(3) * 4.0).tolist()
        elif box == "mapping":
            box = {"vectors": np.eye(3) * 4.0, "boundary": np.array([True, True, False])}
        elif box == "bad":
            box = np.zeros((2, 2))                                  # bad_box
        else:
            box = None
        if not isinstance(box, np.ndarray) and draw(st.booleans()):
            return mrec.Frame(blocks=blocks, box=box)
        return {"blocks": blocks, "box": box}
    if kind == "lists":
        return {"blocks": {"atoms": {c: v.tolist() for c, v in blocks["atoms"].items()}}}
    if kind == "zero":
        return {"blocks": {"atoms": blocks["atoms"], "ions": {"q": np.zeros(0), "v": np.zeros((0, 3))}}}
    if kind == "bad_col":
        blocks["atoms"]["w"] = np.zeros(3)
    elif kind == "bad_dtype":
        blocks["atoms"]["y"] = np.zeros(3, np.float32)
    elif kind == "bad_rows":
        blocks["atoms"]["y"] = np.zeros(4)
    elif kind == "bad_block":
        blocks["solvent"] = {"x": np.zeros(2)}
    elif kind == "bad_trailing":
        blocks["ions"]["v"] = np.zeros((len(blocks["ions"]["q"]), 2))
    elif kind == "meta":
        return {"blocks": blocks, "meta": {"pe": 1.0}}               # undeclared meta key (no meta declared)
    return {"blocks": blocks}


@st.composite
def session(draw):
    ops, prev = [], None
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["extend", "extend", "extend", "append", "flush", "reopen"]))
        if op == "extend":
            frames = []
            for _ in range(draw(st.integers(0, 16))):
                prev = draw(frame(prev))
                frames.append(prev)
            ops.append(("extend", frames))
        elif op == "append":
            prev = draw(frame(prev))
            ops.append(("append", prev, draw(st.sampled_from([None, None, 1, 7]))))
        else:
            ops.append((op,))
    return ops, draw(st.integers(1, 9)), draw(st.sampled_from([4096, 4096, 1, 3]))


class Pair:
    """The same operations on three stores: ``loop`` appends frame by frame through the general path
    (Frame construction, check_frame, per-frame planning), ``append`` through append() (which takes
    the batch path for a regular frame), ``batch`` calls extend."""

    def __init__(self, root, flush_every, make_schema=schema):
        self.paths = {m: root / f"{m}.mrec" for m in ("loop", "append", "batch")}
        self.flush_every = flush_every
        self.w = {m: TrajectoryWriter.create(p, make_schema(), flush_every=flush_every, durable=False)
                  for m, p in self.paths.items()}

    def run(self, op):
        kinds = {}
        for m in list(self.w):
            try:
                self.apply(m, op)
                kinds[m] = None
            except RefusalError as e:
                kinds[m] = e.kind
        assert kinds["loop"] == kinds["append"] == kinds["batch"], op
        self.check()

    def apply(self, m, op):
        w = self.w[m]
        if op[0] == "flush":
            w.flush()
        elif op[0] == "reopen":
            w.close()
            self.w[m] = TrajectoryWriter.open(self.paths[m], flush_every=self.flush_every, durable=False)
        else:
            self.add(m, w, op)

    def add(self, m, w, op):
        """An "extend" or "append" op through writer ``m``."""
        if op[0] == "extend":
            if m == "batch":
                w.extend(op[1])
            else:
                for f in op[1]:
                    (w._append_checked if m == "loop" else w.append)(f)
        else:
            last = w.buffer.step.last
            step = None if op[2] is None or last is None else last + op[2]
            (w._append_checked if m == "loop" else w.append)(op[1], step=step)

    def state(self, m):
        w = self.w[m]
        return w.nframes, w.committed, w.buffer.step.last, w.buffer.has_time, tree_hash(self.paths[m])

    def check(self):
        assert self.state("loop") == self.state("append") == self.state("batch")

    def close(self):
        for w in self.w.values():
            w.close()
        assert tree_hash(self.paths["loop"]) == tree_hash(self.paths["append"]) == tree_hash(self.paths["batch"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(session())
def test_extend_writes_the_bytes_of_append_one_by_one(tmp_path_factory, monkeypatch, s):
    run_session(Pair, tmp_path_factory.mktemp("ext"), monkeypatch, s)


def run_session(cls, root, monkeypatch, s) -> None:
    """Run a drawn session (ops, flush_every, extend's window) through ``cls``'s writers."""
    ops, flush_every, window = s
    monkeypatch.setattr(TrajectoryWriter, "EXTEND_WINDOW", window)
    writers = cls(root, flush_every)
    for op in ops:
        writers.run(op)
    writers.close()


def walk(n, atoms=3, seed=0):
    rng = np.random.default_rng(seed)
    pos = np.cumsum(rng.normal(0, 0.05, (n, 2, atoms)), axis=0)
    return [{"blocks": {"atoms": {"x": pos[f, 0], "y": pos[f, 1], "id": np.arange(atoms, dtype=np.uint64)}}}
            for f in range(n)]


@pytest.mark.parametrize("flush_every", [1, 7, 64, None])
def test_extend_of_a_long_regular_run_is_byte_identical_and_reads_back(tmp_path, flush_every):
    frames = walk(300)
    for m in ("loop", "batch"):
        with TrajectoryWriter.create(tmp_path / f"{m}.mrec", schema(), flush_every=flush_every) as w:
            if m == "loop":
                for f in frames:
                    w._append_checked(f)
            else:
                w.extend(iter(frames))                       # any iterable
    assert tree_hash(tmp_path / "loop.mrec") == tree_hash(tmp_path / "batch.mrec")
    r = mrec.TrajectoryReader(tmp_path / "batch.mrec")
    assert len(r) == 300
    for i in (0, 1, 150, 299):
        got = r[i].blocks["atoms"]
        assert got["x"].tobytes() == round_to_precision(frames[i]["blocks"]["atoms"]["x"], 1e-3).tobytes()
        assert got["y"].tobytes() == frames[i]["blocks"]["atoms"]["y"].tobytes()
    assert list(r.steps) == list(range(300))


def test_extend_after_a_step_gap_and_reopen(tmp_path):
    """Default steps after an explicit stride (the progression becomes a step array) and after reopen."""
    frames = walk(40)
    for m in ("loop", "batch"):
        p = tmp_path / f"{m}.mrec"
        with TrajectoryWriter.create(p, schema(), flush_every=6, durable=False) as w:
            w.append(frames[0], step=0)
            w.append(frames[1], step=10)
            (w.extend(frames[2:20]) if m == "batch" else [w._append_checked(f) for f in frames[2:20]])
        with TrajectoryWriter.open(p, flush_every=6, durable=False) as w:
            (w.extend(frames[20:]) if m == "batch" else [w._append_checked(f) for f in frames[20:]])
    assert tree_hash(tmp_path / "loop.mrec") == tree_hash(tmp_path / "batch.mrec")
    assert list(mrec.TrajectoryReader(tmp_path / "batch.mrec").steps) == [0, 10] + list(range(11, 49))


def test_a_refused_first_frame_leaves_store_and_writer_unchanged(tmp_path):
    p = tmp_path / "t.mrec"
    w = TrajectoryWriter.create(p, schema(), flush_every=4, durable=False)
    w.extend(walk(6))
    before = tree_hash(p), w.nframes, w.committed
    bad = walk(3)
    bad[0]["blocks"]["atoms"]["y"] = np.zeros(3, np.int64)
    with pytest.raises(RefusalError) as e:
        w.extend(bad)
    assert e.value.kind == "canonical_dtype"            # y is a canonical f64 name
    assert (tree_hash(p), w.nframes, w.committed) == before
    w.close()


def test_a_refusal_mid_batch_keeps_the_frames_before_it(tmp_path):
    """As the loop would: frames 0..4 appended (one automatic flush at 4), frame 5 refused, 6.. not taken."""
    frames = walk(9)
    frames[5] = {"blocks": {"atoms": {**frames[5]["blocks"]["atoms"], "w": np.zeros(3)}}}
    w = TrajectoryWriter.create(tmp_path / "t.mrec", schema(), flush_every=4, durable=False)
    with pytest.raises(RefusalError) as e:
        w.extend(frames)
    assert e.value.kind == "undeclared_column"
    assert (w.nframes, w.committed) == (5, 4)
    w.close()
    assert len(mrec.TrajectoryReader(tmp_path / "t.mrec")) == 5


def test_extend_refuses_frames_unaligned_with_the_system_block(tmp_path):
    """Blocks shared with system/ are checked on the batch path too (row count, id column)."""
    frames = walk(8, atoms=2)
    frames[5]["blocks"]["atoms"]["id"] = np.array([1, 0], np.uint64)
    kinds, hashes = {}, {}
    for m in ("loop", "batch"):
        p = tmp_path / f"{m}.mrec"
        mrec.write_record(p, system={"atoms": {"id": np.arange(2, dtype="<u8")}})
        s = mrec.SequenceSchema()
        s.declare_block("atoms", rows=2)
        s.declare_column("atoms", "x", "f64", precision=1e-3)
        s.declare_column("atoms", "y", "f64")
        s.declare_column("atoms", "id", "u64")
        w = TrajectoryWriter.create(p, s, flush_every=3, durable=False)
        try:
            if m == "loop":
                for f in frames:
                    w._append_checked(f)
            else:
                w.extend(frames)
        except RefusalError as e:
            kinds[m] = e.kind
        assert w.nframes == 5
        w.close()
        hashes[m] = tree_hash(p)
    assert kinds == {"loop": "row_count_mismatch", "batch": "row_count_mismatch"}
    assert hashes["loop"] == hashes["batch"]


def test_extend_with_meta_keys_or_times_writes_the_loops_store(tmp_path):
    """A schema with meta keys (frames giving none: every value its fill) writes the loop's store, and
    frames without times after one with a time are refused (test_extend_md_frames.py: meta values,
    steps and times on the batch path)."""
    frames = walk(10)
    for m in ("loop", "batch"):
        w = TrajectoryWriter.create(tmp_path / f"{m}.mrec", schema(meta=True), flush_every=3, durable=False)
        (w.extend(frames) if m == "batch" else [w._append_checked(f) for f in frames])
        w.close()
    assert tree_hash(tmp_path / "loop.mrec") == tree_hash(tmp_path / "batch.mrec")
    w = TrajectoryWriter.create(tmp_path / "t.mrec", schema(), durable=False)
    w.append(frames[0], time=0.5)
    with pytest.raises(RefusalError) as e:
        w.extend(frames[1:])
    assert e.value.kind == "partial_time" and w.nframes == 1
    w.close()


def test_extend_on_a_closed_writer_refuses(tmp_path):
    w = TrajectoryWriter.create(tmp_path / "t.mrec", schema(), durable=False)
    w.close()
    w.extend([])                                         # the loop over nothing does nothing
    with pytest.raises(RefusalError) as e:
        w.extend(walk(2))
    assert e.value.kind == "closed"


@pytest.mark.parametrize("cells", ["constant", "npt", "from_frame_3"])
def test_extend_with_a_cell_per_frame(tmp_path, cells):
    """Frames carrying a box take the batch path; the cell is change-detected frame by frame."""
    frames = walk(30)
    for i, f in enumerate(frames):
        if cells == "constant":
            f["box"] = mrec.Box(np.eye(3) * 40.0)
        elif cells == "npt":
            f["box"] = np.eye(3) * (40.0 + 0.01 * i)                # a 3x3 array: Box.from_any
        elif i >= 3:
            f["box"] = {"vectors": np.eye(3) * 40.0, "origin": np.array([-0.0, 0.0, 0.0])}
    for m in ("loop", "batch"):
        with TrajectoryWriter.create(tmp_path / f"{m}.mrec", schema(), flush_every=7, durable=False) as w:
            (w.extend(frames) if m == "batch" else [w._append_checked(f) for f in frames])
    assert tree_hash(tmp_path / "loop.mrec") == tree_hash(tmp_path / "batch.mrec")
    r = mrec.TrajectoryReader(tmp_path / "batch.mrec")
    assert r.box_at(29) == mrec.Box.from_any(frames[29]["box"])
