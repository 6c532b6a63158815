"""The force-field section ``forcefield/`` (mrec-notes §9.1; the spec's forcefield chapter).

``forcefield`` is frame-shaped::

    forcefield/                     attrs = the force-field document (plain JSON, no _meta_types):
                                    name, units, source?, special_bonds?, styles, producer keys
      <category>.<encoded style>/   one block (a "style table") per entry of styles
        name                        string[T], never null, unique
        itom jtom ktom ltom mtom    string[T], never null, the first <arity> of them ("" = wildcard)
        class element smarts ...    string[T], nullable annotations
        <param>                     f64[T] | f64[T, S...] | string[T]; canonical keys at their dtype
        _validity/<column>          absent parameters are nulls

:class:`ForceField` is the model (the document plus the tables as a
:class:`~mrec.record.model.frame.Frame` whose blocks are the tables);
:func:`write_forcefield` / :func:`read_forcefield` are the binding;
:func:`unresolved_links` lists the names a system uses that resolve to no
row (a SHOULD-level report, never a refusal).

The modules, lowest first: ``vocabulary`` (categories and their arity,
endpoints, annotations, block names), ``units`` (presets and the units a
quantity may state), ``document`` (the document's checks), ``tables`` (the
style tables' checks), ``links`` (:func:`unresolved_links`), ``model``
(:class:`ForceField`) and ``readwrite`` (the binding).

Every rule is checked when a :class:`ForceField` is built, so it holds on
write (the model is built from the caller's input) and on read (the model
is built from the store).  Refusals are :class:`~mrec.errors.RefusalError`
with one of these kinds, and a message naming the style, table, row or key:

* ``missing_key`` -- ``name`` / ``styles`` / ``source.format`` absent;
* ``missing_units`` -- ``units`` absent, or stating neither a preset nor a quantity;
* ``bad_units`` -- an unknown preset, a quantity that is not a string, a
  quantity that does not agree with the preset beside it (``"angle":
  "radian"`` beside any preset);
* ``bad_forcefield`` -- the document's shape: ``name`` not a string,
  ``source`` / ``special_bonds`` / ``styles`` / a style entry malformed, a
  ``(category, style)`` pair twice, a ``one_four`` other than ``regular`` /
  ``epsilon14``, a non-finite number;
* ``reserved_meta_key`` -- a ``_meta_types`` key (the document is untyped);
* ``missing_table`` -- a declared style without its table;
* ``bad_name`` -- a table's ``name`` column missing, not string, null or repeated;
* ``bad_endpoint`` -- endpoints missing, beyond the category's arity, not
  string, null; a smirks-keyed table with endpoints or without ``smirks``; a
  class-keyed style whose atom tables lack ``class``;
* ``bad_annotation`` -- an annotation column that is not a string per row;
* ``bad_parameter`` -- a parameter that is not ``f64`` / ``string`` (canonical
  keys aside), trailing axes on a non-``f64`` column or of length 0, a
  non-finite value in a non-null row, a ``cmap`` grid not ``f64[T,N,N]`` with
  N >= 2, a gap in ``dihedral.nharmonic``'s ``a1..aN``;
* ``pair_conflict`` -- two rows of a pair table naming one unordered
  ``{itom, jtom}`` with different parameters;
* ``bad_precision`` -- a precision declared on a force-field column;
* ``structural_shape_mismatch`` -- a style table with a structural shape;
* the frame kinds (``canonical_dtype``, ``bad_validity``, ``row_count_mismatch``,
  ``unknown_dtype``, ``narrow_float``, ...) for the block rules every
  frame-shaped group shares.
"""
from .document import check_forcefield_document
from .links import unresolved_links
from .model import ForceField
from .readwrite import read_forcefield, write_forcefield
from .units import PRESET_UNITS, PRESETS, QUANTITIES, check_units
from .vocabulary import (ANNOTATIONS, CATEGORY_ARITY, ENDPOINTS, RELATION_BLOCKS, SECTION, block_name,
                         decode_block_name, encode_style)

__all__ = [
    "SECTION", "CATEGORY_ARITY", "ENDPOINTS", "ANNOTATIONS", "PRESETS", "QUANTITIES", "PRESET_UNITS",
    "ForceField", "block_name", "encode_style", "decode_block_name", "check_forcefield_document",
    "check_units", "write_forcefield", "read_forcefield", "unresolved_links", "RELATION_BLOCKS",
]
