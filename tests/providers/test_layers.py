"""``herder.providers`` uses herder only as any provider may (DESIGN §3): the provider SDK, the API client,
the object model, and the Talos library to reach its machines; never the store, the controllers, the
server or the emulator."""

from __future__ import annotations

import ast
from pathlib import Path

import herder.providers

ROOT = Path(herder.providers.__file__).parent
ALLOWED = frozenset({"providers", "infra", "client", "resources", "talos"})


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_providers_import_only_the_sdk_the_client_the_model_and_talos() -> None:
    modules = sorted(ROOT.rglob("*.py"))
    assert len(modules) >= 8  # the scan sees the package
    foreign = sorted(
        f"{path.relative_to(ROOT)} → {name}"
        for path in modules
        for name in _imports(path)
        if name.startswith("herder.") and name.split(".")[1] not in ALLOWED
    )
    assert not foreign
