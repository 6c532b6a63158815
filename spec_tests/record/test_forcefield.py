"""The force-field section (mrec-notes §9.1, the spec's forcefield chapter), frame-shaped groups at any
path, and sections created from scratch (issue 13).

Every force-field rule is exercised in both directions: refused when a :class:`mrec.ForceField` is built
(nothing reaches the disk), and refused when a store another writer tampered with is read (directory and
zip), with the same ``kind``; ``mrec validate`` reports it under its ``FF-*`` rule.  The spec's JSON
vectors (``vectors/fixtures/schema/core/forcefield``) are accepted / refused; zarr-python, zarrs and
tensorstore read the force-field arrays mrec writes bit for bit, and mrec reads a force field and a bare
frame store that zarr-python wrote.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr
from hypothesis import given, settings, strategies as st

import mrec
from mrec.record.model.dtypes import NUMPY_DTYPES
from mrec.record.sections.forcefield import PRESET_UNITS, block_name, decode_block_name, encode_style
from mrec.check.validate import validate
from mrec.zarr.array import Array
from mrec.zarr.stores.directory import DirectoryStore
from test_record import same  # noqa: E402  (spec_tests is on sys.path under pytest)

ROOT = Path(__file__).resolve().parents[2]
VECTORS = Path("/work/shared/spec/vectors")
FF_VECTORS = VECTORS / "fixtures/schema/core/forcefield"
#: The kind mrec gives each invalid vector (the vectors name no kind; these are mrec's).
VECTOR_KINDS = {"invalid-category-case.json": "bad_forcefield", "invalid-empty-units.json": "missing_units",
                "invalid-no-units.json": "missing_units", "invalid-unknown-endpoint-key.json": "bad_forcefield"}


def tables_of(model: dict) -> mrec.Frame:
    """The ``tables`` of a spec model (columns with dtype / shape / values / validity) as a Frame."""
    blocks, masks, counts = {}, {}, {}
    for b, blk in model.get("tables", {}).items():
        counts[b] = blk["count"]
        blocks[b] = {}
        for c, col in blk.get("columns", {}).items():
            blocks[b][c] = np.array(col["values"], dtype=NUMPY_DTYPES[col["dtype"]]).reshape(col["shape"])
            if col.get("validity") is not None:
                masks.setdefault(b, {})[c] = np.array(col["validity"], bool)
    return mrec.Frame(blocks=blocks, masks=masks, counts=counts)


def from_model(model: dict) -> mrec.ForceField:
    return mrec.ForceField.from_any({**{k: v for k, v in model.items() if k != "tables"},
                                     "tables": tables_of(model)})


def tip3p(**over) -> dict:
    ff = {"name": "TIP3P", "units": {"preset": "real"}, "source": {"format": "lammps"},
          "special_bonds": {"lj": [0.0, 0.0, 0.5], "coul": [0.0, 0.0, 0.8333]},
          "styles": [{"category": "atom", "style": "full"}, {"category": "bond", "style": "harmonic"},
                     {"category": "pair", "style": "lj/cut/coul/long", "params": {"cutoff": 10.0,
                                                                                 "mixing": "arithmetic"}}],
          "tables": {("atom", "full"): {"name": ["OW", "HW"], "element": ["O", "H"], "mass": [15.999, 1.008],
                                        "charge": [-0.834, 0.417]},
                     ("bond", "harmonic"): {"name": ["OW-HW"], "itom": ["OW"], "jtom": ["HW"], "k": [529.581],
                                            "r0": [0.9572]},
                     ("pair", "lj/cut/coul/long"): {"name": ["OW", "HW", "OW-HW"], "itom": ["OW", "HW", "OW"],
                                                    "jtom": ["OW", "HW", "HW"], "epsilon": [0.1521, None, None],
                                                    "sigma": [3.1507, None, None], "desc": [None, "no LJ", None]}},
          "x_vendor": {"kept": [1, None]}}
    ff.update(over)
    return ff


def cmap_ff() -> dict:
    grid = np.linspace(-1.0, 1.0, 2 * 24 * 24).reshape(2, 24, 24)
    return {"name": "cmap", "units": {"preset": "real", "angle": "degrees"},
            "styles": [{"category": "cmap", "style": "charmm"}, {"category": "urey_bradley", "style": "harm",
                                                                 "expression": "k_ub*(distance(p1,p3)-r_ub)^2"}],
            "tables": {"cmap.charmm": {"name": ["c1", "c2"], **{e: ["C", ""] for e in
                                                                ("itom", "jtom", "ktom", "ltom", "mtom")},
                                       "grid": grid, "type_id": np.array([1, 2], "u8")},
                       "urey_bradley.harm": {"name": ["u"], "itom": ["A"], "jtom": ["B"], "ktom": ["C"],
                                             "k_ub": [1.0], "r_ub": [2.0]}}}


# -- the JSON vectors --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in FF_VECTORS.glob("*.json")))
def test_forcefield_vectors(tmp_path, name):
    """valid-* build, write and read back equal (directory and zip); invalid-* are refused with a kind."""
    model = json.loads((FF_VECTORS / name).read_text())
    if name.startswith("invalid-"):
        with pytest.raises(mrec.RefusalError) as e:
            mrec.write_record(tmp_path / "v.mrec", forcefield=from_model(model))
        assert e.value.kind == VECTOR_KINDS[name], e.value
        assert not (tmp_path / "v.mrec").exists()
        return
    ff = from_model(model)
    p = mrec.write_record(tmp_path / "v.mrec", forcefield=ff)
    z = mrec.pack(p, keep=True)
    for form in (p, z):
        with mrec.read_record(form) as r:
            assert r.forcefield == ff and r.sections() == ["meta", "forcefield"] and r.unknown == {}
            assert r.forcefield.document() == {k: v for k, v in model.items() if k != "tables"}
    assert validate(p, deep=True).ok and validate(z, deep=True).ok


def test_forcefield_package_record_vector(tmp_path):
    """record/valid-forcefield-package: meta plus a force field only is a valid record."""
    model = json.loads((VECTORS / "fixtures/schema/core/record/valid-forcefield-package.json").read_text())
    p = mrec.write_record(tmp_path / "pkg.mrec", meta=model["meta"], forcefield=from_model(model["forcefield"]))
    assert mrec.sections(p) == ["meta", "forcefield"]
    rep = validate(p, deep=True)
    assert rep.ok and not rep.warnings, rep.to_json()
    with mrec.read_record(p) as r:
        assert r.meta == {} and r.forcefield.table("atom", "full")["name"].tolist() == ["A"]


# -- block names -----------------------------------------------------------------------------------

def test_block_name_examples():
    assert block_name("pair", "lj/cut/coul/long") == "pair.lj%2Fcut%2Fcoul%2Flong"
    assert block_name("bond", "harmonic") == "bond.harmonic"
    assert block_name("dihedral", "multi/harmonic") == "dihedral.multi%2Fharmonic"
    assert encode_style("a.b c~é") == "a%2Eb%20c%7E%C3%A9"            # '.', ' ', '~' and non-ASCII encoded
    assert decode_block_name("pair.lj%2Fcut") == ("pair", "lj/cut")
    assert decode_block_name("x.a.b") == ("x", "a.b")                    # split at the first '.'
    assert decode_block_name("nodot") is None and decode_block_name("a.%2") is None
    assert decode_block_name("a.%FF") is None                           # not UTF-8


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.text(min_size=1, max_size=20))
def test_block_name_round_trip(category, style):
    name = block_name(category, style)
    assert decode_block_name(name) == (category, style)
    enc = name.split(".", 1)[1]
    assert all(c.isascii() and (c.isalnum() or c in "-_%") for c in enc)
    assert all(enc[i + 1:i + 3].upper() == enc[i + 1:i + 3] for i, c in enumerate(enc) if c == "%")


# -- write, read, nulls ----------------------------------------------------------------------------

def test_round_trip_nulls_arrays_unknown_keys(tmp_path):
    """Absent parameters are nulls through _validity; array parameters; unknown document keys, a
    category outside the registry and its expression are kept; the tables are frame-shaped on disk."""
    ff = mrec.ForceField.from_any(tip3p())
    p = mrec.write_record(tmp_path / "ff.mrec", forcefield=ff, sections={})
    b = "forcefield/pair.lj%2Fcut%2Fcoul%2Flong"
    doc = json.loads((p / "forcefield/zarr.json").read_text())
    assert doc["attributes"] == ff.document() and "_meta_types" not in doc["attributes"]
    assert doc["attributes"]["x_vendor"] == {"kept": [1, None]}
    assert json.loads((p / b / "zarr.json").read_text())["attributes"] == {"count": 3}
    mask = Array.open(DirectoryStore(str(p)), b[len(""):] + "/_validity/epsilon").read()
    assert mask.tolist() == [True, False, False]
    with mrec.read_record(p) as r:
        got = r.forcefield
        assert got == ff and got.masks[b.split("/")[1]]["desc"].tolist() == [False, True, False]
        assert got.table("pair", "lj/cut/coul/long")["epsilon"][0] == 0.1521
    c = mrec.ForceField.from_any(cmap_ff())
    p2 = mrec.write_record(tmp_path / "c.mrec", forcefield=c)
    with mrec.read_record(p2) as r:
        assert r.forcefield == c and r.forcefield.table("cmap", "charmm")["grid"].shape == (2, 24, 24)
        assert r.forcefield.styles[1]["expression"] == "k_ub*(distance(p1,p3)-r_ub)^2"


def test_empty_table_gets_its_columns_and_missing_table_is_refused(tmp_path):
    ff = mrec.ForceField(name="x", units="real", styles=[{"category": "pair", "style": "coul/cut"}],
                         tables={("pair", "coul/cut"): {}})
    assert sorted(ff.table("pair", "coul/cut")) == ["itom", "jtom", "name"] and ff.tables.counts["pair.coul%2Fcut"] == 0
    with pytest.raises(mrec.RefusalError) as e:
        mrec.ForceField(name="x", units="real", styles=[{"category": "pair", "style": "coul/cut"}])
    assert e.value.kind == "missing_table" and "pair.coul%2Fcut" in str(e.value)


UNITS_OK = [{"preset": p} for p in PRESET_UNITS] + [
    {"preset": "real", "length": "angstrom", "energy": "kcal/mol", "angle": "degree", "charge": "e",
     "mass": "g/mol", "time": "femtosecond"},
    {"preset": "metal", "energy": "eV", "time": "ps"}, {"preset": "si", "charge": "coulomb", "mass": "kg"},
    {"preset": "nano", "energy": "attogram * nm**2 / ns**2"}, {"preset": "lj", "angle": "deg"},
    {"length": "nm", "energy": "kJ/mol"}, {"angle": "radian"}, {"preset": "openmm", "length": "nanometer"},
    "real", {"preset": "real", "x_note": "kept"}, {"preset": "real", "length": None},
]
UNITS_BAD = [
    (None, "missing_units"), ({}, "missing_units"), ({"x_note": 1}, "missing_units"),
    ({"preset": "gromacs"}, "bad_units"), ({"preset": "real", "angle": "radian"}, "bad_units"),
    ({"preset": "real", "length": "nm"}, "bad_units"), ({"preset": "lj", "length": "angstrom"}, "bad_units"),
    ({"length": 1.0}, "bad_units"), ({"energy": ""}, "bad_units"), (["real"], "bad_units"),
    ({"preset": "metal", "energy": "kcal/mol"}, "bad_units"),
]


@pytest.mark.parametrize("units", UNITS_OK, ids=str)
def test_units_accepted(units):
    assert mrec.ForceField(name="u", units=units, styles=[]).units


@pytest.mark.parametrize("units,kind", UNITS_BAD, ids=str)
def test_units_refused(units, kind):
    with pytest.raises(mrec.RefusalError) as e:
        mrec.ForceField(name="u", units=units, styles=[])
    assert e.value.kind == kind and "units" in str(e.value)


def _t(table, **cols):
    """tip3p() with one table's columns replaced / added (None deletes a column)."""
    ff = tip3p()
    t = dict(ff["tables"][table])
    for c, v in cols.items():
        if v is None:
            t.pop(c, None)
        else:
            t[c] = v
    ff["tables"][table] = t
    return ff


