"""The layout stays legible: no import cycles (function-level imports included), small
modules, short functions.

docs/architecture.md describes the pipeline these tests keep honest: ``core`` (torch
only) <- ``schema`` <- ``checks`` <- ``plugin`` <- ``tools``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "amp_conformance"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
#: what each layer may import (besides itself); suite/ (the shipped tests) may import anything
LAYERS = {
    "core": set(),
    "schema": {"core"},
    "checks": {"core", "schema"},
    "plugin": {"core", "schema", "checks"},
    "tools": {"core", "schema", "checks", "plugin"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Package modules imported anywhere in the module, inside functions too: a function-level
    import hides a cycle, it does not remove it (``from pkg import sub`` counts as ``sub``)."""
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
            deps |= subs or ({node.module} & set(modules))
        elif isinstance(node, ast.Import):
            deps |= {a.name for a in node.names} & set(modules)
    return deps


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_no_import_cycles():
    graph, state, cycles = _graph(), {}, []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_layers_import_only_downwards():
    wrong = []
    for module, deps in _graph().items():
        layer = _layer(module)
        if layer is None:
            continue
        for dep in deps:
            dep_layer = _layer(dep)
            if dep_layer is None or dep_layer == layer:
                continue
            allowed = LAYERS[layer]
            rest = dep.split(".", 1)[1]
            if dep_layer not in allowed and not any(rest.startswith(a) for a in allowed):
                wrong.append(f"{module} imports {dep} ({layer} may import {sorted(allowed)})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_are_small(path: Path):
    rel = str(path.relative_to(PACKAGE))
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{rel}: {lines} lines (at most {MAX_MODULE_LINES})"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{rel}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"
