"""The machine API's security over real gRPC with TLS on loopback: maintenance mode without a client
certificate, mutual TLS with the cluster's Talos CA once configured, and role checks."""

from __future__ import annotations

import pytest

from herder.emu.control.emulator import Emulator
from herder.talos.machine import (
    MachineClient,
    MachineStage,
    PermissionDenied,
    Unauthenticated,
)
from tests.emu.support import ClusterConfigs, admin, bring_up, wait_stage


async def test_maintenance_answers_insecure_reads_only(emulator: Emulator) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(machine.record.endpoint) as client:
        version = await client.version()
        assert version.tag == machine.record.talos_version
        assert {s.id for s in await client.service_list()} >= {"apid", "machined"}
        for call in (
            client.reboot(),
            client.upgrade("ghcr.io/siderolabs/installer:v1.14.0"),
            client.reset(),
            client.bootstrap(),
            client.shutdown(),
        ):
            with pytest.raises(PermissionDenied, match="not authorized"):
                await call


async def test_configured_machine_requires_its_cluster_ca(
    emulator: Emulator, cluster_a: ClusterConfigs, cluster_b: ClusterConfigs
) -> None:
    machine = next(iter(emulator.machines.values()))
    await bring_up(emulator, machine, cluster_a.controlplane)
    async with admin(cluster_a, machine) as client:
        assert (await client.version()).tag == machine.record.talos_version
    # Without a client certificate: refused in the TLS handshake, as Talos's apid (mutual TLS) does.
    async with MachineClient.insecure(machine.record.endpoint, retries=0) as client:
        with pytest.raises(Unauthenticated):
            await client.version()
    # A client of another cluster: its CA neither signed the machine's certificate nor is trusted by it.
    async with admin(cluster_b, machine, retries=0) as client:
        with pytest.raises(Unauthenticated):
            await client.version()


async def test_roles_are_checked_per_method(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = next(iter(emulator.machines.values()))
    await bring_up(emulator, machine, cluster_a.controlplane)
    reader = MachineClient.from_talosconfig(cluster_a.talosconfig_with("os:reader"), endpoint=machine.address)
    async with reader:
        await reader.version()
        await reader.service_list()
        for call in (
            reader.reboot(),
            reader.apply_configuration(cluster_a.controlplane),
            reader.kubeconfig(),
        ):
            with pytest.raises(PermissionDenied, match="not authorized"):
                await call
    operator = MachineClient.from_talosconfig(
        cluster_a.talosconfig_with("os:operator"), endpoint=machine.address
    )
    async with operator:
        with pytest.raises(PermissionDenied):
            await operator.reset()
        await operator.reboot()
    await wait_stage(emulator, machine, MachineStage.REBOOTING)
    await wait_stage(emulator, machine, MachineStage.RUNNING)
