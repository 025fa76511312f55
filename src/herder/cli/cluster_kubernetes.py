"""``herder cluster kubernetes``: what herder keeps in a cluster's Kubernetes. ``manifest-sync`` shows, object
by object, what syncing the cluster's ClusterManifests would change (the workload cluster's own server-side
dry run, through herder's proxy as you) and then has herder sync them now; ``upgrade-pre-checks`` lists the
objects a Kubernetes upgrade would strand (served only in API versions the target removes)."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from herder.cli.common import KubeconfigOption, connect, kubeconfig_path, out, run
from herder.cli.errors import fail
from herder.client import Client
from herder.client.kubeconfig import load
from herder.controllers.kubernetes.manifest_sync import plan
from herder.controllers.kubernetes.pre_checks import stranded
from herder.controllers.kubernetes.workload import WorkloadAPI
from herder.resources import Resource, now_rfc3339
from herder.resources.clusters import CLUSTER, ClusterSpec
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.manifests import (
    CLUSTER_MANIFEST,
    SYNC_REQUESTED_ANNOTATION,
    ClusterManifestSpec,
    ClusterManifestStatus,
    describe,
)
from herder.resources.status import status_of

app = typer.Typer(
    help="What herder keeps in a cluster's Kubernetes: manifests and upgrade pre-checks.",
    no_args_is_help=True,
)

NameArgument = Annotated[str, typer.Argument(help="The cluster's name.")]
NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the cluster.")]


def _workload(kubeconfig: Path | None, name: str, namespace: str) -> tuple[httpx.AsyncClient, WorkloadAPI]:
    """The cluster's Kubernetes API through herder's proxy, as the caller."""
    credentials = load(kubeconfig_path(kubeconfig))
    verify: ssl.SSLContext | bool = True
    if credentials.insecure:
        verify = False
    elif credentials.ca_pem is not None:
        verify = ssl.create_default_context(cadata=credentials.ca_pem.decode())
    headers = {"Authorization": f"Bearer {credentials.token}"} if credentials.token else {}
    client = httpx.AsyncClient(verify=verify, headers=headers, timeout=30)
    return client, WorkloadAPI(client, f"{credentials.server}/k8s/clusters/{namespace}/{name}")


@app.command("manifest-sync")
def manifest_sync(
    name: NameArgument,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would change; change nothing.")
    ] = False,
    namespace: NamespaceOption = "default",
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds to wait for the sync.", min=1)] = 120,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show each object of the cluster's ClusterManifests that a sync would create, change or prune (the
    workload cluster's server-side dry run), then, unless --dry-run, sync them now and print how each
    went. Exit 1 when an object failed."""

    async def work() -> int:
        async with connect(kubeconfig) as client:
            await client.get(CLUSTER, name, namespace)  # it exists, and you may see it
            listed = await client.list(CLUSTER_MANIFEST, namespace, label_selector=f"{CLUSTER_LABEL}={name}")
            manifests = sorted(listed.items, key=lambda m: m.name)
            if not manifests:
                out.print(f"cluster {name} has no ClusterManifests", markup=False)
                return 0
            http, api = _workload(kubeconfig, name, namespace)
            async with http:
                pending = 0
                for manifest in manifests:
                    spec = CLUSTER_MANIFEST.spec_of(manifest, ClusterManifestSpec)
                    status = status_of(manifest, ClusterManifestStatus)
                    out.print(f"clustermanifest {manifest.name} ({spec.mode}):", markup=False)
                    for change in await plan(api, spec, status.inventory):
                        if change.action != "unchanged":
                            pending += 1
                        out.print(f"  {change}".rstrip(), markup=False)
            if dry_run:
                out.print(f"{pending} change(s) pending (dry run: nothing changed)", markup=False)
                return 0
            failed = 0
            for manifest in manifests:
                failed += await _sync_now(client, manifest, timeout)
            return 1 if failed else 0

    code = run(work)
    if code:
        raise typer.Exit(code)


async def _sync_now(client: Client, manifest: Resource, timeout: float) -> int:
    """Ask herder to sync one manifest now; print each object's result; the number that failed."""
    requested = now_rfc3339()
    before = status_of(manifest, ClusterManifestStatus).last_sync_time
    patch = {"metadata": {"annotations": {SYNC_REQUESTED_ANNOTATION: f"{requested} {time.monotonic_ns()}"}}}
    await client.patch(CLUSTER_MANIFEST, manifest.name, patch, manifest.namespace)
    deadline = time.monotonic() + timeout
    status = status_of(manifest, ClusterManifestStatus)
    while time.monotonic() < deadline:
        current = await client.get(CLUSTER_MANIFEST, manifest.name, manifest.namespace)
        status = status_of(current, ClusterManifestStatus)
        if status.last_sync_time and status.last_sync_time != before and status.last_sync_time >= requested:
            break
        await asyncio.sleep(0.5)
    else:
        raise fail(f"clustermanifest {manifest.name}: not synced within {timeout:g}s (it still will be)")
    for result in status.objects:
        line = f"  {result.state.lower()} {describe(result.ref)}" + (
            f": {result.message}" if result.message else ""
        )
        out.print(line, markup=False)
    failed = sum(1 for r in status.objects if r.state == "Failed")
    out.print(
        f"clustermanifest {manifest.name}: synced" + (f", {failed} failed" if failed else ""), markup=False
    )
    return failed


@app.command("upgrade-pre-checks")
def upgrade_pre_checks(
    name: NameArgument,
    to: Annotated[str, typer.Option("--to", help="The Kubernetes version to upgrade to, e.g. 1.34.1.")],
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """List the cluster's objects that are served only in API versions Kubernetes TO removes (each with its
    replacement), as herder checks before it upgrades; nothing is upgraded. Exit 1 when there are any."""

    async def work() -> int:
        async with connect(kubeconfig) as client:
            cluster = await client.get(CLUSTER, name, namespace)
            current = CLUSTER.spec_of(cluster, ClusterSpec).kubernetes_version
            http, api = _workload(kubeconfig, name, namespace)
            async with http:
                try:
                    found = await stranded(api, current, to)
                except ValueError as exc:
                    raise fail(str(exc)) from None
        if not found:
            out.print(f"cluster {name}: no objects in API versions removed by Kubernetes {to}", markup=False)
            return 0
        for item in found:
            out.print(str(item), markup=False)
        out.print(f"{len(found)} object(s) would be stranded by the upgrade to {to}", markup=False)
        return 1

    code = run(work)
    if code:
        raise typer.Exit(code)
