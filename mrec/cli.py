"""The ``mrec`` command line (also ``python -m mrec``).

Errors from mrec are one line on stderr and exit status 2 — never a
traceback for a user's mistake.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from .errors import MrecError


def _array_summary(store, node_path: str, node) -> dict:
    prefix = node_path + "/"
    on_disk = sum(store.size(k) or 0 for k in store.list(prefix) if not k.endswith("zarr.json"))
    logical = int(np.prod(node.shape)) * (node.data_type.itemsize or 16)
    codecs = [c.name for c in node.codecs.codecs]
    sharding = node.codecs.sharding
    if sharding is not None:
        codecs = [f"sharding_indexed[{sharding.index_location}]"] + [c.name for c in sharding.codecs.codecs]
    return {"path": node_path, "dtype": node.data_type.name, "shape": list(node.shape),
            "chunks": list(node.chunk_shape), "codecs": codecs, "bytes": on_disk,
            "ratio": round(logical / on_disk, 2) if on_disk else None}


def _info(path: str, as_json: bool) -> int:
    from .record.trajectory.reader import TrajectoryReader
    from .record.trajectory.store import open_store
    from .zarr.array import read_node
    from .zarr.metadata import ArrayMetadata, GroupMetadata
    store = open_store(path)
    try:
        root = read_node(store, "")
        if not isinstance(root, GroupMetadata):
            raise MrecError("no Zarr group at the top: not a record", path=path)
        arrays = []
        for key in store.list():
            if key.endswith("zarr.json"):
                node_path = key[: -len("zarr.json")].rstrip("/")
                node = read_node(store, node_path)
                if isinstance(node, ArrayMetadata):
                    arrays.append(_array_summary(store, node_path, node))
        total = sum(store.size(k) or 0 for k in store.list())
        from .record.whole import KNOWN_SECTIONS
        present = {n for n in store.list_dir("") if read_node(store, n) is not None}
        sections = [n for n in KNOWN_SECTIONS if n in present] + sorted(present - set(KNOWN_SECTIONS))
        info: dict = {"path": path, "form": "zip" if type(store).__name__ == "ZipStore" else "directory",
                      "bytes_on_disk": total, "sections": sections, "arrays": arrays}
        for doc in ("meta", "status", "method"):
            node = read_node(store, doc)
            if isinstance(node, GroupMetadata):
                info[doc] = node.attributes
        units = _stored_units(store)
        if units is not None:
            info["units"] = units
        for section in ("system", "frame"):
            if isinstance(read_node(store, section), GroupMetadata):
                blocks = {}
                for b in sorted(store.list_dir(section)):
                    g = read_node(store, f"{section}/{b}")
                    if isinstance(g, GroupMetadata) and b != "box":
                        blocks[b] = {"count": g.attributes.get("count"),
                                     "columns": [a["path"].rsplit("/", 1)[1] for a in arrays
                                                 if a["path"].startswith(f"{section}/{b}/")
                                                 and "/_validity/" not in a["path"]]}
                info[section] = {"blocks": blocks}
        if isinstance(read_node(store, "forcefield"), GroupMetadata):
            info["forcefield"] = _forcefield_info(store)
        if isinstance(read_node(store, "trajectory"), GroupMetadata):
            r = TrajectoryReader(None, store=store)
            steps = r.steps
            info["trajectory"] = {
                "frames": len(r), "steps": [int(steps[0]), int(steps[-1])] if len(r) else [],
                "time": r.times is not None,
                "blocks": {b: {"state": "regular" if r.layout.blocks[b].regular else "ragged",
                               "updates": r.layout.blocks[b].n_updates,
                               "columns": {c: {"dtype": d.dtype, "trailing": list(d.trailing),
                                               **({"precision": d.precision} if d.precision is not None else {})}
                                           for c, d in bd.columns.items()}}
                           for b, bd in r.schema.blocks.items()},
                "meta": {k: m.tag for k, m in r.schema.meta.items()}}
            info["trajectory"].update(_trajectory_summary(r))
    finally:
        store.close()
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(f"{path} ({info['form']}, {total / 1e6:.2f} MB): sections {', '.join(sections)}")
    if "units" in info:
        u = info["units"]
        print("  units: " + (", ".join(f"{k} {v}" for k, v in u.items()) if isinstance(u, dict) else str(u)))
    for section in ("system", "frame"):
        if section in info:
            print(f"  {section}: " + "; ".join(f"{b}[{d['count']}] {', '.join(d['columns'])}"
                                               for b, d in info[section]["blocks"].items()))
    if "forcefield" in info:
        _print_forcefield(info["forcefield"])
    if "trajectory" in info:
        t = info["trajectory"]
        print(f"  trajectory: {t['frames']} frames, steps {t['steps']}, time {'yes' if t['time'] else 'no'}")
        for b, d in t["blocks"].items():
            cols = ", ".join(f"{c}:{v['dtype']}{v['trailing'] or ''}" for c, v in d["columns"].items())
            print(f"    {b} ({d['state']}, {d['updates']} updates): {cols}")
        _print_trajectory_summary(t)
    _print_arrays(arrays)
    return 0


def _stored_units(store):
    """The units a record states: its system's (or frame's) meta key ``units``, else the meta
    document's; None when it states none."""
    from .zarr.array import read_node
    from .zarr.metadata import GroupMetadata
    for where in ("system", "frame", "meta"):
        node = read_node(store, where)
        if isinstance(node, GroupMetadata) and node.attributes.get("units") is not None:
            return node.attributes["units"]
    return None