PAIR, BOND, ATOM = ("pair", "lj/cut/coul/long"), ("bond", "harmonic"), ("atom", "full")
STYLES = tip3p()["styles"]

#: (force field, kind, fragment of the message) -- each breaks one rule.
WRITE_REFUSALS = [
    (tip3p(name=None), "missing_key", "name is required"),
    (tip3p(name=3), "bad_forcefield", "name is a string"),
    (tip3p(styles={"a": 1}), "bad_forcefield", "styles is a list"),
    (tip3p(source={"uri": "x"}), "missing_key", "source.format"),
    (tip3p(source={"format": "lammps", "sha256": "ABC"}), "bad_forcefield", "sha256"),
    (tip3p(special_bonds={"lj": [0, 0, 0.5]}), "missing_key", "special_bonds.coul"),
    (tip3p(special_bonds={"lj": [0, 0], "coul": [0, 0, 1]}), "bad_forcefield", "special_bonds.lj"),
    (tip3p(special_bonds={"lj": [0, 0, 1], "coul": [0, 0, 1], "x": 1}), "bad_forcefield", "only lj and coul"),
    (tip3p(_meta_types={"name": "string"}), "reserved_meta_key", "_meta_types"),
    (tip3p(x_bad=float("nan")), "bad_forcefield", "finite"),
    (tip3p(styles=[*STYLES, {"category": "Bond", "style": "x"}]), "bad_forcefield", "category must match"),
    (tip3p(styles=[*STYLES, {"category": "bond", "style": ""}]), "bad_forcefield", "non-empty"),
    (tip3p(styles=[*STYLES, {"category": "bond"}]), "missing_key", "style is required"),
    (tip3p(styles=[*STYLES, {"category": "bond", "style": "harmonic"}]), "bad_forcefield", "repeats style 1"),
    (tip3p(styles=[{**STYLES[0]}, STYLES[1], {**STYLES[2], "params": {"cutoff": [1]}}]), "bad_forcefield",
     "params.cutoff"),
    (tip3p(styles=[STYLES[0], {**STYLES[1], "endpoint_key": "residue"}, STYLES[2]]), "bad_forcefield",
     "endpoint_key"),
    (tip3p(styles=[STYLES[0], {**STYLES[1], "expression": 3}, STYLES[2]]), "bad_forcefield", "expression"),
    (tip3p(styles=[*STYLES, {"category": "angle", "style": "harmonic"}]), "missing_table", "angle.harmonic"),
    (_t(BOND, name=None), "bad_name", "name column is required"),
    (_t(BOND, name=np.array([1], "u8")), "canonical_dtype", "'name'"),
    (_t(PAIR, name=["OW", "HW", "OW"]), "bad_name", "row 2: name 'OW' repeats row 0"),
    (_t(PAIR, name=["OW", None, "x"]), "bad_name", "row 1"),
    (_t(BOND, jtom=None), "bad_endpoint", "'jtom' is required"),
    (_t(BOND, ktom=["X"]), "bad_endpoint", "arity 2"),
    (_t(ATOM, itom=["A", "B"]), "bad_endpoint", "arity 0"),
    (_t(PAIR, itom=["OW", None, "OW"]), "bad_endpoint", "row 1"),
    (_t(BOND, itom=np.array([1.0])), "bad_endpoint", "string[T]"),
    (_t(ATOM, smarts=np.array([1.0, 2.0])), "bad_annotation", "'smarts'"),
    (_t(BOND, k=np.array([5], "i8")), "bad_parameter", "f64 or string"),
    (_t(BOND, k=np.array([[1.0]], dtype=object).astype(str).astype(object)), "bad_parameter", "string[T]"),
    (_t(BOND, k=np.zeros((1, 0))), "bad_parameter", "at least 1 long"),
    (_t(BOND, k=[float("nan")]), "bad_parameter", "row 0"),
    (_t(BOND, r0=[float("inf")]), "bad_parameter", "non-finite"),
    (_t(ATOM, mass=np.array([1, 2], "u8")), "canonical_dtype", "'mass'"),
    (_t(PAIR, itom=["OW", "HW", "HW"], jtom=["HW", "HW", "OW"], name=["a", "b", "c"],
        epsilon=[0.1521, None, 0.2]), "pair_conflict", "row 2: restates the pair"),
]


