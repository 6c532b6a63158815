"""One writer per store, overwrite, links and leftovers (docs/reliability.md, "One writer, overwrite,
links and leftovers"): real processes race for a store, links inside a record are refused before
anything is written through them, and what a crash inside an atomic replace leaves is cleaned."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import mrec
from mrec.errors import MrecError, RefusalError
from mrec.archive.pack import LOCK_NAME, pack, plan_pack, unpack
from mrec.check.repair import repair
from mrec.check.validate import validate

REPO = Path(__file__).resolve().parents[2]
CTX = mp.get_context("fork")
RACES = 40


def schema() -> mrec.SequenceSchema:
    s = mrec.SequenceSchema()
    s.declare_block("atoms", rows=3)
    s.declare_column("atoms", "x", "f64")
    s.declare_meta("who", "i64")
    return s


def frame(who: int, i: int) -> dict:
    return {"blocks": {"atoms": {"x": np.full(3, who * 1000.0 + i)}}, "meta": {"who": who}}


def write_frames(w, who: int, n: int = 5) -> None:
    for i in range(n):
        w.append(frame(who, i))
        w.flush()


def digest(root: Path) -> dict:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = Path(d, f)
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- B: one writer per store, across and within processes ------------------------------------

def _racer(op: str, path: str, who: int, barrier, results) -> None:
    try:
        barrier.wait(timeout=30)
        if op == "create":
            w = mrec.TrajectoryWriter.create(path, schema(), flush_every=1)
        else:
            w = mrec.TrajectoryWriter.open(path, flush_every=1)
        write_frames(w, who)
        w.close()
        results.put((who, "ok"))
    except MrecError as exc:
        results.put((who, f"refused:{exc.kind}"))
    except BaseException as exc:               # anything else is a failure of its own
        results.put((who, f"error:{type(exc).__name__}: {exc}"))


def _race(op: str, path: Path) -> list[tuple[int, str]]:
    barrier = CTX.Barrier(2)
    results = CTX.Queue()
    procs = [CTX.Process(target=_racer, args=(op, str(path), who, barrier, results)) for who in (1, 2)]
    for p in procs:
        p.start()
    out = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return sorted(out)


def _who_wrote(path: Path) -> list[int]:
    r = mrec.TrajectoryReader(path)
    return [int(r[i].meta["who"]) for i in range(len(r))]


def test_processes_racing_create_get_one_writer(tmp_path):
    """40 races of two processes creating one store: exactly one writes, the other is refused
    (``live_writer`` while the winner holds the lock, ``exists`` after), and every frame the
    winner wrote is there."""
    kinds = set()
    for k in range(RACES):
        path = tmp_path / f"c{k}.mrec"
        out = _race("create", path)
        oks = [who for who, res in out if res == "ok"]
        others = [res for who, res in out if res != "ok"]
        assert len(oks) == 1, (k, out)
        assert others[0] in ("refused:live_writer", "refused:exists"), (k, out)
        kinds.add(others[0])
        assert _who_wrote(path) == [oks[0]] * 5, (k, out)
        assert not (path / LOCK_NAME).exists()
    assert kinds, kinds


def test_processes_racing_open_lose_no_frames(tmp_path):
    """40 races of two processes reopening one store: a writer that reports success has every
    frame it wrote in the store, after the frames of whoever wrote before it."""
    for k in range(RACES):
        path = tmp_path / f"o{k}.mrec"
        w = mrec.TrajectoryWriter.create(path, schema())
        w.append(frame(0, 0))
        w.close()
        out = _race("open", path)
        assert all(res in ("ok", "refused:live_writer") for _, res in out), (k, out)
        oks = [who for who, res in out if res == "ok"]
        assert oks, (k, out)
        got = _who_wrote(path)
        assert got[0] == 0 and len(got) == 1 + 5 * len(oks), (k, out, got)
        for who in oks:
            assert got.count(who) == 5, (k, out, got)


def test_second_writer_in_the_same_process_is_refused(tmp_path):
    path = tmp_path / "r.mrec"
    w = mrec.TrajectoryWriter.create(path, schema())
    w.append(frame(1, 0))
    for again in (lambda: mrec.TrajectoryWriter.open(path), lambda: mrec.TrajectoryWriter.create(path, schema())):
        with pytest.raises(RefusalError) as e:
            again()
        assert e.value.kind == "live_writer" and str(os.getpid()) in str(e.value)
    with pytest.raises(RefusalError) as e:
        pack(path)
    assert e.value.kind == "live_writer"
    with pytest.raises(RefusalError) as e:
        repair(path)
    assert e.value.kind == "live_writer"
    w.close()
    w2 = mrec.TrajectoryWriter.open(path)             # released on close
    w2.append(frame(2, 0))
    w2.close()
    assert _who_wrote(path) == [1, 2]


def test_writer_killed_leaves_no_lock_that_blocks(tmp_path):
    """A writer SIGKILLed while open: the kernel drops its lock; the file it leaves names a dead
    pid; the next writer, repair and pack go ahead."""
    path = tmp_path / "k.mrec"
    code = ("import sys, os, numpy as np, mrec\n"
            "s = mrec.SequenceSchema(); s.declare_block('atoms', rows=3); s.declare_column('atoms', 'x', 'f64')\n"
            "s.declare_meta('who', 'i64')\n"
            f"w = mrec.TrajectoryWriter.create({str(path)!r}, s)\n"
            "w.append({'blocks': {'atoms': {'x': np.zeros(3)}}, 'meta': {'who': 7}}); w.flush()\n"
            "print('ready', flush=True); sys.stdin.readline()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == b"ready"
    with pytest.raises(RefusalError) as e:                    # alive: refused
        mrec.TrajectoryWriter.open(path)
    assert e.value.kind == "live_writer" and str(proc.pid) in str(e.value)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (path / LOCK_NAME).exists()
    repair(path)
    w = mrec.TrajectoryWriter.open(path)
    w.append(frame(8, 0))
    w.close()
    assert _who_wrote(path) == [7, 8]
    assert pack(path).exists()


def _packer(path: str, barrier, results) -> None:
    try:
        barrier.wait(timeout=30)
        pack(path)
        results.put("ok")
    except MrecError as exc:
        results.put(f"refused:{exc.kind}")
    except BaseException as exc:
        results.put(f"error:{type(exc).__name__}: {exc}")


def test_concurrent_packs_of_one_store_one_refuses_cleanly(tmp_path):
    """Two processes packing one store: one packs, the other raises an MrecError (never an OSError
    such as FileNotFoundError), and the archive holds the whole record."""
    rng = np.random.default_rng(3)
    seen = set()
    for k in range(20):
        path = tmp_path / f"p{k}.mrec"
        mrec.write_record(path, meta={}, frame={"blocks": {"atoms": {"x": rng.normal(size=60_000)}}})
        files = digest(path)
        barrier = CTX.Barrier(2)
        results = CTX.Queue()
        procs = [CTX.Process(target=_packer, args=(str(path), barrier, results)) for _ in range(2)]
        for p in procs:
            p.start()
        out = sorted(results.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        assert out[0] == "ok" and out[1].startswith("refused:"), (k, out)
        seen.add(out[1])
        archive = Path(str(path) + ".zip")
        with zipfile.ZipFile(archive) as z:
            assert sorted(z.namelist()) == sorted(files)
            for name in files:
                assert hashlib.sha256(z.read(name)).hexdigest() == files[name]
        assert not path.exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert seen <= {"refused:live_writer", "refused:not_a_record", "refused:exists"}, seen


# -- C: links inside a record ------------------------------------------------------------------

def _record_with_link(tmp_path, target_is_dir=False):
    path = tmp_path / "l.mrec"
    w = mrec.TrajectoryWriter.create(path, schema(), flush_every=1)
    write_frames(w, 1, 2)
    w.close()
    shard = next(p for p in (path / "trajectory" / "atoms" / "x").rglob("*") if p.is_file() and p.name != "zarr.json")
    if target_is_dir:
        outside = tmp_path / "outside_dir"
        os.rename(shard.parent, outside)
        link = shard.parent
    else:
        outside = tmp_path / "outside.bin"
        outside.write_bytes(shard.read_bytes())
        shard.unlink()
        link = shard
    os.symlink(outside, link)
    return path, link, outside


@pytest.mark.parametrize("target_is_dir", [False, True])
def test_writer_and_repair_refuse_a_record_holding_a_link(tmp_path, target_is_dir):
    path, link, outside = _record_with_link(tmp_path, target_is_dir)
    before = digest(outside) if target_is_dir else outside.read_bytes()
    rel = os.path.relpath(link, path)
    with pytest.raises(RefusalError) as e:
        w = mrec.TrajectoryWriter.open(path, flush_every=1)
        write_frames(w, 2, 3)                          # today: lands in the file outside the record
        w.close()
    assert e.value.kind == "bad_layout" and rel in str(e.value) and "link" in str(e.value)
    for dry in (True, False):
        with pytest.raises(RefusalError) as e:
            repair(path, dry_run=dry)
        assert e.value.kind == "bad_layout" and rel in str(e.value)
    assert (digest(outside) if target_is_dir else outside.read_bytes()) == before
    assert not (path / LOCK_NAME).exists()
    report = validate(path)
    hits = [v for v in report.violations if v.rule == "SS-1"]
    assert not report.ok and len(hits) == 1 and hits[0].path == str(link) and hits[0].kind == "bad_layout"
    with pytest.raises(RefusalError) as e:
        pack(path)
    assert e.value.kind == "bad_layout"


def test_create_refuses_a_record_holding_a_link(tmp_path):
    path = tmp_path / "c.mrec"
    mrec.write_record(path, meta={}, status={"state": "running"})
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"precious")
    os.symlink(outside, path / "notes.json")
    with pytest.raises(RefusalError) as e:
        mrec.TrajectoryWriter.create(path, schema())
    assert e.value.kind == "bad_layout" and "notes.json" in str(e.value)
    assert outside.read_bytes() == b"precious" and not (path / "trajectory").exists()


def test_overwrite_of_a_path_that_is_a_link_leaves_the_link_target_alone(tmp_path):
    """write_record(overwrite=True) on a name that is a link to a record elsewhere never removes the
    files of the record it points at; since issue 27 it is refused (kind ``bad_target``, naming the
    link) and the link kept, as every path that replaces does (spec_tests/record/test_link_traps.py)."""
    elsewhere = tmp_path / "elsewhere.mrec"
    mrec.write_record(elsewhere, meta={}, status={"state": "old"})
    before = digest(elsewhere)
    link = tmp_path / "link.mrec"
    os.symlink(elsewhere, link)
    with pytest.raises(RefusalError) as e:
        mrec.write_record(link, meta={}, status={"state": "new"}, overwrite=True)
    assert e.value.kind == "bad_target" and str(link) in str(e.value)
    assert link.is_symlink() and mrec.read_record(link).status["state"] == "old"
    assert digest(elsewhere) == before


# -- D: leftovers of a crash inside an atomic replace ------------------------------------------------

def _closed_record(tmp_path, name="d.mrec"):
    path = tmp_path / name
    w = mrec.TrajectoryWriter.create(path, schema(), flush_every=1)
    write_frames(w, 1, 2)
    w.close()
    return path


LEFTOVERS = ["trajectory/.mrec-tmp-zarr.json.0a1b2c3d", ".mrec-tmp-zarr.json.deadbeef",
             "trajectory/atoms/x/.mrec-tmp-zarr.json.00000000"]


def _plant(path):
    for key in LEFTOVERS:
        (path / key).write_bytes(b'{"half')


def test_reopening_a_writer_removes_replace_temp_files(tmp_path):
    path = _closed_record(tmp_path)
    _plant(path)
    keep = path / "trajectory" / ".mrec-tmp-not-ours"          # not a replace temp name: left alone
    keep.write_bytes(b"x")
    with pytest.raises(RefusalError) as e:
        pack(path)
    assert e.value.kind == "stray_temp_files" and "mrec repair" in str(e.value)
    w = mrec.TrajectoryWriter.open(path)
    assert sorted(w.removed_temps) == sorted(LEFTOVERS)
    w.close()
    assert not any((path / k).exists() for k in LEFTOVERS) and keep.exists()
    keep.unlink()
    assert pack(path).exists()


def test_mrec_repair_removes_replace_temp_files(tmp_path):
    path = _closed_record(tmp_path)
    _plant(path)
    os.symlink(tmp_path, path / "trajectory" / ".mrec-tmp-link.12345678")   # a link is never followed or removed
    with pytest.raises(RefusalError) as e:
        repair(path)
    assert e.value.kind == "bad_layout"
    (path / "trajectory" / ".mrec-tmp-link.12345678").unlink()
    dry = repair(path, dry_run=True)
    assert sorted(dry.removed_temps) == sorted(LEFTOVERS) and all((path / k).exists() for k in LEFTOVERS)
    out = subprocess.run([sys.executable, "-m", "mrec", "repair", str(path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert "removed 3 temporary file(s)" in out.stdout
    assert not any((path / k).exists() for k in LEFTOVERS)
    assert plan_pack(path).entries


def test_writer_killed_inside_a_replace_then_reopen_and_pack(tmp_path):
    """A real process killed between an atomic replace's temp write and its rename: the temp file
    stays; reopening cleans it and pack succeeds."""
    path = _closed_record(tmp_path)
    code = ("import os, signal, numpy as np, mrec\n"
            "from mrec.fs import posix\n"
            "real = os.replace\n"
            "def dying(src, dst):\n"
            "    if os.path.basename(dst) == 'zarr.json' and 'trajectory' in dst:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    real(src, dst)\n"
            "os.replace = dying\n"
            f"w = mrec.TrajectoryWriter.open({str(path)!r}, flush_every=1)\n"
            "w.append({'blocks': {'atoms': {'x': np.ones(3)}}, 'meta': {'who': 3}})\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == -signal.SIGKILL
    temps = [p for p in path.rglob(".mrec-tmp-*")]
    assert temps
    with pytest.raises(RefusalError) as e:
        pack(path, keep=True)
    assert e.value.kind == "stray_temp_files"
    w = mrec.TrajectoryWriter.open(path)
    assert w.committed == 2
    w.close()
    assert not list(path.rglob(".mrec-tmp-*"))
    assert _who_wrote(Path(pack(path))) == [1, 1]


def test_unpack_skips_lock_and_temp_entries(tmp_path):
    """An archive another tool made of a live or crashed store (carrying the writer lock and temp
    files) unpacks into a store that a writer opens and pack packs."""
    path = _closed_record(tmp_path)
    files = digest(path)
    archive = tmp_path / "x.mrec.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(files):
            z.write(path / name, name)
        z.writestr(LOCK_NAME, f"{os.getppid()}\n")
        z.writestr("trajectory/.mrec-tmp-zarr.json.0a1b2c3d", b"{")
        z.writestr(".mrec-tmp-anything", b"?")
    out = unpack(archive)
    assert digest(out) == files
    w = mrec.TrajectoryWriter.open(out)
    w.append(frame(5, 0))
    w.close()
    assert _who_wrote(out) == [1, 1, 5]
    assert pack(out, out=tmp_path / "y.mrec.zip").exists()


# -- A: write_record(overwrite=True) is recoverable -----------------------------------------------------

def _status(path) -> str:
    with mrec.read_record(path) as r:
        return r.status["state"]


def killed_before_rename(step: int, call: str) -> None:
    """Run ``call`` (Python, with ``os``, ``np`` and ``mrec`` imported) in a real process SIGKILLed just
    before its ``step``-th rename (``os.replace`` / ``os.rename``)."""
    code = ("import os, signal, numpy as np, mrec\n"
            "real, n = os.replace, [0]\n"
            "def dying(src, dst):\n"
            "    n[0] += 1\n"
            f"    if n[0] == {step}:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    real(src, dst)\n"
            "os.replace = dying\n"
            "os.rename = dying\n"
            f"{call}\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == -signal.SIGKILL


def _kill_overwrite_at(tmp_path, step: int) -> Path:
    """A real process overwriting ``r.mrec`` SIGKILLed just before its ``step``-th rename."""
    path = tmp_path / "r.mrec"
    mrec.write_record(path, meta={}, status={"state": "old"})
    killed_before_rename(step, f"mrec.write_record({str(path)!r}, meta={{}}, status={{'state': 'new'}}, overwrite=True)")
    return path


def _renames_of_an_overwrite(tmp_path) -> int:
    from mrec.fs import RecordingFileSystem
    p = tmp_path / "count.mrec"
    mrec.write_record(p, meta={}, status={"state": "x"})
    fs = RecordingFileSystem()
    mrec.write_record(p, meta={}, status={"state": "y"}, overwrite=True, fs=fs)
    return sum(op.kind == "rename" for op in fs.ops) + sum(op.kind == "replace" for op in fs.ops)


@pytest.mark.parametrize("via", ["read", "repair", "open", "write"])
def test_overwrite_killed_at_every_rename_recovers(tmp_path, via):
    """Killed before each rename of an overwrite (its file replaces included): the next read,
    `mrec repair`, writer open or write of the path finds the complete old record before the
    commit rename and the complete new one after it — never nothing."""
    total = _renames_of_an_overwrite(tmp_path)
    seen = []
    for step in range(1, total + 1):
        case = tmp_path / f"k{step}"
        case.mkdir()
        path = _kill_overwrite_at(case, step)
        if via == "read":
            got = _status(path)
        elif via == "repair":
            subprocess.run([sys.executable, "-m", "mrec", "repair", str(path)], capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
            got = _status(path)
        elif via == "open":
            with pytest.raises(MrecError):              # no trajectory to append to; recovered first
                mrec.TrajectoryWriter.open(path)
            got = _status(path)
        else:
            mrec.write_record(path, meta={}, status={"state": "third"}, overwrite=True)
            got = _status(path)
            assert sorted(os.listdir(case)) == ["r.mrec"], os.listdir(case)
        seen.append(got)
        assert not [n for n in os.listdir(case) if n.startswith(".mrec-tmp-new-") or n.startswith(".mrec-tmp-old-")]
    if via == "write":
        assert set(seen) == {"third"}
    else:
        first_new = seen.index("new")
        assert set(seen[:first_new]) == {"old"} and set(seen[first_new:]) == {"new"}, seen
        assert 0 < first_new < len(seen) - 1, seen


def test_recovery_rules(tmp_path):
    """The states an interrupted overwrite can leave, built by hand, and what recovery makes of each."""
    from mrec.record.integrity.replace import names, recover
    from mrec.fs import DEFAULT_FS

    def make(tag, name):
        return mrec.write_record(tmp_path / tag / name, meta={}, status={"state": name})

    cases = {   # present names -> what the path holds after recovery
        ("r.mrec", "new"): "new",        # committed, old not yet moved: roll forward
        ("new", "old"): "new",           # between the two renames: roll forward
        ("r.mrec", "old"): "r.mrec",     # swapped, old not yet removed: remove it
        ("old",): "old",                 # impossible by the protocol; roll back
        ("new",): "new",
    }
    for k, (present, want) in enumerate(cases.items()):
        d = tmp_path / f"c{k}"
        final = str(d / "r.mrec")
        new, old = names(final)
        for which in present:
            built = make(f"src{k}", which)
            d.mkdir(exist_ok=True)
            os.rename(built, {"r.mrec": final, "new": new, "old": old}[which])
        assert recover(DEFAULT_FS, final) is not None
        assert _status(final) == want, (present, want)
        assert os.listdir(d) == ["r.mrec"]


def test_zip_writer_creates_its_file_exclusively(tmp_path):
    """ZipWriter creates its archive with O_EXCL: a name taken even by a dangling link is refused,
    never written through (the link's target is not created)."""
    from mrec.errors import StoreError
    from mrec.zarr.stores.zip_write import ZipWriter
    link = tmp_path / "a.zip"
    os.symlink(tmp_path / "elsewhere.zip", link)
    with pytest.raises(StoreError, match="already exists"):
        ZipWriter(link)
    assert not (tmp_path / "elsewhere.zip").exists()


def test_read_only_record_packs_with_keep_and_writers_get_a_clear_error(tmp_path):
    """No lock file can be made in a read-only record (a file system refusing creates, as a read-only
    mount does): pack(keep=True) still packs it, checking the lock file's pid as before; a writer
    gets a StoreError saying why, not a live-writer refusal."""
    import errno
    from mrec.fs import PosixFileSystem

    class ReadOnlyLocks(PosixFileSystem):
        def lock(self, path, *, directory=False, blocking=False):
            if not directory:
                raise PermissionError(errno.EROFS, "Read-only file system", path)
            return super().lock(path, directory=directory, blocking=blocking)

    path = _closed_record(tmp_path)
    ro = ReadOnlyLocks()
    with pytest.raises(mrec.StoreError) as e:
        mrec.TrajectoryWriter.open(path, fs=ro)
    assert "read-only" in str(e.value)
    with pytest.raises(mrec.StoreError):
        pack(path, fs=ro)                             # keep=False would remove what it cannot lock
    (path / LOCK_NAME).write_text(f"{os.getppid()}\n")
    with pytest.raises(RefusalError) as e:
        pack(path, fs=ro, keep=True)
    assert e.value.kind == "live_writer"
    (path / LOCK_NAME).unlink()
    assert pack(path, fs=ro, keep=True).exists() and path.exists()