def _print_arrays(arrays: list[dict]) -> None:
    """The array table, each column as wide as its widest cell (bytes right-aligned)."""
    head = ("array", "dtype", "shape", "codecs", "bytes", "ratio")
    rows = [head] + [(a["path"], a["dtype"], str(a["shape"]), "+".join(a["codecs"]), str(a["bytes"]),
                      "-" if a["ratio"] is None else f"x{a['ratio']}") for a in arrays]
    widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
    for r in rows:
        cells = [f"{v:>{w}s}" if k == 4 else f"{v:{w}s}" for k, (v, w) in enumerate(zip(r, widths))]
        print(("  " + "  ".join(cells)).rstrip())


def _forcefield_info(store) -> dict:
    """The force field of ``mrec info``: its document's keys and one entry per style table."""
    from .record.sections.forcefield import block_name, read_forcefield
    try:
        ff, _ = read_forcefield(store)
    except MrecError as exc:                      # info still describes the rest; validate says more
        return {"error": str(exc), "kind": getattr(exc, "kind", None)}
    tables = {}
    for s in ff.styles:
        b = block_name(s["category"], s["style"])
        cols = ff.tables.blocks[b]
        tables[b] = {"category": s["category"], "style": s["style"], "rows": ff.tables.counts[b],
                     "columns": {c: ("string" if a.dtype == object else str(a.dtype.name)) + (
                         str(list(a.shape[1:])) if a.ndim > 1 else "") for c, a in cols.items()},
                     **{k: s[k] for k in ("params", "endpoint_key", "expression") if k in s}}
    return {"name": ff.name, "units": ff.units, **({"source": ff.source} if ff.source else {}),
            **({"special_bonds": ff.special_bonds} if ff.special_bonds else {}), "tables": tables,
            "unnamed_tables": ff.unnamed_tables(), "other_keys": sorted(ff.extra)}


def _print_forcefield(d: dict) -> None:
    if "error" in d:
        print(f"  forcefield: unreadable ({d['kind']}): {d['error']}")
        return
    units = ", ".join(f"{k}={v}" for k, v in d["units"].items())
    print(f"  forcefield: {d['name']!r} ({units}), {len(d['tables'])} styles"
          + (f", special_bonds lj {d['special_bonds']['lj']} coul {d['special_bonds']['coul']}"
             if "special_bonds" in d else ""))
    for b, t in d["tables"].items():
        extra = f" params {t['params']}" if "params" in t else ""
        print(f"    {t['category']} {t['style']!r} [{b}] {t['rows']} rows: {', '.join(t['columns'])}{extra}")
    if d["unnamed_tables"]:
        print(f"    tables no style names (kept): {', '.join(d['unnamed_tables'])}")


def _validate(path: str, deep: bool, as_json: bool) -> int:
    from .progress import Bar
    from .check.validate import validate
    from .fs.urls import is_url
    if not is_url(path) and not os.path.exists(path):
        raise MrecError("no such file or directory", path=path)
    with Bar("validate", unit="arrays", enabled=None if deep and not as_json else False) as bar:
        report = validate(path, deep=deep, progress=bar)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for v in report.violations + report.warnings:
            print(v)
        c = report.checked
        verdict = "valid" if report.ok else f"{len(report.violations)} violation(s)"
        print(f"{path}: {verdict}, {len(report.warnings)} warning(s); checked {c['nodes']} nodes, "
              f"{c['arrays']} arrays" + (f", {c['chunks']} chunks, {c['frames']} frames" if deep else ""))
    return 0 if report.ok else 1


