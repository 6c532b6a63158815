"""Issue 29, target 6: the topology's fast paths give what MDAnalysis' own objects give.

``topology_system`` takes bonds / angles / dihedrals / impropers / cmaps from the Universe's raw
values with numpy instead of MDAnalysis' TopologyGroups (a quarter second for adk's bonds), and
string attributes by their element types instead of per element; the rows, their order and the
columns must be those of the path through MDAnalysis' objects.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

mda = pytest.importorskip("MDAnalysis")
datafiles = pytest.importorskip("MDAnalysisTests.datafiles")

from mrec.md.parts import local_relations  # noqa: E402
from mrec.md.topology import _relation_rows, _values, topology_system  # noqa: E402

RELATIONS = ("bonds", "angles", "dihedrals", "impropers", "cmaps")


def _through_groups(atoms, attr: str):
    """The old path: MDAnalysis' TopologyGroup of ``atoms``, renumbered to it."""
    try:
        group = getattr(atoms, attr)
    except Exception:   # noqa: BLE001 - NoDataError when the Universe has none
        return None
    return local_relations(atoms, group.indices) if len(group) else None


def _same(fast, slow) -> bool:
    if fast is None or len(fast) == 0:
        return slow is None or len(slow) == 0
    return slow is not None and fast.dtype == slow.dtype and np.array_equal(fast, slow)


@pytest.fixture(scope="module")
def psf():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(datafiles.PSF, datafiles.DCD)


@pytest.mark.parametrize("pick", ["all", "selection", "reversed", "strided"])
def test_relations_are_mdanalysis_groups(psf, pick):
    atoms = {"all": psf.atoms, "selection": psf.select_atoms("resid 3:10 or resid 40"),
             "reversed": psf.atoms[::-1][:700], "strided": psf.atoms[::3]}[pick]
    for attr in RELATIONS:
        assert _same(_relation_rows(atoms, attr), _through_groups(atoms, attr)), attr


def test_repeated_rows_take_mdanalysis_path():
    """A row given twice (MDAnalysis keeps both in its values) is one row of its group."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe.empty(5, trajectory=True)
        u.add_TopologyAttr("bonds", [(3, 4), (0, 1), (1, 2)])
        u.add_TopologyAttr("angles", [(2, 1, 0), (0, 1, 2), (1, 2, 3)])
    assert len(u._topology.angles.values) == 3
    for attr in ("bonds", "angles", "dihedrals"):
        assert _same(_relation_rows(u.atoms, attr), _through_groups(u.atoms, attr)), attr
    assert _relation_rows(u.atoms, "angles").tolist() == [[0, 1, 2], [1, 2, 3]]
    assert _relation_rows(u.atoms, "bonds").tolist() == [[0, 1], [1, 2], [3, 4]]


def test_topology_system_blocks(psf):
    system, cols = topology_system(psf, [])
    for attr in RELATIONS:
        slow = _through_groups(psf.atoms, attr)
        if slow is None or len(slow) == 0:
            assert attr not in system["blocks"]
            continue
        ends = {"bonds": "ij", "angles": "ijk", "cmaps": "ijklm"}.get(attr, "ijkl")
        got = np.stack([system["blocks"][attr][f"atom{e}"] for e in ends], axis=1)
        assert np.array_equal(got, slow) and system["counts"][attr] == len(slow)
    assert cols == sorted(system["blocks"]["atoms"])


def test_string_values():
    names = np.array(["CA", "N", "CA"], dtype=object)
    out = _values("name", names)
    assert out.dtype == object and out.tolist() == ["CA", "N", "CA"] and out is not names
    sub = _values("name", np.array([np.str_("CA"), "N"], dtype=object))
    assert [type(v) for v in sub] == [str, str]
    assert [type(v) for v in _values("name", np.array(["A", "B"]))] == [str, str]       # U dtype
    assert _values("name", np.array(["CA", 3], dtype=object)) is None
    assert _values("name", np.array([b"CA"], dtype=object)) is None
    assert _values("name", np.array([["A"]], dtype=object)) is None
    assert _values("name", np.array([], dtype=object)).tolist() == []
