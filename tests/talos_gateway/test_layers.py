"""``herder.talos_gateway`` imports only the layers README names for it: ``talos``, ``state``,
``resources`` and ``api`` (with krm's ``Identity`` and ``Access``, the types api's audit trail takes); no
controller, no HTTP server, no emulator."""

from __future__ import annotations

import ast
from pathlib import Path

import herder.talos_gateway

ROOT = Path(herder.talos_gateway.__file__).parent
ALLOWED = {"talos", "state", "resources", "api", "talos_gateway"}


def test_the_gateway_imports_only_the_layers_below_it() -> None:
    for path in ROOT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name == "herder.krm.policy":
                    continue
                if name.startswith("herder."):
                    assert name.split(".")[1] in ALLOWED, f"{path.name} imports {name}"
