"""``herder talos schematic id -f FILE``: the Image Factory ID of a schematic file (the factory's own
format, ``{overlay, customization}``), computed offline exactly as the factory computes it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError

from herder.cli.errors import UsageFailure, one_line_errors
from herder.resources.schematic import Schematic, installer_image

app = typer.Typer(help="Image Factory schematics.", no_args_is_help=True)


def _load(path: Path) -> Schematic:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        raise UsageFailure(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageFailure(f"{path} is not YAML: {exc}") from None
    try:
        return Schematic.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = [
            f"{'.'.join(map(str, e['loc'])) or '(root)'}: "
            + ("unknown field" if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors()
        ]
        raise UsageFailure(f"{path} is not a schematic: " + "; ".join(problems)) from None


@app.command("id")
def schematic_id(
    file: Annotated[Path, typer.Option("--file", "-f", help="The schematic (YAML or JSON; - for stdin).")],
    talos_version: Annotated[
        str | None,
        typer.Option("--talos-version", help="Also print the installer image of this Talos version."),
    ] = None,
) -> None:
    """Print the schematic's Image Factory ID (and, with --talos-version, its installer image)."""
    with one_line_errors():
        schematic = _load(file)
    typer.echo(schematic.id())
    if talos_version:
        typer.echo(installer_image(schematic, talos_version))
