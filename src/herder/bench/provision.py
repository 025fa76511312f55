"""``python -m herder.bench provision --requests 1000``: one MachineRequestSet of N machines for the
emulator's infra provider, until every request is Provisioned and herder is connected to every machine.

A real ``herder serve`` (embedded SQLite), the emulator and the emulator's provider (``herder emu
provider``, as a provider runs outside the server) are separate processes. The provider is registered
as an Admin does it (an InfraProvider, and a ServiceAccount of role InfraProvider with a token); once it
is Ready, the set is created and the clock runs until the last request is Provisioned and the last
Machine connected. Prints that time, the store writes per request (from the server's own metrics: the
requests, their statuses, the Machines and their links, Events), and the RSS of the server, the
emulator and the provider.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from herder.api.datadir import write_kubeconfig
from herder.bench.clusters import per_machine, processes, read_counters, until
from herder.bench.report import emit
from herder.client import Client
from herder.client.kubeconfig import load
from herder.resources import Resource
from herder.resources.access import SERVICE_ACCOUNT
from herder.resources.machines import MACHINE
from herder.resources.provisioning import INFRA_PROVIDER, MACHINE_REQUEST, MACHINE_REQUEST_SET
from herder.resources.status import condition_true

PROVIDER = "bench"
TALOS = "v1.13.9"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def register(
    client: Client, kubeconfig: Path, admin: Path, provider_id: str = PROVIDER, *, hidden: bool = False
) -> None:
    """The provider, as ``herder infraprovider create [--hidden]`` makes it (by ``client``, Support's for
    a hidden one): its kubeconfig at ``kubeconfig``."""
    await client.create(
        Resource.model_validate(
            {
                "apiVersion": INFRA_PROVIDER.api_version,
                "kind": INFRA_PROVIDER.kind,
                "metadata": {"name": provider_id},
                "spec": {"hidden": hidden},
            }
        )
    )
    await client.create(
        Resource.model_validate(
            {
                "apiVersion": SERVICE_ACCOUNT.api_version,
                "kind": SERVICE_ACCOUNT.kind,
                "metadata": {"name": f"infraprovider-{provider_id}"},
                "spec": {"role": "InfraProvider", "providerId": provider_id},
            }
        )
    )
    token = (await client.issue_token(SERVICE_ACCOUNT, f"infraprovider-{provider_id}")).token
    credentials = load(admin)
    write_kubeconfig(kubeconfig, credentials.server, credentials.ca_pem, token)


def start_provider(
    root: Path, kubeconfig: Path, emulator: str, concurrency: int, provider_id: str = PROVIDER
) -> subprocess.Popen[bytes]:
    """``herder emu provider`` as a child process, its output in ``<id>-provider.log``."""
    args = ["emu", "provider", "--id", provider_id, "--kubeconfig", str(kubeconfig), "--emulator", emulator]
    with (root / f"{provider_id}-provider.log").open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from herder.cli.main import main; main()",
                *args,
                "--concurrency",
                str(concurrency),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def stop_provider(provider: subprocess.Popen[bytes] | None) -> None:
    if provider is not None and provider.poll() is None:
        provider.terminate()
        try:
            provider.wait(20)
        except subprocess.TimeoutExpired:
            provider.kill()
            provider.wait()


async def run(requests: int, concurrency: int, timeout: float) -> None:
    async with processes("herder-bench-provision-", machines=0, clusters=1) as running:
        root, server, emulator, client = running.root, running.server, running.emulator, running.client
        provider: subprocess.Popen[bytes] | None = None
        try:
            kubeconfig = root / "provider.kubeconfig"
            await register(client, kubeconfig, server.data_dir / "admin.kubeconfig")
            provider = start_provider(root, kubeconfig, running.control_url, concurrency)
            deadline = time.monotonic() + 120

            async def ready() -> bool:
                return condition_true((await client.get(INFRA_PROVIDER, PROVIDER)).status, "Ready")

            await until("the provider to be Ready", deadline, ready)
            before = await read_counters(client, "herder_store_writes_total", "kind")
            started = time.monotonic()
            await client.create(
                Resource.model_validate(
                    {
                        "apiVersion": MACHINE_REQUEST_SET.api_version,
                        "kind": MACHINE_REQUEST_SET.kind,
                        "metadata": {"name": "bench", "namespace": "default"},
                        "spec": {"providerID": PROVIDER, "machineCount": requests, "talosVersion": TALOS},
                    }
                )
            )
            provisioned_at = 0.0

            async def provisioned() -> bool:
                nonlocal provisioned_at
                listed = await client.list(MACHINE_REQUEST, "default", limit=requests + 10)
                done = sum(1 for r in listed.items if (r.status or {}).get("stage") == "Provisioned")
                if done >= requests and not provisioned_at:
                    provisioned_at = time.monotonic() - started
                return done >= requests

            async def connected() -> bool:
                listed = await client.list(MACHINE, "default", limit=requests + 10)
                return sum(1 for m in listed.items if (m.status or {}).get("connected")) >= requests

            deadline = started + timeout
            await until(f"{requests} provisioned requests", deadline, provisioned)
            await until(f"{requests} connected machines", deadline, connected)
            elapsed = time.monotonic() - started
            after = await read_counters(client, "herder_store_writes_total", "kind")
            writes = sum(after.values()) - sum(before.values())
            emit(
                "provision_until_all_provisioned",
                provisioned_at,
                "s",
                requests=requests,
                concurrency=concurrency,
            )
            emit(
                "provision_until_all_connected",
                elapsed,
                "s",
                requests=requests,
                concurrency=concurrency,
                cores=os.cpu_count(),
            )
            emit(
                "provision_store_writes_per_request",
                writes / requests,
                "writes",
                requests=requests,
                by_kind=per_machine(after, before, requests),
            )
            emit("provision_server_rss", server.rss_mib(), "MiB", requests=requests)
            emit("provision_emulator_rss", emulator.rss_mib(), "MiB", machines=requests)
            emit("provision_provider_rss", _rss_mib(provider.pid), "MiB", requests=requests)
        finally:
            stop_provider(provider)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench provision", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000, help="machines the set asks for")
    parser.add_argument("--concurrency", type=int, default=32, help="requests the provider works on at once")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to give up after")
    args = parser.parse_args(argv)
    asyncio.run(run(args.requests, args.concurrency, args.timeout))
    return 0
