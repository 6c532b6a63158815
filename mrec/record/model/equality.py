"""``==`` by value for the record's mutable value classes (Frame, Group, Observable, Metrics, ForceField).

Each class defines ``equals(other)`` (bits compared, NaNs equal to themselves); this mixin makes ``==``
call it for an object of the same class and leaves them unhashable, as mutable values should be.
"""
from __future__ import annotations


class EqualByValue:
    """Mixin: ``a == b`` is ``a.equals(b)`` when ``b`` is an instance of ``a``'s class; unhashable."""

    def equals(self, other) -> bool:  # pragma: no cover - every user defines it
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.equals(other)

    __hash__ = None  # type: ignore[assignment]
