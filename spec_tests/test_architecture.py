"""The house map: docs/architecture.md's room table is the rule every import in ``mrec/`` follows.

* each module belongs to the room with the longest path containing it, and every room in the table
  exists on disk (and every package of ``mrec/`` belongs to a room);
* an import (top-level or inside a function) from room A to room B is allowed only when B is in A's
  "may import" cell, and the table itself is ordered lowest first (a room lists only rooms above it);
* no two modules import each other through any chain (``if TYPE_CHECKING:`` imports aside);
* no module of ``mrec/`` or ``tools/`` is longer than 600 lines.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mrec"
MAX_LINES = 600


def _rooms() -> list[tuple[str, list[str]]]:
    """(room path, may-import room paths) from the map, in the table's order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`mrec"):
            continue
        may = cells[3]
        allowed = ["*"] if may.startswith("every room") else re.findall(r"`(mrec[^`]*)`", may)
        rows.append((cells[0].strip("`"), allowed))
    return rows


ROOMS = _rooms()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def room_of(path: Path) -> str:
    rel = path.relative_to(ROOT).as_posix()
    best = None
    for room, _ in ROOMS:
        if rel == room or (room.endswith("/") and rel.startswith(room)):
            if best is None or len(room) > len(best):
                best = room
    assert best is not None, f"{rel} is in no room of docs/architecture.md's map"
    return best


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported mrec module, line, under TYPE_CHECKING) for every import in the file."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    found: list[tuple[str, int, bool]] = []

    def target(name: str) -> str:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    def visit(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            g = guarded or (isinstance(child, ast.If) and _type_checking(child))
            if isinstance(child, ast.Import):
                found.extend((target(a.name), child.lineno, g) for a in child.names if a.name.split(".")[0] == "mrec")
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.split(".")[0] != "mrec":
                    continue
                for a in child.names:
                    sub = f"{mod}.{a.name}"
                    found.append((sub if sub in MODULES else target(mod), child.lineno, g))
            visit(child, g)

    visit(tree, False)
    return found


EDGES = {m: _imports(m, p) for m, p in MODULES.items()}


def test_the_map_lists_rooms_that_exist_and_each_lists_only_rooms_above_it():
    assert len(ROOMS) >= 15
    seen: list[str] = []
    for room, allowed in ROOMS:
        assert (ROOT / room).exists(), f"room {room} of the map does not exist"
        for a in allowed:
            if a != "*":
                assert a in seen, f"{room} may import {a}, which is not listed above it"
        seen.append(room)
    for pkg in {p.parent for p in MODULES.values()}:
        room_of(pkg / "__init__.py")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_import_follows_the_map(module):
    here = room_of(MODULES[module])
    allowed = dict(ROOMS)[here]
    if allowed == ["*"]:
        return
    bad = []
    for target, line, _ in EDGES[module]:
        there = room_of(MODULES[target])
        if there != here and there not in allowed:
            bad.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} ({there})")
    assert not bad, f"{here} may import only {allowed}:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {m: sorted({t for t, _, guarded in EDGES[m] if not guarded and t != m}) for m in MODULES}
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    cycles = []

    def dfs(m: str, stack: list[str]) -> None:
        color[m] = GREY
        stack.append(m)
        for t in graph[m]:
            if color[t] == GREY:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif color[t] == WHITE:
                dfs(t, stack)
        stack.pop()
        color[m] = BLACK

    for m in graph:
        if color[m] == WHITE:
            dfs(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in
                                        list(PKG.rglob("*.py")) + list((ROOT / "tools").rglob("*.py"))))
def test_no_module_over_600_lines(path):
    n = len((ROOT / path).read_text().splitlines())
    assert n <= MAX_LINES, f"{path} has {n} lines (at most {MAX_LINES}: split it by concern)"
