"""The ``herder`` entry point: one typer application with a sub-command group per area."""

from __future__ import annotations

import typer

from herder.cli import talos

app = typer.Typer(
    name="herder",
    help="herder: a management plane for Talos Linux Kubernetes clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(talos.app, name="talos")


def main() -> None:
    app()
