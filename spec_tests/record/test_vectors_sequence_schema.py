"""Published JSON fixtures judged by the record model.

* ``fixtures/schema/binding/sequence-schema/``: every ``valid-*`` parses with
  :meth:`SequenceSchema.from_json` and round-trips through ``to_json`` equal to
  the input (key order aside); every ``invalid-*`` is refused.
* ``fixtures/schema/core/``: the fixtures about what the record model decides
  -- meta tags and fills (``meta-series``), typed frame meta and frames
  (``frame``, ``record``), columns (dtype, mask, precision), blocks
  (targets), cells (``box``, ``cell``, ``box-update``, ``trajectory-box``)
  and trajectories/collections (declaration + frames).

The core fixtures are dumps of the reference's JSON models (columns as
``{dtype, shape, values, validity, precision}``); :func:`frame_from_model`
turns one into a :class:`Frame` -- that conversion is test scaffolding, the
verdict is the model's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mrec.errors import RefusalError
from mrec.record.model.dtypes import NUMPY_DTYPES, check_dtype_name
from mrec.record.model.box import Box
from mrec.record.model.frame import Frame
from mrec.record.model.precision import is_on_grid
from mrec.record.model.schema import SequenceSchema
from mrec.record.model.typed_json import decode_meta_document, encode_meta_document, json_dumps

SPEC = Path(__file__).resolve().parents[2].parent / "shared" / "spec"
FIXTURES = SPEC / "vectors" / "fixtures" / "schema"
SEQUENCE_SCHEMA = FIXTURES / "binding" / "sequence-schema"
CORE = FIXTURES / "core"


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def files(folder: Path, prefix: str) -> list[Path]:
    return sorted(folder.glob(f"{prefix}-*.json")) if folder.is_dir() else []


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def canonical(doc: Any) -> str:
    """Key-order-insensitive text of a JSON document."""
    return json.dumps(doc, sort_keys=True, allow_nan=False)


# ---------------------------------------------------------------------------
# binding/sequence-schema

VALID = files(SEQUENCE_SCHEMA, "valid")
INVALID = files(SEQUENCE_SCHEMA, "invalid")

#: The kind each known invalid fixture is refused with.
INVALID_KINDS = {
    "invalid-aligned-with-not-a-name.json": "bad_alignment",
    "invalid-precision-on-u64.json": "bad_precision",
    "invalid-target-path.json": "bad_reference",
    "invalid-width-abstract-dtype.json": "unknown_dtype",
}


def test_fixture_folder_is_present() -> None:
    assert VALID and INVALID, f"no sequence-schema fixtures under {SEQUENCE_SCHEMA}"


@pytest.mark.parametrize("path", VALID, ids=ids(VALID))
def test_valid_sequence_schema_round_trips(path: Path) -> None:
    doc = load(path)
    schema = SequenceSchema.from_json(doc, path=path.name)
    out = schema.to_json()
    assert canonical(out) == canonical(doc)
    json_dumps(out)  # finite, plain JSON
    again = SequenceSchema.from_json(json.loads(json_dumps(out)))
    assert again == schema


@pytest.mark.parametrize("path", INVALID, ids=ids(INVALID))
def test_invalid_sequence_schema_is_refused(path: Path) -> None:
    with pytest.raises(RefusalError) as info:
        SequenceSchema.from_json(load(path), path=path.name)
    if path.name in INVALID_KINDS:
        assert info.value.kind == INVALID_KINDS[path.name], str(info.value)


def test_valid_fixtures_carry_their_features() -> None:
    by_name = {p.name: SequenceSchema.from_json(load(p)) for p in VALID}
    if "valid-aligned.json" in by_name:
        assert by_name["valid-aligned.json"].blocks["atom_types"].aligned_with == "atoms"
    if "valid-atoms.json" in by_name:
        s = by_name["valid-atoms.json"]
        assert s.blocks["atoms"].columns["mol_id"].nullable
        assert s.meta["pe"].tag == "f64" and np.isnan(s.meta["pe"].fill)
    if "valid-precision.json" in by_name:
        assert by_name["valid-precision.json"].blocks["atoms"].columns["x"].precision == 0.001
    if "valid-targets.json" in by_name:
        assert by_name["valid-targets.json"].blocks["members"].targets == {"atom": "/system/atoms", "ibead": "atoms"}


# ---------------------------------------------------------------------------
# core/meta-series: one per-step meta declaration

META_SERIES = sorted((CORE / "meta-series").glob("*.json"))


@pytest.mark.parametrize("path", META_SERIES, ids=ids(META_SERIES))
def test_meta_series(path: Path) -> None:
    entry = load(path)
    doc = {"blocks": {}, "meta": {"key": entry}}
    if path.name.startswith("valid-"):
        out = SequenceSchema.from_json(doc).to_json()
        assert canonical(out["meta"]["key"]) == canonical(entry)
    else:
        with pytest.raises(RefusalError) as info:
            SequenceSchema.from_json(doc)
        assert info.value.kind == "meta_tag_mismatch"


def test_json_null_fill_is_a_fill() -> None:
    s = SequenceSchema.from_json({"meta": {"units": load(CORE / "meta-series" / "valid-json-null-fill.json")}})
    assert s.meta["units"].has_fill and s.meta["units"].fill is None
    assert s.meta_values(Frame({}))["units"] is None


# ---------------------------------------------------------------------------
# reference-model JSON -> Frame (test scaffolding)

def column_from_model(doc: dict[str, Any], what: str) -> tuple[np.ndarray, Any, Any]:
    dtype = check_dtype_name(doc["dtype"], what=what)
    shape = tuple(doc["shape"])
    values = doc.get("values")
    np_dtype = NUMPY_DTYPES[dtype]
    if values is None:
        arr = np.zeros(shape, dtype=np_dtype)
    else:
        arr = np.array(values, dtype=np_dtype).reshape(shape)
    return arr, doc.get("validity"), doc.get("precision")


def block_parts(name: str, doc: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
    columns, masks, precision = {}, {}, {}
    for c, cdoc in doc.get("columns", {}).items():
        arr, validity, p = column_from_model(cdoc, f"block {name!r} column {c!r}")
        columns[c] = arr
        if validity is not None:
            masks[c] = validity
        if p is not None:
            precision[c] = p
    attrs = {k: v for k, v in doc.items() if k != "columns"}
    return columns, masks, precision, attrs, {}


def frame_from_model(doc: dict[str, Any]) -> Frame:
    blocks, masks, precision, attrs = {}, {}, {}, {}
    for b, bdoc in doc.get("blocks", {}).items():
        blocks[b], masks[b], precision[b], attrs[b], _ = block_parts(b, bdoc)
    meta, types = decode_meta_document({**doc.get("meta", {}), "_meta_types": doc.get("meta_types") or {}})
    fields = {"blocks": blocks, "masks": masks, "precision": precision, "block_attrs": attrs,
              "box": doc.get("box"), "meta": meta, "meta_types": types}
    extra = {k: v for k, v in doc.items() if k not in ("blocks", "box", "meta", "meta_types")}
    # unknown top-level keys go along verbatim: Frame.from_any then reads the mapping as blocks
    return Frame.from_any({**{k: v for k, v in fields.items() if v is not None}, **extra})


# ---------------------------------------------------------------------------
# core/frame and core/record

FRAMES = sorted((CORE / "frame").glob("*.json"))

#: Kind of each frame fixture refusal the record model decides.
FRAME_KINDS = {"invalid-retired-meta-tag.json": "meta_tag_mismatch"}


@pytest.mark.parametrize("path", FRAMES, ids=ids(FRAMES))
def test_frame_fixtures(path: Path) -> None:
    doc = load(path)
    if path.name.startswith("valid-"):
        frame = frame_from_model(doc)
        assert set(frame.blocks) == set(doc["blocks"])
        for b, bdoc in doc["blocks"].items():
            assert frame.rows(b) == bdoc["count"]
        frame.check_references()
        # typed meta survives its group-attribute form
        attrs, tags = encode_meta_document(frame.meta, frame.meta_types)
        meta, back_tags = decode_meta_document(json.loads(json_dumps(attrs)))
        assert back_tags == frame.meta_types
        assert Frame(frame.blocks, box=frame.box, meta=meta, masks=frame.masks, meta_types=back_tags,
                     counts=frame.counts, precision=frame.precision, block_attrs=frame.block_attrs).equals(frame)
        # and the frame derives a declaration it satisfies (names reserved in trajectories aside)
        SequenceSchema.from_frame(frame).check_frame(frame)
    else:
        with pytest.raises(RefusalError) as info:
            frame_from_model(doc)
        if path.name in FRAME_KINDS:
            assert info.value.kind == FRAME_KINDS[path.name], str(info.value)
        if path.name == "invalid-extra-key.json":
            assert "x_vendor" in str(info.value)


def test_typed_meta_fixture_values() -> None:
    frame = frame_from_model(load(CORE / "frame" / "valid-typed-meta.json"))
    assert frame.meta_types == {"com": "f64x3", "n": "i32", "title": "string"}
    assert frame.meta["com"].dtype == np.float64 and frame.meta["com"].tolist() == [0.0, 0.5, 1.0]
    assert type(frame.meta["n"]) is np.int32 and frame.meta["title"] == "water"


def test_pair_overrides_are_nullable_columns() -> None:
    frame = frame_from_model(load(CORE / "frame" / "valid-pair-overrides.json"))
    assert frame.mask("pairs", "charge_product").tolist() == [True, False, False]
    assert frame.mask("pairs", "lj_scale") is None
    assert SequenceSchema.from_frame(frame).blocks["pairs"].columns["sigma"].nullable


def test_record_structure_frame() -> None:
    doc = load(CORE / "record" / "valid-structure.json")
    frame = frame_from_model(doc["frame"])
    assert frame.box == Box(np.eye(3) * 10, boundary=[True, True, False])
    assert frame.mask("atoms", "mol_id").tolist() == [True, False]
    assert frame.meta == {"title": "water"} and frame.meta_types == {"title": "string"}


# ---------------------------------------------------------------------------
# core/column and core/block

COLUMNS = sorted((CORE / "column").glob("*.json"))

#: ``invalid-no-shape`` fails only the JSON model's required ``shape`` key: not a record-model rule.
COLUMN_KINDS = {
    "invalid-narrow-float.json": "narrow_float",
    "invalid-precision-on-i64.json": "bad_precision",
    "invalid-zero-precision.json": "bad_precision",
}


@pytest.mark.parametrize("path", COLUMNS, ids=ids(COLUMNS))
def test_column_fixtures(path: Path) -> None:
    doc = load(path)
    if path.name == "invalid-no-shape.json":
        pytest.skip("only the JSON model requires 'shape'; an array always has one")

    def build() -> Frame:
        arr, validity, p = column_from_model(doc, "block 'b' column 'c'")
        return Frame({"b": {"c": arr}}, masks={"b": {"c": validity}} if validity is not None else {},
                     precision={"b": {"c": p}})

    if path.name.startswith("valid-"):
        frame = build()
        if doc.get("precision") is not None:
            assert is_on_grid(frame.blocks["b"]["c"], doc["precision"])
            assert frame.rounded() is frame  # already what a writer stores
    else:
        with pytest.raises(RefusalError) as info:
            build()
        if path.name in COLUMN_KINDS:
            assert info.value.kind == COLUMN_KINDS[path.name], str(info.value)


BLOCKS = sorted((CORE / "block").glob("*.json"))


@pytest.mark.parametrize("path", BLOCKS, ids=ids(BLOCKS))
def test_block_fixtures(path: Path) -> None:
    doc = load(path)

    def build() -> Frame:
        columns, masks, precision, attrs, _ = block_parts("block", doc)
        return Frame({"block": columns}, masks={"block": masks}, precision={"block": precision},
                     block_attrs={"block": attrs})

    if path.name.startswith("valid-"):
        frame = build()
        assert frame.rows("block") == doc["count"]
        if doc.get("targets"):
            assert frame.block_attrs["block"]["targets"] == doc["targets"]
    else:
        with pytest.raises(RefusalError) as info:
            build()
        if path.name == "invalid-target-into-trajectory.json":
            assert info.value.kind == "bad_reference"


# ---------------------------------------------------------------------------
# cells

CELLS = sorted((CORE / "box").glob("*.json")) + sorted((CORE / "cell").glob("*.json"))


@pytest.mark.parametrize("path", CELLS, ids=[f"{p.parent.name}/{p.name}" for p in CELLS])
def test_cell_fixtures(path: Path) -> None:
    doc = load(path)
    if path.name.startswith("valid-"):
        box = Box.from_any(doc)
        assert box.vectors.tolist() == doc["vectors"]
        if doc.get("boundary") is not None:
            assert box.boundary.tolist() == doc["boundary"]
        assert Box.from_any(box.to_json()) == box
    else:
        with pytest.raises(RefusalError) as info:
            Box.from_any(doc)
        assert info.value.kind == "bad_box"


def test_box_update_and_trajectory_box() -> None:
    upd = load(CORE / "box-update" / "valid-origin.json")
    assert Box.from_any(upd["box"]) == Box(np.eye(3) * 10)
    tb = load(CORE / "trajectory-box" / "valid-fixed.json")
    for u in tb["updates"]:
        box = Box.from_any({**u["box"], "cell_defined": tb["cell_defined"]})
        assert box.defined and box.boundary.all()


# ---------------------------------------------------------------------------
# trajectories and collections: a declaration plus frames

def _trajectory_docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    path = CORE / "trajectory" / "valid-one-frame.json"
    if path.exists():
        out.append(("trajectory/valid-one-frame", load(path)))
    path = CORE / "collection" / "valid-one-record.json"
    if path.exists():
        for i, record in enumerate(load(path)["records"]):
            if record.get("trajectory"):
                out.append((f"collection/valid-one-record[{i}]", record["trajectory"]))
    return out


TRAJECTORIES = _trajectory_docs()


@pytest.mark.parametrize("doc", [d for _, d in TRAJECTORIES], ids=[n for n, _ in TRAJECTORIES])
def test_trajectory_declaration_and_frames(doc: dict[str, Any]) -> None:
    declaration = {"blocks": doc["blocks"], "meta": doc.get("meta") or {}}
    schema = SequenceSchema.from_json(declaration)
    assert canonical(schema.to_json()) == canonical({k: v for k, v in declaration.items() if v})
    for frame_doc in doc["frames"]:
        frame = frame_from_model(frame_doc)
        schema.check_frame(frame)
        derived = SequenceSchema.from_frame(frame)
        assert derived.to_json()["blocks"] == schema.to_json()["blocks"]


def test_collection_sequence_schema_round_trips() -> None:
    doc = load(CORE / "collection" / "valid-one-record.json")
    schema = SequenceSchema.from_json(doc["sequence_schema"])
    assert canonical(schema.to_json()) == canonical(doc["sequence_schema"])
