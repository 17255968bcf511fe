"""The workbook's import graph has no cycles: between modules, and between rooms (``workbook/<room>/``).

Every import counts, also one inside a function (a lazy import still ties two modules together:
following one option through the code would climb back up the graph). A cycle makes a room
impossible to read on its own, and is how the RLHF command once spread over three rooms that
called each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workbook"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The workbook modules ``path`` imports, anywhere in the file (``from a import b`` → ``a.b`` if that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import workbook.lm.model.GPT`-style: the longest module prefix
                target = target.rpartition(".")[0]
            if target and target != "workbook" and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, name, known) for name, path in known.items()}


def room(module: str) -> str:
    """``workbook.lm.model`` → ``lm``; a top-level module is its own room (``workbook.cli`` → ``cli``)."""
    return module.split(".")[1] if module != "workbook" else module


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_checker_finds_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    known = {"workbook.x.y": Path("y"), "workbook.x": Path("x"), "workbook.z": Path("z")}
    tmp = PACKAGE / "x"  # resolution only; the file is never written
    assert room("workbook.lm.model") == "lm" and room("workbook.cli") == "cli"
    assert module_name(tmp / "y.py") == "workbook.x.y" and known


def test_imports_are_resolved_to_modules(tmp_path):
    graph_ = graph()
    assert "workbook.lm.model" in graph_["workbook.loop.algorithms"], "a module-level import"
    assert "workbook.lm.reward" in graph_["workbook.rlhf.rewards"], "an import inside a function"
    assert "workbook.distributed" in graph_["workbook.loop.run"], "from workbook import distributed"


@pytest.mark.parametrize("level", ["module", "room"])
def test_no_import_cycles(level):
    edges = graph()
    if level == "room":
        rooms: dict[str, set[str]] = {}
        for source, targets in edges.items():
            rooms.setdefault(room(source), set()).update(room(t) for t in targets if room(t) != room(source))
        edges = rooms
    cycle = find_cycle(edges)
    assert cycle is None, f"import cycle between {level}s: {' -> '.join(cycle)}"
