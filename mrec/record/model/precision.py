"""Declared precision: the power-of-two grid an ``f64`` column is stored on.

mrec-notes §2.3.  A precision ``p`` (absolute tolerance, finite,
``2^-1000 <= p <= 2^1000``) selects the quantum ``q``, the largest power of
two ``<= p``: with ``p = m * 2^e``, ``0.5 <= m < 1`` (:func:`math.frexp`),
``q = 2^(e-1)``.  A writer stores, computed in binary64,

* ``x`` itself when ``x`` is NaN, +-inf, or ``|x| >= 2^52 * q``;
* ``roundTiesToEven(x / q) * q`` otherwise (both steps exact: q is a power of two).

The sign of zero survives (``-1e-4`` with ``p = 1e-3`` stores ``-0.0``).  A
reader never re-rounds; a validator may report off-grid values
(:func:`off_grid`, :func:`is_on_grid`).

Edge note: for ``q`` near ``2^1000`` and ``|x|`` within one quantum of
``DBL_MAX`` the literal binary64 product overflows to ``inf``; the rule is
applied literally (every conforming writer computes the same bytes).
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ...errors import RefusalError

__all__ = ["P_MIN", "P_MAX", "check_precision", "quantum", "round_to_precision", "off_grid", "is_on_grid"]

#: Smallest and largest admissible precision (2^-1000, 2^1000).
P_MIN: float = math.ldexp(1.0, -1000)
P_MAX: float = math.ldexp(1.0, 1000)

_TWO52 = math.ldexp(1.0, 52)


def check_precision(p: Any, where: str | None = None, what: str = "precision") -> float:
    """``p`` as a float if it is an admissible precision, else ``bad_precision``.

    Admissible: a real number (int or float, numpy scalars included, never a
    bool), finite, ``2^-1000 <= p <= 2^1000``.  ``0``, negatives, ``inf``,
    ``NaN`` and non-numbers are refused.
    """
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise RefusalError(f"{what}: {p!r} is not a number", path=where, kind="bad_precision")
    try:
        value = float(p)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or not (P_MIN <= value <= P_MAX):
        raise RefusalError(
            f"{what}: {p!r} is outside [2^-1000, 2^1000] (finite, positive)", path=where, kind="bad_precision"
        )
    return value


def quantum(p: Any) -> float:
    """The quantum of precision ``p``: the largest power of two ``<= p`` (frexp rule)."""
    return _quantum_of(check_precision(p))


@functools.lru_cache(maxsize=256)
def _quantum_of(value: float) -> float:
    _, e = math.frexp(value)
    return math.ldexp(1.0, e - 1)


def inverse_quantum(p: Any) -> float:
    """``1 / quantum(p)``, exactly: ``q = 2^k`` with ``-1001 <= k <= 999``, so ``2^-k`` is a normal
    binary64.  ``x * inverse_quantum(p)`` is therefore bit for bit ``x / q`` (both are the correctly
    rounded value of the same real number, overflow and underflow included), at the cost of a
    multiply instead of a divide (~3x less on this machine: the writer's batch rounding)."""
    return _inverse_quantum_of(check_precision(p))


@functools.lru_cache(maxsize=256)
def _inverse_quantum_of(value: float) -> float:
    return 1.0 / _quantum_of(value)


def _grid(p: Any) -> tuple[float, float]:
    """``(quantum(p), inverse_quantum(p))``, remembered by ``p`` (a writer rounds each frame's columns
    with the same few precisions: the checks of :func:`check_precision` once, not per call).  An
    unhashable ``p`` is checked (and refused) as :func:`quantum` always did."""
    try:
        return _grid_of(p)
    except TypeError:                  # unhashable: not a number, refused by check_precision below
        return quantum(p), inverse_quantum(p)


@functools.lru_cache(maxsize=256)
def _grid_of(p: Any) -> tuple[float, float]:
    return quantum(p), inverse_quantum(p)


def _as_f64(values: Any, what: str) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype.kind != "f" or a.dtype.itemsize != 8:
        raise RefusalError(f"{what}: precision applies to f64 only, found {a.dtype}", kind="bad_precision")
    return a


def round_to_precision(values: Any, p: Any, what: str = "column") -> np.ndarray:
    """``values`` (an ``f64`` array of any shape) rounded to the grid of ``p``, exactly per §2.3.

    Vectorised: one temporary for ``x / q`` rounded in place, one boolean
    mask.  When no element changes bit-for-bit the input array itself is
    returned (no copy); otherwise a new array (native byte order).  Anything
    but ``f64`` is refused (``bad_precision``).
    """
    a = _as_f64(values, what)
    q = quantum(p)
    # one errstate for the whole computation (a writer calls this per column per frame): NaN / inf
    # compare False; x / q of a kept huge x may overflow and is discarded; the literal binary64
    # product may overflow (module docstring)
    with np.errstate(invalid="ignore", over="ignore"):
        keep = ~(np.abs(a) < _TWO52 * q)  # NaN / inf compare False -> kept
        if keep.all():
            return a
        r = np.divide(a, q, out=np.empty(a.shape, dtype=np.float64))
        np.rint(r, out=r)  # ties to even, sign of zero preserved
        np.multiply(r, q, out=r)
    if keep.any():
        np.copyto(r, a, where=keep)
    if r.dtype.byteorder == a.dtype.byteorder and _same_bytes(r, a):   # bit for bit, C order
        return a
    return r


def round_in_place(a: np.ndarray, p: Any) -> bool:
    """Round ``a`` — a fresh, writable, C-contiguous ``f64`` array the caller owns — to the grid of
    ``p`` in place, in three passes (the writer's batch path; :func:`round_to_precision` makes eight).

    Returns True when ``a`` now holds exactly what :func:`round_to_precision` returns: the same
    ``x / q``, ``rint``, ``* q`` in binary64, and for ``|x| >= 2^52 q`` (already on the grid) both
    steps are exact, so ``x`` comes back.  The one case that differs is a non-finite result (NaN,
    inf, or ``x / q`` overflowing), detected by the sum of the result; then it returns False, ``a``
    is garbage, and the caller rounds the original values with :func:`round_to_precision`.
    """
    q, inv = _grid(p)
    with np.errstate(invalid="ignore", over="ignore"):
        np.multiply(a, inv, out=a)          # = a / q, bit for bit (inverse_quantum)
        np.rint(a, out=a)
        np.multiply(a, q, out=a)
        total = np.add.reduce(a, axis=None)
    return bool(np.isfinite(total))


def stack_rows(arrays: list) -> np.ndarray:
    """``np.stack(arrays)`` of arrays of one shape, as one concatenation (np.stack expands each
    array's dimensions in Python first: ~1 us an array, which small frames feel)."""
    first = np.shape(arrays[0])
    if not first:
        return np.stack(arrays)
    out = np.concatenate(arrays)
    if out.shape[0] != len(arrays) * first[0]:
        return np.stack(arrays)              # not one shape: np.stack raises as it always did
    return out.reshape(len(arrays), *first)


def stack_rounded(arrays: list, p: Any) -> np.ndarray | None:
    """``round_to_precision(np.stack(arrays), p)`` in one pass less: each array divided by ``q``
    straight into its row of the stack, then :func:`round_in_place`'s ``rint`` and ``* q``.  The
    arrays are ``f64`` of one shape.  None (nothing to use) where :func:`round_in_place` says no."""
    if np.size(arrays[0]) < 1024:      # small rows: one stack costs less than a divide per row
        out = stack_rows(arrays)
        return out if round_in_place(out, p) else None
    q, inv = _grid(p)
    out = np.empty((len(arrays), *np.shape(arrays[0])), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for k, a in enumerate(arrays):
            np.multiply(a, inv, out=out[k])   # = a / q, bit for bit (inverse_quantum)
        np.rint(out, out=out)
        np.multiply(out, q, out=out)
        total = np.add.reduce(out, axis=None)
    return out if np.isfinite(total) else None


def rounded(a: np.ndarray, p: Any) -> np.ndarray:
    """``round_to_precision(a, p)``: through :func:`stack_rounded`'s three passes where it can (an
    ``f64`` array of any shape; fresh, or ``a`` itself where nothing changes).  A pipelined writer's
    committer thread rounds the rows ``append`` buffered unrounded with it."""
    out = stack_rounded([a], p)
    return out[0] if out is not None else round_to_precision(a, p)


#: values of each column a pipelined writer's change detection rounds first (:func:`rounded_head`)
HEAD = 8
#: :func:`rounded_head` takes quanta up to this: for any smaller ``q`` the grid's integers map one
#: to one onto the stored values (``n * q`` never overflows: the module docstring's edge note)
HEAD_Q_MAX = math.ldexp(1.0, 900)


def rounded_head(stack: np.ndarray, p: Any) -> tuple | None:
    """A key of the first :data:`HEAD` values of each column of ``stack`` (``(columns, ...)``
    ``f64``, unrounded or not) as :func:`round_to_precision` stores them: their grid integers
    ``rint(x / q)``, as Python ints (``round`` of a float is ties-to-even and exact, like ``rint``).
    Rounding is per value, the key of a value is the key of its rounding, and ``n -> n * q`` is one
    to one below :data:`HEAD_Q_MAX`, so two frames whose keys differ store different values: a
    pipelined ``append`` decides that a moving column changed from these few values and leaves the
    whole rounding to its committer thread.  Equal keys decide nothing (``-0.0`` and ``0.0`` share
    one; the caller compares in full).  None when a value is NaN or inf, or ``x / q`` overflows (only
    the full rounding says what is stored), when there is no value, or when ``q`` is too large.
    Plain Python on a few floats: cheaper here than numpy's calls (and it never warns)."""
    q = quantum(p)
    flat = stack.reshape(stack.shape[0], -1)
    k = min(HEAD, flat.shape[1])
    if k == 0 or q > HEAD_Q_MAX:
        return None
    inv = 1.0 / q                      # exact: q is a power of two (inverse_quantum)
    try:
        return tuple([round(x * inv) for row in flat[:, :k].tolist() for x in row])   # x * inv = x / q
    except (OverflowError, ValueError):
        return None


def _same_bytes(r: np.ndarray, a: np.ndarray) -> bool:
    """r.tobytes() == a.tobytes() for a fresh C-order r; large C-contiguous inputs are compared in
    place (two copies of a batch of frames cost more than the rounding)."""
    if a.size > 4096 and a.flags.c_contiguous:
        return memoryview(r).cast("B") == memoryview(a).cast("B")
    return r.tobytes() == a.tobytes()


def off_grid(values: Any, p: Any, validity: Any = None, what: str = "column") -> np.ndarray:
    """Boolean array: True where a stored value is not what :func:`round_to_precision` stores.

    Null rows (``validity`` False, one flag per row) are unconstrained and
    never flagged.  NaN, +-inf and ``|x| >= 2^52 q`` are always on the grid.
    """
    a = _as_f64(values, what)
    r = round_to_precision(a, p, what)
    if r is a:
        bad = np.zeros(a.shape, dtype=bool)
    else:
        bad = r.astype("<f8", copy=False).view(np.uint64) != a.astype("<f8", copy=False).view(np.uint64)
    if validity is not None:
        v = np.asarray(validity, dtype=bool)
        bad &= v.reshape(v.shape + (1,) * (a.ndim - v.ndim))
    return bad


def is_on_grid(values: Any, p: Any, validity: Any = None, what: str = "column") -> bool:
    """Whether every (valid) value of ``values`` lies on the grid of ``p`` (validator helper)."""
    return not bool(off_grid(values, p, validity, what).any())
