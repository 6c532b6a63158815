"""Short, informative ``repr`` texts for frames, readers, writers and records.

Counts, blocks, columns, the cell and the step / time range -- never a dump of arrays, and
nothing decoded beyond what the object already holds (a reader's steps and times, the
index arrays it read on open).
"""
from __future__ import annotations

from typing import Any

__all__ = ["frame_repr", "reader_repr", "writer_repr", "record_repr"]

_MAX_NAMES = 8


def _names(names) -> str:
    names = list(names)
    more = f" +{len(names) - _MAX_NAMES}" if len(names) > _MAX_NAMES else ""
    return " ".join(str(n) for n in names[:_MAX_NAMES]) + more


def _num(v: Any) -> str:
    return f"{float(v):.6g}" if isinstance(v, float) or hasattr(v, "dtype") and v.dtype.kind == "f" else str(v)


def frame_repr(f) -> str:
    parts = [f"{b}: {f.counts.get(b, 0)} rows [{_names(cols)}]" for b, cols in f.blocks.items()]
    if f.box is not None:
        parts.append(f"box={f.box!r}")
    if f.meta:
        parts.append(f"meta [{_names(f.meta)}]")
    if f.masks:
        parts.append(f"masks [{_names(f'{b}/{c}' for b, cols in f.masks.items() for c in cols)}]")
    return f"Frame({', '.join(parts) if parts else 'empty'})"


def _range(values, unit: str = "") -> str:
    if values is None or len(values) == 0:
        return "-"
    lo, hi = values[0], values[-1]
    return f"{_num(lo)}..{_num(hi)}{unit}" if len(values) > 1 else f"{_num(lo)}{unit}"


def reader_repr(r) -> str:
    lay = r.layout
    n = lay.nstep
    parts = [f"{n} frame{'s' if n != 1 else ''}"]
    try:
        if n:
            parts.append(f"steps {_range(r.steps)}")
            if r.times is not None:
                parts.append(f"time {_range(r.times)}")
    except Exception as exc:  # noqa: BLE001 - a repr never raises
        parts.append(f"steps unreadable ({type(exc).__name__})")
    blocks = []
    for name, b in lay.blocks.items():
        cols = _names(b.decl.columns)
        if b.regular:
            shape = f"regular {b.uniform_rows} rows"
        elif b.n_updates:
            counts = b.counts()
            lo, hi = int(counts.min()), int(counts.max())
            shape = f"ragged {lo}..{hi} rows" if lo != hi else f"{lo} rows"
            shape += f", {b.n_updates} update{'s' if b.n_updates != 1 else ''}"
        else:
            shape = "absent"
        blocks.append(f"{name} ({shape}) [{cols}]")
    parts.append("blocks " + "; ".join(blocks) if blocks else "no blocks")
    box = lay.box
    if box.n_updates == 0:
        parts.append("no cell")
    elif box.attr_cell is not None or box.n_updates == 1:
        try:
            parts.append(f"cell {r.box_at(0 if box.step_index is None else int(box.step_index[0]))!r}")
        except Exception:  # noqa: BLE001
            parts.append("cell (fixed)")
    else:
        parts.append(f"cell changes {box.n_updates} times")
    if lay.meta:
        parts.append(f"meta [{_names(lay.meta)}]")
    where = r.path if r.path is not None else "<store>"
    return f"TrajectoryReader({where!r}: {', '.join(parts)})"


def writer_repr(w) -> str:
    state = "closed" if w.closed else "open"
    blocks = "; ".join(f"{name} [{_names(bs.decl.columns)}]" for name, bs in w.blocks.items()) \
        if w.blocks else _names(w.schema.blocks)
    return (f"TrajectoryWriter({w.path!r}: {state}, {w.nframes} frames ({w.committed} committed), "
            f"blocks {blocks or '-'})")


def record_repr(rec) -> str:
    parts = [f"sections [{_names(rec.sections())}]"]
    for name in ("system", "frame"):
        f = getattr(rec, name)
        if f is not None:
            parts.append(f"{name} " + ", ".join(f"{b} {f.counts.get(b, 0)} rows" for b in f.blocks) or f"{name} empty")
    if rec.trajectory is not None:
        parts.append(f"trajectory {len(rec.trajectory)} frames")
    if rec.observables:
        parts.append(f"observables [{_names(rec.observables)}]")
    return f"Record({rec.path!r}: {', '.join(parts)})"
