"""The benchmark modules import one another in one direction only: no module of
ling_local/bench reaches itself through its imports, counting the imports inside functions
(the lazy ones that keep `ling-local --help` fast are still dependencies)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

BENCH = REPO / "ling_local" / "bench"


def _imports(path: Path, modules: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {f"ling_local.bench.{p.stem}": p for p in BENCH.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for dep in sorted(graph[name]):
            if found := visit(dep, [*path, name]):
                return found
        done.add(name)
        return None

    for name in sorted(graph):
        if found := visit(name, []):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_bench_module_imports_itself_through_another() -> None:
    graph = _graph()
    assert "ling_local.bench.engine_stream" in graph["ling_local.bench.edit"]
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])
