"""``mrec validate``: check any store, from any writer, against the normative rules.

:func:`validate` never stops at the first problem where it can go on: each
check runs on its own and reports :class:`Violation` s with the rule id of
``docs/conformance.md``, the path of the offending node (or archive entry),
what was found and what was expected.  SHOULD-level findings are warnings
(reported, not failing).  With ``deep=True`` every stored chunk within the
logical lengths is decoded (so every crc32c is verified), every trajectory
frame is resolved, zip entries have their CRC-32 checked, and precision
columns are checked to hold only values on their grid.

Checks, in order: the container (directory or ``*.mrec.zip`` and its packing
rules), the root group, every ``zarr.json`` (data types within the 13,
codecs within the must-decode set, little-endian writes), the documents,
the presence of ``meta`` and of a substantive section, the frame-shaped
sections, observables and metrics, the trajectory (``sequence_schema``,
``nstep``, progressions, the reopen rule's logical lengths, CSR
monotonicity, the system 1:1 rule), then the deep checks.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import asdict, dataclass, field
from typing import Callable

from .errors import MrecError
from .record.precision import is_on_grid
from .zarr.array import Array, meta_key, read_node
from .zarr.metadata import ArrayMetadata, GroupMetadata

__all__ = ["Violation", "Report", "validate", "RULES", "KIND_RULES"]

#: Every rule id the validator reports (each is a row of docs/conformance.md).
RULES: dict[str, str] = {
    "C-ZIP-1": "packed form: one stored entry per file, relative '/' names, no '..', no directory entries",
    "C-ZIP-2": "packed form: ZIP64 whenever needed; a readable central directory",
    "C-CODEC-1": "codecs within the must-decode set",
    "N-1.1a": "the root is a Zarr group",
    "N-1.1b": "meta present, plus at least one substantive section",
    "N-1.1n": "records are named *.mrec / *.mrec.zip",
    "N-0": "molrec_version, when present, is the JSON integer 1 or 2",
    "N-1.2": "document sections and their required keys",
    "N-1.4a": "frame-shaped group layout",
    "N-1.4b": "reserved names box / _validity",
    "N-1.4c": "block columns agree with count; masks bool[count] naming a column",
    "N-1.5": "typed frame meta",
    "N-1.6": "data types: the 13 column dtypes, no narrow floats, no fixed-length strings",
    "N-1.6e": "writers emit little-endian",
    "N-2.3": "declared precision: f64 only, within bounds; stored values on the grid",
    "N-2.4f": "the cell",
    "N-2.6a": "row references (targets)",
    "N-3.1s": "trajectory blocks sharing a system block's name are aligned 1:1",
    "N-3.3": "nstep is the commit marker; arrays at least their logical length",
    "N-3.6": "the sequence_schema declaration",
    "N-3.8r": "CSR indexes: offset monotone from 0, step_index strictly ascending",
    "N-4e": "zarr.json well-formed; every chunk decodes and verifies its crc32c",
    "N-6.1": "observables: data array and meta group paired, required keys",
    "N-6.2": "metrics: catalog, dense series, WAL",
    "N-12": "shard indexes verify their crc32c (mrec repair rebuilds a torn one)",
    "SS-1": "a record directory holds files and directories, no symbolic links",
}

#: The rule a refusal kind belongs to (when the check itself does not say).
KIND_RULES: dict[str, str] = {
    "narrow_float": "N-1.6", "unknown_dtype": "N-1.6", "canonical_dtype": "N-1.6",
    "unsupported_codec": "C-CODEC-1", "unsupported": "N-4e", "bad_metadata": "N-4e", "corrupt": "N-4e",
    "bad_validity": "N-1.4c", "row_count_mismatch": "N-1.4c", "structural_shape_mismatch": "N-1.4a",
    "reserved_block_name": "N-1.4b", "reserved_column_name": "N-1.4b",
    "meta_tag_mismatch": "N-1.5", "reserved_meta_key": "N-1.5",
    "bad_precision": "N-2.3", "bad_box": "N-2.4f", "bad_reference": "N-2.6a",
    "bad_version": "N-0", "missing_key": "N-1.2", "bad_document": "N-1.2",
    "bad_observable": "N-6.1", "bad_metrics": "N-6.2",
    "broken_index": "N-3.3", "non_monotonic_offset": "N-3.8r", "declaration_mismatch": "N-3.6",
    "bad_zip": "C-ZIP-1", "not_a_record": "N-1.1a", "bad_layout": "N-1.4a",
    "aligned_count_mismatch": "N-3.6", "undeclared_block": "N-3.6", "undeclared_column": "N-3.6",
}

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Violation:
    rule: str
    path: str
    message: str
    kind: str = "violation"
    severity: str = "error"           # "error" (MUST) or "warning" (SHOULD)

    def __str__(self) -> str:
        tag = "" if self.severity == "error" else " (warning)"
        return f"[{self.rule}]{tag} {self.path}: {self.message}"


@dataclass
class Report:
    path: str
    deep: bool
    violations: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: {"nodes": 0, "arrays": 0, "chunks": 0, "frames": 0})

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        return {"path": self.path, "deep": self.deep, "valid": self.ok,
                "violations": [asdict(v) for v in self.violations],
                "warnings": [asdict(v) for v in self.warnings], "checked": dict(self.checked)}


class _Checker:
    def __init__(self, path: str, deep: bool, progress: Progress | None, fs):
        self.report = Report(path, deep)
        self.deep = deep
        self.progress = progress
        self.fs = fs
        self.store = None
        self._seen: set[tuple[str, str]] = set()

    # -- reporting ------------------------------------------------------------------
    def add(self, rule: str, path: str, message: str, kind: str = "violation", severity: str = "error") -> None:
        if (path, message) in self._seen:
            return
        self._seen.add((path, message))
        v = Violation(rule, path, message, kind, severity)
        (self.report.violations if severity == "error" else self.report.warnings).append(v)

    def error(self, exc: MrecError, rule: str | None = None, default_path: str = "") -> None:
        kind = getattr(exc, "kind", "error")
        self.add(rule or KIND_RULES.get(kind, "N-4e"), exc.path or default_path, exc.detail, kind)

    def attempt(self, fn, *args, rule: str | None = None, where: str = ""):
        try:
            return fn(*args)
        except MrecError as exc:
            self.error(exc, rule, where)
            return None

    def where(self, key: str) -> str:
        return self.store.describe(key)

    # -- the checks -----------------------------------------------------------------
    def run(self) -> Report:
        path = self.report.path
        from .record.trajectory_read import open_store
        if os.path.isfile(path):
            self.check_zip(path)
        elif os.path.isdir(path):
            self.check_links(path)
        if not (path.rstrip("/").endswith(".mrec") or path.endswith(".mrec.zip")):
            self.add("N-1.1n", path, "a record is named <stem>.mrec (directory) or <stem>.mrec.zip (archive)",
                     severity="warning")
        try:
            self.store = open_store(path, fs=self.fs)
        except MrecError as exc:
            self.error(exc, "C-ZIP-2" if os.path.isfile(path) else "N-1.1a", path)
            return self.report
        try:
            root = self.attempt(read_node, self.store, "", rule="N-1.1a", where=path)
            if not isinstance(root, GroupMetadata):
                if root is not None or not self.report.violations:
                    self.add("N-1.1a", self.where("zarr.json"), "expected a Zarr V3 group zarr.json at the "
                             "top of the record", "not_a_record")
                return self.report
            nodes = self.check_nodes()
            self.check_documents(nodes)
            sections = self.check_sections(nodes)
            if self.deep:
                self.check_chunks(nodes, sections)
        finally:
            self.store.close()
        return self.report

    def check_zip(self, path: str) -> None:
        from .zarr.zipstore import zip_problems
        for message in zip_problems(path, self.fs, check_crc=self.deep):
            rule = "C-ZIP-2" if any(w in message.lower() for w in ("central directory", "end record", "zip64",
                                                                 "truncated", "not a zip")) else "C-ZIP-1"
            entry, _, detail = message.partition(": ")
            self.add(rule, entry or path, detail or message, "bad_zip")

    def check_links(self, path: str) -> None:
        """Symbolic links inside a record directory: pack refuses them and a writer would write
        through them (mrec.record.leftovers); reported here the same way, kind ``bad_layout``."""
        from .fs import DEFAULT_FS
        from .record.leftovers import scan
        links, _ = scan(self.fs or DEFAULT_FS, path)
        for key in links:
            self.add("SS-1", os.path.join(path, *key.split("/")), "a symbolic link: a record holds files, not "
                     "links (pack refuses it; a writer or repair would write through it, outside the record)",
                     "bad_layout")

    def check_nodes(self) -> dict[str, object]:
        """Parse every zarr.json; returns node path -> metadata for the parseable ones."""
        from .zarr.dtypes import DATA_TYPES  # noqa: F401  (parse_node refuses types outside the 13)
        nodes: dict[str, object] = {}
        for key in self.store.list(""):
            if posixpath.basename(key) != "zarr.json":
                continue
            node_path = posixpath.dirname(key)
            self.report.checked["nodes"] += 1
            node = self.attempt(read_node, self.store, node_path, where=self.where(key))
            if node is None:
                continue
            nodes[node_path] = node
            if isinstance(node, ArrayMetadata):
                self.report.checked["arrays"] += 1
                self.check_array_meta(node_path, node)
        return nodes

    def check_array_meta(self, node_path: str, node: ArrayMetadata) -> None:
        from .record.dtypes import dtype_from_zarr
        self.attempt(dtype_from_zarr, node.data_type.name, self.where(meta_key(node_path)),
                     where=self.where(meta_key(node_path)))
        for codec in _walk_codecs(node.codecs):
            endian = getattr(codec, "endian", None)
            if endian == "big" and node.data_type.numpy.itemsize > 1:
                self.add("N-1.6e", self.where(meta_key(node_path)),
                         "the bytes codec is big-endian; writers emit little-endian (readers decode both)")

    def check_documents(self, nodes: dict) -> None:
        from .record.documents import check_meta, check_method, check_status
        for name, check in (("meta", check_meta), ("status", check_status), ("method", check_method)):
            node = nodes.get(name)
            if node is None:
                if name == "meta":
                    # readers take a missing meta/ as an empty document (mrec-notes §1.1), so the store
                    # stays readable: reported as a warning, not a failure
                    self.add("N-1.1b", self.where("meta"), "writers always create a meta group "
                             "(written first, possibly an empty document); readers read its absence as {}",
                             "missing_section", "warning")
                continue
            if not isinstance(node, GroupMetadata):
                self.add("N-1.2", self.where(meta_key(name)), f"{name} is a group holding a document, found an "
                         "array", "bad_layout")
                continue
            self.attempt(check, node.attributes, self.where(meta_key(name)), where=self.where(meta_key(name)))
        top = {p for p in nodes if p and "/" not in p}
        if not top & {"frame", "system", "trajectory", "forcefield", "status"}:
            self.add("N-1.1b", self.where(""), "a record holds meta plus at least one of frame, system, "
                     "trajectory, forcefield or status", "empty_record")

    def check_sections(self, nodes: dict) -> dict:
        from .record.frame_group import read_frame_group
        from .record.metrics import Metrics
        from .record.observables import read_observables
        found: dict = {}
        for name in ("system", "frame"):
            if isinstance(nodes.get(name), GroupMetadata):
                self.check_reserved(name, nodes)
                g = self.attempt(read_frame_group, self.store, name, where=self.where(name))
                if g is not None:
                    found[name] = g.frame
        for name, f in found.items():
            self.attempt(lambda f=f, name=name: f.check_references(found, path=self.where(name)),
                         where=self.where(name))
            if self.deep:
                self.check_grid_frame(name, f)
        if isinstance(nodes.get("observables"), GroupMetadata):
            self.attempt(read_observables, self.store, rule=None, where=self.where("observables"))
        if isinstance(nodes.get("metrics"), GroupMetadata):
            self.attempt(Metrics.read, self.store, where=self.where("metrics"))
        if isinstance(nodes.get("trajectory"), GroupMetadata):
            found["trajectory"] = self.check_trajectory(found.get("system"))
        return found

    def check_reserved(self, section: str, nodes: dict) -> None:
        for p, node in nodes.items():
            parts = p.split("/")
            if parts[0] != section:
                continue
            if len(parts) == 2 and parts[1] == "box" and isinstance(node, ArrayMetadata):
                self.add("N-1.4b", self.where(p), "'box' is reserved for the cell group; found an array",
                         "reserved_block_name")
            if len(parts) == 3 and parts[2] == "_validity" and isinstance(node, ArrayMetadata):
                self.add("N-1.4b", self.where(p), "'_validity' is reserved for the mask group; found a column "
                         "of that name", "reserved_column_name")

    def check_grid_frame(self, name: str, f) -> None:
        for b, cols in f.precision.items():
            for c, p in cols.items():
                if not is_on_grid(f.blocks[b][c], p):
                    self.add("N-2.3", self.where(f"{name}/{b}/{c}"), f"values off the grid of the declared "
                             f"precision {p} (a writer rounds before storing)", "precision_mismatch", "warning")

    def check_trajectory(self, system):
        from .record.record import check_system_alignment
        from .record.trajectory_read import TrajectoryReader
        where = self.where("trajectory")
        reader = self.attempt(lambda: TrajectoryReader(None, store=self.store), where=where)
        if reader is None:
            return None
        self.attempt(check_system_alignment, system, reader, where, rule="N-3.1s", where=where)
        if self.deep:
            n = len(reader)
            for i in range(n):
                if self.attempt(reader.__getitem__, i, where=f"{where} frame {i}") is None:
                    break
                self.report.checked["frames"] += 1
            for b, decl in reader.schema.blocks.items():
                for c, cd in decl.columns.items():
                    bl = reader.layout.blocks[b]
                    arr = bl.columns.get(c)
                    if cd.precision is None or arr is None or bl.total_rows == 0:
                        continue
                    vals = self.attempt(arr.read, slice(0, bl.total_rows), where=arr.name)
                    if vals is not None and not is_on_grid(vals, cd.precision):
                        self.add("N-2.3", arr.name, f"values off the grid of the declared precision "
                                 f"{cd.precision}", "precision_mismatch", "warning")
        return reader

    # -- deep: every chunk ---------------------------------------------------------------
    def logical_rows(self, sections: dict) -> dict[str, int]:
        """Array path -> rows within the logical length (trajectory arrays only)."""
        reader = sections.get("trajectory")
        if reader is None:
            return {}
        lay = reader.layout
        out: dict[str, int] = {"trajectory/step": lay.nstep, "trajectory/time": lay.nstep}
        for key in lay.meta:
            out[f"trajectory/meta/{key}"] = lay.nstep
        for name, bl in lay.blocks.items():
            rows = bl.total_rows
            for c in bl.columns:
                out[f"trajectory/{name}/{c}"] = rows
            for c in bl.masks:
                out[f"trajectory/{name}/_validity/{c}"] = rows
            out[f"trajectory/{name}/offset"] = bl.n_updates + 1 if bl.n_updates else 0
            out[f"trajectory/{name}/step_index"] = bl.n_updates
        for a in ("vectors", "origin", "boundary", "step_index"):
            out[f"trajectory/box/{a}"] = lay.box.n_updates
        return out

    def check_chunks(self, nodes: dict, sections: dict) -> None:
        logical = self.logical_rows(sections)
        arrays = [(p, n) for p, n in sorted(nodes.items()) if isinstance(n, ArrayMetadata)]
        for done, (p, node) in enumerate(arrays):
            if self.progress is not None:
                self.progress(done, len(arrays))
            arr = Array(self.store, p, node)
            arr.appended = p.startswith("trajectory/")     # written by appending (torn-index rebuild applies)
            try:
                self.report.checked["chunks"] += _read_every_chunk(arr, logical.get(p))
            except MrecError as exc:
                self.error(exc, "N-4e", arr.name)
                continue
            for key in sorted(arr.unverified_indexes):
                self.add("N-12", self.where(key), "the shard index fails its crc32c (a torn in-place rewrite); "
                         "its entries were verified through the chunks' own crc32c: run `mrec repair`",
                         "corrupt")
        if self.progress is not None:
            self.progress(len(arrays), len(arrays))


def _walk_codecs(pipeline):
    """Every codec of a pipeline, at every nesting depth (sharding's inner and index pipelines)."""
    for c in (*pipeline.array_array, pipeline.array_bytes, *pipeline.bytes_bytes):
        yield c
        for sub in (getattr(c, "codecs", None), getattr(c, "index_codecs", None)):
            if sub is not None:
                yield from _walk_codecs(sub)


def _read_every_chunk(arr: Array, rows: int | None) -> int:
    """Decode every stored chunk of ``arr`` within ``rows`` leading rows (all when None); returns chunks read."""
    m = arr.meta
    if m.ndim == 0:
        arr.read()
        return 1
    n = m.shape[0] if rows is None else min(rows, m.shape[0])
    sharding = arr.sharding
    step = sharding.chunk_shape[0] if sharding is not None else m.chunk_shape[0]
    count = 0
    for lo in range(0, n, max(1, step)):
        arr.read(slice(lo, min(n, lo + step)))
        count += 1
    return count


def validate(path, *, deep: bool = False, progress: Progress | None = None, fs=None) -> Report:
    """Check the store at ``path`` (``*.mrec`` directory or ``*.mrec.zip``) and return a :class:`Report`."""
    return _Checker(os.fspath(path), deep, progress, fs).run()

