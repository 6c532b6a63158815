"""The force-field section's vocabulary: the section's name, the registered categories and their
arity, the endpoint columns and keys, the annotation columns, the system blocks relations link
from, the block name of a style's table (``<category>.<percent-encoded style>``), and ``_refuse``
(a refusal of a kind, the one every check of the section raises)."""
from __future__ import annotations

from ....errors import RefusalError

__all__ = ["SECTION", "ENDPOINTS", "CATEGORY_ARITY", "RELATION_BLOCKS", "ANNOTATIONS", "ENDPOINT_KEYS",
           "encode_style", "block_name", "decode_block_name"]

SECTION = "forcefield"
#: Endpoint columns, in order; a table of arity A carries exactly the first A.
ENDPOINTS: tuple[str, ...] = ("itom", "jtom", "ktom", "ltom", "mtom")
#: The registered categories and their arity.  Any other ``^[a-z][a-z0-9_]*$`` category is legal:
#: its endpoint columns must then be a prefix of :data:`ENDPOINTS`.
CATEGORY_ARITY: dict[str, int] = {"atom": 0, "bond": 2, "angle": 3, "dihedral": 4, "improper": 4, "pair": 2,
                                  "constraint": 2, "virtual_site": 0, "drude": 2, "cmap": 5}
#: The system block a relation category links from (``type`` names a row of a table of the category).
RELATION_BLOCKS: dict[str, str] = {"bond": "bonds", "angle": "angles", "dihedral": "dihedrals",
                                   "improper": "impropers", "constraint": "constraints",
                                   "virtual_site": "virtual_sites", "drude": "drudes", "cmap": "cmaps"}
#: Nullable string annotation columns.
ANNOTATIONS: tuple[str, ...] = ("class", "element", "smarts", "smirks", "overrides", "desc", "doi")
ENDPOINT_KEYS: tuple[str, ...] = ("type", "class", "smirks")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _refuse(kind: str, message: str, where: str | None = None) -> RefusalError:
    return RefusalError(message, path=where, kind=kind)


# ---------------------------------------------------------------------------
# Block names

def encode_style(style: str) -> str:
    """``style``'s UTF-8 bytes with every byte outside ``A-Z a-z 0-9 - _`` as ``%XX`` (uppercase hex)."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in style.encode("utf-8"))


def block_name(category: str, style: str) -> str:
    """The block of a style's table: ``<category>.<encoded style>`` (``pair.lj%2Fcut``)."""
    return f"{category}.{encode_style(style)}"


def decode_block_name(name: str) -> tuple[str, str] | None:
    """``(category, style)`` of a block name (split at the first ``.``, percent-decode the rest),
    or None when ``name`` is no such name (no ``.``, a broken ``%`` escape, bytes that are not UTF-8)."""
    category, dot, rest = name.partition(".")
    if not dot:
        return None
    raw = bytearray()
    i = 0
    while i < len(rest):
        ch = rest[i]
        if ch == "%":
            hexd = rest[i + 1:i + 3]
            if len(hexd) != 2 or not all(c in "0123456789ABCDEFabcdef" for c in hexd):
                return None
            raw.append(int(hexd, 16))
            i += 3
        else:
            raw += ch.encode("utf-8")
            i += 1
    try:
        return category, raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