@pytest.mark.parametrize("ff,kind,fragment", WRITE_REFUSALS, ids=[f"{k}-{f}" for _, k, f in WRITE_REFUSALS])
def test_write_refusals(tmp_path, ff, kind, fragment):
    """Each rule refused before anything is written, with its kind and a message naming the style, table,
    row or key."""
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_record(tmp_path / "w.mrec", forcefield=ff)
    assert e.value.kind == kind and fragment in str(e.value), e.value
    assert not (tmp_path / "w.mrec").exists()


def test_more_table_rules():
    base = {"name": "r", "units": "real"}
    cm = cmap_ff()
    for grid, ok in ((np.zeros((2, 3, 3)), True), (np.zeros((2, 3, 4)), False), (np.zeros((2, 1, 1)), False),
                     (np.zeros((2, 9)), False), (np.zeros((2, 3, 3, 3)), False)):
        cm["tables"]["cmap.charmm"]["grid"] = grid
        if ok:
            mrec.ForceField.from_any(cm)
        else:
            with pytest.raises(mrec.RefusalError, match="cmap grid") as e:
                mrec.ForceField.from_any(cm)
            assert e.value.kind == "bad_parameter"
    smirks = [{"category": "bond", "style": "harmonic", "endpoint_key": "smirks"}]
    mrec.ForceField(**base, styles=smirks, tables={"bond.harmonic": {"name": ["b1"], "smirks": ["[#6:1]-[#1:2]"]}})
    for cols, frag in (({"name": ["b1"], "smirks": ["x"], "itom": ["a"]}, "no endpoint columns"),
                       ({"name": ["b1"]}, "requires the smirks column"),
                       ({"name": ["b1", "b2"], "smirks": ["x", None]}, "never null")):
        with pytest.raises(mrec.RefusalError, match=frag) as e:
            mrec.ForceField(**base, styles=smirks, tables={"bond.harmonic": cols})
        assert e.value.kind == "bad_endpoint"
    keyed = [{"category": "atom", "style": "full"}, {"category": "bond", "style": "harmonic", "endpoint_key": "class"}]
    tables = {"atom.full": {"name": ["a"]}, "bond.harmonic": {"name": ["b"], "itom": ["c"], "jtom": ["c"]}}
    with pytest.raises(mrec.RefusalError, match="carries class") as e:
        mrec.ForceField(**base, styles=keyed, tables=tables)
    assert e.value.kind == "bad_endpoint"
    mrec.ForceField(**base, styles=keyed, tables={**tables, "atom.full": {"name": ["a"], "class": ["c"]}})
    unreg = [{"category": "ub", "style": "x"}]
    with pytest.raises(mrec.RefusalError, match="prefix") as e:
        mrec.ForceField(**base, styles=unreg, tables={"ub.x": {"name": ["u"], "itom": ["a"], "ktom": ["b"]}})
    assert e.value.kind == "bad_endpoint"
    charmm = [{"category": "pair", "style": "lj/charmm", "params": {"one_four": "sometimes"}}]
    with pytest.raises(mrec.RefusalError, match="one_four") as e:
        mrec.ForceField(**base, styles=charmm, tables={"pair.lj%2Fcharmm": {}})
    assert e.value.kind == "bad_forcefield"
    nh = [{"category": "dihedral", "style": "nharmonic"}]
    four = {e: ["a"] for e in ("itom", "jtom", "ktom", "ltom")}
    mrec.ForceField(**base, styles=nh, tables={"dihedral.nharmonic": {"name": ["d"], **four, "a1": [1.0], "a2": [2.0]}})
    with pytest.raises(mrec.RefusalError, match="contiguous") as e:
        mrec.ForceField(**base, styles=nh, tables={"dihedral.nharmonic": {"name": ["d"], **four, "a1": [1.0],
                                                                          "a3": [2.0]}})
    assert e.value.kind == "bad_parameter"
    restated = mrec.ForceField(**base, styles=[{"category": "pair", "style": "lj/cut"}], tables={"pair.lj%2Fcut": {
        "name": ["a", "b"], "itom": ["A", "B"], "jtom": ["B", "A"], "epsilon": [1.0, 1.0], "desc": ["x", "y"]}})
    assert restated.tables.counts["pair.lj%2Fcut"] == 2           # an equal restatement is one row: accepted
    with pytest.raises(mrec.RefusalError) as e:
        mrec.ForceField(**base, styles=[{"category": "bond", "style": "h"}],
                        tables=mrec.Frame(blocks={"bond.h": {"name": ["b"], "itom": ["a"], "jtom": ["a"],
                                                             "k": [1.0]}}, precision={"bond.h": {"k": 1e-3}}))
    assert e.value.kind == "bad_precision"
    with pytest.raises(mrec.RefusalError) as e:
        mrec.ForceField(**base, styles=[{"category": "atom", "style": "full"}],
                        tables=mrec.Frame(blocks={"atom.full": {"name": ["a", "b"]}},
                                          block_attrs={"atom.full": {"structural_shape": [2, 1]}}))
    assert e.value.kind == "structural_shape_mismatch"


