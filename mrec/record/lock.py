"""The single-writer lock of a record: ``<record>/.mrec-writer.lock`` holding the writer's pid.

Used by the trajectory writer (one writer at a time) and by pack (never pack a live store).
"""
from __future__ import annotations

import json
import os
import re

LOCK_NAME = ".mrec-writer.lock"


def parse_lock_pid(text: bytes) -> int | None:
    """The writer pid a lock file holds: a bare integer, or JSON with ``pid``; None if unreadable."""
    try:
        s = text.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if s.isdigit():
        pid = int(s)
        return pid if pid > 0 else None
    try:
        doc = json.loads(s)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and type(doc.get("pid")) is int and doc["pid"] > 0:
        return doc["pid"]
    match = re.match(r"^\s*(\d+)\b", s)
    if match and int(match.group(1)) > 0:
        return int(match.group(1))
    return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 probes without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True
