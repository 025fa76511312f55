"""``python -m herder.bench gateway``: bytes per second of a 10 MiB ``Read`` through herder's Talos API
gateway, against the same ``Read`` straight from the machine as the baseline.

A real ``herder serve`` and the emulator run as separate processes; herder forms one cluster (a control
plane and a worker) on the emulator. The reader is herder's Talos client in this process, the same way
round both times: through the gateway with the talosconfig ``herder cluster talosconfig`` hands out
(its endpoint the gateway, the machine named with ``node``), and directly with a certificate from the
cluster's own Talos CA (its secrets read as platform staff, with a Support token). Reads alternate between the two; the medians are printed, with their ratio
(``gateway.relay.rate``, goal: at least half the direct rate).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from herder.bench.clusters import KUBERNETES, TALOS, Fleet, all_ready, create_all, fleet, new_object, until
from herder.bench.report import emit
from herder.client import Client
from herder.client.kubeconfig import load
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.resources.clusters import CLUSTER, MACHINE_SET, control_plane_set_name
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.talos.machine import MachineClient
from herder.talos.secrets import load_secrets
from herder.talos.talosconfig import Talosconfig, generate_talosconfig, load_talosconfig_file

PATH = "/usr/bin/containerd-shim-runc-v2"
"""A 10 MiB file of every emulated machine."""
SIZE = 10 << 20


async def _read(client: MachineClient, node: str | None) -> float:
    """Seconds to read the file once."""
    started = time.perf_counter()
    got = 0
    async for chunk in client.read(PATH, node=node):
        got += len(chunk)
    elapsed = time.perf_counter() - started
    if got != SIZE:
        raise RuntimeError(f"read {got} bytes of {PATH}, expected {SIZE}")
    return elapsed


async def run(reads: int, timeout: float) -> None:
    with tempfile.TemporaryDirectory(prefix="herder-bench-gateway-support-") as held:
        token = secrets.token_urlsafe(32)
        support = Path(held) / "support.token"
        support.write_text(token + "\n")
        support.chmod(0o600)
        await _run(reads, timeout, support, token)


async def _direct_talosconfig(site: Fleet, token: str, name: str, endpoint: str) -> Talosconfig:
    """An os:admin talosconfig of the cluster's own CA, for its machine at ``endpoint``."""
    staff = Client(dataclasses.replace(load(site.server.data_dir / "admin.kubeconfig"), token=token))
    try:
        stored = await staff.get(CLUSTER_SECRETS, name, "default")
    finally:
        await staff.close()
    bundle = load_secrets(CLUSTER_SECRETS.spec_of(stored, ClusterSecretsSpec).bundle)
    return generate_talosconfig(bundle, name, endpoints=[endpoint])


async def _run(reads: int, timeout: float, support: Path, token: str) -> None:
    async with fleet(
        "herder-bench-gateway-", 1, timeout, serve=("--support-token-file", str(support))
    ) as site:
        name = "bench-gateway"
        cp, worker = site.machines_of(0)[:2]
        labels = {CLUSTER_LABEL: name}
        await create_all(
            site.client,
            [
                new_object(CLUSTER, name, {"talosVersion": TALOS, "kubernetesVersion": KUBERNETES}),
                new_object(
                    MACHINE_SET,
                    control_plane_set_name(name),
                    {"role": "controlplane", "machines": [cp]},
                    labels,
                ),
                new_object(MACHINE_SET, f"{name}-workers", {"role": "worker", "machines": [worker]}, labels),
            ],
        )
        await until("the cluster Ready", time.monotonic() + timeout, lambda: all_ready(site.client, 1))
        machine = await site.client.get(MACHINE, cp, "default")
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        node = MachineStatus.model_validate(machine.status or {}).addresses[0]
        talosconfig = site.server.data_dir.parent / "gateway.talosconfig"
        made = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from herder.cli.main import main; main()", "cluster", "talosconfig", name,
            "-o", str(talosconfig), "--kubeconfig", str(site.server.data_dir / "admin.kubeconfig"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _out, err = await made.communicate()
        if made.returncode != 0:
            raise RuntimeError(f"herder cluster talosconfig failed: {err.decode()}")
        direct_config = await _direct_talosconfig(site, token, name, endpoint)
        through = MachineClient.from_talosconfig(load_talosconfig_file(talosconfig), timeout=120)
        direct = MachineClient.from_talosconfig(direct_config, timeout=120)
        gateway_s: list[float] = []
        direct_s: list[float] = []
        async with through, direct:
            # A first read of each warms the connections (TLS handshakes, the gateway's upstream client).
            await _read(through, node)
            await _read(direct, None)
            for _ in range(reads):
                gateway_s.append(await _read(through, node))
                direct_s.append(await _read(direct, None))
        rate = SIZE / statistics.median(gateway_s)
        baseline = SIZE / statistics.median(direct_s)
        emit(
            "gateway.relay.rate",
            rate,
            "bytes/s",
            baseline=baseline,
            goal_min_ratio=0.5,
            size=SIZE,
            reads=reads,
            cores=os.cpu_count(),
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench gateway", description=__doc__)
    parser.add_argument("--reads", type=int, default=5, help="10 MiB reads each way")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to give up after")
    args = parser.parse_args(argv)
    asyncio.run(run(args.reads, args.timeout))
    return 0
