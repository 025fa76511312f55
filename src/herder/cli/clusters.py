"""``herder cluster``: the credentials of a cluster (its kubeconfig, made by the server from the cluster's
secrets, which users never read themselves, and a talosconfig for herder's Talos API gateway); an etcd
backup of it now; a support bundle of it."""

from __future__ import annotations

import io
import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Annotated

import typer

from herder.cli.errors import fail, one_line_errors
from herder.cli.files import STDOUT, write_private
from herder.cli.kubeconfigs import KubeconfigOption, kubeconfig_path
from herder.cli.lazy import Lazy, lazy_group
from herder.cli.quick import connect_rest, one_line_failures
from herder.client.kubeconfig import proxied

app = typer.Typer(
    help="Clusters: their credentials, templates and operations.",
    no_args_is_help=True,
    cls=lazy_group(
        {
            "rotate": Lazy(
                "herder.cli.cluster_rotate",
                "rotate",
                "Rotate the cluster's Talos API CA or Kubernetes CA without downtime.",
            ),
            "template": Lazy(
                "herder.cli.cluster_templates",
                "app",
                "Clusters as Omni cluster templates: validate and render offline; sync, diff, status, delete, "
                "export.",
            ),
            "import": Lazy(
                "herder.cli.cluster_import",
                "import_cluster",
                "Take over a running Talos cluster herder did not make; its machines keep their configs.",
            ),
            "kubernetes": Lazy(
                "herder.cli.cluster_kubernetes",
                "app",
                "What herder keeps in a cluster's Kubernetes: manifest-sync, upgrade-pre-checks.",
            ),
        }
    ),
)

OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="File to write (mode 0600); - for standard output.")
]
TtlOption = Annotated[
    int, typer.Option("--ttl", help="Seconds until the credentials expire.", min=1, max=30 * 24 * 3600)
]
NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the cluster.")]


def _download(action: str, name: str, output: str, ttl: int, namespace: str, kubeconfig: Path | None) -> None:
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        cluster = rest.kind("clusters")
        data = rest.raw("POST", cluster.path(namespace, name, action), body={"ttlSeconds": ttl}, accept="*/*")
    if output == STDOUT:
        sys.stdout.buffer.write(data)
        return
    with one_line_errors():
        write_private(Path(output), data)
    typer.echo(f"{action} of cluster {name} written to {output} (valid for {ttl}s)", err=True)


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
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        clusters = rest.kind("clusters")
        rest.request("GET", clusters.path(namespace, name))  # it exists, and you may see it
        data = proxied(kubeconfig_path(kubeconfig), name, namespace).encode()
    if output == STDOUT:
        sys.stdout.buffer.write(data)
        return
    with one_line_errors():
        write_private(Path(output), data)
    typer.echo(f"kubeconfig of cluster {name} (through herder, as you) written to {output}", err=True)


@app.command()
def talosconfig(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    output: OutputOption = STDOUT,
    ttl: TtlOption = 3600,
    namespace: NamespaceOption = "default",
    break_glass: Annotated[
        bool,
        typer.Option(
            "--break-glass",
            help="An os:admin talosconfig signed by the cluster's own Talos CA, straight to its control "
            "planes (Admin; audited, and marked on the cluster): for when herder's gateway cannot serve. It "
            "stays valid for --ttl whatever happens, until the cluster's Talos CA is rotated.",
        ),
    ] = False,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """A talosconfig for the cluster's machines through herder's Talos API gateway, its certificate naming
    you with the Talos role of your herder role (Reader: os:reader, Operator: os:operator, Admin and
    Support: os:admin), short-lived: an hour unless --ttl says otherwise."""
    action = "talosconfig-break-glass" if break_glass else "talosconfig"
    _download(action, name, output, ttl, namespace, kubeconfig)


@app.command()
def backup(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    namespace: NamespaceOption = "default",
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds to wait for the backup.", min=1)] = 300,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Take an etcd backup of the cluster now (Operator and up) and print the EtcdBackup's name."""

    with one_line_failures(), connect_rest(kubeconfig) as rest:
        cluster = rest.kind("clusters")
        answer = rest.raw("POST", cluster.path(namespace, name, "backup"), body={})
        number = int(json.loads(answer)["requested"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = rest.request("GET", cluster.path(namespace, name)).get("status") or {}
            backups = status.get("backups") or {}
            if int(backups.get("served") or 0) >= number:
                if backups.get("lastError"):
                    raise fail(f"backup of cluster {name} failed: {backups['lastError']}")
                typer.echo(str(backups.get("lastBackup", "")))
                return
            time.sleep(0.5)
    raise fail(f"backup of cluster {name} asked for, not taken within {timeout}s (it still will be)")


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
    typer.echo(f"gathering the support bundle of cluster {name}…", err=True)
    # The bundle asks the cluster's machines, etcd and Kubernetes now: it may take a while.
    with one_line_failures(), connect_rest(kubeconfig, timeout=120) as rest:
        cluster = rest.kind("clusters")
        data = rest.raw("POST", cluster.path(namespace, name, "support"), body={}, accept="application/zip")
    with one_line_errors():
        write_private(path, data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        files = len(archive.namelist())
    typer.echo(
        f"support bundle of cluster {name} written to {path} ({files} files, {len(data)} bytes)", err=True
    )


def _set_lock(name: str, namespace: str, kubeconfig: Path | None, locked: bool) -> None:
    from herder.client.rest import MERGE_PATCH
    from herder.resources.clusters import LOCKED_ANNOTATION

    with one_line_failures(), connect_rest(kubeconfig) as rest:
        clusters = rest.kind("clusters")
        body = {"metadata": {"annotations": {LOCKED_ANNOTATION: "true" if locked else None}}}
        rest.request("PATCH", clusters.path(namespace, name), body=body, content_type=MERGE_PATCH)
    if locked:
        typer.echo(f"cluster {name} locked: herder changes nothing on its machines until it is unlocked")
    else:
        typer.echo(f"cluster {name} unlocked: herder manages its machines again")


@app.command()
def lock(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Lock the cluster (Operator on it; audited): herder changes nothing on its machines (no config apply,
    upgrade, allocation change, teardown or reset) and a delete waits, while its status is still observed.
    The cluster shows the condition Locked."""
    _set_lock(name, namespace, kubeconfig, True)


@app.command()
def unlock(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Unlock the cluster (Operator on it; audited): what waited for it goes on."""
    _set_lock(name, namespace, kubeconfig, False)
