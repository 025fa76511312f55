"""``herder talos validate`` and ``herder talos patch``: check a machine config against a Talos version,
apply config patches to it.

Patch values and failures are handled as ``herder talos gen`` handles them (``@FILE`` or inline text; one
line on stderr and exit code 1 for anything the user can get wrong).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herder.cli.errors import one_line_errors
from herder.cli.files import STDOUT, patch_texts, write_private
from herder.cli.talos_gen import TALOS_FAILURES
from herder.talos.contracts import VersionContract
from herder.talos.patch_layers import check_allowed
from herder.talos.patches import apply_patches, load_patch
from herder.talos.validate import ConfigInvalid, validate_config


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.reason if isinstance(e, UnicodeDecodeError) else e.strerror or str(e)
        typer.echo(f"error: cannot read {file}: {reason}", err=True)
        raise typer.Exit(1) from None


def validate(
    file: Annotated[Path, typer.Argument(help="The machine config to check.", show_default=False)],
    talos_version: Annotated[
        str,
        typer.Option(
            "--talos-version",
            help="Talos version whose config contract applies (X.Y or vX.Y.Z).",
            show_default=False,
        ),
    ],
) -> None:
    """Check a machine config as the given Talos version would: its schema and its cross-field rules."""
    with one_line_errors(*TALOS_FAILURES):
        contract = VersionContract.parse(talos_version)
        text = _read(file)
        try:
            validate_config(text, contract)
        except ConfigInvalid as e:
            typer.echo(f"error: {file}: {e}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"{file} is valid for Talos {contract}")


def patch(
    file: Annotated[Path, typer.Argument(help="The machine config to patch.", show_default=False)],
    patches: Annotated[
        list[str],
        typer.Option(
            "--patch",
            "-p",
            help="A strategic merge or JSON 6902 patch: inline YAML/JSON, or @FILE. Repeat to apply several, in order.",
            show_default=False,
        ),
    ],
    output: Annotated[
        str, typer.Option("--output", "-o", help='Where to write the patched config; "-" for stdout.')
    ] = STDOUT,
    user: Annotated[
        bool,
        typer.Option(
            "--user",
            help="Police the patches as herder polices users' patches of a cluster: refuse those touching secrets,"
            " CAs, the endpoint, the cluster name, the machine type or the install disk.",
        ),
    ] = False,
) -> None:
    """Apply config patches to a machine config, with Talos's patch semantics."""
    with one_line_errors(*TALOS_FAILURES):
        text = _read(file)
        loaded = [load_patch(t) for t in patch_texts(patches, "--patch")]
        if user:
            for value, one in zip(patches, loaded, strict=True):
                check_allowed(one, value if value.startswith("@") else f"--patch {value!r}")
        patched = apply_patches(text, loaded)
        if output == STDOUT:
            typer.echo(patched, nl=False)
        else:
            write_private(Path(output), patched)


def register(app: typer.Typer) -> None:
    """Add ``validate`` and ``patch`` to the ``herder talos`` application."""
    app.command("validate")(validate)
    app.command("patch")(patch)