# -- read refusals: stores another writer tampered with ----------------------------------------------

def _attrs(p, node, edit):
    f = Path(p) / node / "zarr.json"
    doc = json.loads(f.read_text())
    edit(doc["attributes"])
    f.write_text(json.dumps(doc))


def _replace(node, values, dtype, attributes=None):
    def t(p):
        import shutil
        from mrec.record.sections.fixed import write_fixed_array
        shutil.rmtree(Path(p) / node, ignore_errors=True)
        write_fixed_array(DirectoryStore(str(p)), node, np.asarray(values, dtype=object if dtype == "string" else
                                                                   NUMPY_DTYPES[dtype]), dtype,
                          attributes=attributes)
    return t


B = "forcefield/bond.harmonic"
P = "forcefield/pair.lj%2Fcut%2Fcoul%2Flong"
READ_REFUSALS = [
    (lambda p: _attrs(p, "forcefield", lambda a: a.pop("units")), "missing_units", "FF-3"),
    (lambda p: _attrs(p, "forcefield", lambda a: a.update(units={"preset": "real", "angle": "radian"})),
     "bad_units", "FF-3"),
    (lambda p: _attrs(p, "forcefield", lambda a: a.pop("name")), "missing_key", "FF-2"),
    (lambda p: _attrs(p, "forcefield", lambda a: a.pop("styles")), "missing_key", "FF-2"),
    (lambda p: _attrs(p, "forcefield", lambda a: a.update(_meta_types={})), "reserved_meta_key", "FF-2"),
    (lambda p: _attrs(p, "forcefield", lambda a: a["styles"].append({"category": "angle", "style": "x"})),
     "missing_table", "FF-7"),
    (lambda p: _attrs(p, "forcefield", lambda a: a["styles"][1].update(category="Bond")), "bad_forcefield",
     "FF-6"),
    (lambda p: (Path(p) / B).rename(Path(p) / "forcefield/bond.harm"), "missing_table", "FF-7"),
    (_replace(f"{B}/name", ["OW-HW", "OW-HW"], "string"), "row_count_mismatch", "N-1.4c"),
    (_replace(f"{P}/name", ["OW", "OW", "x"], "string"), "bad_name", "FF-8"),
    (_replace(f"{B}/ktom", ["X"], "string"), "bad_endpoint", "FF-9"),
    (_replace(f"{B}/jtom", [1.0], "f64"), "bad_endpoint", "FF-9"),
    (_replace(f"{B}/k", [3], "i32"), "bad_parameter", "FF-11"),
    (_replace(f"{B}/k", [float("nan")], "f64"), "bad_parameter", "FF-11"),
    (_replace(f"{B}/k", [1.0], "f64", {"precision": 0.001}), "bad_precision", "FF-12"),
    (_replace("forcefield/atom.full/mass", [1.0, 2.0], "c128"), "canonical_dtype", "FF-11"),
    (_replace(f"{P}/jtom", ["OW", "HW", "OW"], "string"), "pair_conflict", "FF-14"),
    (lambda p: _attrs(p, B, lambda a: a.update(structural_shape=[1])), "structural_shape_mismatch", "FF-12"),
    (_replace(f"{P}/_validity/epsilon", [1, 0, 0], "u8"), "bad_validity", "N-1.4c"),
    (lambda p: _attrs(p, "forcefield", lambda a: a["source"].update(sha256="F" * 64)), "bad_forcefield", "FF-6"),
    (lambda p: _attrs(p, "forcefield", lambda a: a["special_bonds"].pop("coul")), "missing_key", "FF-2"),
    (lambda p: _attrs(p, "forcefield", lambda a: a["styles"][2]["params"].update(cutoff=None)), "bad_forcefield",
     "FF-6"),
    (_replace("forcefield/atom.full/desc", [1.0, 2.0], "f64"), "bad_annotation", "FF-10"),
    (_replace(f"{P}/itom", ["OW", "HW"], "string"), "row_count_mismatch", "N-1.4c"),
    (_replace(f"{B}/r0", [["a", "b"]], "string"), "bad_parameter", "FF-11"),
    (_replace(f"{B}/k", np.zeros((1, 0)), "f64"), "bad_parameter", "FF-11"),
    (lambda p: _attrs(p, "forcefield", lambda a: a.update(styles=[{**s, "endpoint_key": "smirks"} if
                                                                 s["category"] == "bond" else s
                                                                 for s in a["styles"]])), "bad_endpoint", "FF-9"),
]
#: Refusals of a stored cmap force field (cmap_ff()).
CMAP_READ_REFUSALS = [
    (_replace("forcefield/cmap.charmm/grid", np.zeros((2, 3, 4)), "f64"), "bad_parameter", "FF-13"),
    (_replace("forcefield/cmap.charmm/grid", np.zeros((2, 1, 1)), "f64"), "bad_parameter", "FF-13"),
    (_replace("forcefield/cmap.charmm/grid", np.zeros((2, 9)), "f64"), "bad_parameter", "FF-13"),
    (_replace("forcefield/cmap.charmm/mtom", [1.0, 2.0], "f64"), "bad_endpoint", "FF-9"),
    (_replace("forcefield/cmap.charmm/type_id", [1, 2], "i64"), "canonical_dtype", "FF-11"),
    (lambda p: (Path(p) / "forcefield/cmap.charmm/ltom").rename(Path(p) / "forcefield/cmap.charmm/zz"),
     "bad_endpoint", "FF-9"),
]


