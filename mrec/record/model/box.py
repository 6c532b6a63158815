"""The simulation cell of a frame: :class:`Box` (mrec-notes §2.4).

``vectors`` 3x3 f64 with the lattice vectors as **columns** (as stored on disk), ``origin`` f64[3],
``boundary`` bool[3], ``defined``; :meth:`Box.from_rows` / :meth:`Box.from_dimensions` take an MD
tool's cell (rows, or ``a, b, c, alpha, beta, gamma``) and :meth:`Box.to_json` gives the on-disk
attributes.  Refusals are kind ``bad_box`` (``narrow_float`` for a float32 cell).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import RefusalError

__all__ = ["FLAT_CELL", "Box"]


def _bad_box(message: str, path: str | None = None) -> RefusalError:
    return RefusalError(f"box: {message}", path=path, kind="bad_box")


def _real_array(value: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind == "f" and a.dtype.itemsize < 8:
        # the constructor also builds the cells a reader reads: a stored float32 stays refused
        raise RefusalError(f"box: {what} is {a.dtype}; the cell is f64 (Box.from_rows / from_dimensions "
                           "take an MD tool's float32 cell and widen it exactly)", kind="narrow_float")
    if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and a.dtype.itemsize != 8):
        raise _bad_box(f"{what} must be real numbers, found {a.dtype}")
    if a.shape != shape:
        raise _bad_box(f"{what} must have shape {list(shape)}, found {list(a.shape)}")
    return np.array(a, dtype="<f8")


#: ``Box.from_dimensions`` refuses a cell whose c lies this close to the a-b plane: (c_z / c)**2 <= FLAT_CELL
#: (angles like 30, 30, 60 make a flat cell whose c_z rounding leaves a few ulps above zero)
FLAT_CELL = 1e-10


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@dataclass(eq=False)
class Box:
    """A frame's simulation cell (mrec-notes §2.4).

    **Convention**: ``vectors[:, 0]`` is the lattice vector a, ``vectors[:, 1]`` is b,
    ``vectors[:, 2]`` is c -- the vectors are the **columns** (as stored on disk).  MDAnalysis
    and ASE hold them as **rows** and describe a cell as ``(a, b, c, alpha, beta, gamma)``: use
    :meth:`from_rows` / :attr:`rows` and :meth:`from_dimensions` / :attr:`dimensions` to move
    between the two; never pass a tool's row matrix as ``vectors``.

    ``vectors`` -- 3x3 f64, the lattice vectors are its **columns**;
    ``origin`` -- f64[3], default zeros; ``boundary`` -- bool[3], which axes
    wrap, default all True for a defined cell; ``defined`` -- whether there is
    a cell at all.

    Normalisation (what a writer writes and a reader returns): an undefined
    cell holds identity ``vectors`` whatever was given (a reader ignores
    stored vectors) and an all-False ``boundary`` by default; a True boundary
    flag on an undefined cell is refused.  Equality is bitwise (``-0.0`` and
    ``0.0`` differ, NaN equals NaN).  Refusals are kind ``bad_box`` (and
    ``narrow_float`` for float32 input: use :meth:`from_rows` for an MD tool's cell).
    """

    vectors: Any = None
    origin: Any = None
    boundary: Any = None
    defined: bool = True

    def __post_init__(self) -> None:
        defined = self.defined
        if isinstance(defined, np.bool_):
            defined = bool(defined)
        if not isinstance(defined, bool):
            raise _bad_box(f"defined (cell_defined) must be a bool, found {defined!r}")
        self.defined = defined
        if defined:
            if self.vectors is None:
                raise _bad_box("a defined cell needs vectors")
            self.vectors = _real_array(self.vectors, (3, 3), "vectors")
        else:
            self.vectors = np.eye(3, dtype="<f8")
        self.origin = np.zeros(3, dtype="<f8") if self.origin is None else _real_array(self.origin, (3,), "origin")
        if self.boundary is None:
            self.boundary = np.full(3, defined, dtype=bool)
        else:
            b = np.asarray(self.boundary)
            if b.dtype.kind != "b" or b.shape != (3,):
                raise _bad_box(f"boundary must be 3 bools, found {self.boundary!r}")
            if not defined and b.any():
                raise _bad_box("a True boundary flag on an undefined cell (cell_defined false) is malformed")
            self.boundary = np.array(b, dtype=bool)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Box):
            return NotImplemented
        return (self.defined == other.defined and _bits_equal(self.vectors, other.vectors)
                and _bits_equal(self.origin, other.origin) and _bits_equal(self.boundary, other.boundary))

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_any(cls, obj: Any) -> "Box":
        """A Box from a Box, a mapping, or a 3x3 array of lattice vectors (as columns).

        Mapping keys: ``vectors``, ``origin``, ``boundary``, ``defined`` or its
        on-disk spelling ``cell_defined`` (``null`` for origin/boundary/
        cell_defined means the default).  Unknown keys are refused.
        """
        if isinstance(obj, Box):
            return obj
        if isinstance(obj, Mapping):
            unknown = set(obj) - {"vectors", "origin", "boundary", "defined", "cell_defined"}
            if unknown:
                raise _bad_box(f"unknown keys {sorted(unknown)}")
            defined = obj.get("defined")
            cell_defined = obj.get("cell_defined")
            if defined is not None and cell_defined is not None and defined is not cell_defined:
                raise _bad_box("defined and cell_defined disagree")
            flag = defined if defined is not None else cell_defined
            return cls(vectors=obj.get("vectors"), origin=obj.get("origin"), boundary=obj.get("boundary"),
                       defined=True if flag is None else flag)
        if isinstance(obj, (np.ndarray, list, tuple)):
            return cls(vectors=obj)
        raise _bad_box(f"cannot make a cell from {type(obj).__name__}")

    # -- the row / (a, b, c, alpha, beta, gamma) conventions of MD tools -------------------

    @classmethod
    def from_rows(cls, rows: Any, origin: Any = None, boundary: Any = None) -> "Box":
        """A cell from a 3x3 matrix whose **rows** are the lattice vectors a, b, c.

        MDAnalysis (``triclinic_dimensions``) and ASE (``atoms.cell``) hold the vectors as rows;
        mrec stores them as the columns of ``vectors``, so ``Box.from_rows(m).vectors == m.T``
        and ``Box.from_rows(m).rows == m`` bit for bit.  Any real input is taken as f64 (a
        float32 matrix widens exactly).
        """
        m = np.asarray(rows)
        if m.dtype.kind not in "iuf":
            raise _bad_box(f"rows must be real numbers, found {m.dtype}")
        if m.shape != (3, 3):
            raise _bad_box(f"rows must have shape [3, 3], found {list(m.shape)}")
        return cls(vectors=np.array(m, dtype="<f8").T, origin=origin, boundary=boundary)

    @classmethod
    def from_dimensions(cls, a: float, b: float, c: float, alpha: float = 90.0, beta: float = 90.0,
                        gamma: float = 90.0, origin: Any = None, boundary: Any = None) -> "Box":
        """A cell from lengths ``a b c`` and angles ``alpha beta gamma`` in degrees (MDAnalysis'
        ``dimensions``, ASE's ``cellpar``; alpha is the angle between b and c, beta between a
        and c, gamma between a and b).

        The standard orientation: a along x, b in the xy plane, c completing a right-handed
        cell -- the same matrix as MDAnalysis' ``triclinic_vectors`` and ASE's
        ``cellpar_to_cell`` (an angle of exactly 90 gives exact zeros).  Also accepts one
        sequence of six numbers.  Refused (``bad_box``): a length not positive and finite, an
        angle outside (0, 180), angles that make no cell (c within ``FLAT_CELL`` of the a-b plane).
        """
        vals = [float(v) for v in (a, b, c, alpha, beta, gamma)]
        la, lb, lc, al, be, ga = vals
        if not all(math.isfinite(v) and v > 0 for v in (la, lb, lc)):
            raise _bad_box(f"lengths a, b, c must be positive and finite, found {vals[:3]}")
        if not all(math.isfinite(v) and 0 < v < 180 for v in (al, be, ga)):
            raise _bad_box(f"angles alpha, beta, gamma must be in (0, 180) degrees, found {vals[3:]}")

        def cos_sin(deg: float) -> tuple[float, float]:
            if deg == 90.0:
                return 0.0, 1.0
            r = math.radians(deg)
            return math.cos(r), math.sin(r)

        ca, _ = cos_sin(al)
        cb, _ = cos_sin(be)
        cg, sg = cos_sin(ga)
        cx = lc * cb
        cy = lc * (ca - cb * cg) / sg
        cz2 = lc * lc - cx * cx - cy * cy
        if not cz2 > FLAT_CELL * lc * lc:    # c (numerically) in the plane of a and b: no volume
            raise _bad_box(f"angles {vals[3:]} (degrees) make no cell (the vectors are coplanar)")
        rows = np.array([[la, 0.0, 0.0], [lb * cg, lb * sg, 0.0], [cx, cy, math.sqrt(cz2)]], dtype="<f8")
        return cls.from_rows(rows, origin=origin, boundary=boundary)

    @property
    def rows(self) -> np.ndarray:
        """The lattice vectors as the **rows** of a 3x3 f64 matrix (``vectors.T``, a copy):
        the layout of MDAnalysis' ``triclinic_dimensions`` and ASE's ``cell``."""
        return np.ascontiguousarray(self.vectors.T)

    @property
    def dimensions(self) -> np.ndarray | None:
        """``[a, b, c, alpha, beta, gamma]`` (f64; lengths in the record's length unit, angles
        in degrees), MDAnalysis' ``dimensions`` / ASE's ``cell.cellpar()``; ``None`` for an
        undefined cell.  Angles between perpendicular vectors are exactly 90."""
        if not self.defined:
            return None
        va, vb, vc = (self.vectors[:, k] for k in range(3))
        lengths = [float(np.sqrt(np.dot(v, v))) for v in (va, vb, vc)]

        def angle(u: np.ndarray, v: np.ndarray, nu: float, nv: float) -> float:
            d = float(np.dot(u, v))
            if d == 0.0:
                return 90.0
            if nu == 0.0 or nv == 0.0:
                return 90.0
            return math.degrees(math.acos(max(-1.0, min(1.0, d / (nu * nv)))))

        la, lb, lc = lengths
        return np.array([la, lb, lc, angle(vb, vc, lb, lc), angle(va, vc, la, lc), angle(va, vb, la, lb)],
                        dtype="<f8")

    def __repr__(self) -> str:
        if not self.defined:
            return "Box(undefined)"
        d = self.dimensions
        text = "Box(a={:.6g}, b={:.6g}, c={:.6g}, alpha={:.6g}, beta={:.6g}, gamma={:.6g}".format(*d)
        if self.origin.any():
            text += f", origin={self.origin.tolist()}"
        if not self.boundary.all():
            text += f", boundary={[bool(x) for x in self.boundary]}"
        return text + ")"

    def to_json(self) -> dict[str, Any]:
        """The attribute form of the cell (the reference writer's choice, §2.4/§3.7).

        ``vectors`` always (nested rows of the 3x3 matrix); ``origin`` only
        when any component is not +0.0 bit-for-bit (so ``-0.0`` survives);
        ``boundary`` only when not all True; ``cell_defined: false`` only for
        an undefined cell.
        """
        out: dict[str, Any] = {"vectors": self.vectors.tolist()}
        if self.origin.view(np.uint64).any():
            out["origin"] = self.origin.tolist()
        if not self.boundary.all():
            out["boundary"] = [bool(b) for b in self.boundary]
        if not self.defined:
            out["cell_defined"] = False
        return out


# ---------------------------------------------------------------------------
