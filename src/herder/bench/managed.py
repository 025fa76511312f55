"""``python -m herder.bench managed --clusters 50``: N clusters with a managed control plane of size xs
(1 machine from a hidden provider) and 2 auto-provisioned workers (from a visible one), on one emulator.

A real ``herder serve --managed-control-planes --support-token-file FILE`` (embedded SQLite), the
emulator and two emulator providers (``herder emu provider``: ``herder-bench`` hidden, registered by
Support, which writes its ``spec.managedControlPlanes``; ``bench`` for the workers) are separate
processes. Once the offering is published, every cluster is created with its workers' set, and the clock
runs until every Cluster is Ready. Prints that time and the store writes per machine (from the server's
own metrics: requests, machines, the clusters' objects, Events).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

from herder.api.datadir import write_kubeconfig
from herder.bench.clusters import (
    Processes,
    create_all,
    new_object,
    per_machine,
    processes,
    read_counters,
    until,
)
from herder.bench.provision import register, start_provider, stop_provider
from herder.bench.report import emit
from herder.client import Client, NotFound
from herder.client.kubeconfig import load
from herder.resources.clusters import CLUSTER, MACHINE_SET
from herder.resources.machines import CLUSTER_LABEL, MACHINE_CLASS
from herder.resources.managed import MANAGED_CONTROL_PLANE_OFFERING
from herder.resources.provisioning import INFRA_PROVIDER
from herder.resources.status import condition_true

MANAGED_PROVIDER = "herder-bench"
OFFERING = "bench"
WORKERS_PROVIDER = "bench"
WORKERS = 2
TALOS = "v1.13.9"
KUBERNETES = "1.33.0"


async def run(clusters: int, concurrency: int, timeout: float) -> None:
    with tempfile.TemporaryDirectory(prefix="herder-bench-support-") as held:
        # The Support token must be in its file before the server starts.
        token_file = Path(held) / "support.token"
        token = secrets.token_urlsafe(32)
        token_file.write_text(token)
        token_file.chmod(0o600)
        serve = ("--managed-control-planes", "--support-token-file", str(token_file))
        async with processes("herder-bench-managed-", machines=0, clusters=clusters, serve=serve) as running:
            await _run(running, token, clusters, concurrency, timeout)


async def _run(running: Processes, token: str, clusters: int, concurrency: int, timeout: float) -> None:
    machines = clusters * (1 + WORKERS)
    root, server, client, url = running.root, running.server, running.client, running.control_url
    providers: list[subprocess.Popen[bytes]] = []
    try:
        admin = server.data_dir / "admin.kubeconfig"
        credentials = load(admin)
        write_kubeconfig(root / "support.kubeconfig", credentials.server, credentials.ca_pem, token)
        support = Client.from_kubeconfig(root / "support.kubeconfig")
        for provider_id, by, hidden in (
            (MANAGED_PROVIDER, support, True),
            (WORKERS_PROVIDER, client, False),
        ):
            kubeconfig = root / f"{provider_id}.kubeconfig"
            await register(by, kubeconfig, admin, provider_id, hidden=hidden)
            providers.append(start_provider(root, kubeconfig, url, concurrency, provider_id))
        deadline = time.monotonic() + 120

        async def providers_ready() -> bool:
            return all(
                [
                    condition_true((await support.get(INFRA_PROVIDER, p)).status, "Ready")
                    for p in (MANAGED_PROVIDER, WORKERS_PROVIDER)
                ]
            )

        await until("the providers to be Ready", deadline, providers_ready)
        offer = await support.get(INFRA_PROVIDER, MANAGED_PROVIDER)
        offer.spec = {
            **(offer.spec or {}),
            "managedControlPlanes": {"sizes": {"xs": {"machines": 1}}, "talosVersions": [TALOS]},
        }
        await support.update(offer)

        async def offered() -> bool:
            try:
                await client.get(MANAGED_CONTROL_PLANE_OFFERING, OFFERING)
            except NotFound:
                return False
            return True

        await until("the offering", deadline, offered)
        await client.create(
            new_object(MACHINE_CLASS, "workers", {"autoProvision": {"providerID": WORKERS_PROVIDER}})
        )
        before = await read_counters(client, "herder_store_writes_total", "kind")
        started = time.monotonic()
        names = [f"bench-{i:03d}" for i in range(clusters)]
        managed = {"managed": {"enabled": True, "provider": OFFERING, "size": "xs"}}
        await create_all(
            client,
            [
                new_object(
                    CLUSTER,
                    name,
                    {"talosVersion": TALOS, "kubernetesVersion": KUBERNETES, "controlPlane": managed},
                )
                for name in names
            ],
        )
        await create_all(
            client,
            [
                new_object(
                    MACHINE_SET,
                    f"{name}-workers",
                    {"role": "worker", "machineClass": {"name": "workers", "size": WORKERS}},
                    {CLUSTER_LABEL: name},
                )
                for name in names
            ],
        )

        async def all_ready() -> bool:
            listed = await client.list(CLUSTER)
            return sum(1 for c in listed.items if condition_true(c.status, "Ready")) >= clusters

        await until(f"{clusters} clusters Ready", started + timeout, all_ready)
        elapsed = time.monotonic() - started
        after = await read_counters(client, "herder_store_writes_total", "kind")
        writes = per_machine(after, before, machines)
        emit(
            "managed_until_all_ready",
            elapsed,
            "s",
            clusters=clusters,
            machines=machines,
            cores=os.cpu_count(),
        )
        emit("managed_store_writes_per_machine", sum(writes.values()), "writes", by_kind=writes)
        await support.close()
    finally:
        for provider in providers:
            stop_provider(provider)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench managed", description=__doc__)
    parser.add_argument("--clusters", type=int, default=50, help="clusters of a managed xs and 2 workers")
    parser.add_argument("--concurrency", type=int, default=16, help="requests each provider works on at once")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to give up after")
    args = parser.parse_args(argv)
    asyncio.run(run(args.clusters, args.concurrency, args.timeout))
    return 0
