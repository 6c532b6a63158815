"""LAMMPS text dumps, read frame by frame by mrec itself (``mrec convert dump.lammpstrj run.mrec``).

A dump (``dump atom`` / ``dump custom``; ``.gz``, ``.bz2`` and ``.xz`` too) may change its atom count
from frame to frame -- deposition, evaporation, ``fix deposit``, ``delete_atoms`` -- which is what a
ragged mrec trajectory holds; MDAnalysis refuses such a dump.  Every frame's ``ITEM: ATOMS``
columns are kept, sorted by ``id`` (LAMMPS writes atoms in processor order):

* positions ``x y z`` from the first of ``x y z``, ``xs ys zs`` (scaled), ``xu yu zu``
  (unwrapped), ``xsu ysu zsu`` present, converted to Cartesian Å through the frame's cell; the
  others are kept under their own names;
* ``id`` -> ``id`` (u64), ``type`` -> ``type`` (the label, ``"1"`` or a type label's name),
  ``mol`` -> ``mol_id`` (u64), ``q`` -> ``charge``, ``ix iy iz`` image flags (i32), ``element``,
  ``mass``, ``vx vy vz``, ``fx fy fz``; ``proc`` / ``procp1`` / ``i_*`` as i64, any other column
  (``c_*``, ``v_*``, ``f_*[1]`` ...) as f64, or a string column when a value is not a number;
* the cell from ``BOX BOUNDS`` (orthogonal, tilted ``xy xz yz``, or general ``abc origin``):
  lattice vectors, origin, and ``pp`` / ``ff`` / ``ss`` / ``fm`` ... as the periodic axes;
* the step from ``ITEM: TIMESTEP``, the time from ``ITEM: TIME`` (``dump_modify time yes``) and
  the units from ``ITEM: UNITS`` (``dump_modify units yes``) when the dump has them.

Reals are parsed from the text exactly (nearest binary64): no float32 on the way.  A malformed
dump is refused (:class:`~mrec.errors.RefusalError` kind ``bad_input``) naming the line.
"""
from __future__ import annotations

import bz2
import gzip
import itertools
import lzma
import os
from dataclasses import dataclass, field
from typing import IO, Iterator

import numpy as np

from ..errors import RefusalError

__all__ = ["DumpFrame", "read_dump", "scan_dump", "is_dump", "UNIT_STYLES", "DUMP_SUFFIXES"]

#: suffixes recognised as LAMMPS dumps without ``--format LAMMPSDUMP``
DUMP_SUFFIXES = (".lammpstrj", ".lammpsdump")
#: the units of the LAMMPS ``units`` styles a dump can state (``dump_modify units yes``)
UNIT_STYLES = {
    "real": {"length": "angstrom", "time": "fs", "velocity": "angstrom/fs", "force": "kcal/(mol*angstrom)",
             "energy": "kcal/mol", "mass": "amu", "charge": "e"},
    "metal": {"length": "angstrom", "time": "ps", "velocity": "angstrom/ps", "force": "eV/angstrom",
              "energy": "eV", "mass": "amu", "charge": "e"},
    "electron": {"length": "bohr", "time": "fs", "velocity": "bohr/fs", "force": "hartree/bohr",
                 "energy": "hartree", "mass": "amu", "charge": "e"},
}
#: what a dump that does not state its style is taken in: Å and amu, e (real and metal agree)
DEFAULT_UNITS = {"length": "angstrom", "mass": "amu", "charge": "e"}

_CONVENTIONS = (("", ""), ("s", "scaled"), ("u", "unwrapped"), ("su", "scaled_unwrapped"))
_INTS = {"id": ("id", np.uint64), "mol": ("mol_id", np.uint64), "ix": ("ix", np.int32), "iy": ("iy", np.int32),
         "iz": ("iz", np.int32), "proc": ("proc", np.int64), "procp1": ("procp1", np.int64)}
_RENAME = {"q": "charge"}


@dataclass
class DumpFrame:
    """One dump frame: step, time (or None), atom count, cell, and per-atom columns (sorted by id)."""

    step: int
    time: float | None
    n: int
    box: object
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    coordinates: str = ""           # "", "scaled", "unwrapped" or "scaled_unwrapped"
    units: str | None = None


def is_dump(path: str, fmt: str | None) -> bool:
    """A LAMMPS dump by ``fmt`` (``LAMMPSDUMP``) or by suffix (compression suffixes aside)."""
    if fmt is not None:
        return fmt.upper() == "LAMMPSDUMP"
    low = os.fspath(path).lower()
    for c in (".gz", ".bz2", ".xz"):
        if low.endswith(c):
            low = low[: -len(c)]
    return low.endswith(DUMP_SUFFIXES)


