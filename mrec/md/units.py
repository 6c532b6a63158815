"""Velocities and forces from a record's stated units to MDAnalysis' (Å/ps, kJ/(mol·Å)) -- issue 28.

A record states its units in the system meta (or the root meta) key ``units``: an OpenMM record
``{"length": "nm", "velocity": "nm/ps", "force": "kJ/(mol*nm)", ...}``, an ASE one ``{"force":
"eV/angstrom", ...}``.  A stated ``velocity`` / ``force`` wins; without one a velocity is the stated
length per the stated time, a force the stated energy (default kJ/mol) per the stated length
(default Å).  A unit this module does not know is refused, naming it: never a number off by a
factor.

``record_units`` gives a record's (length, time) factors to Å and ps (what every export scales by);
``MDA_UNITS`` / ``ASE_UNITS`` are the units a record converted through MDAnalysis / ASE states.
"""
from __future__ import annotations

import re

from ..errors import MrecError

#: the units of a record written through MDAnalysis (its own) and through ASE (stated in the meta)
MDA_UNITS = {"length": "angstrom", "time": "ps", "velocity": "angstrom/ps", "force": "kJ/(mol*angstrom)",
             "energy": "kJ/mol", "mass": "amu", "charge": "e"}
ASE_UNITS = {"length": "angstrom", "time": "ps", "velocity": "angstrom/ps", "force": "eV/angstrom",
             "energy": "eV", "stress": "eV/angstrom**3", "mass": "amu", "charge": "e"}
#: Å per unit of length; ps per unit of time (what ``record_units`` and ``motion_factors`` read)
_LENGTH = {"angstrom": 1.0, "a": 1.0, "å": 1.0, "nm": 10.0, "nanometer": 10.0, "pm": 0.01, "bohr": 0.529177210903}
_TIME = {"ps": 1.0, "picosecond": 1.0, "fs": 1e-3, "femtosecond": 1e-3, "ns": 1e3, "nanosecond": 1e3}

#: kJ/mol per unit of energy (per particle units taken per mole: eV, hartree, Ry; CODATA 2018).
ENERGY_KJ_MOL = {"kj/mol": 1.0, "kcal/mol": 4.184, "j/mol": 1e-3, "ev": 96.48533212331002,
                 "mev": 0.09648533212331002, "hartree": 2625.4996394798254, "ry": 1312.7498197399127}

_PER_MOL = re.compile(r"(kj|kcal|j)/\(mol\*([a-zå]+)\)")     # kJ/(mol*nm)
_PER = re.compile(r"(.+)/([a-zå]+)")                          # kJ/mol/nm, eV/angstrom, nm/ps


def _norm(unit) -> str:
    return str(unit).replace(" ", "").replace("·", "*").replace("Å", "angstrom").lower()


def _ratio(unit: str, numerators: dict, denominators: dict, what: str) -> float:
    """``unit`` as "numerator/denominator" (or "E/(mol*L)") in the tables' units."""
    s = _norm(unit)
    m = _PER_MOL.fullmatch(s)
    if m:
        num, den = m.group(1) + "/mol", m.group(2)
    else:
        m = _PER.fullmatch(s)
        num, den = m.groups() if m else (None, None)
    if num not in numerators or den not in denominators:
        raise MrecError(f"the record states the {what} unit {unit!r}, which mrec does not convert "
                        f"(numerators {sorted(numerators)}, per {sorted(denominators)})")
    return numerators[num] / denominators[den]


def motion_factors(units: dict | str | None) -> tuple[float, float]:
    """(velocity factor to Å/ps, force factor to kJ/(mol·Å)) for a record's stated ``units``."""
    if not isinstance(units, dict):
        return 1.0, 1.0
    length = _norm(units.get("length", "angstrom"))
    velocity = units.get("velocity") or f"{length}/{_norm(units.get('time', 'ps'))}"
    force = units.get("force") or f"{_norm(units.get('energy', 'kJ/mol'))}/{length}"
    return _ratio(velocity, _LENGTH, _TIME, "velocity"), _ratio(force, ENERGY_KJ_MOL, _LENGTH, "force")


def stated_units(rec) -> dict | str | None:
    """The ``units`` a record states: its system meta's, else its root meta's."""
    units = rec.system.meta.get("units") if rec.system is not None else None
    return units if units is not None else rec.meta.get("units")


def record_units(rec) -> tuple[float, float]:
    """(length factor to Å, time factor to ps) of a record, from the system meta or meta ``units``."""
    units = None
    if rec.system is not None:
        units = rec.system.meta.get("units")
    if units is None:
        units = rec.meta.get("units")
    if isinstance(units, str):
        units = {"preset": units}
    if not isinstance(units, dict):
        return 1.0, 1.0
    lf = _LENGTH.get(str(units.get("length", "angstrom")).lower())
    tf = _TIME.get(str(units.get("time", "ps")).lower())
    if lf is None or tf is None:
        raise MrecError(f"the record states units {units}: mrec convert knows lengths {sorted(_LENGTH)} "
                        f"and times {sorted(_TIME)}")
    return lf, tf
