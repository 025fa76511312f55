"""Forming a Talos cluster on emulated machines, the way an operator does with talosctl: configs made
with herder's Talos library, applied in maintenance mode, one bootstrap, then the admin kubeconfig.

The demo uses it to give ``herder demo`` a running cluster; tests use it to stand up clusters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from herder.emu.control.emulator import Emulator
from herder.emu.machine.lifecycle import Machine
from herder.talos.contracts import VersionContract
from herder.talos.generate import generate_bundle
from herder.talos.generate_input import ConfigInput
from herder.talos.machine import MachineClient, MachineStage
from herder.talos.secrets import SecretsBundle, generate_secrets
from herder.talos.talosconfig import Talosconfig, generate_talosconfig


@dataclass(frozen=True)
class ClusterConfigs:
    """What ``talosctl gen config`` gives an operator: the two machine configs and a talosconfig."""

    name: str
    secrets: SecretsBundle
    controlplane: str
    worker: str
    talosconfig: Talosconfig

    def talosconfig_with(self, *roles: str) -> Talosconfig:
        """A talosconfig of this cluster whose certificate carries only ``roles``."""
        return generate_talosconfig(self.secrets, self.name, roles=roles)


def cluster_configs(
    name: str,
    endpoint: str,
    *,
    talos_version: str = "1.13",
    kubernetes_version: str = "1.33.0",
    secrets: SecretsBundle | None = None,
) -> ClusterConfigs:
    """``talosctl gen config NAME ENDPOINT``: with new secrets, or the cluster's own (``secrets``)."""
    contract = VersionContract.parse(talos_version)
    secrets = secrets or generate_secrets(contract)
    bundle = generate_bundle(
        ConfigInput(
            cluster_name=name,
            endpoint=endpoint,
            kubernetes_version=kubernetes_version,
            contract=contract,
            secrets=secrets,
        )
    )
    return ClusterConfigs(name, secrets, bundle.controlplane, bundle.worker, bundle.talosconfig)


async def bring_up(emulator: Emulator, machine: Machine, config: str, timeout: float = 60.0) -> None:
    """Apply a config to a machine in maintenance mode and wait until it runs."""
    await emulator.wait_for(lambda: machine.stage is MachineStage.MAINTENANCE, timeout)
    async with MachineClient.insecure(machine.record.endpoint) as client:
        await client.apply_configuration(config)
    await emulator.wait_for(lambda: machine.stage is MachineStage.RUNNING, timeout)


async def form_cluster(
    emulator: Emulator,
    configs: ClusterConfigs,
    control_planes: Sequence[Machine],
    workers: Sequence[Machine],
    *,
    controlplane_config: str | None = None,
    snapshot: bytes | None = None,
    timeout: float = 60.0,
) -> bytes:
    """Bring the machines up with the cluster's configs, bootstrap the first control plane (recovering
    etcd from ``snapshot`` if given), wait for every control plane in etcd; return the kubeconfig."""
    await asyncio.gather(
        *(
            bring_up(emulator, m, controlplane_config or configs.controlplane, timeout)
            for m in control_planes
        ),
        *(bring_up(emulator, m, configs.worker, timeout) for m in workers),
    )
    first = control_planes[0].record.endpoint
    async with MachineClient.from_talosconfig(configs.talosconfig, endpoint=first) as client:
        if snapshot is not None:
            await client.etcd_recover(snapshot)
        await client.bootstrap(recover_etcd=snapshot is not None)
        # The machines are remote as far as an operator knows: ask the Talos API until etcd is whole.
        async with asyncio.timeout(timeout):
            while len(await client.etcd_member_list()) < len(control_planes):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        return await client.kubeconfig()
