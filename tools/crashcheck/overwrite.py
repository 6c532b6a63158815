"""Overwrites cut at every operation: ``write_record(overwrite=True)`` (the path holds the complete
old or the complete new record) and the nested ones, a section or a group replaced inside a record."""
from __future__ import annotations

import os
import shutil
import time

import numpy as np

import mrec
from mrec.check.repair import repair
from mrec.fs.faulty import CrashSimulator, recording_fs
from mrec.record.integrity.replace import names as replace_names

from .checks import bits, guarded, tree_digest
from .plans import schema
from .recording import next_op


OW_VERSIONS = {
    "old": {"meta": {"title": "old"}, "status": {"state": "old"},
            "frame": {"blocks": {"atoms": {"x": np.arange(5.0), "q": np.array([1, 2, 3, 4, 5], np.int32)}}}},
    "new": {"meta": {"title": "new"}, "status": {"state": "new"},
            "system": {"blocks": {"atoms": {"element": ["O", "H", "H"]}}},
            "frame": {"blocks": {"atoms": {"x": -np.arange(3.0)}, "ions": {"q": np.array([0.5, -0.5])}}}},
}


def _matches(rec, want: dict) -> bool:
    if rec.meta.get("title") != want["meta"]["title"] or rec.status != want["status"]:
        return False
    for section in ("frame", "system"):
        got, exp = getattr(rec, section), want.get(section)
        if (got is None) != (exp is None):
            return False
        if exp is None:
            continue
        if set(got.blocks) != set(exp["blocks"]):
            return False
        for b, cols in exp["blocks"].items():
            if set(got.blocks[b]) != set(cols):
                return False
            for c, v in cols.items():
                g = got.blocks[b][c]
                if (list(g) != list(v)) if isinstance(v, list) else bits(g) != bits(np.asarray(v)):
                    return False
    return True


def check_overwrite_state(parent: str, name: str, allowed: set[str], via: str) -> str | None:
    """Recover (by ``via``: a read, ``mrec repair`` or the next write), then the path holds exactly
    one allowed version; no well-known sibling is left; a further overwrite leaves only the record."""
    path = os.path.join(parent, name)
    try:
        if via == "repair" and (os.path.isdir(path) or any(os.path.exists(p) for p in replace_names(path))):
            try:
                repair(path)
            except mrec.MrecError:
                pass                          # a record without a trajectory: repair checks nothing more
        rec = mrec.read_record(path) if os.path.exists(path) or any(
            os.path.exists(p) for p in replace_names(path)) else None
    except mrec.MrecError as exc:
        return f"after recovery the path does not read: {exc}"
    if rec is None:
        if "absent" not in allowed:
            return f"the path is absent (allowed: {sorted(allowed)})"
    else:
        got = [v for v, want in OW_VERSIONS.items() if _matches(rec, want)]
        rec.close()
        if not got or got[0] not in allowed:
            return f"the path holds {got or 'neither version (a mixture)'}; allowed: {sorted(allowed)}"
    left = [p for p in replace_names(path) if os.path.lexists(p)]
    if left:
        return f"siblings left after recovery: {left}"
    try:
        mrec.write_record(path, overwrite=True, **OW_VERSIONS["new"])
    except mrec.MrecError as exc:
        return f"a further overwrite failed: {exc}"
    extra = sorted(set(os.listdir(parent)) - {name})
    return f"a further overwrite left {extra} beside the record" if extra else None


