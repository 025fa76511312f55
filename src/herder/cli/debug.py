"""``herder debug``: what herder is made of, for those who extend or operate it.

``herder debug controllers`` lists every controller a server runs with its primary kind, its inputs (the
kinds it watches) and its outputs (what it owns, creates, deletes and which fields it sets), read from
the controllers' own declarations; ``--markdown`` prints ``docs/controllers.md``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from herder.controllers.catalog import ControllerOptions, listed_controllers
from herder.resources.catalog import herder_registry
from herder.runtime.describe import inputs, markdown, output_lines
from herder.state.memory import MemoryBackend
from herder.state.store import Store

app = typer.Typer(
    help="What herder is made of: its controllers and what each reads and writes.", no_args_is_help=True
)


@app.command("controllers")
def list_controllers(
    as_markdown: Annotated[bool, typer.Option("--markdown", help="Print docs/controllers.md.")] = False,
) -> None:
    """Every controller with its primary kind, inputs and outputs (who writes which status field)."""
    running = listed_controllers(Store(MemoryBackend(), herder_registry()), ControllerOptions())
    if as_markdown:
        typer.echo(markdown(running), nl=False)
        return
    table = Table("CONTROLLER", "PRIMARY", "INPUTS", "OUTPUTS", box=None, show_lines=True)
    for controller in running:
        outputs = "\n".join(line for output in controller.outputs for line in output_lines(output))
        table.add_row(controller.name, controller.primary, ", ".join(inputs(controller)), outputs)
    Console(width=200).print(table)