@pytest.mark.parametrize("packed", [False, True], ids=["dir", "zip"])
@pytest.mark.parametrize("tamper,kind,rule", READ_REFUSALS, ids=[f"{k}-{i}" for i, (_, k, _r) in
                                                                  enumerate(READ_REFUSALS)])
def test_read_refusals(tmp_path, tamper, kind, rule, packed):
    """A stored force field breaking a rule is refused on read with the write side's kind; ``mrec
    validate`` reports it under its rule id (directory and zip)."""
    _refused_on_read(tmp_path, tip3p(), tamper, kind, rule, packed)


@pytest.mark.parametrize("tamper,kind,rule", CMAP_READ_REFUSALS, ids=[f"{k}-{i}" for i, (_, k, _r) in
                                                                      enumerate(CMAP_READ_REFUSALS)])
def test_cmap_read_refusals(tmp_path, tamper, kind, rule):
    _refused_on_read(tmp_path, cmap_ff(), tamper, kind, rule, False)


def _refused_on_read(tmp_path, ff, tamper, kind, rule, packed):
    p = mrec.write_record(tmp_path / "t.mrec", forcefield=ff)
    tamper(p)
    target = mrec.pack(p, keep=True) if packed else p
    with pytest.raises(mrec.RefusalError) as e:
        mrec.read_record(target)
    assert e.value.kind == kind, e.value
    assert "forcefield" in str(e.value)
    rep = validate(target)
    assert not rep.ok and any(v.rule == rule and v.kind == kind for v in rep.violations), rep.to_json()


# -- records, linking, the validator and info --------------------------------------------------------

def test_forcefield_only_record_and_linking_warnings(tmp_path):
    """meta + forcefield is a whole record; with a system, names link by name and an unresolved one is
    a validator warning, never a refusal."""
    p = mrec.write_record(tmp_path / "only.mrec", forcefield=tip3p())
    assert mrec.sections(p) == ["meta", "forcefield"]
    rep = validate(p, deep=True)
    assert rep.ok and rep.warnings == []
    system = {"blocks": {"atoms": {"type": ["OW", "HW", "HX"], "x": [0.0, 1.0, 2.0]},
                         "bonds": {"atomi": np.array([0, 0], "u8"), "atomj": np.array([1, 2], "u8"),
                                   "type": ["OW-HW", "OW-HX"], "style": ["harmonic", "harmonic"]},
                         "angles": {"atomi": np.array([1], "u8"), "atomj": np.array([0], "u8"),
                                    "atomk": np.array([2], "u8"), "type": ["HW-OW-HW"]}}}
    p2 = mrec.write_record(tmp_path / "sys.mrec", system=system, forcefield=tip3p())
    with mrec.read_record(p2) as r:                                     # never refused on read
        msgs = r.forcefield.unresolved(r.system)
    assert len(msgs) == 3 and "atoms.type row 2: 'HX'" in msgs[0], msgs
    assert any("bonds.type row 1: 'OW-HX'" in m and "'bond.harmonic'" in m for m in msgs)
    assert any("angles.type row 0" in m for m in msgs)
    rep = validate(p2)
    assert rep.ok and [w.rule for w in rep.warnings] == ["FF-17"] * 3, rep.to_json()
    out = subprocess.run([sys.executable, "-m", "mrec", "validate", str(p2)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "[FF-17] (warning)" in out.stdout, out.stdout + out.stderr


def test_info_shows_the_forcefield(tmp_path):
    p = mrec.write_record(tmp_path / "i.mrec", forcefield=tip3p())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "mrec", "info", str(p), "--json"], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr
    ff = json.loads(out.stdout)["forcefield"]
    assert ff["name"] == "TIP3P" and ff["units"] == {"preset": "real"} and ff["other_keys"] == ["x_vendor"]
    t = ff["tables"]["pair.lj%2Fcut%2Fcoul%2Flong"]
    assert t["style"] == "lj/cut/coul/long" and t["rows"] == 3 and t["columns"]["epsilon"] == "float64"
    assert t["params"] == {"cutoff": 10.0, "mixing": "arithmetic"}
    text = subprocess.run([sys.executable, "-m", "mrec", "info", str(p)], capture_output=True, text=True, env=env)
    assert "forcefield: 'TIP3P' (preset=real), 3 styles" in text.stdout
    assert "pair 'lj/cut/coul/long' [pair.lj%2Fcut%2Fcoul%2Flong] 3 rows" in text.stdout


# -- oracles both ways --------------------------------------------------------------------------------

def _zarrs(path):
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}):
        z = zarr.open_array(str(path), mode="r")
        assert type(z._async_array.codec_pipeline).__name__ == "ZarrsCodecPipeline"
        return z[...]


