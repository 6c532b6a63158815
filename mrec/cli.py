"""The ``mrec`` command line (also ``python -m mrec``).

Errors from mrec are one line on stderr and exit status 2 — never a
traceback for a user's mistake.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .errors import MrecError


def _info(path: str, as_json: bool) -> int:
    from .record.trajectory_read import open_store
    from .zarr.array import read_node
    from .zarr.metadata import ArrayMetadata
    store = open_store(path)
    arrays = []
    for key in store.list():
        if not key.endswith("zarr.json"):
            continue
        node_path = key[: -len("zarr.json")].rstrip("/")
        node = read_node(store, node_path)
        if isinstance(node, ArrayMetadata):
            prefix = node_path + "/"
            on_disk = sum(store.size(k) or 0 for k in store.list(prefix) if not k.endswith("zarr.json"))
            logical = int(np.prod(node.shape)) * (node.data_type.itemsize or 16)
            arrays.append({"path": node_path, "dtype": node.data_type.name, "shape": list(node.shape),
                           "codecs": [c.name for c in node.codecs.codecs], "bytes": on_disk,
                           "ratio": round(logical / on_disk, 2) if on_disk else None})
    info = {"path": path, "sections": sorted({a["path"].split("/")[0] for a in arrays} |
                                            {n for n in store.list_dir("") if read_node(store, n) is not None}),
            "arrays": arrays}
    if read_node(store, "trajectory") is not None:
        from .record.trajectory_read import TrajectoryReader
        r = TrajectoryReader(None, store=store)
        info["frames"] = len(r)
        info["blocks"] = {b: {c: {"dtype": d.dtype, "trailing": list(d.trailing)} for c, d in bd.columns.items()}
                          for b, bd in r.schema.blocks.items()}
    if as_json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{path}: sections {', '.join(info['sections'])}")
    if "frames" in info:
        print(f"trajectory: {info['frames']} frames, blocks {', '.join(info['blocks'])}")
    for a in arrays:
        print(f"  {a['path']:40s} {a['dtype']:10s} {str(a['shape']):18s} {'+'.join(a['codecs']):20s} "
              f"{a['bytes']:>10d} B  x{a['ratio']}")
    return 0


def _cat(path: str, frame: int, fmt: str) -> int:
    from .record.trajectory_read import TrajectoryReader
    with TrajectoryReader(path) as r:
        f = r[frame]
        if fmt == "extxyz":
            atoms = f.blocks.get("atoms", {})
            n = len(atoms.get("x", []))
            lattice = ""
            if f.box is not None:
                lattice = 'Lattice="' + " ".join(f"{v:.8g}" for v in np.asarray(f.box.vectors).T.ravel()) + '" '
            print(n)
            print(f'{lattice}Properties=species:S:1:pos:R:3 step={int(r.steps[frame])}')
            species = atoms.get("element", ["X"] * n)
            for k in range(n):
                print(f"{species[k]} {atoms['x'][k]:.8f} {atoms['y'][k]:.8f} {atoms['z'][k]:.8f}")
        else:
            doc = {"frame": frame, "step": int(r.steps[frame]),
                   "blocks": {b: {c: np.asarray(v).tolist() for c, v in cols.items()} for b, cols in f.blocks.items()},
                   "meta": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in f.meta.items()},
                   "box": None if f.box is None else {"vectors": np.asarray(f.box.vectors).tolist(),
                                                       "origin": np.asarray(f.box.origin).tolist(),
                                                       "boundary": np.asarray(f.box.boundary).tolist(),
                                                       "defined": f.box.defined}}
            print(json.dumps(doc, indent=1, default=float))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="mrec", description="mrec molecular records: inspect, pack, unpack, demo")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("demo", help="write, pack and read back a demo trajectory record")
    p.add_argument("out", nargs="?", default="demo-out")
    p = sub.add_parser("info", help="sections, frames, arrays with dtype, shape, codecs and bytes")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("pack", help="<stem>.mrec/ -> <stem>.mrec.zip")
    p.add_argument("path")
    p.add_argument("--keep", action="store_true", help="keep the directory after packing")
    p = sub.add_parser("unpack", help="<stem>.mrec.zip -> <stem>.mrec/")
    p.add_argument("path")
    p = sub.add_parser("cat", help="print one frame")
    p.add_argument("path")
    p.add_argument("--frame", type=int, default=0)
    p.add_argument("--format", choices=("json", "extxyz"), default="json")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "demo":
            from .demo import run_demo
            run_demo(args.out)
            return 0
        if args.cmd == "info":
            return _info(args.path, args.json)
        if args.cmd == "pack":
            from .pack import pack
            print(pack(args.path, keep=args.keep))
            return 0
        if args.cmd == "unpack":
            from .pack import unpack
            print(unpack(args.path))
            return 0
        if args.cmd == "cat":
            return _cat(args.path, args.frame, args.format)
    except MrecError as exc:
        print(f"mrec {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except (IndexError, KeyError, FileNotFoundError) as exc:
        print(f"mrec {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
