"""Issue 28, section 3: records at a URL as users serve them, against REAL servers on 127.0.0.1.

* ``python -m http.server`` (a real subprocess) ignores ``Range``: a record it serves is read whole,
  file by file, bounded by ``storage_options`` ``whole_read_limit``, with one warning per file;
* storage options apply to the protocol they are for (per-protocol sections; a flat
  ``MREC_STORAGE_OPTIONS`` is for object stores, never sent to an ``http(s)://`` server);
* ``mda.Universe(URL, storage_options=...)`` passes them on;
* every write entry point refuses a URL (``remote_read_only``), whatever else it is given;
* the MDAnalysis reader converts forces (and velocities) from the record's stated units.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec import TrajectoryReader
from mrec import pack
from mrec.errors import RangesIgnoredWarning, StoreError
from mrec.check.fixtures import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servers import s3_server, upload  # noqa: E402
from test_remote import big_record  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
NAMES = ["whole_record", "masks", "cell_changing"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_http_server(root: Path) -> tuple[subprocess.Popen, str]:
    """``python -m http.server`` serving ``root`` on a free loopback port, as a user runs it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("python -m http.server did not start")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def stdlib(tmp_path_factory):
    """A real ``python -m http.server`` holding a fresh run (both forms) and some fixtures."""
    root = tmp_path_factory.mktemp("stdlib")
    pack(big_record(root / "run.mrec", atoms=400, frames=30), keep=True)
    for n in NAMES:
        shutil.copytree(FIXTURES / f"{n}.mrec", root / f"{n}.mrec")
        shutil.copy(FIXTURES / f"{n}.mrec.zip", root / f"{n}.mrec.zip")
    proc, url = python_http_server(root)
    yield {"root": root, "url": url}
    proc.terminate()
    proc.wait(10)


def frame_bytes(frame) -> dict:
    return {(b, c): np.asarray(v).tobytes() for b, cols in frame.blocks.items() for c, v in cols.items()}


# -- 1. python -m http.server ignores Range: read whole, bounded, with a note -----------------------------

def test_the_stdlib_server_really_ignores_range(stdlib):
    """The premise: Python's own server answers a ranged GET with 200 and the whole file."""
    import urllib.request
    req = urllib.request.Request(f"{stdlib['url']}/run.mrec.zip", headers={"Range": "bytes=0-9"})
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 200
        assert len(resp.read()) == os.path.getsize(stdlib["root"] / "run.mrec.zip")


@pytest.mark.parametrize("form", [".mrec.zip", ".mrec"])
def test_a_record_served_by_python_http_server_reads_exactly(stdlib, form):
    url = f"{stdlib['url']}/run{form}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = TrajectoryReader(url)
        want = TrajectoryReader(stdlib["root"] / f"run{form}")
        assert len(r) == len(want) == 30 and list(r.steps) == list(want.steps)
        for i in range(len(r)):
            assert frame_bytes(r[i]) == frame_bytes(want[i])
    notes = [w for w in caught if issubclass(w.category, RangesIgnoredWarning)]
    files = [str(w.message).split(": the server ignores Range")[0] for w in notes]
    assert notes and len(files) == len(set(files)), [str(w.message) for w in notes]   # once per file
    assert all("ignores Range" in str(w.message) and "whole" in str(w.message) for w in notes)
    if form == ".mrec.zip":
        assert len(notes) == 1 and "run.mrec.zip" in str(notes[0].message)


@pytest.mark.parametrize("form", [".mrec.zip", ".mrec"])
@pytest.mark.parametrize("name", NAMES)
def test_fixtures_served_by_python_http_server_read_like_the_local_record(stdlib, name, form):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        assert describe(f"{stdlib['url']}/{name}{form}") == describe(stdlib["root"] / f"{name}{form}")


