"""Issue 28, part 4: live from the simulation engine -- the OpenMM reporter, the ASE MD writer
(``dyn.attach``) and ``mrec.mdtraj.load``, each against the real package."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mrec
from mrec.errors import MrecError, RefusalError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:                                  # the OpenMM tests need it; the ASE and MDTraj ones do not
    import openmm
    import openmm.app as app
    import openmm.unit as unit
except ImportError:
    openmm = app = unit = None
needs_openmm = pytest.mark.skipif(openmm is None, reason="openmm is not installed (mrec[openmm])")


# -- OpenMM -------------------------------------------------------------------------------------

def water_box() -> tuple:
    """185 TIP3P waters in a 1.8 nm box (OpenMM's own water box and force field files), PME."""
    ff = app.ForceField("amber14-all.xml", "amber14/tip3p.xml")
    m = app.Modeller(app.Topology(), [])
    m.addSolvent(ff, boxSize=openmm.Vec3(1.8, 1.8, 1.8) * unit.nanometer)
    system = ff.createSystem(m.topology, nonbondedMethod=app.PME, nonbondedCutoff=0.8 * unit.nanometer,
                             constraints=app.HBonds)
    return m.topology, system, m.positions


def simulation(topology, system, seed: int = 7):
    integ = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.002 * unit.picoseconds)
    integ.setRandomNumberSeed(seed)
    return app.Simulation(topology, system, integ, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"})


class Capture:
    """A reporter asking for what MrecReporter asks for (so both get the same State) and keeping it."""

    def __init__(self, interval: int):
        self.interval, self.states = interval, []

    def describeNextReport(self, simulation):
        return {"steps": self.interval - simulation.currentStep % self.interval, "periodic": None,
                "include": ["positions", "velocities", "energy"]}

    def report(self, simulation, state):
        self.states.append((simulation.currentStep, state))


@pytest.fixture(scope="module")
def water():
    return water_box()


def run(path, water, steps: int, interval: int = 50, sim=None, **kw):
    """``steps`` steps with an MrecReporter, a Capture and OpenMM's StateDataReporter (its text in
    ``cap.text``) every ``interval``."""
    from mrec.openmm import MrecReporter
    topology, system, positions = water
    if sim is None:
        sim = simulation(topology, system)
        sim.context.setPositions(positions)
        sim.context.setVelocitiesToTemperature(300 * unit.kelvin, 3)
    rep = MrecReporter(path, interval, **kw)
    cap = Capture(interval)
    cap.text = io.StringIO()
    sim.reporters += [rep, cap, app.StateDataReporter(cap.text, interval, step=True, potentialEnergy=True,
                                                      kineticEnergy=True, temperature=True)]
    sim.step(steps)
    return sim, rep, cap


def state_data(cap) -> list[tuple]:
    """(step, potential, kinetic, temperature) rows as OpenMM's StateDataReporter wrote them (repr
    of the floats: exact)."""
    lines = [ln for ln in cap.text.getvalue().splitlines() if ln and not ln.startswith("#")]
    return [(int(a), float(b), float(c), float(d)) for a, b, c, d in (ln.split(",") for ln in lines)]


def check_frames(r, captured, first: int = 0) -> None:
    """Frames ``first..`` of reader ``r`` hold the captured States' values, bit for bit."""
    nm, ps, kj = unit.nanometer, unit.picosecond, unit.kilojoule_per_mole
    for k, (step, state) in enumerate(captured):
        i = first + k
        f = r[i]
        assert int(r.steps[i]) == step
        assert r.times[i] == state.getTime().value_in_unit(ps)
        assert f.positions.tobytes() == np.asarray(state.getPositions(asNumpy=True).value_in_unit(nm)).tobytes()
        assert f.velocities.tobytes() == np.asarray(state.getVelocities(asNumpy=True).value_in_unit(nm / ps)).tobytes()
        assert f.meta["potential_energy"] == state.getPotentialEnergy().value_in_unit(kj)
        assert f.meta["kinetic_energy"] == state.getKineticEnergy().value_in_unit(kj)
        rows = np.asarray(state.getPeriodicBoxVectors(asNumpy=True).value_in_unit(nm))
        assert r.box_at(i).rows.tobytes() == rows.tobytes()


@needs_openmm
def test_openmm_reporter_frames_equal_the_states(tmp_path, water):
    """Every reportInterval: positions, velocities, cell, step, time and energies bit for bit as the
    State holds them, the temperature as StateDataReporter prints it, the topology and units."""
    path = str(tmp_path / "run.mrec")
    sim, rep, cap = run(path, water, 300)
    rep.close()
    with mrec.read_record(path) as rec:
        r = rec.trajectory
        assert r.steps.tolist() == [50, 100, 150, 200, 250, 300]
        check_frames(r, cap.states)
        meta = [(int(s), r[i].meta["potential_energy"], r[i].meta["kinetic_energy"], r[i].meta["temperature"])
                for i, s in enumerate(r.steps)]
        assert meta == state_data(cap)            # what OpenMM's StateDataReporter reports
        units = rec.system.meta["units"]
        assert (units["length"], units["time"], units["energy"], units["temperature"]) == ("nm", "ps", "kJ/mol", "K")
        atoms = rec.system.blocks["atoms"]
        assert [str(s) for s in atoms["element"][:3]] == ["O", "H", "H"]
        assert [str(s) for s in atoms["res_name"][:3]] == ["HOH"] * 3
        assert atoms["mass"][:3].tolist() == [sim.system.getParticleMass(i).value_in_unit(unit.dalton)
                                              for i in range(3)]
        charges = sim.system.getForce([type(f).__name__ for f in sim.system.getForces()].index("NonbondedForce"))
        assert atoms["charge"][:3].tolist() == [charges.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge)
                                                for i in range(3)]
        assert rec.system.counts["bonds"] == 2 * 185