def _plain(v):
    """JSON-safe plain value: NaN / Infinity as strings, complex as [re, im], numpy to Python."""
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()] if v.ndim else _plain(v.item())
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, complex):
        return [_plain(v.real), _plain(v.imag)]
    if isinstance(v, float) and not np.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return v


def _trajectory_summary(r) -> dict:
    """Per-step meta (min / mean / max of every numeric key) and the cell over time."""
    out: dict = {}
    meta = {}
    n = len(r)
    for key, arr in r.layout.meta.items():
        tag = r.schema.meta[key].tag
        if tag not in ("f64", "i32", "i64", "u32", "u64") or n == 0:
            meta[key] = {"tag": tag}
            continue
        v = np.asarray(arr.read(slice(0, n)), dtype=np.float64)
        finite = v[np.isfinite(v)]
        meta[key] = {"tag": tag, "min": float(finite.min()) if finite.size else None,
                     "mean": float(finite.mean()) if finite.size else None,
                     "max": float(finite.max()) if finite.size else None, "non_finite": int(v.size - finite.size)}
    out["meta_summary"] = meta
    bl = r.layout.box
    cell: dict = {"updates": bl.n_updates}
    if bl.n_updates:
        first = r.box_at(int(bl.step_index[0]))
        cell["defined"] = first.defined
        if first.defined:
            if bl.vectors is not None and bl.n_updates > 1:
                vecs = np.asarray(bl.vectors.read(slice(0, bl.n_updates)), dtype=np.float64)
                vols = np.abs(np.linalg.det(vecs))
                lengths = np.sqrt((vecs ** 2).sum(axis=1))          # |column k| per update: a, b, c
                cell["volume"] = {"min": float(vols.min()), "mean": float(vols.mean()), "max": float(vols.max())}
                cell["lengths_min"] = lengths.min(axis=0).tolist()
                cell["lengths_max"] = lengths.max(axis=0).tolist()
            else:
                cell["volume"] = float(abs(np.linalg.det(first.vectors)))
            cell["first"] = first.dimensions.tolist()
            cell["last"] = r.box_at(n - 1).dimensions.tolist() if n else None
    out["cell"] = cell
    return out


def _print_trajectory_summary(t: dict) -> None:
    def g(v):
        return "-" if v is None else f"{v:.6g}"
    for key, m in t.get("meta_summary", {}).items():
        if "min" in m:
            extra = f" ({m['non_finite']} non-finite)" if m.get("non_finite") else ""
            print(f"    meta {key} ({m['tag']}): min {g(m['min'])}  mean {g(m['mean'])}  max {g(m['max'])}{extra}")
        else:
            print(f"    meta {key} ({m['tag']})")
    c = t.get("cell", {})
    if not c.get("updates"):
        print("    cell: none")
    elif not c.get("defined", True):
        print("    cell: undefined (open boundaries)")
    else:
        dims = " ".join(g(x) for x in c["first"])
        if isinstance(c.get("volume"), dict):
            v = c["volume"]
            last = " ".join(g(x) for x in c["last"])
            print(f"    cell: {c['updates']} updates; first (a b c alpha beta gamma) {dims}; last {last}; "
                  f"volume min {g(v['min'])} mean {g(v['mean'])} max {g(v['max'])}")
        else:
            print(f"    cell: fixed (a b c alpha beta gamma) {dims}; volume {g(c['volume'])}")


def _frame_selection(spec: str | None, n: int) -> list[int] | None:
    """``--frame``: ``I`` (negative counts from the end) or ``START:STOP[:STEP]`` (Python slice)."""
    if spec is None:
        return None
    try:
        if ":" in spec:
            parts = [int(p) if p.strip() else None for p in spec.split(":")]
            if len(parts) > 3:
                raise ValueError
            return list(range(*slice(*parts).indices(n)))
        i = int(spec)
    except ValueError:
        raise MrecError(f"--frame {spec!r} is not an integer or START:STOP[:STEP]") from None
    if not -n <= i < n:
        raise MrecError(f"frame {i} is out of range (the trajectory has {n} frames)")
    return [i % n]


