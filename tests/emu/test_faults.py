"""Faults on demand: each changes what the machine API shows, and heal undoes the lasting ones."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from herder.emu.control.emulator import Emulator
from herder.talos.machine import ApplyMode, DeadlineExceeded, MachineClient, MachineStage
from tests.emu.support import ClusterConfigs, admin, bring_up, edit_config, wait_stage


async def test_crash_loses_what_was_not_persisted(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = next(iter(emulator.machines.values()))
    await bring_up(emulator, machine, cluster_a.controlplane)
    tried = edit_config(cluster_a.controlplane, lambda d: d["machine"].update(certSANs=["try.example"]))
    async with admin(cluster_a, machine) as client:
        await client.apply_configuration(tried, mode=ApplyMode.TRY, try_timeout=60)
    assert machine.config is not None and machine.config.cert_sans == ("try.example",)
    assert len(machine.events.backlog(tail_events=-1, tail_id="", tail_seconds=0)) > 0
    await machine.inject("crash")
    await wait_stage(emulator, machine, MachineStage.RUNNING)
    # The TRY config lived in memory only; the persisted config and installation survived.
    assert machine.config is not None and machine.config.cert_sans == ()
    assert machine.record.installed
    stages = [e for e in machine.events.backlog(tail_events=-1, tail_id="", tail_seconds=0)]
    assert len(stages) < 10


async def test_partition_stops_answers_until_healed(emulator: Emulator) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(machine.record.endpoint, timeout=0.5, retries=0) as client:
        await client.version()
        await machine.inject("partition")
        with pytest.raises(DeadlineExceeded):
            await client.version()
        await machine.inject("heal")
        assert machine.faults == set()
    async with MachineClient.insecure(machine.record.endpoint) as client:
        await client.version()


async def test_a_connection_caught_mid_handshake_does_not_outlive_apid(emulator: Emulator) -> None:
    """A caller whose TLS handshake began before apid went away must not keep a channel to the machine
    across its restart (a client would go on reading the old boot's state over it)."""
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    host, port = machine.record.endpoint.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))  # accepted; no TLS yet
    machine.host.network.stop(machine.uuid, grace=0)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        await writer.start_tls(context)
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(100), 10)
    except (ConnectionError, ssl.SSLError):
        answer = b""
    finally:
        writer.close()
    assert answer == b"", "the gRPC server answered over a connection apid no longer has"


async def test_slow_boot(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = next(iter(emulator.machines.values()))
    await bring_up(emulator, machine, cluster_a.controlplane)
    await machine.inject("slow-boot")
    async with admin(cluster_a, machine) as client:
        await client.reboot()
    await wait_stage(emulator, machine, MachineStage.BOOTING)
    started = time.monotonic()
    await asyncio.sleep(0.5)
    assert machine.stage is MachineStage.BOOTING
    await wait_stage(emulator, machine, MachineStage.RUNNING, timeout=10)
    assert time.monotonic() - started >= emulator.timings.slow_boot - 0.6


async def test_failed_install_returns_to_maintenance(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    await machine.inject("fail-install")
    async with MachineClient.insecure(machine.record.endpoint) as client:
        await client.apply_configuration(cluster_a.controlplane)
    await wait_stage(emulator, machine, MachineStage.INSTALLING)
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    assert "install failed" in machine.last_error
    assert machine.record.config is None and not machine.record.installed
    await machine.inject("heal")
    await bring_up(emulator, machine, cluster_a.controlplane)
    assert machine.record.installed