@needs_openmm
def test_openmm_reporter_forces_without_velocities_or_energies(tmp_path, water):
    path = str(tmp_path / "run.mrec")
    _, rep, cap = run(path, water, 100, forces=True, velocities=False, energies=False)
    rep.close()
    r = mrec.TrajectoryReader(path)
    assert list(r.schema.blocks["atoms"].columns) == ["x", "y", "z", "fx", "fy", "fz"] and not r.schema.meta
    kj_nm = unit.kilojoule_per_mole / unit.nanometer
    for i, (_step, state) in enumerate(cap.states):
        assert r[i].forces.tobytes() == np.asarray(state.getForces(asNumpy=True).value_in_unit(kj_nm)).tobytes()
        assert r[i].velocities is None and r[i].meta == {}


@needs_openmm
def test_openmm_restart_from_checkpoint_drops_the_crashed_tail(tmp_path, water):
    """Run 1 saves a checkpoint at step 150 and goes on to 300; run 2 loads the checkpoint and
    reports with append=True: the record holds run 1's frames up to 150, then run 2's."""
    path = str(tmp_path / "run.mrec")
    sim, rep, cap = run(path, water, 150)
    rep.flush()
    sim.saveCheckpoint(str(tmp_path / "ckpt"))
    sim.step(150)
    rep.close()
    topology, system, _ = water
    sim2 = simulation(topology, system)
    sim2.loadCheckpoint(str(tmp_path / "ckpt"))
    assert sim2.currentStep == 150
    _, rep2, cap2 = run(path, water, 200, sim=sim2, append=True)
    rep2.close()
    assert rep2.resumed_after == 150
    r = mrec.TrajectoryReader(path)
    assert r.steps.tolist() == [50, 100, 150, 200, 250, 300, 350]
    check_frames(r, cap.states[:3])
    check_frames(r, cap2.states, first=3)


CRASHING_RUN = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {tests!r})
    from test_md_live import run, water_box, app
    sim, rep, cap = run({path!r}, water_box(), 0)
    sim.reporters.append(app.CheckpointReporter({ckpt!r}, 100))
    sim.step(180)
    os._exit(3)               # a crash: no close, no flush; the writer's buffer is lost
