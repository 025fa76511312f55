"""A command line that answers at once: the everyday commands (``get``, ``describe``, ``apply``, ``delete``,
``cluster kubeconfig``) and ``herder --help`` load neither the server, the emulator, templates, the Talos
library, the async client (httpx) nor the kinds' models, which made every command pay for all of herder;
what they import is measured (``python -X importtime``), so that it does not creep back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from herder.cli.lazy import short_help
from herder.cli.main import COMMANDS
from tests.api.server import Server

# What an everyday command must never load: each costs tens to hundreds of milliseconds at start.
HEAVY = (
    "httpx",
    "rich",
    "pygments",
    "uvicorn",
    "grpc",
    "cryptography",
    "jsonschema",
    "herder.api.serve",
    "herder.krm",
    "herder.state",
    "herder.runtime",
    "herder.controllers",
    "herder.talos",
    "herder.templates",
    "herder.emu",
    "herder.web",
    "herder.client.client",
    "herder.resources.registry",
    "herder.resources.object",
    "herder.resources.clusters",
)
# Runs the command line in this process as the herder script does, then tells what it imported.
_PROBE = """
import json, sys
from herder.cli.main import main
sys.argv = ["herder", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


# Modules loaded beyond typer's own (which every command needs), a measure of the import cost that a
# busy machine does not blur. Measured: herder --help 12, an everyday command about 165; when they loaded
# the async client and the kinds' models, 335 to 620.
_TYPER = "import json, sys, typer; print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
_ALLOWED = {"help": 30, "command": 230}
# What the imports may take, summed from -X importtime, however busy the machine (a second or two when
# everything was loaded on an idle one).
_SECONDS = 5.0


def _run(code: str, *args: str) -> tuple[list[str], float]:
    """What ``code`` imports (its last stderr line, JSON), and what the imports took (s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    lines = done.stderr.splitlines()
    timed = [line for line in lines if line.startswith("import time:") and "self [us]" not in line]
    found = json.loads(lines[-1]) if lines else []
    return found, sum(int(line.split("|")[0].split(":")[1]) for line in timed) / 1e6


def _imports(args: list[str]) -> tuple[list[str], int, float]:
    """What the command line ``args`` imports, how many modules beyond typer's, and what it took (s)."""
    modules, seconds = _run(_PROBE, json.dumps(args))
    return modules, len(modules) - len(_run(_TYPER)[0]), seconds


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["get", "--help"],
        ["describe", "--help"],
        ["apply", "--help"],
        ["delete", "--help"],
        ["cluster", "kubeconfig", "--help"],
    ],
    ids=" ".join,
)
def test_help_loads_little(args: list[str]) -> None:
    modules, extra, seconds = _imports(args)
    assert _heavy(modules) == []
    if args == ["--help"]:
        # The root's help loads no area at all, nor what only commands with arguments need.
        assert not [m for m in modules if m.split(".")[0] in ("pydantic", "yaml")]
        assert [m for m in modules if m.startswith("herder.cli.")] == ["herder.cli.lazy", "herder.cli.main"]
    allowed = _ALLOWED["help" if args == ["--help"] else "command"]
    assert extra < allowed, f"{extra} modules beyond typer's"
    assert seconds < _SECONDS, f"imports took {seconds:.1f} s"


def test_everyday_commands_against_a_server_load_little(server: Server, tmp_path: Path) -> None:
    manifest = tmp_path / "patch.yaml"
    manifest.write_text(
        "apiVersion: herder.dev/v1alpha1\nkind: ConfigPatch\nmetadata: {name: light}\nspec: {data: 'machine: {}'}\n"
    )
    kubeconfig = ["--kubeconfig", str(server.kubeconfig)]
    for args in (
        ["get", "ns"],
        ["get", "cp", "-o", "yaml"],
        ["apply", "-f", str(manifest)],
        ["describe", "cp", "light"],
        ["delete", "cp", "light"],
    ):
        modules, extra, seconds = _imports([*args, *kubeconfig])
        assert _heavy(modules) == [], args
        assert extra < _ALLOWED["command"], f"{args}: {extra} modules beyond typer's"
        assert seconds < _SECONDS, f"{args}: imports took {seconds:.1f} s"


def test_the_lazy_help_is_each_commands_own() -> None:
    for name, lazy in COMMANDS.items():
        assert lazy.help == short_help(lazy, name), name
