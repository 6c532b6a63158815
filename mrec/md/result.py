"""What a conversion answers: the ``ConvertResult`` summary and the creator document it stamps.

``ConvertResult`` counts frames and atoms, names the reader, the positions' precision, the fields
written and what was skipped; ``result_text`` / ``result_json`` are the two forms ``mrec convert``
prints.  ``creator()`` is the meta document's ``creator`` of a record made by ``mrec convert`` (or
by the MDAnalysis / ASE writers and the LAMMPS reader it shares them with).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..version import __version__

__all__ = ["ConvertResult", "result_text", "result_json", "creator"]


@dataclass
class ConvertResult:
    source: str
    output: str
    frames: int = 0
    atoms: int | list[int] = 0
    seconds: float = 0.0
    reader: str = ""
    precision: float | None = None
    fields: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        out = dict(vars(self))
        out["bytes"] = _size(self.output)
        out["frames_per_second"] = round(self.frames / self.seconds, 2) if self.seconds > 0 else None
        return out


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else 0


def result_text(res: ConvertResult) -> str:
    atoms = res.atoms if isinstance(res.atoms, int) else f"{min(res.atoms)}..{max(res.atoms)} (changing)"
    prec = f", positions at precision {res.precision:g} Å" if res.precision else ""
    rate = f" ({res.frames / res.seconds:.1f} frames/s)" if res.seconds > 0 else ""
    skipped = f"; skipped {', '.join(res.skipped)}" if res.skipped else ""
    return f"{res.source} -> {res.output}: {res.frames} frames, {atoms} atoms{prec}, {res.seconds:.2f} s{rate}{skipped}"


def result_json(res: ConvertResult) -> str:
    return json.dumps(res.to_json(), indent=2, default=str)


def creator() -> dict:
    return {"creator": {"name": "mrec convert", "version": __version__}}