def test_oracles_read_the_forcefield_arrays(tmp_path):
    """Every force-field array mrec writes (strings, masks, f64, u64, a cmap grid f64[T,24,24]) reads
    identically through zarr-python, the zarrs pipeline and tensorstore (strings: zarr-python only)."""
    p = mrec.write_record(tmp_path / "o.mrec", forcefield=mrec.ForceField.from_any(cmap_ff()))
    p2 = mrec.write_record(tmp_path / "t.mrec", forcefield=tip3p())
    checked = {"zarr-python": 0, "zarrs": 0, "tensorstore": 0}
    for root in (p, p2):
        g = zarr.open_group(str(root / "forcefield"), mode="r")
        assert dict(g.attrs) == json.loads((root / "forcefield/zarr.json").read_text())["attributes"]
        for zj in sorted((root / "forcefield").rglob("zarr.json")):
            doc = json.loads(zj.read_text())
            if doc["node_type"] != "array":
                continue
            node = zj.parent
            ours = Array.open(DirectoryStore(str(root)), str(node.relative_to(root))).read()
            assert same(zarr.open_array(str(node), mode="r")[...], ours), node
            checked["zarr-python"] += 1
            if doc["data_type"] != "string":
                assert same(_zarrs(node), ours), node
                t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(node)}}, open=True).result()
                assert same(t.read().result(), ours), node
                checked["zarrs"] += 1
                checked["tensorstore"] += 1
    assert checked["zarr-python"] >= 20 and checked["tensorstore"] >= 8, checked


def test_zarr_python_writes_a_forcefield_mrec_reads(tmp_path):
    """A force field laid down by zarr-python (its own codecs and chunking, masks, a cmap grid, an unnamed
    table) reads through mrec as the same model."""
    root = tmp_path / "zp.mrec"
    g = zarr.open_group(str(root), mode="w")
    g.create_group("meta")
    doc = {"name": "zp", "units": {"length": "nm", "energy": "kJ/mol"},
           "styles": [{"category": "atom", "style": "full"}, {"category": "cmap", "style": "charmm"}],
           "x_origin": "zarr-python"}
    ffg = g.create_group("forcefield", attributes=doc)

    def col(block, name, values):
        a = np.asarray(values, dtype=object if isinstance(values[0], str) else None)
        arr = block.create_array(name, shape=a.shape, dtype=str if a.dtype == object else a.dtype,
                                 chunks=(1,) + a.shape[1:])
        arr[...] = a

    atom = ffg.create_group("atom.full", attributes={"count": 3})
    col(atom, "name", ["C", "N", "O"])
    col(atom, "mass", np.array([12.011, 14.007, 0.0]))
    valid = atom.create_group("_validity")
    col(valid, "mass", np.array([True, True, False]))
    cm = ffg.create_group("cmap.charmm", attributes={"count": 1})
    for e, v in zip(("itom", "jtom", "ktom", "ltom", "mtom"), "CNOCN"):
        col(cm, e, [v])
    col(cm, "name", ["m"])
    col(cm, "grid", np.arange(16.0).reshape(1, 4, 4))
    extra = ffg.create_group("x.unnamed", attributes={"count": 1})
    col(extra, "v", np.array([7.0]))
    with mrec.read_record(root) as r:
        ff = r.forcefield
        assert ff.document() == doc and ff.unnamed_tables() == ["x.unnamed"]
        assert ff.table("atom", "full")["name"].tolist() == ["C", "N", "O"]
        assert ff.masks["atom.full"]["mass"].tolist() == [True, True, False]
        assert same(ff.table("cmap", "charmm")["grid"], np.arange(16.0).reshape(1, 4, 4))
    assert validate(root, deep=True).ok


# -- frame-shaped groups at any path -------------------------------------------------------------------

FRAME = {"blocks": {"atoms": {"x": [0.0, 1.5], "element": ["O", "H"], "charge": [-0.8, None and 0.0 or 0.4]}},
         "masks": {"atoms": {"charge": [True, False]}}, "meta": {"title": "bare"},
         "box": mrec.Box(np.eye(3) * 10)}


def test_bare_frame_store_mrec_writes_zarr_python_reads(tmp_path):
    p = mrec.write_frame(tmp_path / "bare.zarr", FRAME, group="")
    g = zarr.open_group(str(p), mode="r")
    assert g.attrs["title"] == "bare" and g.attrs["_meta_types"] == {"title": "string"}
    assert g["atoms"].attrs["count"] == 2 and list(g["atoms/element"][...]) == ["O", "H"]
    assert g["atoms/_validity/charge"][...].tolist() == [True, False]
    assert same(g["box/vectors"][...], np.eye(3) * 10)
    back = mrec.read_frame(p, group="")
    assert back == mrec.Frame.from_any(FRAME)
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_frame(p, FRAME)
    assert e.value.kind == "exists"
    mrec.write_frame(p, {"blocks": {"a": {"x": [1.0]}}}, overwrite=True)
    assert mrec.read_frame(p, group="").blocks.keys() == {"a"}


