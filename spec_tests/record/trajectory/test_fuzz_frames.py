"""Property tests: random frame sequences read back exactly as the model resolves them; and a short
run of tools/fuzz/ (mutated zarr.json, shard and zip bytes raise nothing but MrecError)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import mrec
from mrec.record.model.precision import round_to_precision

PREC = 1e-3
SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-300, -1e300]


def floats(n):
    return st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from(SPECIAL)),
                    min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.float64))


@st.composite
def frame(draw, first: bool):
    blocks, masks = {}, {}
    if first or draw(st.booleans()):
        blocks["atoms"] = {"x": draw(floats(3)), "y": draw(floats(3))}
    if draw(st.booleans()):
        k = draw(st.integers(0, 4))
        blocks["ions"] = {"q": draw(floats(k)), "id": np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=k, max_size=k)),
                                                                dtype=np.uint64)}
        if k and draw(st.booleans()):
            masks["ions"] = {"q": np.array(draw(st.lists(st.booleans(), min_size=k, max_size=k)), bool)}
    f = {"blocks": blocks, "meta": {"pe": float(draw(st.floats(allow_nan=False, width=64)))}}
    if masks:
        f["masks"] = masks
    if draw(st.integers(0, 3)) == 0:
        f["box"] = mrec.Box(np.diag(draw(floats(3))), draw(floats(3)), np.array(draw(st.lists(st.booleans(), min_size=3, max_size=3))), True)
    return f


@st.composite
def session(draw):
    n = draw(st.integers(1, 10))
    frames = [draw(frame(i == 0)) for i in range(n)]
    gaps = draw(st.lists(st.integers(1, 2**40), min_size=n, max_size=n))
    flush_every = draw(st.integers(1, 4))
    flush_at = set(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    reopen_at = draw(st.one_of(st.none(), st.integers(0, n - 1)))
    return frames, gaps, flush_every, flush_at, reopen_at


def schema():
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64", precision=PREC)
    s.declare_column("atoms", "y", "f64")
    s.declare_block("ions")
    s.declare_column("ions", "q", "f64", nullable=True)
    s.declare_column("ions", "id", "u64")
    s.declare_meta("pe", "f64")
    return s


def bits(a):
    a = np.asarray(a)
    return a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(session())
def test_random_frame_sequences_read_back_as_the_model(tmp_path_factory, s):
    frames, gaps, flush_every, flush_at, reopen_at = s
    p = tmp_path_factory.mktemp("fz") / "f.mrec"
    w = mrec.TrajectoryWriter.create(p, schema(), flush_every=flush_every, durable=False)
    steps, step = [], -1
    for i, f in enumerate(frames):
        step += gaps[i]
        w.append(f, step=step, time=None)
        steps.append(step)
        if i in flush_at:
            w.flush()
        if i == reopen_at:
            w.close()
            w = mrec.TrajectoryWriter.open(p, flush_every=flush_every, durable=False)
    w.close()
    r = mrec.TrajectoryReader(p)
    assert len(r) == len(frames) and r.steps.tolist() == steps and r.times is None
    cur, cur_box = {}, None
    for i, f in enumerate(frames):
        for name, cols in f["blocks"].items():
            vals = dict(cols)
            if name == "atoms":
                vals["x"] = round_to_precision(vals["x"], PREC)
            m = (f.get("masks") or {}).get(name, {})
            cur[name] = (vals, {c: v for c, v in m.items() if not v.all()})
        if "box" in f:
            cur_box = f["box"]
        got = r[i]
        assert set(got.blocks) == set(cur)
        for name, (vals, masks) in cur.items():
            for c, v in vals.items():
                assert bits(got.blocks[name][c]) == bits(v), (i, name, c)
            gm = (got.masks or {}).get(name, {})
            assert {c: bits(v) for c, v in gm.items()} == {c: bits(v) for c, v in masks.items()}
        if cur_box is None:
            assert got.box is None
        else:
            for a in ("vectors", "origin", "boundary"):
                assert bits(getattr(got.box, a)) == bits(np.asarray(getattr(cur_box, a))), (i, a)
        assert bits(np.float64(got.meta["pe"])) == bits(np.float64(f["meta"]["pe"]))


def test_fuzz_tool_short_run(capsys):
    from test_crashcheck import _tool       # spec_tests is on sys.path under pytest
    mod = _tool("fuzz")
    assert mod.main(["--n", "450", "--seed", "7"]) == 0
    assert "failures 0" in capsys.readouterr().out
