"""The demo: write a real trajectory record, pack it, read it back from the zip, summarise it."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from .fs import DEFAULT_FS, refuse_link
from .archive.pack import pack
from .record.model.box import Box
from .record.whole import read_record, write_record
from .record.integrity.replace import discard
from .record.model.schema import SequenceSchema
from .record.trajectory.writer import TrajectoryWriter


def build_schema(n_atoms: int, max_ions: int) -> SequenceSchema:
    s = SequenceSchema()
    s.declare_block("atoms", rows=n_atoms)
    for c in "xyz":
        s.declare_column("atoms", c, "f64", precision=1e-3)
    s.declare_block("ions", rows=max_ions)                # ragged: the count changes over time
    s.declare_column("ions", "x", "f64")
    s.declare_column("ions", "charge", "f64", nullable=True)
    s.declare_meta("pe", "f64")
    s.declare_meta("temp", "f64")
    s.declare_meta("press", "f64", fill=0.0)
    return s


def write_demo(out_dir: Path, *, n_atoms: int = 300, n_frames: int = 200, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    path = out_dir / "demo.mrec"
    for p in (path, out_dir / "demo.mrec.zip"):       # the demo's own names: never through a link
        refuse_link(DEFAULT_FS, str(p), "replace the demo at")
        if p.exists():
            discard(DEFAULT_FS, str(p))
    schema = build_schema(n_atoms, 20)
    pos = rng.uniform(0, 40, size=(n_atoms, 3))
    elements = np.array(["O", "H", "H"] * (n_atoms // 3) + ["C"] * (n_atoms % 3), dtype=object)
    masses = np.where(elements == "O", 15.999, np.where(elements == "H", 1.008, 12.011))
    n_mol = n_atoms // 3
    bonds_i = np.repeat(np.arange(n_mol, dtype=np.uint64) * 3, 2)
    bonds_j = bonds_i + np.tile(np.array([1, 2], dtype=np.uint64), n_mol)
    write_record(   # the documents, the topology (system/), the starting frame and one observable first
        path,
        meta={"creator": {"name": "mrec demo"}, "source": "a synthetic water box"},
        status={"state": "running"},
        method={"type": "classical", "description": "NVT random walk", "engine": {"name": "mrec demo"}},
        system={"blocks": {"atoms": {"element": elements, "mass": masses},
                           "bonds": {"atomi": bonds_i, "atomj": bonds_j}},
                "meta": {"n_molecules": n_mol}},
        frame={"blocks": {"atoms": {"x": pos[:, 0].copy(), "y": pos[:, 1].copy(), "z": pos[:, 2].copy()}},
               "precision": {"atoms": {c: 1e-3 for c in "xyz"}}, "box": Box(np.eye(3) * 40.0)},
        observables={"rdf_oo": {"data": np.exp(-np.linspace(0, 4, 50) ** 2), "kind": "vector",
                                "description": "O-O radial distribution (made up)", "time_dependent": False,
                                "axes": ["r"]}},
    )
    with TrajectoryWriter.create(path, schema) as w:
        n_ions = 5
        for i in range(n_frames):
            pos += rng.normal(0, 0.05, size=pos.shape)
            blocks = {"atoms": {"x": pos[:, 0].copy(), "y": pos[:, 1].copy(), "z": pos[:, 2].copy()}}
            if i % 10 == 0:
                n_ions = int(rng.integers(0, 20))
                q = rng.choice([-1.0, 1.0], size=n_ions)
                mask = rng.random(n_ions) > 0.2
                blocks["ions"] = {"x": rng.uniform(0, 40, n_ions), "charge": q}
                masks = {"ions": {"charge": mask}}
            else:
                masks = {}
            side = 40.0 + 0.01 * (i // 50)                   # the cell changes every 50 frames
            meta = {"pe": float(-1000 + rng.normal()), "temp": float(300 + rng.normal())}
            if i % 4 == 0:
                meta["press"] = float(rng.normal())
            w.append({"blocks": blocks, "masks": masks, "box": Box(np.eye(3) * side), "meta": meta},
                     step=i * 100, time=i * 0.2)
    return path


def _plain(meta: dict) -> dict:
    return {k: (round(v.item(), 3) if isinstance(v.item(), float) else v.item()) if hasattr(v, "item") else v
            for k, v in meta.items()}


def run_demo(out: str | os.PathLike | None = None, *, echo=print) -> Path:
    out_dir = Path(out or "demo-out")
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    path = write_demo(out_dir)
    t_write = time.perf_counter() - t0
    dir_bytes = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    zip_path = pack(path)
    with read_record(zip_path) as rec:
        r = rec.trajectory
        n = len(r)
        f0, flast = r[0], r[-1]
        x = r.column("atoms", "x")
        ion_counts = [len(r[i].blocks["ions"]["x"]) if "ions" in r[i].blocks else 0 for i in range(0, n, 10)]
        changes = sorted({tuple(np.diag(r.box_at(i).vectors)) for i in range(n)})
        echo(f"wrote    {path} in {t_write:.2f} s ({dir_bytes / 1e6:.2f} MB on disk)")
        echo(f"packed   {zip_path} ({zip_path.stat().st_size / 1e6:.2f} MB, one file)")
        echo(f"sections {', '.join(rec.sections())} (read back from the zip by range reads)")
        echo(f"system   {', '.join(f'{b}[{rec.system.counts[b]}]' for b in rec.system.blocks)}; "
             f"meta {_plain(rec.system.meta)}; status {rec.status['state']}; method {rec.method['description']}")
        echo(f"frames   {n}; steps {r.steps[0]}..{r.steps[-1]} every {r.steps[1] - r.steps[0]}; "
             f"times {r.times[0]:.6g}..{r.times[-1]:.6g}")
        echo(f"blocks   " + ", ".join(f"{b}({', '.join(d.columns)})" for b, d in r.schema.blocks.items()))
        echo(f"atoms    {x.shape[1]} per frame, x column {x.shape}, precision 1e-3 -> "
             f"{dir_bytes / (n * x.shape[1]):.1f} B/atom/frame for everything")
        echo(f"ions     ragged: counts at every 10th frame {ion_counts}")
        echo(f"box      {len(changes)} distinct cells over the run; last {np.diag(flast.box.vectors)}")
        echo(f"meta     frame 0 {_plain(f0.meta)}; frame {n - 1} {_plain(flast.meta)}")
        echo(f"read back from the zip: frame 0 atoms x[:3] = {f0.blocks['atoms']['x'][:3]}")
    return zip_path
