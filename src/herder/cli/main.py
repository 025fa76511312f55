"""The ``herder`` entry point: one typer application with a sub-command group per area."""

from __future__ import annotations

import typer

from herder.cli import accounts, audit, clusters, emu, infraproviders, machines, objects, serve, talos

app = typer.Typer(
    name="herder",
    help="herder: a management plane for Talos Linux Kubernetes clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(talos.app, name="talos")
app.command("serve")(serve.serve_command)
app.command("demo")(serve.demo)
app.command("get")(objects.get)
app.command("apply")(objects.apply)
app.command("delete")(objects.delete)
app.command("describe")(objects.describe)
app.add_typer(accounts.app, name="serviceaccount")
app.command("audit")(audit.audit_events)
app.add_typer(clusters.app, name="cluster")
app.add_typer(machines.app, name="machine")
app.add_typer(emu.app, name="emu")
app.add_typer(infraproviders.app, name="infraprovider")
app.add_typer(infraproviders.requests_app, name="machinerequest")


def main() -> None:
    app()