""")


@needs_openmm
def test_openmm_crash_then_restart_keeps_every_frame_up_to_the_checkpoint(tmp_path, water):
    """A CheckpointReporter in the simulation makes the reporter flush where it checkpoints: a run
    killed after its checkpoint at step 100 restarts from it with no lost or repeated step."""
    path, ckpt = str(tmp_path / "run.mrec"), str(tmp_path / "ckpt")
    script = CRASHING_RUN.format(tests=os.path.join(ROOT, "spec_tests", "md"), path=path, ckpt=ckpt)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert mrec.TrajectoryReader(path).steps.tolist()[:2] == [50, 100]    # flushed with the checkpoint
    topology, system, _ = water
    sim = simulation(topology, system)
    sim.loadCheckpoint(ckpt)
    _, rep, cap = run(path, water, 100, sim=sim, append=True)
    rep.close()
    r = mrec.TrajectoryReader(path)
    assert r.steps.tolist() == [50, 100, 150, 200]
    check_frames(r, cap.states, first=2)


@needs_openmm
def test_openmm_reporter_refuses_an_existing_record_and_an_archive(tmp_path, water):
    from mrec.openmm import MrecReporter
    path = str(tmp_path / "run.mrec")
    run(path, water, 50)[1].close()
    with pytest.raises(RefusalError) as exc:
        MrecReporter(path, 10)
    assert exc.value.kind == "exists" and "append=True" in str(exc.value)
    with pytest.raises(MrecError, match="pack it when the run is done"):
        MrecReporter(str(tmp_path / "run.mrec.zip"), 10)
    with pytest.raises(MrecError, match="reportInterval"):
        MrecReporter(str(tmp_path / "b.mrec"), 0)
    _, rep, cap = run(path, water, 100, overwrite=True)
    rep.close()
    assert mrec.TrajectoryReader(path).steps.tolist() == [50, 100]


@needs_openmm
def test_openmm_append_with_other_options_is_refused_untouched(tmp_path, water):
    """A restart asking for other columns is refused before the reopen truncates anything."""
    path = str(tmp_path / "run.mrec")
    sim, rep, _ = run(path, water, 150, velocities=False)
    rep.close()
    sim.reporters.clear()
    sim.currentStep = 50
    with pytest.raises(RefusalError) as exc:
        run(path, water, 50, sim=sim, append=True)
    assert exc.value.kind == "declaration_mismatch" and "vx" in str(exc.value)
    assert mrec.TrajectoryReader(path).steps.tolist() == [50, 100, 150]


@needs_openmm
def test_openmm_record_reads_in_angstrom_through_mdanalysis(tmp_path, water):
    mda = pytest.importorskip("MDAnalysis")
    import mrec.md.mdanalysis  # noqa: F401
    path = str(tmp_path / "run.mrec")
    _, rep, cap = run(path, water, 100)
    rep.close()
    u = mda.Universe(path)
    u.trajectory[1]
    want = np.asarray(cap.states[1][1].getPositions(asNumpy=True).value_in_unit(unit.angstrom))
    np.testing.assert_allclose(u.atoms.positions, want, rtol=1e-6)
    np.testing.assert_allclose(u.dimensions[:3], [18.0, 18.0, 18.0], rtol=1e-6)


@pytest.mark.parametrize("module, extra", [("mrec.openmm", "openmm"), ("mrec.mdtraj", "mdtraj"),
                                           ("mrec.ase_md", "ase")])
def test_missing_engine_names_its_extra(module, extra):
    """Without the package, importing the integration raises MissingExtraError naming the extra."""
    top = extra
    code = (f"import sys; sys.modules[{top!r}] = None\n"
            f"from mrec.md import MissingExtraError\n"
            f"try:\n    import {module}\nexcept MissingExtraError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert f"pip install 'mrec[{extra}]'" in out.stdout, out.stdout + out.stderr


# -- ASE molecular dynamics ----------------------------------------------------------------------

def cu_cluster(pbc: bool):
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.cluster import Icosahedron
    from ase import units
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat(2) if pbc else Icosahedron("Cu", 3)
    atoms.calc = EMT()
    rng = np.random.default_rng(2)
    atoms.set_momenta(rng.normal(size=(len(atoms), 3)) * np.sqrt(atoms.get_masses() * 600 * units.kB)[:, None])
    return atoms


def dynamics(atoms, langevin: bool):
    from ase import units
    from ase.md.langevin import Langevin
    from ase.md.verlet import VelocityVerlet
    if langevin:
        return Langevin(atoms, 2 * units.fs, temperature_K=600, friction=0.02, fixcm=False,
                        rng=np.random.default_rng(5))
    return VelocityVerlet(atoms, 2 * units.fs)


def ase_capture(atoms, dyn, into: list):
    """An observer keeping what the writer should have written (called after it, same step)."""
    def keep():
        into.append((dyn.nsteps, dyn.get_time(), atoms.get_positions().copy(), atoms.get_velocities().copy(),
                     atoms.get_forces().copy(), atoms.get_potential_energy(), atoms.get_kinetic_energy(),
                     atoms.get_temperature(), atoms.get_cell()[:].copy()))
    return keep


def check_ase_frames(r, kept, first: int = 0) -> None:
    from ase import units
    ps = 1000 * units.fs
    for k, (step, t, pos, vel, frc, epot, ekin, temp, cell) in enumerate(kept):
        i = first + k
        f = r[i]
        assert int(r.steps[i]) == step and r.times[i] == t / ps
        assert f.positions.tobytes() == pos.tobytes() and f.forces.tobytes() == frc.tobytes()
        assert f.velocities.tobytes() == (vel * ps).tobytes()
        assert (f.meta["potential_energy"], f.meta["kinetic_energy"], f.meta["temperature"]) == (epot, ekin, temp)
        box = r.box_at(i)
        assert (box is None and not cell.any()) or box.rows.tobytes() == cell.tobytes()


@pytest.mark.parametrize("langevin, pbc", [(False, False), (True, True)], ids=["verlet-cluster", "langevin-bulk"])
def test_ase_md_writer_attached_to_dynamics(tmp_path, langevin, pbc):
    import ase.io
    from mrec.ase_md import MrecMDWriter
    atoms = cu_cluster(pbc)
    dyn = dynamics(atoms, langevin)
    path = str(tmp_path / "md.mrec")
    kept: list = []
    with MrecMDWriter(path, atoms, dyn) as writer:
        dyn.attach(writer, interval=5)
        dyn.attach(ase_capture(atoms, dyn, kept), interval=5)
        dyn.run(30)
    r = mrec.TrajectoryReader(path)
    assert r.steps.tolist() == [0, 5, 10, 15, 20, 25, 30]
    check_ase_frames(r, kept)
    from mrec.md.ase_io import read_mrec
    images = list(read_mrec(path, index=":"))         # what ase.io.read(..., format="mrec") gives
    assert len(images) == 7 and images[3].get_chemical_symbols() == atoms.get_chemical_symbols()
    assert images[3].get_potential_energy() == kept[3][5]
    assert images[3].get_forces().tobytes() == kept[3][4].tobytes()
    assert images[3].get_masses().tobytes() == atoms.get_masses().tobytes()
    assert images[3].pbc.tolist() == [pbc] * 3


def test_ase_md_writer_restart_drops_the_frames_after_the_resumed_step(tmp_path):
    from mrec.ase_md import MrecMDWriter
    path = str(tmp_path / "md.mrec")
    atoms = cu_cluster(False)
    dyn = dynamics(atoms, False)
    with MrecMDWriter(path, atoms, dyn) as w:
        dyn.attach(w, interval=5)
        dyn.run(20)
    with pytest.raises(RefusalError) as exc:
        MrecMDWriter(path, atoms, dyn)
    assert exc.value.kind == "exists"
    atoms2 = cu_cluster(False)                          # "restarted" from other velocities at step 10
    dyn2 = dynamics(atoms2, False)
    dyn2.nsteps = 10
    kept: list = []
    with MrecMDWriter(path, atoms2, dyn2, append=True) as w2:
        dyn2.attach(w2, interval=5)
        dyn2.attach(ase_capture(atoms2, dyn2, kept), interval=5)
        dyn2.run(15)
    assert w2.resumed_after == 10
    r = mrec.TrajectoryReader(path)
    assert r.steps.tolist() == [0, 5, 10, 15, 20, 25]
    check_ase_frames(r, kept, first=3)


def test_ase_md_writer_refuses_periodic_atoms_without_a_cell(tmp_path):
    from ase import Atoms
    from ase.calculators.emt import EMT
    from mrec.ase_md import MrecMDWriter
    atoms = Atoms("Cu2", positions=[[0, 0, 0], [2.5, 0, 0]], pbc=True)
    atoms.calc = EMT()
    with MrecMDWriter(str(tmp_path / "md.mrec"), atoms) as w, pytest.raises(MrecError, match="no full cell"):
        w()


# -- MDTraj -----------------------------------------------------------------------------------------

def _mdtraj_pair(tmp_path, src: str, top: str):
    """(mrec.mdtraj.load of the record ``mrec convert`` makes of src + top, MDTraj's load of them)."""
    md = pytest.importorskip("mdtraj")
    import mrec.mdtraj
    from mrec.md.convert import convert
    out = str(tmp_path / "x.mrec.zip")
    convert(src, out, top=top)
    return mrec.mdtraj.load(out), md.load(src, top=top), out


def _same_residues(a, b, renamed: dict | None = None) -> None:
    """Topologies ``a`` and ``b`` have the same residues (names -- ``a``'s through ``renamed``,
    MDTraj's standard names --, numbers, atoms)."""
    renamed = renamed or {}
    assert a.n_residues == b.n_residues
    assert [(renamed.get(r.name, r.name), r.resSeq) for r in a.residues] == [(r.name, r.resSeq) for r in b.residues]
    assert [at.residue.index for at in a.atoms] == [at.residue.index for at in b.atoms]


def test_mdtraj_load_equals_mdtraj_of_the_source_pdb_xtc(tmp_path):
    md = pytest.importorskip("mdtraj")
    from MDAnalysisTests.datafiles import PDB_sub_sol, XTC_sub_sol
    a, b, out = _mdtraj_pair(tmp_path, XTC_sub_sol, PDB_sub_sol)
    assert isinstance(a, md.Trajectory) and (a.n_frames, a.n_atoms) == (b.n_frames, b.n_atoms) == (3, 19385)
    prec = mrec.TrajectoryReader(out).schema.blocks["atoms"].columns["x"].precision     # Å
    assert np.abs(a.xyz.astype(np.float64) - b.xyz).max() <= prec / 2 / 10 + 1e-6        # the record's grid
    assert a.time.tolist() == b.time.tolist()
    np.testing.assert_allclose(a.unitcell_lengths, b.unitcell_lengths, rtol=1e-6)
    assert a.unitcell_angles.tolist() == b.unitcell_angles.tolist()
    raw = md.load_pdb(PDB_sub_sol, standard_names=False).topology       # names as in the file (SOL, not HOH)
    _same_residues(a.topology, raw)
    assert [at.name for at in a.topology.atoms] == [at.name for at in raw.atoms]
    ions = {"NA", "CL"}                           # MDTraj takes the PDB's sodium "NA" for nitrogen
    assert [at.element for at in a.topology.atoms if at.residue.name not in ions] == \
        [at.element for at in b.topology.atoms if at.residue.name not in ions]
    assert {at.element.symbol for at in a.topology.atoms if at.residue.name == "NA"} == {"Na"}


def test_mdtraj_load_equals_mdtraj_of_the_source_psf_dcd(tmp_path):
    from MDAnalysisTests.datafiles import DCD, PSF
    a, b, _ = _mdtraj_pair(tmp_path, DCD, PSF)
    assert (a.n_frames, a.n_atoms) == (98, 3341)
    assert a.xyz.tobytes() == b.xyz.tobytes()        # DCD holds float32 Å: converted exactly as MDTraj does
    assert a.unitcell_lengths is None and b.unitcell_lengths is None
    _same_residues(a.topology, b.topology, {"HSD": "HIS", "HSE": "HIS", "HSP": "HIS"})   # CHARMM's histidines
    assert [at.element for at in a.topology.atoms] == [at.element for at in b.topology.atoms]
    assert sorted((x.index, y.index) for x, y in a.topology.bonds) == sorted((x.index, y.index) for x, y in b.topology.bonds)


@needs_openmm
def test_mdtraj_load_of_an_openmm_record(tmp_path, water):
    pytest.importorskip("mdtraj")
    import mrec.mdtraj
    path = str(tmp_path / "run.mrec")
    sim, rep, cap = run(path, water, 100)
    rep.close()
    t = mrec.mdtraj.load(path)
    state = cap.states[1][1]
    assert t.xyz[1].tobytes() == np.asarray(state.getPositions(asNumpy=True)._value, dtype=np.float32).tobytes()
    assert t.time.tolist() == [st.getTime().value_in_unit(unit.picosecond) for _, st in cap.states]
    assert t.unitcell_lengths.tolist() == [[np.float32(1.8)] * 3] * 2 and t.unitcell_angles.tolist() == [[90.0] * 3] * 2
    assert t.topology.n_residues == 185 and t.topology.n_bonds == 370
    assert [a.element.symbol for a in t.topology.atoms][:3] == ["O", "H", "H"]


def test_mdtraj_load_refuses_a_changing_atom_count(tmp_path):
    pytest.importorskip("mdtraj")
    import mrec.mdtraj
    path = str(tmp_path / "ragged.mrec")
    schema = mrec.SequenceSchema()
    schema.declare_block("atoms")
    for c in "xyz":
        schema.declare_column("atoms", c, "f64")
    with mrec.TrajectoryWriter.create(path, schema) as w:
        for n in (3, 4):
            w.append({"blocks": {"atoms": {c: np.zeros(n) for c in "xyz"}}})
    with pytest.raises(RefusalError) as exc:
        mrec.mdtraj.load(path)
    assert exc.value.kind == "row_count_mismatch"


# -- the user guide ------------------------------------------------------------------------------

@needs_openmm
def test_user_guide_snippets_run_as_written(tmp_path):
    """docs/user-guide.md, "Writing from a running simulation": its python blocks, one after the
    other in an empty directory, run and print what their comments say."""
    pytest.importorskip("mdtraj")
    import re
    text = open(os.path.join(ROOT, "docs", "user-guide.md"), encoding="utf-8").read()
    section = text.split("## Writing from a running simulation\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 4
    done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(np.array([50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 550, 600]))
    assert lines[1].startswith("11 ") and lines[1].endswith("(55, 3)")
    assert lines[2].startswith("<mdtraj.Trajectory with 12 frames, 555 atoms, 185 residues, and unitcells")