def _cat(path: str, frame: str | None, fmt: str) -> int:
    from .md.atoms import atoms_view
    from .md.text import write_extxyz, write_pdb, write_xyz
    from .record.whole import read_record
    out = sys.stdout
    with read_record(path) as rec:
        system = rec.system
        if rec.trajectory is not None and (frame is not None or rec.frame is None):
            r = rec.trajectory
            sel = _frame_selection(frame if frame is not None else "0", len(r))
            if not sel and frame is not None and ":" not in frame:
                raise MrecError(f"frame {frame} is out of range (the trajectory has {len(r)} frames)", path=path)
            steps = r.steps
            times = r.times
            items = ((i, r[i], int(steps[i]), None if times is None else float(times[i])) for i in sel)
        elif rec.frame is not None:
            if frame is not None:
                raise MrecError("the record has no trajectory: drop --frame to print its frame section", path=path)
            items = iter([(None, rec.frame, None, None)])
        else:
            raise MrecError("the record has neither a trajectory nor a frame section", path=path)
        many = frame is not None and ":" in frame
        for k, (i, f, step, time) in enumerate(items):
            if fmt == "json":
                doc = {"frame": i, "step": step, "time": time,
                       "blocks": {b: {c: _plain(v) for c, v in cols.items()} for b, cols in f.blocks.items()},
                       "masks": {b: {c: _plain(m) for c, m in ms.items()} for b, ms in f.masks.items()},
                       "meta": {kk: _plain(v) for kk, v in f.meta.items()}, "meta_types": f.meta_types,
                       "box": None if f.box is None else {"vectors": _plain(f.box.vectors),
                                                           "origin": _plain(f.box.origin),
                                                           "boundary": _plain(f.box.boundary),
                                                           "defined": f.box.defined}}
                if time is None:
                    del doc["time"]
                out.write(json.dumps(doc, indent=None if many else 1, allow_nan=False) + "\n")
                continue
            view = atoms_view(f, system)
            if view.positions is None:
                raise MrecError("this format needs an atoms block with x, y, z columns", path=path)
            if fmt == "extxyz":
                write_extxyz(out, view, step=step, time=time)
            elif fmt == "xyz":
                write_xyz(out, view, step=step, time=time)
            else:
                write_pdb(out, view, model=k + 1 if many else None, step=step, time=time)
        if fmt == "pdb" and not many:    # models end in ENDMDL (a final END reads as one more model in ASE)
            out.write("END\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    ap = argparse.ArgumentParser(
        prog="mrec", description="mrec molecular records: inspect, validate, repair, repack, pack / unpack, "
        "print frames, convert MD trajectories (XTC, DCD, TRR, extxyz, ...) to and from mrec, demo, golden "
        "fixtures.",
        epilog="`mrec COMMAND --help` describes a command. Errors are one line on stderr, exit status 2.")
    ap.add_argument("--version", action="version", version=f"mrec {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    p = sub.add_parser("demo", help="write, pack and read back a demo record",
                       description="Write a whole demo record (documents, system, a 200-frame trajectory), "
                       "pack it to a zip, read it back from the zip and print a summary.")
    p.add_argument("out", nargs="?", default="demo-out", help="output directory (default: demo-out)")
    p = sub.add_parser("info", help="sections, frames, blocks, arrays with dtype, shape, codecs, bytes, ratio",
                       description="Summarise a record: sections, documents, frame/system blocks, the "
                       "trajectory (frames, steps, blocks, per-step meta min/mean/max, the cell over time) and "
                       "every array with its dtype, shape, chunks, codecs, bytes on disk and compression ratio.")
    p.add_argument("path", help="a <stem>.mrec directory or a <stem>.mrec.zip")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = sub.add_parser("validate", help="check a store against the normative rules (exit 1 on any violation)",
                       description="Check any store against the normative rules; one line per violation "
                       "'[rule-id] path: what was wrong / expected'. Exit 1 on any violation, 0 when valid.")
    p.add_argument("path", help="a <stem>.mrec directory or a <stem>.mrec.zip")
    p.add_argument("--deep", action="store_true", help="decode every chunk (crc32c), resolve every frame, "
                   "check zip CRCs and precision grids")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    from .check.repair import add_repair_command
    add_repair_command(sub)
    from .archive.repack import add_repack_command
    add_repack_command(sub)
    p = sub.add_parser("fixtures", help="write the golden fixture catalogue (valid and invalid stores + sidecars)",
                       description="Write the golden fixture catalogue: the same bytes as the committed fixtures/.")
    p.add_argument("out", nargs="?", default="fixtures-out", help="output directory (default: fixtures-out)")
    p = sub.add_parser("pack", help="<stem>.mrec/ -> <stem>.mrec.zip (or OUT, a path or a URL to stream up to)",
                       description="Pack a live <stem>.mrec directory into <stem>.mrec.zip (stored entries, "
                       "random access without extraction) and remove the directory.")
    p.add_argument("path", help="the <stem>.mrec directory")
    p.add_argument("out", nargs="?", default=None,
                   help="the archive to write (default <stem>.mrec.zip beside it), or a URL such as "
                        "s3://bucket/run.mrec.zip to stream it up to (mrec[remote])")
    p.add_argument("--keep", action="store_true", help="keep the directory after packing")
    p.add_argument("--overwrite", action="store_true", help="replace an existing <stem>.mrec.zip")
    p = sub.add_parser("unpack", help="<stem>.mrec.zip -> <stem>.mrec/",
                       description="Rebuild the live <stem>.mrec directory from <stem>.mrec.zip (to append to "
                       "its trajectory) and remove the zip, as pack removes the directory.")
    p.add_argument("path", help="the <stem>.mrec.zip archive")
    p.add_argument("--keep", action="store_true", help="keep the zip after unpacking")
    p = sub.add_parser("cat", help="print frames as JSON, extxyz, xyz or PDB",
                       description="Print trajectory frames (or the frame section when there is no trajectory) "
                       "as JSON, extended XYZ (species from element, else name / type; Lattice, pbc, velocities, "
                       "forces, per-step energies), plain XYZ or PDB (MODEL per frame).")
    p.add_argument("path", help="a <stem>.mrec directory or a <stem>.mrec.zip")
    p.add_argument("--frame", default=None, metavar="I|START:STOP[:STEP]",
                   help="one frame (negative counts from the end) or a range, e.g. 1:5 or ::10 (default: 0)")
    p.add_argument("--format", choices=("json", "extxyz", "xyz", "pdb"), default="json",
                   help="output format (default: json)")
    from .md.cli import add_convert_command
    ap.set_defaults(convert_parser=add_convert_command(sub))
    return ap


