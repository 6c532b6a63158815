"""``mrec convert`` on the command line."""
from __future__ import annotations

import argparse

__all__ = ["add_convert_command"]


def add_convert_command(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "convert", help="MD trajectory (XTC, DCD, TRR, NetCDF, LAMMPS dump, extxyz, ...) <-> mrec",
        description="Convert an MD trajectory into an mrec record, or a record's trajectory back out. "
        "Into mrec: through MDAnalysis (XTC, TRR, DCD, NetCDF, GRO, PDB, LAMMPS dump, ...; topology with "
        "--top) or ASE (.extxyz, .xyz, .traj: atom counts may change). Out of mrec: .extxyz, .xyz, .pdb "
        "by mrec itself; .xtc, .dcd, .trr, ... through MDAnalysis. Needs pip install 'mrec[md]'.",
        epilog="examples:  mrec convert md.xtc --top md.tpr run.mrec.zip\n"
               "           mrec convert part1.xtc part2.xtc --top md.tpr --select protein run.mrec.zip\n"
               "           mrec convert run.mrec.zip --frames 0:100 out.xtc",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", metavar="IN", nargs="+",
                   help="the source: a trajectory file (several are read one after the other into one "
                        "record, steps continuing), or a *.mrec / *.mrec.zip record")
    p.add_argument("out", metavar="OUT", help="the target: OUT.mrec or OUT.mrec.zip, or a trajectory file")
    p.add_argument("--top", metavar="TOPOLOGY", default=None,
                   help="topology for MDAnalysis (PSF, TPR, PRMTOP, PDB, GRO, LAMMPS data, ...)")
    p.add_argument("--format", dest="fmt", metavar="NAME", default=None,
                   help="MDAnalysis format of IN when its extension does not tell (e.g. LAMMPSDUMP)")
    p.add_argument("--type-map", dest="type_map", metavar="TYPE=ELEMENT,...", default=None,
                   help="the element of each LAMMPS atom type, e.g. 1=C,2=O (default: from the types' masses "
                        "when the dump or --top gives them); also names the species of an extxyz / xyz OUT")
    p.add_argument("--frames", metavar="START:STOP[:STEP]", default=None, help="only these frames (a Python slice)")
    p.add_argument("--select", metavar="SELECTION", default=None,
                   help="only these atoms, with their topology: an MDAnalysis selection string, e.g. 'protein'")
    p.add_argument("--precision", type=float, default=None, metavar="ANGSTROM",
                   help="positions' absolute precision in Å (default: the source's own for a lossy source "
                        "such as XTC, else exact)")
    p.add_argument("--profile", choices=("reference", "compact"), default="reference",
                   help="the trajectory layout profile (default: reference)")
    p.add_argument("--compression", default="auto", metavar="CODEC",
                   help="compressor of float columns: auto (default: exact floats byte-shuffled then zstd; "
                        "values stored exactly), none, [shuffle+]gzip[:N], [shuffle+]zstd[:N]")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="draw the progress bar on stderr even when it is not a terminal")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="never draw the progress bar")
    p.set_defaults(func=run_convert)
    return p


def run_convert(args) -> int:
    from ..errors import RefusalError
    from .convert import convert
    from .options import OVERWRITE_HINT
    from .result import result_json, result_text
    from .progress import FrameBar
    with FrameBar("convert", None, enabled=args.progress) as bar:
        try:
            res = convert(args.src, args.out, top=args.top, frames=args.frames, select=args.select,
                          precision=args.precision, profile=args.profile, compression=args.compression,
                          fmt=args.fmt, overwrite=args.overwrite, progress=bar, type_map=args.type_map)
        except RefusalError as exc:
            if exc.kind != "exists":
                raise
            raise RefusalError(exc.detail.replace(OVERWRITE_HINT, "use --overwrite"), path=exc.path,
                               kind=exc.kind) from None
    print(result_json(res) if args.json else result_text(res))
    return 0