def _open(path: str) -> IO[str]:
    low = path.lower()
    opener = gzip.open if low.endswith(".gz") else bz2.open if low.endswith(".bz2") else \
        lzma.open if low.endswith(".xz") else open
    return opener(path, "rt")


def _bad(path: str, line: int, why: str) -> RefusalError:
    return RefusalError(f"line {line}: {why}", path=path, kind="bad_input")


class _Lines:
    """A dump's lines with their numbers."""

    def __init__(self, fh: IO[str], path: str):
        self.fh, self.path, self.no = fh, path, 0

    def next(self, what: str) -> str:
        line = self.fh.readline()
        if not line:
            raise _bad(self.path, self.no + 1, f"the file ends where {what} was expected (a cut dump)")
        self.no += 1
        return line

    def number(self, what: str, kind=int):
        line = self.next(what)
        try:
            return kind(line.split()[0])
        except (ValueError, IndexError):
            raise _bad(self.path, self.no, f"{what} expected, found {line.strip()[:60]!r}") from None

    def block(self, n: int) -> list[str]:
        lines = list(itertools.islice(self.fh, n))
        if len(lines) < n:
            raise _bad(self.path, self.no + len(lines) + 1, f"the file ends inside an ATOMS section ({n} atoms "
                                                           f"announced, {len(lines)} lines follow)")
        self.no += n
        return lines


def _headers(lines: _Lines) -> Iterator[tuple[dict, list[str], int]]:
    """(header items, ATOMS column names, first ATOMS line number) of each frame; the caller reads
    or skips the frame's atom lines before asking for the next."""
    head: dict = {}
    units = None                              # LAMMPS writes ITEM: UNITS once, before the first frame
    while True:
        line = lines.fh.readline()
        if not line:
            if head:
                raise _bad(lines.path, lines.no + 1, "the file ends inside a frame header (a cut dump)")
            return
        lines.no += 1
        if not line.strip():
            continue
        if not line.startswith("ITEM:"):
            raise _bad(lines.path, lines.no, f"an 'ITEM:' line expected, found {line.strip()[:60]!r}")
        item = line[5:].strip()
        if item == "TIMESTEP":
            head["step"] = lines.number("the timestep")
        elif item == "TIME":
            head["time"] = lines.number("the time", float)
        elif item == "UNITS":
            units = lines.next("the units style").strip()
        elif item == "NUMBER OF ATOMS":
            head["n"] = lines.number("the number of atoms")
            if head["n"] < 0:
                raise _bad(lines.path, lines.no, f"a negative atom count {head['n']}")
        elif item.startswith("BOX BOUNDS"):
            head["bounds"] = (item.split()[2:], [lines.next("a box bound") for _ in range(3)], lines.no)
        elif item.startswith("ATOMS"):
            if "step" not in head or "n" not in head:
                raise _bad(lines.path, lines.no, "an ATOMS section before its TIMESTEP and NUMBER OF ATOMS")
            yield {**head, "units": units}, item.split()[1:], lines.no + 1
            head = {}
        else:
            raise _bad(lines.path, lines.no, f"unknown item {item[:40]!r}")


def scan_dump(path: str) -> list[tuple[int, int]]:
    """(step, atom count) of every frame, walking the headers and skipping the atom lines."""
    out = []
    with _open(path) as fh:
        lines = _Lines(fh, path)
        for head, _names, _ in _headers(lines):
            lines.block(head["n"])
            out.append((head["step"], head["n"]))
    return out


def read_dump(path: str, frames: slice = slice(None), count: int | None = None) -> Iterator[DumpFrame]:
    """The frames ``frames`` selects (``count`` -- the dump's frame count, for negative bounds)."""
    wanted = range(*frames.indices(count)) if count is not None else None
    pick = set(wanted) if wanted is not None else None
    last = max(wanted) if wanted else -1
    with _open(path) as fh:
        lines = _Lines(fh, path)
        for k, (head, names, first) in enumerate(_headers(lines)):
            body = lines.block(head["n"])
            if pick is not None and k not in pick:
                if k >= last:
                    return
                continue
            yield _frame(path, head, names, body, first)


