"""``herder talos``: a small talosctl — config generation, validation, patching, machine API calls."""

from __future__ import annotations

import typer

from herder.cli import talos_config, talos_gen, talos_inspect, talos_machine, talos_schematic

app = typer.Typer(help="Talos configs and the Talos machine API.", no_args_is_help=True)

talos_gen.register(app)
talos_config.register(app)
talos_machine.register(app)
talos_inspect.register(app)
app.add_typer(talos_schematic.app, name="schematic")