def run_overwrite(work: str, seeds: int, ordered: bool, limit_cuts: int | None, violations: list) -> dict:
    """Record write_record(old) then write_record(new, overwrite=True) in one directory; cut at every
    op under both models; recover through a read, mrec repair or the next write, in turn."""
    parent = os.path.join(work, "overwrite")
    os.makedirs(parent)
    fs = recording_fs()
    name = "rec.mrec"
    path = os.path.join(parent, name)
    mrec.write_record(path, fs=fs, **OW_VERSIONS["old"])
    mrec.write_record(path, fs=fs, overwrite=True, **OW_VERSIONS["new"])
    ops = fs.ops
    renames = [i for i, op in enumerate(ops) if op.kind == "rename"]
    old_pub = next(i for i in renames if ops[i].path == path)              # build -> path
    # the new record is complete under some name once its build is renamed (-> .mrec-tmp-new-<name>)
    new_commit = next(i for i in renames if i > old_pub and os.path.basename(ops[i].data.decode()).startswith(
        f".mrec-tmp-{name}."))
    syncs = [i for i, op in enumerate(ops) if op.kind == "fsync_dir" and op.path == parent]
    old_durable = next(i for i in syncs if i > old_pub)
    new_durable = next(i for i in syncs if i > new_commit)
    sim = CrashSimulator(ops, parent)
    counts = {"ops": len(ops), "process": 0, "power": 0}
    cuts = range(len(ops) + 1)
    if limit_cuts:
        cuts = range(0, len(ops) + 1, max(1, (len(ops) + 1) // limit_cuts))
    ways = ("read", "repair", "write")
    memo: dict = {}
    for cut in cuts:
        if cut > new_commit:
            proc = {"new"}
        elif cut > old_pub:
            proc = {"old"}
        else:
            proc = {"absent"}
        if cut > new_durable:
            power = {"new"}
        elif cut > old_durable:
            power = {"old"} | ({"new"} if cut > new_commit else set())
        else:
            power = {"absent"} | ({"old"} if cut > old_pub else set())
        _replace_states(sim, ops, cut, proc, power, seeds, ordered, os.path.join(work, "ow-state"), ways,
                        lambda dest, allowed, via: check_overwrite_state(dest, name, allowed, via),
                        memo, counts, violations, "overwrite")
    shutil.rmtree(parent, ignore_errors=True)
    return counts


def _replace_states(sim, ops, cut, proc, power, seeds, ordered, dest, ways, check, memo, counts, violations,
                    label) -> None:
    """The states of an overwrite session cut at ``cut`` (process crash, with and without a stray
    temp file inside a replace; power loss at the sampled seeds), each checked through one of
    ``ways`` in turn by ``check(dest, allowed, via)`` (memoised by tree digest)."""
    variants = [False, True] if cut < len(ops) and ops[cut].kind == "replace" else [False]
    states = [("process", proc, lambda d, st=st: sim.materialise_process(cut, d, stray_temp=st))
              for st in variants]
    states += [("power", power, lambda d, sd=sd: sim.materialise_power(cut, d, seed=sd, ordered_metadata=ordered))
               for sd in [None, "all"] + [cut * 1000 + k for k in range(seeds)]]
    for k, (model, allowed, make) in enumerate(states):
        shutil.rmtree(dest, ignore_errors=True)
        make(dest)
        counts[model] += 1
        via = ways[(cut + k) % len(ways)]
        key = (tree_digest(dest), frozenset(allowed), via)
        if key not in memo:
            memo[key] = guarded(check, dest, allowed, via)
        if memo[key]:
            violations.append(f"[{model}] {label} cut {cut}/{len(ops)} ({next_op(ops, cut)}) via {via}: {memo[key]}")


# -- nested overwrites: write_section / write_frame(group=) replace a group inside a record --------------

NESTED = {"section": "frame", "group": "a/b"}        # the session -> the group it replaces
NESTED_WAYS = ("read_record", "read_frame", "read_group", "write", "writer", "repair", "pack")


def _nested_version(frame) -> str | None:
    """'old' / 'new' when ``frame`` is bit-identical to that version's frame (OW_VERSIONS), else None."""
    from types import SimpleNamespace
    doc = {"meta": {"title": "t"}, "status": {"state": "s"}}
    got = SimpleNamespace(frame=frame, system=None, **doc)
    return next((v for v in ("old", "new") if _matches(got, {**doc, "frame": OW_VERSIONS[v]["frame"]})), None)


def _temp_names(root: str, siblings_only: bool) -> list[str]:
    """``.mrec-tmp-`` names in the tree (only ``new-`` / ``old-`` siblings with ``siblings_only``)."""
    marks = (".mrec-tmp-new-", ".mrec-tmp-old-") if siblings_only else (".mrec-tmp-",)
    out = []
    for d, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in dirs + files if n.startswith(marks)]
    return sorted(out)


def _nested_overwrite(path: str, scenario: str, version: str, fs=None) -> None:
    frame = OW_VERSIONS[version]["frame"]
    if scenario == "section":
        mrec.write_section(path, "frame", frame, overwrite=True, fs=fs)
    else:
        mrec.write_frame(path, frame, group="a/b", overwrite=True, fs=fs)


def check_nested_state(parent: str, scenario: str, allowed: set[str], via: str) -> str | None:
    """Give the crash state to one entry point of the record (``via``), then: what it read is an
    allowed version; no new / old sibling is left (a writer, repair or pack: no ``.mrec-tmp-`` name
    at all); the group holds exactly that allowed version, the record's other group and documents
    are intact; a further overwrite of the group leaves nothing of itself behind."""
    from mrec.archive.pack import pack
    node = NESTED[scenario]
    other = "a/b" if node == "frame" else "frame"
    path = os.path.join(parent, "r.mrec")
    read = None
    try:
        if via == "read_record":
            with mrec.read_record(path) as rec:
                shown = [s for s in rec.sections() if s.startswith(".mrec-tmp-")] + \
                    [k for k in rec.unknown if ".mrec-tmp-" in k]
                if shown:
                    return f"read_record shows temporary nodes: {shown[:4]}"
                read = _nested_version(rec.frame) if node == "frame" else None
        elif via == "read_frame":
            read = _nested_version(mrec.read_frame(path, group=node))
        elif via == "read_group":
            g = mrec.read_group(path, node)
            read = _nested_version(mrec.Frame(blocks={b: dict(s.arrays) for b, s in g.groups.items()}))
        elif via == "write":
            mrec.write_section(path, "notes", {"attributes": {"k": 1}})
        elif via == "writer":
            mrec.TrajectoryWriter.create(path, schema()).close()
        elif via == "repair":
            try:
                repair(path)
            except mrec.MrecError:
                pass                          # a record without a trajectory: repair checks nothing more
        elif via == "pack":
            z = pack(path, keep=True)
            import zipfile
            with zipfile.ZipFile(z) as zf:
                packed = [n for n in zf.namelist() if ".mrec-tmp-" in n]
            if packed:
                return f"pack archived temporaries: {packed[:4]}"
            read = _nested_version(mrec.read_frame(z, group=node))
            os.remove(z)
        else:
            raise ValueError(via)
        if via.startswith("read") and read is None and via != "read_record" or (read is not None and read not in allowed):
            return f"{via} read {read or 'neither version'}; allowed: {sorted(allowed)}"
        left = _temp_names(path, siblings_only=via.startswith("read"))
        if left:
            return f"left after {via}: {left[:4]}"
        now = _nested_version(mrec.read_frame(path, group=node))
        if now not in allowed or (read is not None and now != read):
            return f"after {via} the group holds {now or 'neither version'}; allowed {sorted(allowed)}, read {read}"
        if _nested_version(mrec.read_frame(path, group=other)) != "old":
            return f"the group {other!r}, not replaced, changed"
        with mrec.read_record(path) as rec:
            if rec.meta.get("title") != "t" or rec.status != {"state": "s"}:
                return "the record's documents changed"
        _nested_overwrite(path, scenario, "new")
    except mrec.MrecError as exc:
        return f"{via}: {type(exc).__name__}: {exc}"
    left = _temp_names(path, siblings_only=False)
    return f"a further overwrite left {left[:4]}" if left else None


def run_nested_overwrite(work: str, seeds: int, ordered: bool, limit_cuts: int | None, violations: list,
                         verbose: bool = False) -> dict:
    """A record with a section ``frame`` and a group ``a/b``, then ``write_section(frame, overwrite=True)``
    (session ``section``) or ``write_frame(group="a/b", overwrite=True)`` (session ``group``), each cut at
    every op of the overwrite under both models; each state recovered by one entry point, in turn."""
    t0 = time.time()
    counts = {"ops": 0, "process": 0, "power": 0}
    for scenario, node in NESTED.items():
        parent = os.path.join(work, f"nested-{scenario}")
        os.makedirs(parent)
        fs = recording_fs()
        path = os.path.join(parent, "r.mrec")
        mrec.write_record(path, fs=fs, meta={"title": "t"}, status={"state": "s"}, frame=OW_VERSIONS["old"]["frame"])
        mrec.write_frame(path, OW_VERSIONS["old"]["frame"], group="a/b", fs=fs)
        start = len(fs.ops)
        _nested_overwrite(path, scenario, "new", fs=fs)
        ops = fs.ops
        group_dir = os.path.dirname(os.path.join(path, *node.split("/")))
        build = f".mrec-tmp-{node.rsplit('/', 1)[-1]}."
        # the new group is complete under some name once its build is renamed (-> .mrec-tmp-new-<name>)
        commit = next(i for i in range(start, len(ops)) if ops[i].kind == "rename"
                      and os.path.basename(ops[i].data.decode()).startswith(build))
        durable = next(i for i in range(commit, len(ops)) if ops[i].kind == "fsync_dir" and ops[i].path == group_dir)
        sim = CrashSimulator(ops, parent)
        counts["ops"] += len(ops) - start
        cuts = range(start, len(ops) + 1)
        if limit_cuts:
            cuts = range(start, len(ops) + 1, max(1, (len(ops) + 1 - start) // limit_cuts))
        memo: dict = {}
        for cut in cuts:
            proc = {"new"} if cut > commit else {"old"}
            power = {"new"} if cut > durable else {"old", "new"} if cut > commit else {"old"}
            _replace_states(sim, ops, cut, proc, power, seeds, ordered, os.path.join(work, "nested-state"),
                            NESTED_WAYS, lambda dest, allowed, via, sc=scenario: check_nested_state(dest, sc, allowed, via),
                            memo, counts, violations, f"nested {scenario} overwrite")
        shutil.rmtree(parent, ignore_errors=True)
    bad = sum(v.startswith(("[process] nested", "[power] nested")) for v in violations)
    print(f"crashcheck nested overwrite: {counts['ops']} ops (a section, a write_frame group), process-crash "
          f"states {counts['process']}, power-loss states {counts['power']} "
          f"[{'ordered metadata' if ordered else 'strict'}], violations {bad}, {time.time() - t0:.1f} s", flush=True)
    return counts
