"""The ``herder`` entry point: one typer application with a sub-command group per area.

A command line names one area, and only that area's module is imported to run it: the areas together
import most of herder (the server, the emulator, templates, the Talos library), which would make every
short command, ``herder talos version`` as much as ``herder serve``, pay for all of them at start.
"""

from __future__ import annotations

import importlib
import sys

import typer

# Sub-command → (module, attribute, whether it is a group of commands).
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "talos": ("herder.cli.talos", "app", True),
    "serve": ("herder.cli.serve", "serve_command", False),
    "demo": ("herder.cli.serve", "demo", False),
    "get": ("herder.cli.objects", "get", False),
    "apply": ("herder.cli.objects", "apply", False),
    "delete": ("herder.cli.objects", "delete", False),
    "describe": ("herder.cli.objects", "describe", False),
    "serviceaccount": ("herder.cli.accounts", "app", True),
    "audit": ("herder.cli.audit", "audit_events", False),
    "cluster": ("herder.cli.clusters", "app", True),
    "machine": ("herder.cli.machines", "app", True),
    "emu": ("herder.cli.emu", "app", True),
    "infraprovider": ("herder.cli.infraproviders", "app", True),
    "machinerequest": ("herder.cli.infraproviders", "requests_app", True),
    "debug": ("herder.cli.debug", "app", True),
    "access": ("herder.cli.access", "app", True),
    "login": ("herder.cli.sso", "login", False),
    "logout": ("herder.cli.sso", "logout", False),
    "auth": ("herder.cli.sso", "auth_app", True),
}


def _root() -> typer.Typer:
    app = typer.Typer(
        name="herder",
        help="herder: a management plane for Talos Linux Kubernetes clusters.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # Plain help, wrapped to the terminal: Rich's tables cut long option names short ("--managed-
        # control-pla…") at 80 columns or in a pipe, where a user or a script looks for them.
        rich_markup_mode=None,
    )

    # A callback keeps herder a group even when one command is registered (typer would run it bare).
    @app.callback()
    def _herder() -> None:
        pass

    return app


def build(names: list[str] | None = None) -> typer.Typer:
    """The application with the sub-commands ``names`` (all of them by default)."""
    app = _root()
    for name in names if names is not None else list(COMMANDS):
        module, attribute, group = COMMANDS[name]
        target = getattr(importlib.import_module(module), attribute)
        if group:
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    return app


def main() -> None:
    first = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    build([first] if first in COMMANDS else None)()