def test_bare_frame_store_zarr_python_writes_mrec_reads(tmp_path):
    root = tmp_path / "zp.zarr"
    g = zarr.open_group(str(root), mode="w", attributes={"title": "from zarr-python"})
    atoms = g.create_group("atoms", attributes={"count": 3})
    x = atoms.create_array("x", shape=(3,), dtype="float64", chunks=(2,))
    x[...] = [1.0, 2.0, 3.0]
    e = atoms.create_array("id", shape=(3,), dtype="uint64", chunks=(3,))
    e[...] = [7, 8, 9]
    bonds = g.create_group("bonds", attributes={"count": 1})
    for c, v in (("atomi", 0), ("atomj", 2)):
        a = bonds.create_array(c, shape=(1,), dtype="uint64", chunks=(1,))
        a[...] = [v]
    f = mrec.read_frame(root, group="")
    assert f.meta == {"title": "from zarr-python"} and f.counts == {"atoms": 3, "bonds": 1}
    assert f.blocks["atoms"]["id"].dtype == np.dtype("<u8") and f.blocks["atoms"]["x"].tolist() == [1.0, 2.0, 3.0]
    # and the same group nested in a store: read at its path, added to by mrec at another
    nested = tmp_path / "n.zarr"
    zarr.open_group(str(nested), mode="w").create_group("runs")
    mrec.write_frame(nested, f, group="runs/0")
    mrec.write_frame(nested, f, group="runs/1/final")
    assert mrec.read_frame(nested, group="runs/0") == f == mrec.read_frame(nested, group="/runs/1/final/")
    assert zarr.open_group(str(nested), mode="r")["runs/1/final/atoms/x"][...].tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_frame(nested, f, group="runs/0")
    assert e.value.kind == "exists"
    for bad in ("a/../b", "a//b/.", "__x"):
        with pytest.raises(mrec.RefusalError) as e:
            mrec.read_frame(nested, group=bad)
        assert e.value.kind == "bad_argument"
    with pytest.raises(mrec.RefusalError) as e:
        mrec.read_frame(nested, 0, group="runs/0")
    assert e.value.kind == "bad_argument"
    with pytest.raises(mrec.RefusalError) as e:
        mrec.read_frame(nested, group="runs/9")
    assert e.value.kind == "missing_section"
    assert not [n for n in os.listdir(nested / "runs") if n.startswith(".mrec-tmp")]


# -- metrics and other sections from scratch -------------------------------------------------------------

def test_metrics_and_unknown_sections_from_scratch(tmp_path):
    """A record gains metrics/, a force field and a vendor section after it was written, and a vendor
    section can be written with the record; each reads back as written and is kept by a rewrite."""
    vendor = mrec.Group({"tool": "x", "n": [1, None]}, {"scores": np.arange(4.0), "label": np.array("zero-d"),
                                                        "names": np.array(["a", "b"], dtype=object)},
                        {"sub": {"attributes": {"k": 1}, "arrays": {"m": np.eye(2, dtype="i4")}}},
                        {"scores": {"unit": "eV"}})
    p = mrec.write_record(tmp_path / "s.mrec", status={"state": "running"}, sections={"x_vendor": vendor})
    assert mrec.read_group(p, "x_vendor") == vendor
    events = [{"type": "scalar", "key": "loss", "step": s, "value": 1.0 / (s + 1)} for s in range(3)]
    mrec.write_section(p, "metrics", events)
    mrec.write_section(p, "forcefield", tip3p())
    mrec.write_section(p, "x_other", mrec.Group({"a": 1}))
    with mrec.read_record(p) as r:
        assert r.sections() == ["meta", "status", "forcefield", "metrics", "x_other", "x_vendor"]
        assert r.metrics.series["loss"].steps.tolist() == [0, 1, 2]
        assert r.forcefield == mrec.ForceField.from_any(tip3p())
        out = r.write(tmp_path / "copy.mrec")
    assert mrec.read_group(out, "x_vendor") == vendor and mrec.read_group(out, "x_other") == mrec.Group({"a": 1})
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_section(p, "metrics", events)
    assert e.value.kind == "exists"
    mrec.write_section(p, "metrics", events[:1], overwrite=True)
    with mrec.read_record(p) as r:
        assert len(r.metrics.series["loss"]) == 1
    for name, value, kind in (("trajectory", {}, "bad_layout"), ("forcefield", {"name": "x"}, "missing_units"),
                              ("x/y", {}, "bad_layout"), ("status", {}, "missing_key")):
        with pytest.raises(mrec.RefusalError) as e:
            mrec.write_section(p, name, value, overwrite=True)
        assert e.value.kind == kind, (name, e.value)
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_record(tmp_path / "k.mrec", status={"state": "x"}, sections={"frame": {}})
    assert e.value.kind == "bad_layout"
    z = mrec.pack(p, keep=True)
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_section(z, "x_more", mrec.Group())
    assert e.value.kind == "not_a_record"
    assert not [n for n in os.listdir(p) if n.startswith(".mrec-tmp")]
    assert validate(p, deep=True).ok


def test_write_section_checks_the_rest_of_the_record(tmp_path):
    """A system added to a record is checked against its frame's targets and its trajectory's 1:1 rule."""
    p = mrec.write_record(tmp_path / "r.mrec", frame={"blocks": {"a": {"r": np.array([2], "u8")}},
                                                      "block_attrs": {"a": {"targets": {"r": "/system/atoms"}}}})
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_section(p, "system", {"atoms": {"x": [1.0, 2.0]}})
    assert e.value.kind == "bad_reference"
    mrec.write_section(p, "system", {"atoms": {"x": [1.0, 2.0, 3.0]}})
    assert mrec.read_record(p).system.counts == {"atoms": 3}


# -- the golden fixtures through the validator ------------------------------------------------------------

FIXTURES = ROOT / "fixtures"