def parse_args(ap: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """``ap``'s arguments; ``convert``'s intermixed (``IN [IN ...] --top T OUT``: several inputs
    before or after its options, which one sub-parser pass cannot tell from OUT)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if argv and argv[0] == "convert":
        args = ap.get_default("convert_parser").parse_intermixed_args(argv[1:])
        args.cmd = "convert"
        return args
    return ap.parse_args(argv)


def main(argv=None) -> int:
    ap = build_parser()
    args = parse_args(ap, argv)
    if args.cmd is None:
        ap.print_help()
        return 0
    try:
        return _run(args)
    except BrokenPipeError:
        # the reader of our output (`| head`) went away: stop quietly, as a Unix tool does
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except MrecError as exc:
        print(f"mrec {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except (OSError, IndexError, KeyError) as exc:
        print(f"mrec {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mrec {args.cmd}: interrupted", file=sys.stderr)
        return 130


def _run(args) -> int:
    if args.cmd == "demo":
        from .demo import run_demo
        run_demo(args.out)
        return 0
    if args.cmd == "info":
        return _info(args.path, args.json)
    if args.cmd == "validate":
        return _validate(args.path, args.deep, args.json)
    if args.cmd in ("repair", "repack"):
        return args.func(args)
    if args.cmd == "fixtures":
        from .check.fixtures import make_fixtures, summary
        out = Path(args.out)
        print(summary(out, make_fixtures(out)))
        return 0
    if args.cmd == "pack":
        from .archive.pack import pack
        from .progress import Bar
        try:
            with Bar("pack") as bar:
                out = pack(args.path, keep=args.keep, overwrite=args.overwrite, progress=bar, out=args.out)
        except MrecError as exc:
            if getattr(exc, "kind", None) == "exists" and not args.overwrite:
                raise MrecError(f"{exc} (use --overwrite to replace it)") from None
            raise
        print(out)
        return 0
    if args.cmd == "unpack":
        from .archive.pack import unpack
        from .progress import Bar
        with Bar("unpack") as bar:
            out = unpack(args.path, keep=args.keep, progress=bar)
        print(out)
        return 0
    if args.cmd == "cat":
        return _cat(args.path, args.frame, args.format)
    if args.cmd == "convert":
        return args.func(args)
    return 1


if __name__ == "__main__":
    sys.exit(main())
