"""Issue 29's six targets, each a ratio next to its baseline and floor, met or not.

1-3 the writer on frames as a simulation hands them (:mod:`.issue29_write`); 4 the public reads
(:mod:`.issue29_reads`); 5 random frames (:mod:`.issue29_random`); 6 the MD surfaces
(:mod:`.issue29_md`).  Each part measures its own baselines in the same run; this module prints
the table at the end.
"""
from __future__ import annotations

from pathlib import Path

from .common import Target
from .issue29_md import md_targets
from .issue29_random import random_targets
from .issue29_reads import read_targets
from .issue29_write import write_targets

PARTS = [("1-3. the writer, realistic frames", write_targets), ("4. public reads on 2 cores", read_targets),
         ("5. random frame", random_targets), ("6. MD surfaces", md_targets)]


def issue29(work: Path, quick: bool) -> list[Target]:
    """Run every part, then print the targets table; the Targets, for a caller to count."""
    results = []
    for title, fn in PARTS:
        sub = work / title.split(".")[0].replace("-", "_")
        sub.mkdir(parents=True, exist_ok=True)
        results.append((title, fn(sub, quick)))
    print("\n== issue 29: the targets (ratio, limit, met or not; baseline and floor beside) ==")
    out = []
    for title, targets in results:
        print(f" {title}")
        for t in targets:
            t.print()
            out.append(t)
    met = sum(t.met for t in out)
    print(f" {met} of {len(out)} lines met")
    return out
