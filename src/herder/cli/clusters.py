"""``herder cluster``: the credentials of a cluster (its kubeconfig, made by the server from the cluster's
secrets, which users never read themselves, and a talosconfig for herder's Talos API gateway); an etcd
backup of it now; a support bundle of it."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Annotated

import typer

from herder.cli import cluster_templates
from herder.cli.common import KubeconfigOption, connect, err, kubeconfig_path, out, run
from herder.cli.errors import fail, one_line_errors
from herder.cli.files import STDOUT, write_private
from herder.client.kubeconfig import proxied
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
    ttl: Annotated[
        int,
        typer.Option(
            "--ttl", help="With --break-glass: seconds until it expires.", min=1, max=30 * 24 * 3600
        ),
    ] = 3600,
    namespace: NamespaceOption = "default",
    break_glass: Annotated[
        bool,
        typer.Option(
            "--break-glass",
            help="The cluster's own admin kubeconfig, straight to its API (Admin; audited, and marked on the "
            "cluster): for when herder's proxy cannot serve. It stays valid for --ttl whatever happens.",
        ),
    ] = False,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """A kubeconfig for the cluster's Kubernetes API through herder (https://HERDER/k8s/clusters/NS/NAME), as
    you: with your herder credential, checked on every request, and the Kubernetes groups herder's access
    policy gives you there. Access ends when your credential or your rights do."""
    if break_glass:
        _download("kubeconfig", name, output, ttl, namespace, kubeconfig)
        return
    path = kubeconfig_path(kubeconfig)

    async def check() -> None:
        async with connect(kubeconfig) as client:
            await client.get(CLUSTER, name, namespace)  # it exists, and you may see it

    run(check)
    with one_line_errors():
        data = proxied(path, name, namespace).encode()
        if output == STDOUT:
            sys.stdout.buffer.write(data)
            return
        write_private(Path(output), data)
    err.print(f"kubeconfig of cluster {name} (through herder, as you) written to {output}", markup=False)


@app.command()
def talosconfig(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    output: OutputOption = STDOUT,
    ttl: TtlOption = 3600,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """A talosconfig for the cluster's machines through herder's Talos API gateway, its certificate naming
    you with the Talos role of your herder role (Reader: os:reader, Operator: os:operator, Admin and
    Support: os:admin), short-lived: an hour unless --ttl says otherwise."""
    _download("talosconfig", name, output, ttl, namespace, kubeconfig)


@app.command()
def backup(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    namespace: NamespaceOption = "default",
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds to wait for the backup.", min=1)] = 300,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Take an etcd backup of the cluster now (Operator and up) and print the EtcdBackup's name."""

    async def work() -> str:
        async with connect(kubeconfig) as client:
            answer = await client.run_action(CLUSTER, name, "backup", {}, namespace)
            number = int(json.loads(answer)["requested"])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                backups = ((await client.get(CLUSTER, name, namespace)).status or {}).get("backups") or {}
                if int(backups.get("served") or 0) >= number:
                    if backups.get("lastError"):
                        raise fail(f"backup of cluster {name} failed: {backups['lastError']}")
                    return str(backups.get("lastBackup", ""))
                await asyncio.sleep(0.5)
        raise fail(f"backup of cluster {name} asked for, not taken within {timeout}s (it still will be)")

    out.print(run(work), markup=False)


@app.command()
def support(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The zip to write (mode 0600; default: NAME-support.zip).",
            show_default=False,
        ),
    ] = None,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """A support bundle of the cluster (Reader and up): its objects, conditions, Events, rollouts and audit
    entries, each machine's last logs and kernel log, etcd's status and members, the versions of herder,
    Talos and Kubernetes, and a README.txt of what is inside; no secret herder holds for the cluster."""
    path = output or Path(f"{name}-support.zip")
    err.print(f"gathering the support bundle of cluster {name}…", markup=False)

    async def work() -> bytes:
        async with connect(kubeconfig) as client:
            return await client.run_action(CLUSTER, name, "support", {}, namespace, timeout=120)

    data = run(work)
    with one_line_errors():
        write_private(path, data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        files = len(archive.namelist())
    err.print(
        f"support bundle of cluster {name} written to {path} ({files} files, {len(data)} bytes)", markup=False
    )
