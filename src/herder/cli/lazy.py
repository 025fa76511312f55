"""Sub-commands registered by where they live, loaded only when one is run or asked for its help.

The areas of the command line together import most of herder (the server, the emulator, templates, the
Talos library): a group that imported them to list them would make every short command pay for all of
them. A lazy group lists each sub-command with the one-line help it is given here (a test keeps it equal
to the command's own) and imports the sub-command's module when the command line names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A sub-command: ``attribute`` of ``module``, a Typer app (a group) or a command function."""

    module: str
    attribute: str
    help: str

    def load(self, name: str) -> Any:
        """The sub-command, as the command line's (typer's own click) command."""
        target = getattr(importlib.import_module(self.module), self.attribute)
        # Made as a sub-command of a group of herder's, as if registered there: with its plain help and
        # without the completion options that only the root has.
        parent = typer.Typer(rich_markup_mode=None, add_completion=False)
        parent.callback()(_nothing)
        if isinstance(target, typer.Typer):
            parent.add_typer(target, name=name)
        else:
            parent.command(name)(target)
        group = typer.main.get_command(parent)
        assert isinstance(group, TyperGroup)
        return group.commands[name]


def _nothing() -> None:
    pass


def lazy_group(commands: Mapping[str, Lazy]) -> type[TyperGroup]:
    """A group class (for ``typer.Typer(cls=…)``) with ``commands`` besides the group's own."""

    class LazyGroup(TyperGroup):
        # Typer (0.26 and later) carries its own click (typer._click), whose types are private: Any stands for them.
        def list_commands(self, ctx: Any) -> list[str]:
            return sorted({*super().list_commands(ctx), *commands})

        def get_command(self, ctx: Any, cmd_name: str) -> Any:
            lazy = commands.get(cmd_name)
            if lazy is not None:
                return lazy.load(cmd_name)
            return super().get_command(ctx, cmd_name)

        def format_commands(self, ctx: Any, formatter: Any) -> None:
            rows: list[tuple[str, str]] = []
            for name in self.list_commands(ctx):
                lazy = commands.get(name)
                if lazy is not None:
                    rows.append((name, lazy.help))
                    continue
                command = super().get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(formatter.width)))
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)

    return LazyGroup


def short_help(lazy: Lazy, name: str) -> str:
    """The one-line help the command itself gives (what ``Lazy.help`` must say)."""
    command = lazy.load(name)
    text: Any = command.get_short_help_str(limit=200)
    return str(text)
