"""``herder.emu`` imports only downward: its modules form no import circle (type-only imports count too), each
subpackage imports only its own layer and those below it, and nothing outside the layers DESIGN §3 lets the
emulator use. The Talos library it stands on (``herder.talos``) has no import circle either."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

LAYERS = ("herder.emu", "herder.emu.cluster", "herder.emu.machine", "herder.emu.bmc", "herder.emu.control")
"""From the bottom up: the shared vocabulary (modules directly in herder.emu), then each subpackage."""
BELOW = frozenset({"talos", "krm", "state", "resources", "infra", "client"})
"""The herder layers the emulator may import (DESIGN §3)."""


def _modules(package: str) -> dict[str, Path]:
    root = Path(str(importlib.import_module(package).__file__)).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = [*package.split("."), *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(tree: ast.AST) -> Iterator[str]:
    """Every module an import anywhere in the tree names (in functions and ``if TYPE_CHECKING:`` too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            assert node.level == 0, "herder imports absolutely"
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _graph(package: str = "herder.emu") -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Imports within a package (module → modules), and the other herder modules each one imports."""
    modules = _modules(package)
    inside: dict[str, set[str]] = {name: set() for name in modules}
    outside: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in _imported(ast.parse(path.read_text(), str(path))):
            if target in modules:
                inside[name].add(target)
            elif target.startswith("herder.") and target.rpartition(".")[0] not in modules:
                outside[name].add(target)
        inside[name].discard(name)
    return inside, outside


def _layer(module: str) -> int:
    return max(i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_the_scan_sees_every_kind_of_import() -> None:
    inside, _outside = _graph()
    # A runtime import, an import of a module through its package, and one of a name from a module.
    assert "herder.emu.machine.lifecycle" in inside["herder.emu.control.emulator"]
    assert "herder.emu.machine.certs" in inside["herder.emu.machine.lifecycle"]
    assert "herder.emu.control.store" in inside["herder.emu.control.process"]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circle(graph) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", ["herder.emu", "herder.talos"])
def test_no_import_circle(package: str) -> None:
    inside, _outside = _graph(package)
    assert _circle(inside) is None, " → ".join(_circle(inside) or ())


def test_layers_import_only_downward() -> None:
    inside, _outside = _graph()
    upward = sorted(
        f"{module} → {target}"
        for module, targets in inside.items()
        for target in targets
        if _layer(target) > _layer(module)
    )
    assert not upward


def test_only_the_layers_below_the_emulator_are_imported() -> None:
    _inside, outside = _graph()
    foreign = sorted(
        f"{module} → {target}"
        for module, targets in outside.items()
        for target in targets
        if target.split(".")[1] not in BELOW
    )
    assert not foreign
