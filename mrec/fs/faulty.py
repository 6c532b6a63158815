"""Fault injection for tests and tools: replay a recorded session up to a crash.

Test support, not production code.  A session is recorded with
:class:`~mrec.fs.RecordingFileSystem` (``keep_data=True``) over a scratch
directory; :class:`CrashSimulator` then materialises the state a fresh
directory would hold after a crash that cut the session before operation
``cut`` (``ops[:cut]`` were issued), under one of two failure models:

``process`` — the writer process dies, the kernel lives.  Every operation
issued before the cut reached the OS and is visible.  A cut *inside* an
atomic replace (``replace`` is temp file, write, optional fsync, rename) can
leave the temp file behind: ``materialise_process(cut, stray_temp=True)``.

``power`` — power loss or kernel crash.  Only what a barrier made durable
survives for sure: a file's bytes written before an ``fsync`` of that file,
a directory's entries (creates, renames, removes, mkdirs) changed before an
``fsync_dir`` of that directory, and the payload of a ``replace(fsync=True)``.
Everything else since the last barrier may be dropped, reordered among
itself or torn at 512-byte sector granularity: each sector of a file takes,
independently, any version it had since the file's last fsync that is at
least as new as the newest *forced* write to it; a file's size likewise.
Directory changes reach the disk as a prefix of their issue order — one
global prefix under ``ordered_metadata=True`` (a journaling file system:
ext4 ``data=ordered``, XFS, btrfs), where a surviving directory change also
carries every *extending* write (new blocks) issued before it and the payload
of a file renamed over another (ext4 ``auto_da_alloc``); or an independent
prefix per directory under ``ordered_metadata=False`` (nothing but fsync
orders anything).  Overwrites of existing bytes (an index rewritten in place)
are never ordered by metadata: they are the torn writes.

Directories are inodes: a directory's entries are events of its own, so a
renamed directory (a whole record moved under its name) takes its contents
along, and a dropped rename leaves them under the old name.

Every choice comes from a ``random.Random(seed)``, so a state is reproducible
from ``(cut, seed)``; ``seed=None`` picks the extreme "everything not forced
is lost" and ``seed="all"`` "everything issued survived (sector by sector the
newest)".
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from .base import Op
from .posix import TEMP_MARK
from .recording import RecordingFileSystem

SECTOR = 512


def recording_fs() -> RecordingFileSystem:
    """A recorder that keeps every payload (what a simulator needs)."""
    return RecordingFileSystem(keep_data=True)


@dataclass
class _Inode:
    ino: int
    events: list = field(default_factory=list)   # (seq, "w", offset, data) | (seq, "t", size, None)
    fsyncs: list = field(default_factory=list)   # seqs of fsync of this inode
    born: int = -1                               # seq of the op that created it
    born_fsync: bool = False                     # created by replace(fsync=True)


@dataclass
class _Dir:
    events: list = field(default_factory=list)   # (seq, name, ino | "dir" | None)
    fsyncs: list = field(default_factory=list)


class CrashSimulator:
    """Materialise crash states of a recorded session (see the module doc)."""

    def __init__(self, ops: list[Op], root: str):
        self.ops = list(ops)
        self.root = os.path.normpath(os.fspath(root))
        for op in self.ops:
            if op.kind in ("write_at", "replace") and op.data is None:
                raise ValueError("the session was recorded without keep_data=True")

    def __len__(self) -> int:
        return len(self.ops)

    # -- paths -----------------------------------------------------------------
    def _rel(self, path: str) -> str:
        p = os.path.normpath(path)
        if p == self.root:
            return ""
        if not p.startswith(self.root + os.sep):
            raise ValueError(f"{path}: outside the recorded root {self.root}")
        return p[len(self.root) + 1:].replace(os.sep, "/")

    @staticmethod
    def _split(rel: str) -> tuple[str, str]:
        d, _, n = rel.rpartition("/")
        return d, n

    # -- process crash ---------------------------------------------------------
    def materialise_process(self, cut: int, dest: str, *, stray_temp: bool = False) -> None:
        """``dest`` holds exactly what ``ops[:cut]`` left (plus a temp file if ``stray_temp``
        and ``ops[cut]`` is a replace interrupted before its rename)."""
        os.makedirs(dest, exist_ok=True)
        for op in self.ops[:cut]:
            self._apply(op, dest)
        if stray_temp and cut < len(self.ops) and self.ops[cut].kind == "replace":
            op = self.ops[cut]
            d, n = self._split(self._rel(op.path))
            tmp = os.path.join(dest, *(d.split("/") if d else []), f"{TEMP_MARK}{n}.deaddead")   # the shape replace gives it
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(op.data[: len(op.data) // 2])

    def _apply(self, op: Op, dest: str) -> None:
        rel = self._rel(op.path)
        p = os.path.join(dest, *rel.split("/")) if rel else dest
        k = op.kind
        if k == "write_at":
            fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, op.data, op.offset)
            finally:
                os.close(fd)
        elif k == "replace":
            with open(p, "wb") as f:
                f.write(op.data)
        elif k == "truncate":
            os.truncate(p, op.offset)
        elif k == "rename":
            src = self._rel(op.data.decode())
            os.replace(os.path.join(dest, *src.split("/")), p)
        elif k == "remove":
            os.unlink(p)
        elif k == "mkdir":
            os.makedirs(p, exist_ok=True)
        elif k == "rmdir":
            os.rmdir(p)
        # fsync, fsync_dir, reads: no visible effect

    # -- power loss ------------------------------------------------------------
    def _trace(self, cut: int):
        """Inodes and directories as ``ops[:cut]`` built them.

        Directories are inodes too (keyed by an id; the root is 0): a directory's entries are
        events of its own, so a renamed directory takes its contents along, and a directory
        entry dropped by a power loss takes everything under it out of reach.
        """
        inodes: dict[int, _Inode] = {}
        dirs: dict[int, _Dir] = {0: _Dir()}
        live: dict[str, object] = {"": ("d", 0)}     # rel path -> ino | ("d", dir id)
        nxt = [0]
        nxt_dir = [0]

        def new_inode(seq):
            nxt[0] += 1
            inodes[nxt[0]] = _Inode(nxt[0], born=seq)
            return inodes[nxt[0]]

        def new_dir():
            nxt_dir[0] += 1
            dirs[nxt_dir[0]] = _Dir()
            return ("d", nxt_dir[0])

        def dir_id(d):
            if d not in live:        # there before the session began: its entry always survives
                pd, n = self._split(d)
                live[d] = new_dir()
                dirs[dir_id(pd)].events.insert(0, (-1, n, live[d]))
            return live[d][1]

        def link(seq, rel, target):
            d, n = self._split(rel)
            dirs[dir_id(d)].events.append((seq, n, target))
            if target is None:
                live.pop(rel, None)
            else:
                live[rel] = target

        def move_subtree(src, dst):
            for key in [k for k in live if k.startswith(src + "/")]:
                live[dst + key[len(src):]] = live.pop(key)

        for seq, op in enumerate(self.ops[:cut]):
            k = op.kind
            if k in ("read", "read_range"):
                continue
            rel = self._rel(op.path)
            if k == "write_at":
                ino = live.get(rel)
                if not isinstance(ino, int):
                    ino = new_inode(seq).ino
                    link(seq, rel, ino)
                inodes[ino].events.append((seq, "w", op.offset, op.data))
            elif k == "replace":
                node = new_inode(seq)
                node.born_fsync = op.fsync
                node.events.append((seq, "w", 0, op.data))
                if op.fsync:
                    node.fsyncs.append(seq)
                link(seq, rel, node.ino)
            elif k == "truncate":
                inodes[live[rel]].events.append((seq, "t", op.offset, None))
            elif k == "rename":
                src = self._rel(op.data.decode())
                target = live[src]
                link(seq, src, None)
                link(seq, rel, target)
                if isinstance(target, tuple):
                    move_subtree(src, rel)
            elif k == "remove":
                link(seq, rel, None)
            elif k == "mkdir":
                if rel not in live:
                    # makedirs creates parents too; the recorder logs the leaf only
                    parts = rel.split("/")
                    for i in range(1, len(parts) + 1):
                        sub = "/".join(parts[:i])
                        if sub not in live:
                            link(seq, sub, new_dir())
            elif k == "rmdir":
                link(seq, rel, None)
            elif k == "fsync":
                inodes[live[rel]].fsyncs.append(seq)
            elif k == "fsync_dir":
                dirs[dir_id(rel)].fsyncs.append(seq)
        return inodes, dirs

    def materialise_power(self, cut: int, dest: str, *, seed=None, ordered_metadata: bool = True) -> dict:
        """Write the state after a power loss at ``cut`` into ``dest``; returns what was chosen."""
        inodes, dirs = self._trace(cut)
        rng = random.Random(seed) if seed not in (None, "all") else None
        newest = seed == "all"

        def pick(lo: int, hi: int) -> int:          # an index in [lo, hi]
            if newest:
                return hi
            if rng is None:
                return lo
            return rng.randint(lo, hi)

        # 1. directory changes: a prefix (global or per directory) at least as long as the forced part
        forced_dir = {}
        for d, dd in dirs.items():
            last = max(dd.fsyncs, default=-1)
            forced_dir[d] = max((s for s, _, _ in dd.events if s < last), default=-1)
        all_dir_seqs = sorted(s for dd in dirs.values() for s, _, _ in dd.events)
        if ordered_metadata:
            must = max(forced_dir.values(), default=-1)
            cands = [-1] + all_dir_seqs
            lo = next(i for i, s in enumerate(cands) if s >= must)
            horizon = cands[pick(lo, len(cands) - 1)]
            keep_dir = {d: horizon for d in dirs}
        else:
            keep_dir = {}
            for d, dd in dirs.items():
                seqs = [-1] + [s for s, _, _ in dd.events]
                lo = next(i for i, s in enumerate(seqs) if s >= forced_dir[d])
                keep_dir[d] = seqs[pick(lo, len(seqs) - 1)]
            horizon = -1
        entries: dict[int, dict[str, object]] = {}
        for d, dd in dirs.items():
            got: dict[str, object] = {}
            for s, n, target in dd.events:
                if s <= keep_dir[d]:
                    if target is None:
                        got.pop(n, None)
                    else:
                        got[n] = target
            entries[d] = got
        # the tree reachable from the root through surviving entries
        tree: dict[str, object] = {}
        stack, seen = [("", 0)], {0}
        while stack:
            prefix, d = stack.pop()
            for n, target in entries[d].items():
                rel = f"{prefix}/{n}" if prefix else n
                if isinstance(target, tuple):
                    if target[1] in seen:            # pragma: no cover (a directory reached twice)
                        continue
                    seen.add(target[1])
                    tree[rel] = "dir"
                    stack.append((rel, target[1]))
                else:
                    tree[rel] = target

        renamed_over = set()
        if ordered_metadata:
            for d, dd in dirs.items():
                for s, n, target in dd.events:
                    if isinstance(target, int) and s <= keep_dir[d] and inodes[target].born == s:
                        renamed_over.add(target)
        # 2. file contents, sector by sector
        os.makedirs(dest, exist_ok=True)
        contents: dict[int, bytes] = {}
        for rel in sorted(tree, key=lambda r: r.count("/")):
            target = tree[rel]
            p = os.path.join(dest, *rel.split("/"))
            if target == "dir":
                os.makedirs(p, exist_ok=True)
                continue
            if target not in contents:
                contents[target] = self._content(inodes[target], pick, horizon, target in renamed_over)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(contents[target])
        return {"cut": cut, "seed": seed, "horizon": horizon, "ordered_metadata": ordered_metadata}

    @staticmethod
    def _content(node: _Inode, pick, horizon: int, carried: bool) -> bytes:
        """Per-sector choice among the versions since the last fsync, never older than a forced write."""
        last_sync = max(node.fsyncs, default=-1)
        base = bytearray()
        i = 0
        ev = node.events
        while i < len(ev) and ev[i][0] <= last_sync:     # replace(fsync=True) syncs at its own seq
            _apply_event(base, ev[i])
            i += 1
        sizes = [(len(base), True)]
        versions: dict[int, list] = {}     # sector -> [(bytes, forced)]
        for s in range(-(-len(base) // SECTOR)):
            versions[s] = [(bytes(base[s * SECTOR:(s + 1) * SECTOR]), True)]
        cur = bytearray(base)
        for e in ev[i:]:
            seq, kind, a, data = e
            old_len = len(cur)
            _apply_event(cur, e)
            forced = (carried and seq == node.born) or (kind == "w" and seq < horizon and a >= old_len)
            if kind == "w":
                lo_s, hi_s = a // SECTOR, -(-(a + len(data)) // SECTOR)
            else:
                lo_s, hi_s = min(a, old_len) // SECTOR, -(-max(a, old_len) // SECTOR)
            for s in range(lo_s, hi_s):
                versions.setdefault(s, [(b"", False)]).append((bytes(cur[s * SECTOR:(s + 1) * SECTOR]), forced))
            sizes.append((len(cur), forced))

        def choose(vs):
            lo = max(j for j, (_, f) in enumerate(vs) if f) if any(f for _, f in vs) else 0
            return vs[pick(lo, len(vs) - 1)][0]

        size = choose(sizes)
        out = bytearray(size)
        for s, vs in versions.items():
            if s * SECTOR >= size:
                continue
            b = choose(vs)
            end = min(size, (s + 1) * SECTOR)
            out[s * SECTOR:s * SECTOR + len(b[:end - s * SECTOR])] = b[:end - s * SECTOR]
        return bytes(out)


def _apply_event(buf: bytearray, e) -> None:
    _, kind, a, data = e
    if kind == "w":
        if len(buf) < a:
            buf.extend(b"\0" * (a - len(buf)))
        buf[a:a + len(data)] = data
    else:
        if a < len(buf):
            del buf[a:]
        else:
            buf.extend(b"\0" * (a - len(buf)))



# -- failing operations (ENOSPC, EIO) -------------------------------------------------------------

#: The operations that change or sync files: the injection points of :class:`FaultyFileSystem`.
MUTATING = ("write_at", "replace", "rename", "truncate", "remove", "fsync", "fsync_dir", "mkdir")


class FaultyFileSystem:
    """A file system over a real one whose mutating operations fail on demand.

    Every call of a kind in ``kinds`` (default :data:`MUTATING`) is an injection point, numbered
    from 0 since the last :meth:`arm` (:attr:`count` says how many have passed).  ``arm(n, err)``
    makes point ``n`` raise ``OSError(err)`` as the OS would: a ``write_at`` first writes a part of
    its bytes when ``partial`` (a short write, then the error: what a full disk does), a ``replace``
    leaves nothing behind (the temp file is removed, the target untouched), an ``fsync`` has no
    effect on what the reader sees (the page cache keeps the bytes; their durability is unknown).
    ``sticky=True`` makes every later point of those kinds fail too (a disk that stays full);
    otherwise the fault is transient and later calls succeed (space freed, a retry that works) --
    the case that exposes a writer which forgets a failure.
    """

    def __init__(self, inner=None, *, kinds=MUTATING):
        from .posix import PosixFileSystem
        self.inner = inner if inner is not None else PosixFileSystem()
        self.kinds = frozenset(kinds)
        self.count = 0
        self.fail_at: int | None = None
        self.err = 28
        self.partial = True
        self.sticky = False
        self.failures: list[tuple[str, str]] = []     # (kind, path) of every injected failure
        self.active = True                            # False: calls pass through, uncounted

    def arm(self, fail_at: int | None, err: int = 28, *, kinds=None, partial: bool = True,
            sticky: bool = False) -> None:
        """Restart the numbering; point ``fail_at`` (None: none) of ``kinds`` fails with ``err``."""
        if kinds is not None:
            self.kinds = frozenset(kinds)
        self.count, self.fail_at, self.err, self.partial, self.sticky = 0, fail_at, err, partial, sticky

    def _point(self, kind: str, path: str) -> bool:
        """Count an injection point; True when it must fail."""
        if kind not in self.kinds or not self.active:
            return False
        n = self.count
        self.count += 1
        if self.fail_at is None or n < self.fail_at or (n > self.fail_at and not self.sticky):
            return False
        self.failures.append((kind, path))
        return True

    def _raise(self, path: str):
        # as pwrite / fsync on a descriptor report it: no file name (the caller must say which)
        raise OSError(self.err, os.strerror(self.err))

    def __getattr__(self, name):
        # reads (read, read_range, size, exists, is_dir, is_link, list_dir) and rmdir pass through
        return getattr(self.inner, name)

    # -- mutations: injection points -----------------------------------------------------------
    def write_at(self, path, offset, data):
        if self._point("write_at", path):
            if self.partial and len(data) > 1:
                self.inner.write_at(path, offset, bytes(data[: len(data) // 2]))
            self._raise(path)
        self.inner.write_at(path, offset, data)

    def replace(self, path, data, *, fsync=False):
        if self._point("replace", path):
            self._raise(path)
        self.inner.replace(path, data, fsync=fsync)

    def rename(self, src, dst):
        if self._point("rename", dst):
            self._raise(dst)
        self.inner.rename(src, dst)

    def truncate(self, path, size):
        if self._point("truncate", path):
            self._raise(path)
        self.inner.truncate(path, size)

    def remove(self, path):
        if self._point("remove", path):
            self._raise(path)
        self.inner.remove(path)

    def makedirs(self, path):
        if not self.inner.is_dir(path) and self._point("mkdir", path):
            self._raise(path)
        self.inner.makedirs(path)

    def fsync(self, path):
        if self._point("fsync", path):
            self._raise(path)
        self.inner.fsync(path)

    def fsync_dir(self, path):
        if self._point("fsync_dir", path):
            self._raise(path)
        self.inner.fsync_dir(path)