def _box(path: str, bounds) -> tuple[object, np.ndarray, np.ndarray]:
    """(Box, origin, lattice rows) of a BOX BOUNDS item."""
    from ..record.model.box import Box
    flags, text, no = bounds
    try:
        nums = [[float(t) for t in line.split()] for line in text]
    except ValueError:
        raise _bad(path, no, "BOX BOUNDS lines must be numbers") from None
    periodic = np.array([f == "pp" for f in flags[-3:]], dtype=bool) if len(flags) >= 3 else np.ones(3, bool)
    if flags[:2] == ["abc", "origin"]:                            # general triclinic: a, b, c and the origin
        rows = np.array([r[:3] for r in nums], dtype=np.float64)
        origin = np.array([r[3] for r in nums], dtype=np.float64)
    else:
        (xlo, xhi, *t0), (ylo, yhi, *t1), (zlo, zhi, *t2) = nums
        xy, xz, yz = (t0 + [0.0])[0], (t1 + [0.0])[0], (t2 + [0.0])[0]
        if t0:                                                    # bounding box of a tilted cell
            xlo, xhi = xlo - min(0.0, xy, xz, xy + xz), xhi - max(0.0, xy, xz, xy + xz)
            ylo, yhi = ylo - min(0.0, yz), yhi - max(0.0, yz)
        rows = np.array([[xhi - xlo, 0.0, 0.0], [xy, yhi - ylo, 0.0], [xz, yz, zhi - zlo]], dtype=np.float64)
        origin = np.array([xlo, ylo, zlo], dtype=np.float64)
    return Box.from_rows(rows, origin=origin, boundary=periodic), origin, rows


def _parse(tokens: list[str], name: str):
    """One column's tokens as (mrec name, array)."""
    if name in _INTS:
        col, dt = _INTS[name]
        return col, np.array(np.fromiter(map(int, tokens), dtype=np.int64, count=len(tokens)), dtype=dt)
    if name.startswith("i_") or name.startswith("i2_"):
        return name, np.fromiter(map(int, tokens), dtype=np.int64, count=len(tokens))
    if name in ("element", "type"):                   # a type is a label (mrec-notes 7.2), numbered or named
        return name, np.array(tokens, dtype=object)
    try:
        return _RENAME.get(name, name), np.fromiter(map(float, tokens), dtype=np.float64, count=len(tokens))
    except ValueError:
        return name, np.array(tokens, dtype=object)


def _frame(path: str, head: dict, names: list[str], body: list[str], first: int) -> DumpFrame:
    n, width = head["n"], len(names)
    tokens = " ".join(body).split()
    if len(tokens) != n * width:
        bad = next((k for k, ln in enumerate(body) if len(ln.split()) != width), 0)
        raise _bad(path, first + bad, f"{len(body[bad].split())} values, the ATOMS header names {width}")
    cols: dict[str, np.ndarray] = {}
    try:
        for j, name in enumerate(names):
            col, values = _parse(tokens[j::width], name)
            cols[col] = values
    except ValueError as exc:
        raise _bad(path, first, f"column {name!r}: {exc}") from None
    if "id" in cols:
        order = np.argsort(cols["id"], kind="stable")
        cols = {c: v[order] for c, v in cols.items()}
    box, origin, rows = _box(path, head["bounds"]) if "bounds" in head else (None, None, None)
    coords = _positions(path, cols, origin, rows, first)
    return DumpFrame(head["step"], head.get("time"), n, box, cols, coords, head.get("units"))


def _positions(path: str, cols: dict, origin, rows, first: int) -> str:
    """Put Cartesian ``x y z`` into ``cols`` from the first coordinate convention present; its name."""
    for suffix, convention in _CONVENTIONS:
        names = [a + suffix for a in "xyz"]
        if not all(c in cols and cols[c].dtype == np.float64 for c in names):
            continue
        if "s" in suffix:
            if rows is None:
                raise _bad(path, first, f"scaled coordinates {' '.join(names)} without a BOX BOUNDS item")
            s = np.stack([cols.pop(c) for c in names], axis=1)
            xyz = origin + s @ rows
            cols.update({a: np.ascontiguousarray(xyz[:, k]) for k, a in enumerate("xyz")})
        elif suffix:
            cols.update({a: cols.pop(a + suffix) for a in "xyz"})
        return convention
    raise _bad(path, first, "no coordinates (x y z, xs ys zs, xu yu zu or xsu ysu zsu) in the ATOMS columns")


# -- into mrec ----------------------------------------------------------------------------------

