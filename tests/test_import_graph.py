"""The packages' imports run one way (docs/architecture.md): no package imports one that
imports it back, and the fused kernels know tensors, not the models."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "latentlens"


def imported_packages(path: Path) -> set[str]:
    """The latentlens packages (first name after ``latentlens.``) a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(n.split(".")[1] for n in names if n.startswith("latentlens."))
    return found


def package_graph() -> dict[str, set[str]]:
    """``package -> packages it imports``, over every module of latentlens."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        graph[parts[0]].update(imported_packages(path) - {parts[0]})
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle's packages, each found once from its smallest name."""
    found = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.append(path)
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def test_the_kernels_import_nothing_from_the_models() -> None:
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in (PACKAGE / "kernels").rglob("*.py")
        if "models" in imported_packages(path)
    ]
    assert not offenders, f"latentlens.kernels imports latentlens.models in {offenders}"


def test_no_package_imports_one_that_imports_it_back() -> None:
    assert cycles(package_graph()) == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(planted) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
