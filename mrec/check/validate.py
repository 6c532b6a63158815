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

from ..errors import MrecError
from ..record.model.precision import is_on_grid
from ..zarr.array import Array, meta_key, read_node
from ..zarr.metadata import ArrayMetadata, GroupMetadata

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
    "N-4g": "every group directory holding nodes has its own zarr.json (deep)",
    "RT-1": "a chunk or shard never written reads as the fill value (reported for trajectory arrays)",
    "RT-6": "a chunk whose bytes run past the end of its shard file is corruption, never fill",
    "SS-1": "a record directory holds files and directories, no symbolic links",
    "NREP-4": "no leftover of an interrupted replace of the record or of a group inside it",
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
        self.storage_options = None
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
        import warnings
        from ..errors import StandInWarning
        with warnings.catch_warnings():
            # a stand-in read is reported as RT-6 (check_stand_ins), not warned twice
            warnings.simplefilter("ignore", StandInWarning)
            return self._run()

    def _run(self) -> Report:
        path = self.report.path
        from ..fs.urls import is_url
        from ..record.trajectory.store import open_store
        remote = is_url(path)       # a URL opens read-only through mrec.fs.remote
        packed = path.endswith(".zip") if remote else os.path.isfile(path)
        if packed and not remote:
            self.check_zip(path)
        elif os.path.isdir(path):
            self.check_links(path)
            self.check_interrupted(path)
        if not (path.rstrip("/").endswith(".mrec") or path.endswith(".mrec.zip")):
            self.add("N-1.1n", path, "a record is named <stem>.mrec (directory) or <stem>.mrec.zip (archive)",
                     severity="warning")
        try:
            self.store = open_store(path, fs=self.fs, storage_options=self.storage_options)
        except MrecError as exc:
            self.error(exc, "C-ZIP-2" if packed else "N-1.1a", path)
            return self.report
        if packed and remote:                     # the archive checked through the same file system
            self.check_zip(path, self.store.fs)
        return self.run_checks()

    def run_checks(self) -> Report:
        path = self.report.path
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
                self.check_group_documents()
        finally:
            self.store.close()
        return self.report

    def check_zip(self, path: str, fs=None) -> None:
        from ..zarr.stores.zip_format import zip_problems
        for message in zip_problems(path, fs or self.fs, check_crc=self.deep):
            rule = "C-ZIP-2" if any(w in message.lower() for w in ("central directory", "end record", "zip64",
                                                                 "truncated", "not a zip")) else "C-ZIP-1"
            entry, _, detail = message.partition(": ")
            self.add(rule, entry or path, detail or message, "bad_zip")

    def check_links(self, path: str) -> None:
        """Symbolic links inside a record directory: pack refuses them and a writer would write
        through them (mrec.record.integrity.leftovers); reported here the same way, kind ``bad_layout``."""
        from ..fs import DEFAULT_FS
        from ..record.integrity.leftovers import scan
        links, _ = scan(self.fs or DEFAULT_FS, path)
        for key in links:
            self.add("SS-1", os.path.join(path, *key.split("/")), "a symbolic link: a record holds files, not "
                     "links (pack refuses it; a writer or repair would write through it, outside the record)",
                     "bad_layout")

    def check_interrupted(self, path: str) -> None:
        """What an interrupted overwrite left, of the record (its ``.mrec-tmp-new-`` / ``old-`` siblings)
        or of a group inside it (mrec.record.integrity.replace): reported, never recovered here (the next read,
        write, ``mrec repair`` or pack of the record recovers it)."""
        from ..fs import DEFAULT_FS
        from ..record.integrity.replace import interrupted, names
        fs = self.fs or DEFAULT_FS
        for sibling in names(os.path.abspath(path)):
            if fs.exists(sibling) or fs.is_link(sibling):
                self.add("NREP-4", sibling, "an interrupted overwrite of the record left this sibling: as stored, "
                         "the path may not hold what a reader gets; the next read, write or `mrec repair` of "
                         "the record finishes it (a committed new record wins)", "interrupted_replace")
        for what, group, leftover in interrupted(fs, path):
            where = os.path.join(path, *leftover.split("/"))
            if what == "replace":
                self.add("NREP-4", where, f"an interrupted replace of the group {group!r} left this sibling: as "
                         f"stored, {group!r} is not what a reader gets; the next read, write, `mrec repair` or "
                         "pack of the record finishes it (a committed new group wins)", "interrupted_replace")
            elif what == "build":
                self.add("NREP-4", where, f"a build of the group {group!r} (write_section / write_frame "
                         "interrupted, or still running): nothing reads it; once its writer is gone the next "
                         "write, `mrec repair` or pack of the record removes it", "interrupted_replace",
                         severity="warning")
            else:
                self.add("NREP-4", where, "a leftover of an interrupted replace mrec cannot attribute (the "
                         "former rename-aside protocol named the group it moved away so): put it back under "
                         "its group's name or remove it; pack refuses the record while it is there",
                         "interrupted_replace")

    def check_nodes(self) -> dict[str, object]:
        """Parse every zarr.json; returns node path -> metadata for the parseable ones."""
        from ..zarr.dtypes import DATA_TYPES  # noqa: F401  (parse_node refuses types outside the 13)
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
        from ..record.model.dtypes import dtype_from_zarr
        self.attempt(dtype_from_zarr, node.data_type.name, self.where(meta_key(node_path)),
                     where=self.where(meta_key(node_path)))
        for codec in _walk_codecs(node.codecs):
            endian = getattr(codec, "endian", None)
            if endian == "big" and node.data_type.numpy.itemsize > 1:
                self.add("N-1.6e", self.where(meta_key(node_path)),
                         "the bytes codec is big-endian; writers emit little-endian (readers decode both)")

    def check_documents(self, nodes: dict) -> None:
        from ..record.sections.documents import check_meta, check_method, check_status
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
        from ..record.sections.frame_group import read_frame_group
        from ..record.sections.metrics import Metrics
        from ..record.sections.observables import read_observables
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
        self.check_forcefield(nodes, found)
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
        from ..record.whole import check_system_alignment
        from ..record.trajectory.reader import TrajectoryReader
        from ..record.trajectory.walk import walk_ordinals
        where = self.where("trajectory")
        reader = self.attempt(lambda: TrajectoryReader(None, store=self.store), where=where)
        if reader is None:
            return None
        self.attempt(check_system_alignment, system, reader, where, rule="N-3.1s", where=where)
        if self.deep:
            # every frame that can differ, bounded by what the store holds (nstep is a claim)
            for i in walk_ordinals(reader.layout).tolist():
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

    # -- the force field (mrec-notes §9.1; rules FF-*) ------------------------------------
    def check_forcefield(self, nodes: dict, found: dict) -> None:
        """Every force-field rule (a refusal names its FF rule); names the system uses that resolve to
        no row are warnings (linking is by name, never a format error)."""
        from ..record.sections.forcefield import read_forcefield, unresolved_links
        node = nodes.get("forcefield")
        if node is None:
            return
        where = self.where("forcefield")
        if not isinstance(node, GroupMetadata):
            self.add("FF-1", where, "forcefield is a frame-shaped group, found an array", "bad_layout")
            return
        try:
            ff, _ = read_forcefield(self.store)
        except MrecError as exc:
            kind = getattr(exc, "kind", "error")
            rule = FF_KIND_RULES.get(kind) or KIND_RULES.get(kind, "FF-1")
            if "cmap grid" in exc.detail:
                rule = "FF-13"
            elif "one_four" in exc.detail or "nharmonic" in exc.detail:
                rule = "FF-15"
            self.add(rule, exc.path or where, exc.detail, kind)
            return
        found["forcefield"] = ff
        meta = nodes.get("meta")
        if isinstance(meta, GroupMetadata) and meta.attributes.get("molrec_version") == 1:
            self.add("N-0", where, "a version-1 record's force-field numbers follow the pre-LAMMPS definitions; "
                     "a reader converts them exactly or refuses (mrec refuses)", "bad_version")
        for message in unresolved_links(found.get("system"), ff):
            self.add("FF-17", self.where("system"), f"{message} (linking is by name: an unresolved name is "
                     "reported, never refused)", "unresolved_name", "warning")

    # -- deep: every chunk ---------------------------------------------------------------
    def check_stand_ins(self, arr: Array, rows: int | None) -> None:
        """Warn where an older copy stands in for a newest copy lying wholly past the end of its
        shard file and the last row read from it is the fill value: a power loss before the newest
        copy was written (the rows are as committed) and a file cut exactly there (the rows were
        lost and read as fill) leave the same bytes (docs/reliability.md)."""
        from ..zarr import shardscan
        m = arr.meta
        sh = arr.sharding
        n = m.shape[0] if rows is None else min(rows, m.shape[0])
        for coords in arr.stored_chunks() if arr.unverified_indexes else ():   # what the files hold
            s = coords[0]
            key = arr.chunk_key(coords)
            if s * m.chunk_shape[0] >= n or key not in arr.unverified_indexes:
                continue
            index = arr.indexes.cache.get(key)
            for coord, how in sorted(getattr(index, "degraded", {}).items()):
                if how != shardscan.PAST_END:
                    continue
                lo = s * m.chunk_shape[0] + coord[0] * sh.chunk_shape[0]
                hi = min(n, lo + sh.chunk_shape[0])
                if hi <= lo:
                    continue
                vals = self.attempt(arr.read, slice(lo, hi), where=arr.name)
                if vals is not None and not shardscan.holds_rows(vals, hi - lo, m.fill_value):
                    self.add("RT-6", self.where(key), f"the newest copy of inner chunk {list(coord)} lies past the "
                             f"end of the file; rows {lo}..{hi - 1} are read from the copy before it, whose last "
                             "of them is the fill value: a power loss before the newest copy was written (the "
                             "rows are as committed) or a file cut there (the rows were lost and read as fill)",
                             "stand_in", "warning")

    def check_missing_shards(self, arr: Array, rows: int | None) -> None:
        """Warn of a trajectory shard within the logical length that is not in the store.

        The reader reads it as the fill value, as the Zarr rule says for any chunk never written
        (other writers skip chunks that are all fill), so it is not a violation; but mrec's writer
        writes every shard it lands rows in, so in a store mrec wrote it is a lost file — which
        the directory form cannot tell from one never written (docs/reliability.md)."""
        m = arr.meta
        if m.ndim == 0 or arr.sharding is None:
            return
        n = m.shape[0] if rows is None else min(rows, m.shape[0])
        srows = m.chunk_shape[0]
        count = -(-n // srows) if srows else 0
        held = sorted({c[0] for c in arr.stored_chunks()})      # runs between them: bounded by the files
        for a, b in zip([0] + [s + 1 for s in held], held + [count]):
            if a >= min(b, count):
                continue
            b = min(b, count)
            key = self.where(arr.chunk_key((a,) + (0,) * (m.ndim - 1)))
            what = f"shard {key} was" if b == a + 1 else f"{b - a} shards from {key} on were"
            lo, hi = a * srows, min(n, b * srows)
            self.add("RT-1", arr.name, f"{what} never written: rows {lo}..{hi - 1} read as the fill value "
                     f"{m.fill_value!r} (the Zarr rule). mrec writes every shard of a trajectory array, so in a "
                     "store it wrote this file was lost", "missing_chunk", "warning")

    def logical_rows(self, sections: dict) -> dict[str, int]:
        """Array path -> rows within the logical length (trajectory arrays only)."""
        from ..record.trajectory.layout import logical_lengths
        reader = sections.get("trajectory")
        return {} if reader is None else logical_lengths(reader.layout)

    def check_chunks(self, nodes: dict, sections: dict) -> None:
        logical = self.logical_rows(sections)
        arrays = [(p, n) for p, n in sorted(nodes.items()) if isinstance(n, ArrayMetadata)]
        for done, (p, node) in enumerate(arrays):
            if self.progress is not None:
                self.progress(done, len(arrays))
            arr = Array(self.store, p, node)
            arr.appended = p.startswith("trajectory/")     # written by appending (torn-index rebuild applies)
            if arr.appended:
                self.check_missing_shards(arr, logical.get(p))
            try:
                self.report.checked["chunks"] += _read_every_chunk(arr, logical.get(p))
            except MrecError as exc:
                self.error(exc, "N-4e", arr.name)
                continue
            if arr.appended:
                self.check_stand_ins(arr, logical.get(p))
            for key in sorted(arr.unverified_indexes):
                self.add("N-12", self.where(key), "the shard index fails its crc32c or does not end where the "
                         "file ends (a torn or dropped in-place rewrite); it was rebuilt in memory from the "
                         "chunks in the order they were appended, each verified by its own crc32c: run "
                         "`mrec repair`",
                         "corrupt")
        if self.progress is not None:
            self.progress(len(arrays), len(arrays))


    def check_group_documents(self) -> None:
        """Every directory on the way to a node is a group with its zarr.json (mrec-notes §4): a
        directory without it is invisible to a Zarr reader, which then skips what it holds
        (a block's _validity masks: null rows read back as valid)."""
        keys = [k for k in self.store.list("") if posixpath.basename(k) == "zarr.json"]
        nodes = {posixpath.dirname(k) for k in keys}
        missing: set[str] = set()
        for p in nodes:
            d = posixpath.dirname(p)
            while d and d not in nodes and d not in missing:
                missing.add(d)
                d = posixpath.dirname(d)
        for d in sorted(missing):
            self.add("N-4g", self.where(meta_key(d)), "a group directory without its zarr.json: Zarr readers "
                     "do not see the nodes under it", "bad_layout")


def _walk_codecs(pipeline):
    """Every codec of a pipeline, at every nesting depth (sharding's inner and index pipelines)."""
    for c in (*pipeline.array_array, pipeline.array_bytes, *pipeline.bytes_bytes):
        yield c
        for sub in (getattr(c, "codecs", None), getattr(c, "index_codecs", None)):
            if sub is not None:
                yield from _walk_codecs(sub)


def _read_every_chunk(arr: Array, rows: int | None) -> int:
    """Decode every stored chunk of ``arr`` within ``rows`` leading rows (all when None); returns chunks read.

    Only the chunks present in the store are visited (a listing of the array's keys), so the walk
    is bounded by what the files hold: a 2^20 x 2^20 shape declared in a 1 KB zarr.json costs one
    listing, not 2^40 lookups.  An absent chunk reads as the fill value; the trajectory's frame
    walk (check_trajectory) is what refuses a shard missing inside the logical length."""
    m = arr.meta
    if m.ndim == 0:
        arr.read()
        return 1
    n = m.shape[0] if rows is None else min(rows, m.shape[0])
    c0 = m.chunk_shape[0]
    count = 0
    for coords in arr.stored_chunks():
        lo = coords[0] * c0
        if lo >= n:
            continue
        arr.read_chunk_rows(coords, 0, min(c0, n - lo))
        count += 1
    return count


#: The force-field rules (docs/conformance.md, FF-*) the validator reports.
FF_RULES: dict[str, str] = {
    "FF-1": "forcefield is frame-shaped: the document as attributes, one block per style at <category>.<encoded style>",
    "FF-2": "the document: name required, plain finite JSON, unknown keys kept, no _meta_types",
    "FF-3": "units: a preset and/or quantity strings; a quantity beside a preset agrees with it",
    "FF-4": "source.format required; sha256 64 lowercase hex",
    "FF-5": "special_bonds: lj and coul, three finite numbers each",
    "FF-6": "styles: category ^[a-z][a-z0-9_]*$, style non-empty, params number|string, endpoint_key, each pair once",
    "FF-7": "every style has its table (possibly 0 rows)",
    "FF-8": "name: string, never null, unique within a table",
    "FF-9": "endpoints: the first <arity> of itom..mtom, strings, never null; smirks / class keys",
    "FF-10": "annotations: nullable strings",
    "FF-11": "parameters: f64 or string (canonical keys at their dtype); arrays f64[T,S...]; finite non-null rows",
    "FF-12": "no declared precision, no structural shape on a style table",
    "FF-13": "a cmap grid is f64[T,N,N], N >= 2",
    "FF-14": "a pair table restates a pair only with equal parameters",
    "FF-15": "registered styles: pair.lj/charmm one_four regular|epsilon14, dihedral.nharmonic a1..aN contiguous",
    "FF-17": "linking by name: unresolved names are reported as warnings",
}
RULES.update(FF_RULES)
#: The FF rule of a force-field refusal kind.
FF_KIND_RULES: dict[str, str] = {
    "missing_key": "FF-2", "bad_forcefield": "FF-6", "reserved_meta_key": "FF-2", "missing_units": "FF-3",
    "bad_units": "FF-3", "missing_table": "FF-7", "bad_name": "FF-8", "bad_endpoint": "FF-9",
    "bad_annotation": "FF-10", "bad_parameter": "FF-11", "canonical_dtype": "FF-11", "bad_precision": "FF-12",
    "structural_shape_mismatch": "FF-12", "pair_conflict": "FF-14",
}


def validate(path, *, deep: bool = False, progress: Progress | None = None, fs=None,
             storage_options=None) -> Report:
    """Check the store at ``path`` (``*.mrec`` directory or ``*.mrec.zip``, local or a URL) and return a
    :class:`Report`."""
    checker = _Checker(os.fspath(path), deep, progress, fs)
    checker.storage_options = storage_options
    return checker.run()