def parse_type_map(type_map) -> dict[str, str] | None:
    """``{"1": "C", "2": "O"}`` from a dict or ``"1=C,2=O"``; every value a chemical symbol, else a
    ``bad_argument`` refusal naming the entry."""
    from .elements import is_symbol
    if type_map is None:
        return None
    if isinstance(type_map, str):
        pairs = [p.split("=", 1) for p in type_map.replace(" ", "").split(",") if p]
        if not all(len(p) == 2 and p[0] and p[1] for p in pairs):
            raise RefusalError(f"--type-map {type_map!r} is not TYPE=ELEMENT[,TYPE=ELEMENT...] (1=C,2=O)",
                               kind="bad_argument")
        type_map = dict(pairs)
    if not isinstance(type_map, dict):
        raise RefusalError(f"type_map {type_map!r} is not a dict or 'TYPE=ELEMENT,...'", kind="bad_argument")
    out = {str(k): str(v) for k, v in type_map.items()}
    bad = [f"{k}={v}" for k, v in out.items() if not is_symbol(v)]
    if bad:
        raise RefusalError(f"type map entries {', '.join(bad)}: not chemical symbols", kind="bad_argument")
    return out


class Species:
    """The element of each LAMMPS type: a type map first, else the type's mass (the topology's, or
    the dump's ``mass`` column) when it is an element's standard atomic weight."""

    def __init__(self, type_map: dict[str, str] | None, masses: dict[str, float] | None = None):
        self.type_map, self.masses = type_map, dict(masses or {})
        self.enabled: bool | None = None           # decided by the first frame
        self.unresolved: list[str] = []

    def _element(self, label: str, mass: float | None) -> str | None:
        from .elements import element_of_mass
        if self.type_map is not None:
            return self.type_map.get(label)
        m = self.masses.get(label, mass)
        return None if m is None else element_of_mass(float(m))

    def elements(self, types: np.ndarray | None, mass: np.ndarray | None, where: str) -> np.ndarray | None:
        """``element`` for atoms of labels ``types`` (None: no element column), or a refusal."""
        if types is None or self.enabled is False:
            self.enabled = False
            return None
        labels, first, inverse = np.unique(types.astype(str), return_index=True, return_inverse=True)
        got = [self._element(str(t), None if mass is None else mass[i]) for t, i in zip(labels, first)]
        missing = [str(t) for t, e in zip(labels, got) if e is None]
        if missing and (self.enabled or self.type_map is not None):
            how = "not in the type map" if self.type_map is not None else "not an element's mass"
            raise RefusalError(f"{where}: type(s) {', '.join(missing)} {how}: give every type's element "
                               "(--type-map 1=C,2=O / type_map=)", kind="bad_argument")
        if missing:
            self.enabled, self.unresolved = False, missing
            return None
        self.enabled = True
        return np.array(got, dtype=object)[inverse.reshape(-1)]


def _topology(top: str, counts: list[int], skipped: list[str]):
    """(system section or None, type -> mass of the topology) of a topology file read by MDAnalysis."""
    import warnings
    from . import require
    from .topology import topology_system
    from .foreign import reading
    mda = require("MDAnalysis")
    with warnings.catch_warnings(), reading(top, "MDAnalysis cannot read it"):
        warnings.simplefilter("ignore")
        u = mda.Universe(top)
    masses = None
    attrs = {a.attrname: a for a in u._topology.attrs}
    if "types" in attrs and "masses" in attrs and not getattr(attrs["masses"], "is_guessed", False):
        masses = {str(t): float(m) for t, m in zip(u.atoms.types, u.atoms.masses)}
    if any(c != len(u.atoms) for c in counts):
        skipped.append(f"system (the dump's atom counts {sorted(set(counts))[:4]} differ from the topology's "
                       f"{len(u.atoms)}: its masses name the elements only)")
        return None, masses
    system, _ = topology_system(u, skipped)
    return system, masses


#: dump columns the topology holds (not repeated in the trajectory when a system section is written)
_STATIC = ("id", "type", "mol_id", "mass", "element")


def _columns(frame: DumpFrame, species: Species, system, where: str) -> dict[str, np.ndarray]:
    cols = dict(frame.columns)
    if system is not None:
        sys_cols = system["blocks"]["atoms"]
        if "id" in cols and "id" in sys_cols and not np.array_equal(cols["id"], sys_cols["id"]):
            raise RefusalError(f"{where}: the dump's atom ids are not the topology's", kind="bad_input")
        return {c: v for c, v in cols.items() if not (c in _STATIC and c in sys_cols)}
    if "element" not in cols:
        el = species.elements(cols.get("type"), cols.get("mass"), where)
        if el is not None:
            cols["element"] = el
    return cols


def _declare(frame_cols: dict, n: int, precision: float | None):
    from ..record.model.dtypes import as_column_array, canonical_dtype
    from ..record.model.schema import SequenceSchema
    s = SequenceSchema()
    s.declare_block("atoms", rows=n)
    for c, v in frame_cols.items():
        dt = canonical_dtype(c) or as_column_array(v, what=f"column {c!r}")[1]
        s.declare_column("atoms", c, dt, precision=precision if c in ("x", "y", "z") else None)
    return s


