"""``herder cluster``: the credentials of a cluster (its kubeconfig and talosconfig), made by the server
from the cluster's secrets, which users never read themselves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from herder.cli import cluster_templates
from herder.cli.common import KubeconfigOption, connect, err, run
from herder.cli.errors import one_line_errors
from herder.cli.files import STDOUT, write_private
from herder.resources.clusters import CLUSTER

app = typer.Typer(help="Clusters: their credentials, templates and operations.", no_args_is_help=True)
app.add_typer(cluster_templates.app, name="template")

OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="File to write (mode 0600); - for standard output.")
]
TtlOption = Annotated[
    int, typer.Option("--ttl", help="Seconds until the credentials expire.", min=1, max=30 * 24 * 3600)
]
NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the cluster.")]


def _download(action: str, name: str, output: str, ttl: int, namespace: str, kubeconfig: Path | None) -> None:
    async def work() -> bytes:
        async with connect(kubeconfig) as client:
            return await client.run_action(CLUSTER, name, action, {"ttlSeconds": ttl}, namespace)

    data = run(work)
    if output == STDOUT:
        sys.stdout.buffer.write(data)
        return
    with one_line_errors():
        write_private(Path(output), data)
    err.print(f"{action} of cluster {name} written to {output} (valid for {ttl}s)", markup=False)


@app.command()
def kubeconfig(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    output: OutputOption = STDOUT,
    ttl: TtlOption = 3600,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The cluster's admin kubeconfig (Operator and up), short-lived: an hour unless --ttl says otherwise."""
    _download("kubeconfig", name, output, ttl, namespace, kubeconfig)


@app.command()
def talosconfig(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    output: OutputOption = STDOUT,
    ttl: TtlOption = 3600,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """A talosconfig of the cluster with the Talos role of your herder role (Reader: os:reader,
    Operator: os:operator, Admin: os:admin)."""
    _download("talosconfig", name, output, ttl, namespace, kubeconfig)
