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
    from .record.trajectory_read import TrajectoryReader, open_store
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
        from .record.record import KNOWN_SECTIONS
        present = {n for n in store.list_dir("") if read_node(store, n) is not None}
        sections = [n for n in KNOWN_SECTIONS if n in present] + sorted(present - set(KNOWN_SECTIONS))
        info: dict = {"path": path, "form": "zip" if type(store).__name__ == "ZipStore" else "directory",
                      "bytes_on_disk": total, "sections": sections, "arrays": arrays}
        for doc in ("meta", "status", "method"):
            node = read_node(store, doc)
            if isinstance(node, GroupMetadata):
                info[doc] = node.attributes
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
    finally:
        store.close()
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(f"{path} ({info['form']}, {total / 1e6:.2f} MB): sections {', '.join(sections)}")
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
    print(f"  {'array':44s} {'dtype':10s} {'shape':16s} {'codecs':44s} {'bytes':>10s}  ratio")
    for a in arrays:
        print(f"  {a['path']:44s} {a['dtype']:10s} {str(a['shape']):16s} {'+'.join(a['codecs']):44s} "
              f"{a['bytes']:>10d}  x{a['ratio']}")
    return 0


def _forcefield_info(store) -> dict:
    """The force field of ``mrec info``: its document's keys and one entry per style table."""
    from .record.forcefield import block_name, read_forcefield
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
    from .validate import validate
    from .fs.remote import is_url
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


def _cat(path: str, frame: int | None, fmt: str) -> int:
    from .record.record import read_record
    with read_record(path) as rec:
        step = None
        if rec.trajectory is not None and (frame is not None or rec.frame is None):
            i = 0 if frame is None else frame
            if not -len(rec.trajectory) <= i < len(rec.trajectory):
                raise MrecError(f"frame {i} is out of range (the trajectory has {len(rec.trajectory)} frames)",
                                path=path)
            f = rec.trajectory[i]
            step, frame = int(rec.trajectory.steps[i]), i % len(rec.trajectory)
        elif rec.frame is not None:
            if frame is not None:
                raise MrecError("the record has no trajectory: drop --frame to print its frame section", path=path)
            f = rec.frame
        else:
            raise MrecError("the record has neither a trajectory nor a frame section", path=path)
        system_atoms = rec.system.blocks.get("atoms", {}) if rec.system is not None else {}
    if fmt == "extxyz":
        atoms = f.blocks.get("atoms", {})
        if not all(c in atoms for c in "xyz"):
            raise MrecError("extxyz needs an atoms block with x, y, z columns", path=path)
        n = len(atoms["x"])
        lattice = ""
        if f.box is not None and f.box.defined:
            lattice = 'Lattice="' + " ".join(f"{v:.8g}" for v in np.asarray(f.box.vectors).T.ravel()) + '" '
        print(n)
        print(f"{lattice}Properties=species:S:1:pos:R:3" + (f" step={step}" if step is not None else ""))
        species = atoms.get("element", system_atoms.get("element", ["X"] * n))
        for k in range(n):
            print(f"{species[k]} {atoms['x'][k]:.8f} {atoms['y'][k]:.8f} {atoms['z'][k]:.8f}")
        return 0
    doc = {"frame": frame, "step": step,
           "blocks": {b: {c: _plain(v) for c, v in cols.items()} for b, cols in f.blocks.items()},
           "masks": {b: {c: _plain(m) for c, m in ms.items()} for b, ms in f.masks.items()},
           "meta": {k: _plain(v) for k, v in f.meta.items()}, "meta_types": f.meta_types,
           "box": None if f.box is None else {"vectors": _plain(f.box.vectors), "origin": _plain(f.box.origin),
                                               "boundary": _plain(f.box.boundary), "defined": f.box.defined}}
    print(json.dumps(doc, indent=1, allow_nan=False))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="mrec", description="mrec molecular records: inspect, validate, pack, "
                                 "unpack, demo, golden fixtures")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("demo", help="write, pack and read back a demo record")
    p.add_argument("out", nargs="?", default="demo-out")
    p = sub.add_parser("info", help="sections, frames, blocks, arrays with dtype, shape, codecs, bytes, ratio")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("validate", help="check a store against the normative rules (exit 1 on any violation)")
    p.add_argument("path")
    p.add_argument("--deep", action="store_true", help="decode every chunk (crc32c), resolve every frame, "
                   "check zip CRCs and precision grids")
    p.add_argument("--json", action="store_true")
    from .repair import add_repair_command
    add_repair_command(sub)
    from .repack import add_repack_command
    add_repack_command(sub)
    p = sub.add_parser("fixtures", help="write the golden fixture catalogue (valid and invalid stores + sidecars)")
    p.add_argument("out", nargs="?", default="fixtures-out")
    p = sub.add_parser("pack", help="<stem>.mrec/ -> <stem>.mrec.zip (or OUT, a path or a URL to stream up to)")
    p.add_argument("path")
    p.add_argument("out", nargs="?", default=None)
    p.add_argument("--keep", action="store_true", help="keep the directory after packing")
    p = sub.add_parser("unpack", help="<stem>.mrec.zip -> <stem>.mrec/")
    p.add_argument("path")
    p = sub.add_parser("cat", help="print one frame (a trajectory frame, or the frame section)")
    p.add_argument("path")
    p.add_argument("--frame", type=int, default=None)
    p.add_argument("--format", choices=("json", "extxyz"), default="json")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "demo":
            from .demo import run_demo
            run_demo(args.out)
            return 0
        if args.cmd == "info":
            return _info(args.path, args.json)
        if args.cmd == "validate":
            return _validate(args.path, args.deep, args.json)
        if args.cmd == "repair":
            return args.func(args)
        if args.cmd == "repack":
            return args.func(args)
        if args.cmd == "fixtures":
            from .fixtures import make_fixtures, summary
            out = Path(args.out)
            print(summary(out, make_fixtures(out)))
            return 0
        if args.cmd == "pack":
            from .pack import pack
            from .progress import Bar
            with Bar("pack") as bar:
                out = pack(args.path, keep=args.keep, progress=bar, out=args.out)
            print(out)
            return 0
        if args.cmd == "unpack":
            from .pack import unpack
            from .progress import Bar
            with Bar("unpack") as bar:
                out = unpack(args.path, progress=bar)
            print(out)
            return 0
        if args.cmd == "cat":
            return _cat(args.path, args.frame, args.format)
    except MrecError as exc:
        print(f"mrec {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except (OSError, IndexError, KeyError) as exc:
        print(f"mrec {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
