"""Chemical elements by symbol and standard atomic weight (Z = 1..96), for labels that are not elements.

LAMMPS numbers its atom types; a dump or data file may give their masses.  :func:`element_of_mass`
names the element whose standard atomic weight (IUPAC, as ASE tabulates it) lies within 0.0075 amu
of a mass -- the masses force fields use (12.011, 12.0107, 15.9994, 1.008, 32.066 ...) -- and none
for a reduced (LJ) mass of 1, a coarse-grained bead, a united atom (CH2 = 14.027) or a virtual site
(0).  A mass that names no element leaves the type unnamed: ``--type-map`` names it.
"""
from __future__ import annotations

__all__ = ["SYMBOLS", "MASSES", "element_of_mass", "is_symbol", "MASS_TOLERANCE"]

_TABLE = (
    "H 1.008 He 4.0026 Li 6.94 Be 9.01218 B 10.81 C 12.011 N 14.007 O 15.999 F 18.9984 Ne 20.1797 "
    "Na 22.9898 Mg 24.305 Al 26.9815 Si 28.085 P 30.9738 S 32.06 Cl 35.45 Ar 39.948 K 39.0983 Ca 40.078 "
    "Sc 44.9559 Ti 47.867 V 50.9415 Cr 51.9961 Mn 54.938 Fe 55.845 Co 58.9332 Ni 58.6934 Cu 63.546 "
    "Zn 65.38 Ga 69.723 Ge 72.63 As 74.9216 Se 78.971 Br 79.904 Kr 83.798 Rb 85.4678 Sr 87.62 Y 88.9058 "
    "Zr 91.224 Nb 92.9064 Mo 95.95 Tc 97.9072 Ru 101.07 Rh 102.906 Pd 106.42 Ag 107.868 Cd 112.414 "
    "In 114.818 Sn 118.71 Sb 121.76 Te 127.6 I 126.904 Xe 131.293 Cs 132.905 Ba 137.327 La 138.905 "
    "Ce 140.116 Pr 140.908 Nd 144.242 Pm 144.913 Sm 150.36 Eu 151.964 Gd 157.25 Tb 158.925 Dy 162.5 "
    "Ho 164.93 Er 167.259 Tm 168.934 Yb 173.054 Lu 174.967 Hf 178.49 Ta 180.948 W 183.84 Re 186.207 "
    "Os 190.23 Ir 192.217 Pt 195.084 Au 196.967 Hg 200.592 Tl 204.38 Pb 207.2 Bi 208.98 Po 208.982 "
    "At 209.987 Rn 222.018 Fr 223.02 Ra 226.025 Ac 227.028 Th 232.038 Pa 231.036 U 238.029 Np 237.048 "
    "Pu 244.064 Am 243.061 Cm 247.07 "
).split()

#: element symbols, H first
SYMBOLS: tuple[str, ...] = tuple(_TABLE[0::2])
#: their standard atomic weights (amu)
MASSES: tuple[float, ...] = tuple(float(m) for m in _TABLE[1::2])
#: how far a mass may lie from an element's standard atomic weight
MASS_TOLERANCE = 0.0075
_SET = frozenset(SYMBOLS)


def is_symbol(label: str) -> bool:
    """True for a chemical symbol (``"C"``, ``"Cl"``; case as written)."""
    return label in _SET


def element_of_mass(mass: float) -> str | None:
    """The element whose standard atomic weight is within :data:`MASS_TOLERANCE` of ``mass``, or None."""
    best = min(range(len(MASSES)), key=lambda k: abs(MASSES[k] - mass))
    return SYMBOLS[best] if abs(MASSES[best] - mass) <= MASS_TOLERANCE else None
