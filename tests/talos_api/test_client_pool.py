"""The shared machine API clients: one per endpoint and certificate, kept between callers, and dropped
when their machine stops answering, so that the next caller dials afresh."""

from __future__ import annotations

import pytest

from herder.emu.control.emulator import Emulator
from herder.talos.machine import Credentials, MachineClient, MachineStage, Unavailable
from herder.talos.machine import connections as shared
from herder.talos.machine.pool import ClientPool
from tests.emu.support import ClusterConfigs, bring_up, wait_stage


def _credentials(configs: ClusterConfigs) -> Credentials:
    context = configs.talosconfig.current()
    assert context is not None and context.ca and context.crt and context.key
    return Credentials(context.ca, context.crt, context.key)


async def test_clients_are_shared_and_a_dead_one_is_dropped(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    first, second, *_ = emulator.machines.values()
    await bring_up(emulator, first, cluster_a.controlplane)
    await wait_stage(emulator, second, MachineStage.MAINTENANCE)
    credentials = _credentials(cluster_a)
    pool = ClientPool(keep=1, timeout=5, retries=0)
    try:
        async with pool.client(first.record.endpoint, credentials) as client:
            assert (await client.version()).tag
        async with pool.client(first.record.endpoint, credentials) as again:
            assert again is client  # kept for the next caller
        async with pool.client(second.record.endpoint, None) as insecure:
            assert (await insecure.version()).tag
        assert len(pool) == 1  # the least recently used idle client was closed: keep=1

        async with pool.client(first.record.endpoint, credentials) as client:
            await client.version()
        await first.power_off()
        with pytest.raises(Unavailable):
            async with pool.client(first.record.endpoint, credentials) as client:
                await client.version()
        first.power_on()
        await wait_stage(emulator, first, MachineStage.RUNNING)
        async with pool.client(first.record.endpoint, credentials) as fresh:
            assert fresh is not client  # the one that failed was dropped, not handed out again
            assert (await fresh.version()).tag
    finally:
        await pool.close()
    assert len(pool) == 0


async def test_clients_of_one_machine_share_one_connection_until_it_fails(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    first, second, *_ = emulator.machines.values()
    await bring_up(emulator, first, cluster_a.controlplane)
    await wait_stage(emulator, second, MachineStage.MAINTENANCE)
    credentials = _credentials(cluster_a)
    connections = shared.of_this_loop()
    opened = len(connections)
    link = MachineClient(first.record.endpoint, credentials=credentials, timeout=5, retries=0)
    logs = MachineClient(first.record.endpoint, credentials=credentials, timeout=5, retries=0)
    other = MachineClient.insecure(second.record.endpoint, timeout=5, retries=0)
    try:
        # A status stream and a log follower of one machine: one connection between them.
        assert (await link.version()).tag and (await logs.version()).tag
        old = await link.channel()
        assert await logs.channel() is old
        assert (await other.version()).tag
        assert await other.channel() is not await link.channel()
        assert len(connections) == opened + 2
        await logs.close()
        assert (await link.version()).tag  # still open for the client that holds it
        # A machine that no longer answers: its connection is retired, and a client made after it
        # (a follower dialling again) opens a new one, as the machine comes back.
        await first.power_off()
        with pytest.raises(Unavailable):
            await link.version()
        first.power_on()
        await wait_stage(emulator, first, MachineStage.RUNNING)
        again = MachineClient(first.record.endpoint, credentials=credentials, timeout=5, retries=0)
        async with again:
            assert (await again.version()).tag
            assert await again.channel() is not old
    finally:
        for client in (link, logs, other):
            await client.close()
    assert len(connections) == opened  # the last client to close closed each connection
