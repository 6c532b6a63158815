"""The units of a force field: the presets (the LAMMPS ``units`` command, and ``openmm``), the
quantities a document may state, the spellings taken as one unit, and :func:`check_units`."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .vocabulary import _refuse

__all__ = ["PRESETS", "QUANTITIES", "PRESET_UNITS", "check_units"]

PRESETS: tuple[str, ...] = ("real", "metal", "si", "cgs", "electron", "micro", "nano", "lj", "openmm")
QUANTITIES: tuple[str, ...] = ("length", "energy", "angle", "charge", "mass", "time")
#: Each preset's unit per quantity (the LAMMPS ``units`` command; every angle is the degree, E3+).
#: ``lj`` is reduced: only its angle has a unit.  ``openmm`` is the OpenMM unit system.
PRESET_UNITS: dict[str, dict[str, str]] = {
    "real": {"length": "angstrom", "energy": "kcal/mol", "angle": "degree", "charge": "e", "mass": "dalton",
             "time": "fs"},
    "metal": {"length": "angstrom", "energy": "eV", "angle": "degree", "charge": "e", "mass": "dalton",
              "time": "ps"},
    "si": {"length": "m", "energy": "J", "angle": "degree", "charge": "C", "mass": "kg", "time": "s"},
    "cgs": {"length": "cm", "energy": "erg", "angle": "degree", "charge": "statcoulomb", "mass": "g", "time": "s"},
    "electron": {"length": "bohr", "energy": "hartree", "angle": "degree", "charge": "e", "mass": "dalton",
                 "time": "fs"},
    "micro": {"length": "micrometer", "energy": "picogram*micrometer^2/microsecond^2", "angle": "degree",
              "charge": "picocoulomb", "mass": "picogram", "time": "microsecond"},
    "nano": {"length": "nm", "energy": "attogram*nm^2/ns^2", "angle": "degree", "charge": "e",
             "mass": "attogram", "time": "ns"},
    "lj": {"angle": "degree"},
    "openmm": {"length": "nm", "energy": "kJ/mol", "angle": "degree", "charge": "e", "mass": "dalton",
               "time": "ps"},
}
# Spellings taken as the same unit (pint names and common abbreviations).  mrec does not depend on
# pint: a quantity beside a preset must be one of these spellings of the preset's own unit.
_UNIT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "angstrom": ("angstrom", "angstroms", "Å", "Å", "ångström", "Angstrom"),
    "nm": ("nm", "nanometer", "nanometers", "nanometre", "nanometres"),
    "m": ("m", "meter", "meters", "metre", "metres"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "bohr": ("bohr", "a0", "a_0", "bohr_radius"),
    "micrometer": ("micrometer", "micrometers", "micrometre", "um", "µm", "μm", "micron"),
    "kcal/mol": ("kcal/mol", "kcal/mole", "kilocalorie/mole", "kilocalorie/mol", "kilocalories/mole",
                 "kilocalorie_per_mole", "kcal*mol^-1"),
    "kJ/mol": ("kJ/mol", "kJ/mole", "kilojoule/mole", "kilojoule/mol", "kilojoules/mole", "kilojoule_per_mole",
               "kJ*mol^-1"),
    "eV": ("eV", "electron_volt", "electronvolt"),
    "J": ("J", "joule", "joules"),
    "erg": ("erg", "ergs"),
    "hartree": ("hartree", "hartrees", "Eh", "E_h"),
    "picogram*micrometer^2/microsecond^2": ("picogram*micrometer^2/microsecond^2", "pg*um^2/us^2",
                                            "pg*µm^2/µs^2", "pg*μm^2/μs^2"),
    "attogram*nm^2/ns^2": ("attogram*nm^2/ns^2", "attogram*nanometer^2/nanosecond^2", "ag*nm^2/ns^2"),
    "degree": ("degree", "degrees", "deg", "°"),
    "e": ("e", "elementary_charge", "e0"),
    "C": ("C", "coulomb", "coulombs"),
    "statcoulomb": ("statcoulomb", "statC", "esu", "Fr", "franklin"),
    "picocoulomb": ("picocoulomb", "pC"),
    "dalton": ("dalton", "Da", "amu", "u", "unified_atomic_mass_unit", "g/mol", "g/mole", "gram/mole",
               "grams/mole"),
    "kg": ("kg", "kilogram", "kilograms"),
    "g": ("g", "gram", "grams"),
    "picogram": ("picogram", "picograms", "pg"),
    "attogram": ("attogram", "attograms", "ag"),
    "fs": ("fs", "femtosecond", "femtoseconds"),
    "ps": ("ps", "picosecond", "picoseconds"),
    "s": ("s", "second", "seconds", "sec"),
    "microsecond": ("microsecond", "microseconds", "us", "µs", "μs"),
    "ns": ("ns", "nanosecond", "nanoseconds"),
}
_CANONICAL_UNIT: dict[str, str] = {s: canon for canon, spellings in _UNIT_SPELLINGS.items() for s in spellings}


def _normal_unit(u: str) -> str:
    return re.sub(r"\s+", "", u).replace("**", "^").replace("·", "*")


def check_units(units: Any, where: str | None = None) -> dict:
    """``units`` checked: a preset and/or quantity strings, agreeing with each other.

    A bare string is taken as ``{"preset": <string>}`` (the spelling frame meta
    allows).  Keys beyond ``preset`` and the quantities are kept unchecked; a
    ``null`` value means the key is unset.
    """
    if units is None:
        raise _refuse("missing_units", "forcefield: units is required (a preset and/or the unit of each "
                                       "quantity)", where)
    if isinstance(units, str):
        units = {"preset": units}
    if not isinstance(units, Mapping):
        raise _refuse("bad_units", f"forcefield units: an object of preset / quantities, found {units!r}", where)
    preset = units.get("preset")
    stated = {q: units[q] for q in QUANTITIES if units.get(q) is not None}
    if preset is None and not stated:
        raise _refuse("missing_units", "forcefield units states neither a preset nor any quantity (length, energy, "
                                       "angle, charge, mass, time)", where)
    if preset is not None and preset not in PRESETS:
        raise _refuse("bad_units", f"forcefield units.preset {preset!r} is not one of {', '.join(PRESETS)}", where)
    for q, u in stated.items():
        if not isinstance(u, str) or not u.strip():
            raise _refuse("bad_units", f"forcefield units.{q} must be a unit string, found {u!r}", where)
        if preset is None:
            continue
        want = PRESET_UNITS[preset].get(q)
        got = _CANONICAL_UNIT.get(_normal_unit(u))
        if want is None:
            raise _refuse("bad_units", f"forcefield units.{q} is {u!r} beside preset {preset!r}, which gives "
                                       f"{q} no unit (reduced units)", where)
        if got != want:
            extra = " (every preset's angle is the degree; force constants are per radian whatever it says)" \
                if q == "angle" else ""
            raise _refuse("bad_units", f"forcefield units.{q} is {u!r} beside preset {preset!r}, whose {q} is "
                                       f"{want!r}: a quantity stated beside a preset must agree with it{extra}",
                          where)
    return dict(units)
