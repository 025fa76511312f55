"""What the cluster tests share: forming an emulated cluster through the Talos API, waiting on it, and the
real kubectl against its emulated Kubernetes API."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from herder.emu.cluster.state import Cluster
from herder.emu.control import formation
from herder.emu.control.emulator import Emulator
from herder.emu.machine.lifecycle import Machine
from herder.talos.contracts import VersionContract
from herder.talos.machine import MachineStage
from tests.emu.support import CONTRACT, ClusterConfigs, admin, cluster_configs, edit_config

KUBECTL = "/usr/bin/kubectl"


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout: float = 10.0
) -> None:
    """Wait until ``check()`` holds (it may be a coroutine function); fails the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{getattr(check, '__name__', 'condition')} did not hold within {timeout}s")
        await asyncio.sleep(0.05)


@dataclass
class Formed:
    emulator: Emulator
    configs: ClusterConfigs
    control_planes: list[Machine]
    workers: list[Machine]
    kubeconfig: Path
    cluster_id: str

    @property
    def cluster(self) -> Cluster:
        return self.emulator.clusters[self.cluster_id]

    def healthy_members(self) -> int:
        cluster = self.cluster
        return sum(1 for m in cluster.members.values() if cluster.healthy(m)) if cluster.has_quorum() else 0

    async def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The real kubectl with the kubeconfig fetched through the Talos API."""
        command = [
            KUBECTL,
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.kubeconfig.parent / 'kube-cache'}",
            "--request-timeout=10s",
            *args,
        ]
        proc = await asyncio.to_thread(
            subprocess.run,
            command,
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECTL_INTERACTIVE_DELETE": "false"},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    async def kubectl_json(self, *args: str) -> Any:
        return json.loads((await self.kubectl(*args, "-o", "json")).stdout)


async def form_cluster(
    emulator: Emulator,
    name: str,
    directory: Path,
    *,
    control_planes: int = 3,
    workers: int = 2,
    contract: VersionContract = CONTRACT,
    kubernetes_version: str = "1.33.0",
    edit_controlplane: Callable[[dict[str, Any]], None] | None = None,
    snapshot: bytes | None = None,
) -> Formed:
    """Bring up machines with a cluster's configs, bootstrap the first control plane (recovering from
    ``snapshot`` if given), wait for every control plane in etcd, and fetch the admin kubeconfig. The cluster
    endpoint is the first control plane's API server (``https://IP:6443``), as on hardware without a load
    balancer; ``edit_controlplane`` changes the control planes' v1alpha1 document."""
    free = [m for m in emulator.machines.values() if m.config is None]
    while len(free) < control_planes + workers:
        free.append(emulator.create_machine())
    cps, wks = free[:control_planes], free[control_planes : control_planes + workers]
    configs = cluster_configs(
        name, api_endpoint(cps[0]), contract=contract, kubernetes_version=kubernetes_version
    )
    controlplane = edit_config(configs.controlplane, edit_controlplane) if edit_controlplane else None
    kubeconfig = await formation.form_cluster(
        emulator, configs, cps, wks, controlplane_config=controlplane, snapshot=snapshot
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "kubeconfig"
    path.write_bytes(kubeconfig)
    assert cps[0].config is not None
    return Formed(emulator, configs, cps, wks, path, cps[0].config.cluster_id)


def api_endpoint(control_plane: Machine) -> str:
    """Where a control plane serves the Kubernetes API: its own address, kube-apiserver's port."""
    return f"https://{control_plane.address}:6443"


def client_files(formed: Formed, directory: Path) -> tuple[dict[str, Any], Path, Path, Path]:
    """The kubeconfig's cluster entry, and its CA, client certificate and key written to files."""
    config = yaml.safe_load(formed.kubeconfig.read_text())
    user, cluster = config["users"][0]["user"], config["clusters"][0]["cluster"]
    ca, crt, key = directory / "ca.crt", directory / "admin.crt", directory / "admin.key"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    crt.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    return cluster, ca, crt, key


async def etcd_healthy(formed: Formed, machine: Machine) -> bool:
    async with admin(formed.configs, machine) as client:
        services = {s.id: s for s in await client.service_list()}
    return services["etcd"].healthy


async def nodes_ready(formed: Formed) -> dict[str, bool]:
    """Each node's readiness as kubectl sees it."""
    nodes = await formed.kubectl_json("get", "nodes")
    return {
        n["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
        )
        for n in nodes["items"]
    }


def running(machine: Machine) -> bool:
    return machine.stage is MachineStage.RUNNING