def test_validate_deep_judges_every_fixture():
    """``mrec validate --deep`` accepts every valid fixture (the force-field ones included, a linking miss
    being a warning) and reports every invalid one with its sidecar's kind, directory and zip."""
    valid = sorted(FIXTURES.glob("*.json"))
    invalid = sorted((FIXTURES / "invalid").glob("*.json"))
    assert {"forcefield_tip3p", "forcefield_cmap", "forcefield_with_system"} <= {p.stem for p in valid}
    assert sum(p.stem.startswith("ff_") for p in invalid) >= 10
    for side in valid:
        for form in (f"{side.stem}.mrec", f"{side.stem}.mrec.zip"):
            rep = validate(FIXTURES / form, deep=True)
            assert rep.ok, (form, [str(v) for v in rep.violations])
            assert bool(rep.warnings) == (side.stem == "forcefield_with_system") or side.stem == "trajectory_only", \
                (form, [str(w) for w in rep.warnings])
    for side in invalid:
        kind = json.loads(side.read_text())["refusal_kind"]
        for form in (f"{side.stem}.mrec", f"{side.stem}.mrec.zip"):
            rep = validate(FIXTURES / "invalid" / form, deep=True)
            want = "corrupt" if kind == "corruption" else kind
            assert not rep.ok and want in {v.kind for v in rep.violations}, (form, kind, rep.to_json())


def test_version_1_force_field_is_refused(tmp_path):
    """A version-1 record's force-field numbers follow the pre-LAMMPS definitions: mrec does not convert
    them, so it refuses such a record on write and on read (mrec-notes §1.3)."""
    with pytest.raises(mrec.RefusalError) as e:
        mrec.write_record(tmp_path / "v1.mrec", meta={"molrec_version": 1}, forcefield=tip3p())
    assert e.value.kind == "bad_version" and not (tmp_path / "v1.mrec").exists()
    p = mrec.write_record(tmp_path / "v2.mrec", meta={"molrec_version": 2}, forcefield=tip3p())
    _attrs(p, "meta", lambda a: a.update(molrec_version=1))
    with pytest.raises(mrec.RefusalError) as e:
        mrec.read_record(p)
    assert e.value.kind == "bad_version" and "forcefield" in str(e.value)
    assert any(v.rule == "N-0" and v.kind == "bad_version" for v in validate(p).violations)
    mrec.write_record(tmp_path / "v1-no-ff.mrec", meta={"molrec_version": 1}, status={"state": "x"})


def test_info_survives_a_broken_forcefield(tmp_path):
    p = mrec.write_record(tmp_path / "b.mrec", forcefield=tip3p())
    _attrs(p, "forcefield", lambda a: a.pop("units"))
    out = subprocess.run([sys.executable, "-m", "mrec", "info", str(p)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "forcefield: unreadable (missing_units)" in out.stdout, out.stdout + out.stderr


_style = st.tuples(st.sampled_from(["atom", "bond", "angle", "dihedral", "pair", "cmap", "x_cat"]),
                   st.text(alphabet="abcz/-_. +%é", min_size=1, max_size=8))


@settings(max_examples=25, deadline=None)
@given(st.lists(_style, min_size=1, max_size=4, unique=True), st.integers(0, 4), st.data())
def test_random_force_fields_round_trip(tmp_path_factory, styles, rows, data):
    """Random styles (any style string), row counts, f64 / string / array parameters with random nulls:
    what is written reads back equal, directory and zip."""
    from mrec.record.sections.forcefield import CATEGORY_ARITY, ENDPOINTS
    tables = {}
    for cat, style in styles:
        arity = CATEGORY_ARITY.get(cat, 2)
        cols = {"name": [f"t{i}" for i in range(rows)]}
        cols.update({e: [f"e{i}" if i % 2 else "" for i in range(rows)] for e in ENDPOINTS[:arity]})
        if cat == "pair":                     # distinct unordered pairs: no restatement
            cols["itom"], cols["jtom"] = [f"a{i}" for i in range(rows)], [f"b{i}" for i in range(rows)]
        nulls = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
        cols["p"] = [None if n else float(i) - 0.5 for i, n in enumerate(nulls)]
        cols["s"] = data.draw(st.lists(st.text(max_size=3), min_size=rows, max_size=rows))
        n = data.draw(st.integers(2, 3))
        cols["grid" if cat == "cmap" else "arr"] = np.arange(rows * n * n, dtype="<f8").reshape(rows, n, n)
        tables[(cat, style)] = cols
    ff = mrec.ForceField(name="r", units={"length": "nm"}, tables=tables,
                         styles=[{"category": c, "style": s} for c, s in styles])
    p = mrec.write_record(tmp_path_factory.mktemp("ff") / "r.mrec", forcefield=ff)
    for form in (p, mrec.pack(p, keep=True)):
        with mrec.read_record(form) as r:
            assert r.forcefield == ff
            for c, s in styles:
                assert decode_block_name(block_name(c, s)) == (c, s)
                m = r.forcefield.mask(c, s, "p")
                assert (m is None and not any(v is None for v in tables[(c, s)]["p"])) or \
                    m.tolist() == [v is not None for v in tables[(c, s)]["p"]]


def test_a_failure_part_way_adds_nothing(tmp_path):
    """write_section and write_frame build under a temporary name: a failure part-way (a full disk at
    the n-th file) leaves the record exactly as it was, with no temporary left behind."""
    from test_record import FullDisk as Failing, tree_hash

    p = mrec.write_record(tmp_path / "r.mrec", status={"state": "running"})
    before = tree_hash(p)
    for after in (0, 2, 5, 9, 20):
        with pytest.raises(OSError):
            mrec.write_section(p, "forcefield", tip3p(), fs=Failing(after))
        assert tree_hash(p) == before, after
    for after in (0, 2, 5, 9):
        with pytest.raises(OSError):
            mrec.write_frame(p, FRAME, group="frames/0", fs=Failing(after))
        # a missing parent group is made first (an empty group, valid on its own); the frame never appears
        assert set(os.listdir(p)) <= {"zarr.json", "meta", "status", "frames"}, after
        assert not (p / "frames" / "0").exists()
        assert mrec.read_record(p).forcefield is None
        assert not [n for _, ds, fs_ in os.walk(p) for n in ds + fs_ if n.startswith(".mrec-tmp")], after
    with pytest.raises(OSError):
        mrec.write_frame(tmp_path / "bare.zarr", FRAME, fs=Failing(3))
    assert sorted(os.listdir(tmp_path)) == ["r.mrec"]
