"""Target ``cut`` (issue 27): a shard of a small store cut at a random byte offset, checked by the
rules of ``tools/cutsweep.py``."""
from __future__ import annotations

import os
import random

from .. import cutsweep


_CUT_SEEDS: dict = {}


def cut_case(rng: random.Random, work: str) -> tuple[str, callable]:
    """A shard of a small store (one of four array kinds, random values with many zeros, random
    flushes; built once a run and kind) cut at a random offset: the rules of tools/cutsweep.py."""
    kind = rng.choice(cutsweep.KINDS)
    key = (work, kind)
    if key not in _CUT_SEEDS:
        os.makedirs(work, exist_ok=True)
        pick = [0.0, 0.0, -0.0, float("nan"), 1.5, rng.uniform(-9, 9)]
        values = [[rng.choice(pick) for _ in range(cutsweep.ROWS)] for _ in range(rng.randint(3, 10))]
        flushes = {i for i in range(len(values)) if rng.random() < 0.6}
        _CUT_SEEDS[key] = cutsweep.build(work, kind, values, flushes)
    seed = _CUT_SEEDS[key]
    shard = rng.choice(seed.shards)
    cut = rng.randrange(len(shard.original))

    def run():
        found = cutsweep.check_cut(seed, shard, cut)
        if found:
            raise AssertionError("; ".join(found[:3]))
    return f"{kind} {shard.key} cut at {cut} of {len(shard.original)}", run