def import_dump(src: str, live: str, *, top, sel: slice, precision, profile, compression, progress,
                type_map=None):
    """Convert the LAMMPS dump ``src`` into the new record at ``live`` (a ``*.mrec`` directory)."""
    from ..errors import MrecError
    from ..record.whole import write_record
    from ..record.trajectory.writer import TrajectoryWriter
    from .result import ConvertResult, creator
    from .sizing import frames_hint
    res = ConvertResult(src, live, reader="mrec LAMMPS dump reader", precision=precision)
    index = scan_dump(src)
    picked = range(*sel.indices(len(index)))
    if not picked:
        raise MrecError("no frames selected", path=src)
    counts = [index[k][1] for k in picked]
    system, masses = _topology(top, counts, res.skipped) if top else (None, None)
    species = Species(parse_type_map(type_map), masses)
    if system is not None and "element" not in system["blocks"]["atoms"]:
        el = species.elements(system["blocks"]["atoms"].get("type"), system["blocks"]["atoms"].get("mass"),
                              os.path.basename(top))
        if el is not None:
            system["blocks"]["atoms"]["element"] = el
    frames = read_dump(src, sel, len(index))
    first = next(frames)
    cols0 = _columns(first, species, system, f"frame {picked[0]}")
    if species.unresolved:
        res.skipped.append(f"element (type {', '.join(species.unresolved)}: no mass naming an element; "
                           "--type-map 1=C,2=O names them)")
    units = UNIT_STYLES.get(first.units or "") or ({"preset": first.units} if first.units else DEFAULT_UNITS)
    meta = {**creator(), "converted_from": {"path": os.path.basename(src), "format": "LAMMPS dump",
                                             "coordinates": first.coordinates or "wrapped",
                                             "topology": os.path.basename(top) if top else None}}
    if system is not None:
        system["meta"] = {"units": units}
        write_record(live, meta=meta, system=system, compression=compression)
    else:
        meta["units"] = units
    if progress is not None:
        progress.total = len(picked)
    schema = _declare(cols0, first.n, precision)
    with TrajectoryWriter.create(live, schema, compression=compression, profile=profile,
                                 meta=None if system is not None else meta,
                                 expected_frames=frames_hint(len(picked))) as w:
        last = None
        for k, frame in zip(picked, itertools.chain([first], frames)):
            where = f"frame {k} (step {frame.step})"
            cols = cols0 if frame is first else _columns(frame, species, system, where)
            if set(cols) != set(cols0):
                raise MrecError(f"{where}: columns {sorted(cols)} differ from the first frame's {sorted(cols0)}",
                                path=src)
            if last is not None and frame.step <= last:
                raise MrecError(f"{where}: step {frame.step} does not increase (the previous frame's is {last}); "
                                "steps of an mrec trajectory strictly increase", path=src)
            last = frame.step
            out: dict = {"blocks": {"atoms": cols}}
            if frame.box is not None:
                out["box"] = frame.box
            w.append(out, step=frame.step, time=frame.time)
            res.frames += 1
            if progress is not None:
                progress.update(res.frames)
    res.atoms = counts[0] if len(set(counts)) == 1 else sorted(set(counts))
    res.fields = sorted(cols0) + ["box", "step"] + (["time"] if first.time is not None else []) + \
        ([f"system/atoms/{c}" for c in sorted(system["blocks"]["atoms"])] if system is not None else [])
    return res


# -- out of mrec --------------------------------------------------------------------------------

def named_species(view, type_map: dict[str, str] | None, where: str) -> None:
    """Give ``view`` (an :class:`~mrec.md.atoms.AtomsView`) the elements of its LAMMPS types from
    ``type_map``; refuse species that are type numbers (ASE cannot read ``1`` as an element)."""
    from .atoms import species_column
    cols = view.columns
    if type_map is not None and "type" in cols:
        labels = np.array([str(t) for t in cols["type"]], dtype=object)
        missing = sorted(set(labels.tolist()) - set(type_map))
        if missing:
            raise RefusalError(f"{where}: type(s) {', '.join(missing)} not in the type map", kind="bad_argument")
        cols["element"] = np.array([type_map[t] for t in labels.tolist()], dtype=object)
    key = species_column(cols, view.n)
    if key is not None and key != "element":
        numeric = sorted({str(t) for t in cols[key] if str(t).isdigit()}, key=int)
        if numeric:
            raise RefusalError(f"{where}: the species would be the numbers {', '.join(numeric[:8])} (LAMMPS atom "
                               "types, no element known): name them with --type-map 1=C,2=O (type_map=)",
                               kind="bad_argument")
