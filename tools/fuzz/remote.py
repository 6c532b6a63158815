"""Target ``remote`` (issue 27): the seed record read at a URL of a hostile HTTP server on 127.0.0.1
(``spec_tests/servers.py``) that misbehaves on one or two of its files or directory pages per input."""
from __future__ import annotations

import json
import os
import random
import shutil
import sys

from .mutate import files_of


_REMOTE: dict = {}
#: What the hostile server may do to a file, and to a directory page (spec_tests/servers.py).
REMOTE_FILE_FAULTS = ("missing", "norange", "flood", "endless", "stall", "slow", "flip", "error", "cut", "short")
REMOTE_PAGE_FAULTS = ("missing", "flood", "endless", "slow")
REMOTE_OPTIONS = {"read_timeout": 0.25, "connect_timeout": 2}


def _remote_setup(work: str, seeds: list[str]) -> dict | None:
    """The hostile server (on 127.0.0.1) over a copy of the seed directory and archive, and what the
    local copies read as; None without the remote extra."""
    try:
        import aiohttp  # noqa: F401
        import fsspec  # noqa: F401
    except ImportError:
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "spec_tests"))
    from pathlib import Path
    from servers import http_server
    from mrec.check.fixtures import describe
    root = os.path.join(work, "served")
    shutil.copytree(seeds[0], os.path.join(root, "r.mrec"))
    shutil.copy(seeds[2], os.path.join(root, "r.mrec.zip"))
    server = http_server(Path(root))
    server.delay, server.flood_bytes = 0.5, 16 * 1024 * 1024
    tree = os.path.join(root, "r.mrec")
    files = ["/r.mrec/" + os.path.relpath(f, tree).replace(os.sep, "/") for f in files_of(tree, lambda f, d: True)]
    pages = ["/r.mrec/"] + ["/r.mrec/" + os.path.relpath(d, tree).replace(os.sep, "/") + "/"
                            for d, _, _ in os.walk(tree) if d != tree]
    return {"server": server, "files": files, "pages": pages, "chunks": [f for f in files if "/c/" in f],
            "want": {form: describe(os.path.join(root, "r" + form)) for form in (".mrec", ".mrec.zip")}}


def _remote_faults(rng: random.Random, state: dict, form: str) -> dict[str, str]:
    """One or two (URL path suffix -> mode); a flipped bit only where a checksum covers it (the archive,
    the chunks of the directory form: its zarr.json files have none, on disk or served)."""
    faults = {}
    for _ in range(rng.choice((1, 1, 2))):
        mode = rng.choice(REMOTE_FILE_FAULTS)
        if form == ".mrec.zip":
            faults["/r.mrec.zip"] = mode
        elif mode == "flip":
            faults[rng.choice(state["chunks"])] = mode
        elif mode in REMOTE_PAGE_FAULTS and rng.random() < 0.3:
            faults[rng.choice(state["pages"])] = mode
        else:
            faults[rng.choice(state["files"])] = mode
    return faults


def remote_case(rng: random.Random, work: str, seeds: list[str]) -> tuple[str, callable]:
    """The whole seed record read at a URL while the hostile server misbehaves: the local record's
    content or an MrecError."""
    if work not in _REMOTE:
        _REMOTE[work] = _remote_setup(work, seeds)
    state = _REMOTE[work]
    if state is None:
        return "skipped (no remote extra)", lambda: None
    from mrec.check.fixtures import describe
    form = rng.choice((".mrec", ".mrec.zip"))
    faults = _remote_faults(rng, state, form)
    server = state["server"]

    def run():
        server.faults.clear()
        server.faults.update(faults)
        before = os.environ.get("MREC_STORAGE_OPTIONS")
        os.environ["MREC_STORAGE_OPTIONS"] = json.dumps(REMOTE_OPTIONS)
        try:
            got = describe(server.url + "/r" + form)
        finally:
            server.faults.clear()
            if before is None:
                os.environ.pop("MREC_STORAGE_OPTIONS")
            else:
                os.environ["MREC_STORAGE_OPTIONS"] = before
        if got != state["want"][form]:
            raise AssertionError(f"wrong content read through {faults}")
    return f"r{form} with {faults}", run


def remote_stop() -> None:
    for state in _REMOTE.values():
        if state is not None:
            state["server"].stop()
    _REMOTE.clear()