@pytest.mark.parametrize("form", [".mrec.zip", ".mrec"])
def test_past_the_whole_read_limit_a_store_error_names_the_url_and_the_option(stdlib, form):
    url = f"{stdlib['url']}/run{form}"
    with pytest.raises(StoreError) as e:
        r = TrajectoryReader(url, storage_options={"whole_read_limit": 4096})
        r[3]
    assert f"run{form}" in str(e.value) and "whole_read_limit" in str(e.value) and "Range" in str(e.value)
    limit = os.path.getsize(stdlib["root"] / "run.mrec.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        got = TrajectoryReader(url, storage_options={"whole_read_limit": limit})
        assert frame_bytes(got[3]) == frame_bytes(TrajectoryReader(stdlib["root"] / f"run{form}")[3])


def test_the_whole_read_limit_option_is_checked():
    from mrec.errors import RefusalError
    from mrec.fs.remote import WHOLE_READ_LIMIT, RemoteFileSystem
    assert RemoteFileSystem("http://127.0.0.1:9/x.mrec.zip").whole_read_limit == WHOLE_READ_LIMIT == 256 * 2 ** 20
    assert RemoteFileSystem("http://127.0.0.1:9/x.mrec.zip", {"whole_read_limit": None}).whole_read_limit is None
    for bad in (0, -5, 1.5, "1GB", True):
        with pytest.raises(RefusalError) as e:
            RemoteFileSystem("http://127.0.0.1:9/x.mrec.zip", {"whole_read_limit": bad})
        assert e.value.kind == "bad_storage_options" and "whole_read_limit" in str(e.value)


# -- 2. storage options apply to the protocol they are for ---------------------------------------------

@pytest.fixture(scope="module")
def s3(stdlib):
    srv = s3_server()
    for name in ("run.mrec.zip", "run.mrec", "whole_record.mrec.zip"):
        upload(srv, "records", stdlib["root"] / name, name)
    yield srv
    srv.stop()


def test_flat_s3_options_in_the_environment_do_not_break_http_urls(stdlib, s3, monkeypatch):
    """A flat MREC_STORAGE_OPTIONS is for object stores: an http:// URL takes only mrec's own options."""
    monkeypatch.setenv("MREC_STORAGE_OPTIONS", json.dumps(dict(s3.storage_options, read_timeout=20)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        for url in (f"{stdlib['url']}/whole_record.mrec.zip", "s3://records/whole_record.mrec.zip"):
            assert describe(url) == describe(FIXTURES / "whole_record.mrec.zip")
        r = TrajectoryReader(f"{stdlib['url']}/run.mrec.zip")
        assert r.store.fs.read_timeout == 20.0                     # mrec's own option still applies
        assert "endpoint_url" not in r.store.fs.storage_options
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "mrec", "info", "--json", f"{stdlib['url']}/whole_record.mrec.zip"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sections"] == mrec.sections(FIXTURES / "whole_record.mrec.zip")


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_per_protocol_sections_go_to_their_protocol_only(stdlib, s3, monkeypatch, tmp_path, where):
    opts = {"s3": s3.storage_options, "http": {"headers": {"X-Mrec-Test": "1"}}, "read_timeout": 15,
            "gcs": {"token": "anon"}}
    kw = {"storage_options": opts} if where == "argument" else {}
    if where == "environment":
        monkeypatch.setenv("MREC_STORAGE_OPTIONS", json.dumps(opts))
    want = frame_bytes(TrajectoryReader(stdlib["root"] / "run.mrec")[7])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        for url in (f"{stdlib['url']}/run.mrec.zip", f"{stdlib['url']}/run.mrec", "s3://records/run.mrec.zip",
                    "s3://records/run.mrec"):
            r = TrajectoryReader(url, **kw)
            assert frame_bytes(r[7]) == want, url
            fs = r.store.fs
            assert fs.read_timeout == 15.0
            assert ("endpoint_url" in fs.storage_options) == url.startswith("s3://")
            assert ("headers" in fs.storage_options) == url.startswith("http://")
            assert "gcs" not in fs.storage_options and "s3" not in fs.storage_options
    src = big_record(tmp_path / "up.mrec", atoms=10, frames=3)
    url = pack(src, out=f"s3://records/up-{where}.mrec.zip", keep=True, **kw)      # the upload too
    assert frame_bytes(TrajectoryReader(url, **kw)[2]) == frame_bytes(TrajectoryReader(src)[2])


def test_options_for_selects_the_section_of_the_url_scheme():
    from mrec.fs.urls import options_for
    opts = {"s3": {"anon": True}, "http": {"headers": {"a": "1"}}, "https": {"headers": {"b": "2"}},
            "read_timeout": 3}
    assert options_for("s3://b/x.mrec.zip", opts) == {"anon": True, "read_timeout": 3}
    assert options_for("s3a://b/x.mrec.zip", opts) == {"anon": True, "read_timeout": 3}
    assert options_for("http://h/x.mrec.zip", opts) == {"headers": {"a": "1"}, "read_timeout": 3}
    assert options_for("https://h/x.mrec.zip", opts) == {"headers": {"b": "2"}, "read_timeout": 3}
    assert options_for("https://h/x", {"http": {"headers": {"a": "1"}}}) == {"headers": {"a": "1"}}
    assert options_for("gs://b/x", opts) == {"read_timeout": 3}
    flat = {"key": "k", "endpoint_url": "http://e", "connect_timeout": 2}
    assert options_for("http://h/x", flat) == flat                      # given for this URL: used as given
    assert options_for("http://h/x", flat, from_env=True) == {"connect_timeout": 2}   # env: object stores only
    assert options_for("s3://b/x", flat, from_env=True) == flat
    assert options_for("s3://b/x", options_for("s3://b/x", opts)) == options_for("s3://b/x", opts)   # idempotent


# -- 3. MDAnalysis passes storage_options on ------------------------------------------------------------

def test_mdanalysis_universe_takes_storage_options(stdlib, s3, monkeypatch):
    mda = pytest.importorskip("MDAnalysis")
    import pickle

    import mrec.md.mdanalysis  # noqa: F401
    monkeypatch.delenv("MREC_STORAGE_OPTIONS", raising=False)
    local = mda.Universe(str(stdlib["root"] / "run.mrec.zip"))
    for url in ("s3://records/run.mrec.zip", "s3://records/run.mrec"):
        u = mda.Universe(url, storage_options=s3.storage_options)             # topology parser and reader
        assert u.trajectory.n_frames == 30 and u.atoms.n_atoms == 400
        u.trajectory[17]
        local.trajectory[17]
        assert u.atoms.positions.tobytes() == local.atoms.positions.tobytes()
        again = pickle.loads(pickle.dumps(u.trajectory))                      # reopened with its options
        again[17]
        assert again.ts.positions.tobytes() == local.atoms.positions.tobytes()
        chain = mda.Universe(url, [url, url], storage_options=s3.storage_options)   # a ChainReader's parts
        assert chain.trajectory.n_frames == 60
    sectioned = {"s3": s3.storage_options}
    u = mda.Universe("s3://records/run.mrec.zip", storage_options=sectioned)
    assert u.trajectory.n_frames == 30


# -- 4. every write entry point refuses a URL, whatever else it is given -----------------------------------

def _writers(url: str, opts: dict) -> dict:
    """Each write entry point called on a URL as a user would, with the reader's storage_options."""
    from mrec import TrajectoryWriter, unpack, write_frame, write_record, write_section
    from mrec.archive.repack import repack
    from mrec.check.repair import repair
    src = FIXTURES / "whole_record.mrec"
    frame = TrajectoryReader(src)[0]
    schema = TrajectoryReader(src).schema
    return {
        "TrajectoryWriter.create": lambda: TrajectoryWriter.create(url, schema, storage_options=opts),
        "TrajectoryWriter.create (no options)": lambda: TrajectoryWriter.create(url, schema),
        "TrajectoryWriter.open": lambda: TrajectoryWriter.open(url, storage_options=opts),
        "TrajectoryWriter.open (path=, truncate)": lambda: TrajectoryWriter.open(path=url, truncate_after_step=3,
                                                                                 storage_options=opts),
        "write_record": lambda: write_record(url, meta={}, frame=frame, storage_options=opts),
        "write_frame": lambda: write_frame(url, frame, storage_options=opts),
        "write_section": lambda: write_section(url, "status", {"state": "done"}, storage_options=opts),
        "pack from": lambda: pack(url, storage_options=opts),
        "unpack in place": lambda: unpack(url + ".zip", storage_options=opts),
        "unpack into": lambda: unpack(FIXTURES / "whole_record.mrec.zip", out=url, storage_options=opts),
        "repair": lambda: repair(url, storage_options=opts),
        "repack into": lambda: repack(src, url + ".zip", storage_options=opts),
    }


def _md_writers(url: str) -> dict:
    out = {}
    try:
        import MDAnalysis as mda

        import mrec.mdanalysis  # noqa: F401
        out["mda.Writer"] = lambda: mda.Writer(url, n_atoms=3)
        out["mda.Writer .zip"] = lambda: mda.Writer(url + ".zip", n_atoms=3, format="MREC")
        out["MRECWriter"] = lambda: mrec.mdanalysis.MRECWriter(url, 3)
    except ImportError:
        pass
    try:
        import ase
        import ase.io

        import mrec.md.ase_io  # noqa: F401
        from mrec.ase_md import MrecMDWriter
        h2 = ase.Atoms("H2", positions=[[0, 0, 0], [0, 0, 0.74]])
        out["ase.io.write"] = lambda: ase.io.write(url, h2, format="mrec")
        out["MrecMDWriter"] = lambda: MrecMDWriter(url, h2)
    except ImportError:
        pass
    try:
        from mrec.openmm import MrecReporter
        out["MrecReporter"] = lambda: MrecReporter(url, 10)
        out["MrecReporter (append)"] = lambda: MrecReporter(url, 10, append=True)
    except (ImportError, mrec.MrecError):
        pass
    from mrec.md.convert import convert
    out["convert into"] = lambda: convert(str(FIXTURES / "whole_record.mrec"), url + ".zip")
    return out


@pytest.mark.parametrize("url", ["s3://records/new.mrec", "http://127.0.0.1:9/new.mrec"])
def test_every_write_entry_point_refuses_a_url_whatever_else_it_is_given(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    opts = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}
    attempts = {**_writers(url, opts), **_md_writers(url)}
    assert len(attempts) >= 20, sorted(attempts)
    failed = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            failed[name] = "no error"
        except mrec.RefusalError as exc:
            if exc.kind != "remote_read_only" or "never appended to" not in str(exc):
                failed[name] = f"{exc.kind}: {exc}"
        except Exception as exc:      # noqa: BLE001
            failed[name] = f"{type(exc).__name__}: {exc}"
    assert not failed, failed
    assert list(tmp_path.iterdir()) == []                   # nothing written locally under a URL-like name


# -- 5. MDAnalysis reads forces (and velocities) in its own units -------------------------------------------

def test_mdanalysis_converts_openmm_forces_from_kj_per_mol_nm(tmp_path):
    """An OpenMM record stores forces in kJ/(mol nm); MDAnalysis' unit is kJ/(mol Å): 10x smaller numbers."""
    mda = pytest.importorskip("MDAnalysis")
    openmm = pytest.importorskip("openmm")
    import openmm.app as app
    import openmm.unit as unit

    import mrec.md.mdanalysis  # noqa: F401
    from mrec.openmm import MrecReporter

    class Keep:
        def __init__(self):
            self.states = []

        def describeNextReport(self, simulation):
            return {"steps": 10 - simulation.currentStep % 10, "periodic": None,
                    "include": ["positions", "velocities", "forces"]}

        def report(self, simulation, state):
            self.states.append(state)

    ff = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    m = app.Modeller(app.Topology(), [])
    m.addSolvent(ff, boxSize=openmm.Vec3(1.5, 1.5, 1.5) * unit.nanometer)
    system = ff.createSystem(m.topology, nonbondedMethod=app.PME, nonbondedCutoff=0.7 * unit.nanometer,
                             constraints=app.HBonds)
    integ = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.002 * unit.picoseconds)
    integ.setRandomNumberSeed(3)
    sim = app.Simulation(m.topology, system, integ, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"})
    sim.context.setPositions(m.positions)
    sim.context.setVelocitiesToTemperature(300 * unit.kelvin, 3)
    path = str(tmp_path / "run.mrec")
    rep, keep = MrecReporter(path, 10, forces=True), Keep()
    sim.reporters += [rep, keep]
    sim.step(30)
    rep.close()
    u = mda.Universe(path)
    assert u.trajectory.n_frames == 3 == len(keep.states)
    kj_a, a_ps = unit.kilojoule_per_mole / unit.angstrom, unit.angstrom / unit.picosecond
    stored = TrajectoryReader(path)
    for i, state in enumerate(keep.states):
        u.trajectory[i]
        want_f = np.asarray(state.getForces(asNumpy=True).value_in_unit(kj_a))
        want_v = np.asarray(state.getVelocities(asNumpy=True).value_in_unit(a_ps))
        np.testing.assert_allclose(u.atoms.forces, want_f, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(u.atoms.velocities, want_v, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(u.atoms.forces, stored[i].forces / 10, rtol=1e-6)


def test_mdanalysis_converts_ase_forces_from_ev_per_angstrom(tmp_path):
    """The ASE MD writer stores eV/Å (units in the record); MDAnalysis gets kJ/(mol Å)."""
    mda = pytest.importorskip("MDAnalysis")
    ase = pytest.importorskip("ase")
    from ase import units
    from ase.calculators.emt import EMT
    from ase.cluster import Icosahedron
    from ase.md.verlet import VelocityVerlet

    import mrec.md.mdanalysis  # noqa: F401
    from mrec.ase_md import MrecMDWriter
    atoms = Icosahedron("Cu", 2)
    atoms.calc = EMT()
    atoms.rattle(0.05, seed=1)
    dyn = VelocityVerlet(atoms, 2 * units.fs)
    kept = []
    path = str(tmp_path / "cu.mrec")
    w = MrecMDWriter(path, atoms, dyn)
    dyn.attach(w, interval=5)
    dyn.attach(lambda: kept.append((atoms.get_forces().copy(), atoms.get_velocities().copy())), interval=5)
    dyn.run(10)
    w.close()
    u = mda.Universe(path)
    assert u.trajectory.n_frames == len(kept) == 3
    ev_per_kj_mol = units.kJ / units.mol
    for i, (frc, vel) in enumerate(kept):
        u.trajectory[i]
        np.testing.assert_allclose(u.atoms.forces, frc / ev_per_kj_mol, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(u.atoms.velocities, vel * 1000 * units.fs, rtol=1e-6, atol=1e-9)


def test_force_and_velocity_factors_from_stated_units():
    from mrec.md.units import motion_factors
    assert motion_factors(None) == (1.0, 1.0)
    assert motion_factors({"length": "nm", "time": "ps", "force": "kJ/(mol*nm)"}) == (10.0, 0.1)
    assert motion_factors({"length": "nm", "force": "kJ/mol/nm", "velocity": "nm/ps"}) == (10.0, 0.1)
    assert motion_factors({"length": "nm", "energy": "kJ/mol"}) == (10.0, 0.1)          # force: energy/length
    assert motion_factors({"length": "nm"}) == (10.0, 0.1)
    assert motion_factors({"force": "kcal/(mol*angstrom)"})[1] == 4.184
    assert motion_factors({"force": "kcal/mol/Å"})[1] == 4.184
    assert motion_factors({"velocity": "angstrom/fs"})[0] == 1000.0
    assert motion_factors({"length": "angstrom", "time": "fs"})[0] == 1000.0
    assert motion_factors({"force": "eV/angstrom"})[1] == pytest.approx(96.485332, rel=1e-7)
    assert motion_factors({"force": "hartree/bohr"})[1] == pytest.approx(2625.4996 / 0.529177210903, rel=1e-6)
    for bad in ({"force": "N"}, {"force": "furlong/fortnight"}, {"velocity": "m/s?"}):
        with pytest.raises(mrec.MrecError) as e:
            motion_factors(bad)
        assert str(next(iter(bad.values()))) in str(e.value)
