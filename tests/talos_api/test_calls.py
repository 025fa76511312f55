"""Every machine API call of herder's client against emulated machines, over real gRPC with TLS."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import yaml

from herder.emu.control.emulator import Emulator
from herder.talos.machine import (
    AlreadyExists,
    ApplyMode,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    MachineClient,
    MachineEvent,
    MachineStage,
    MachineStatus,
    NotFound,
    SequenceEvent,
    Unavailable,
    Unimplemented,
)
from tests.emu.support import ClusterConfigs, admin, bring_up, edit_config, wait_stage


def machines(emulator: Emulator) -> list:  # type: ignore[type-arg]
    return list(emulator.machines.values())


async def test_invalid_config_is_refused_with_talos_like_errors(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    machine = machines(emulator)[0]
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    bad = edit_config(
        cluster_a.controlplane, lambda d: d["machine"].update(type="bogus", kubelet={"nope": 1})
    )
    async with MachineClient.insecure(machine.record.endpoint) as client:
        with pytest.raises(InvalidArgument, match="configuration validation failed"):
            await client.apply_configuration(bad)
        with pytest.raises(InvalidArgument, match="failed to parse config"):
            await client.apply_configuration("machine: [unclosed")
        with pytest.raises(Unimplemented, match="staged"):
            await client.apply_configuration(cluster_a.controlplane, mode=ApplyMode.STAGED)
        dry = await client.apply_configuration(cluster_a.controlplane, dry_run=True)
        assert "Dry run" in dry.details
    assert machine.stage is MachineStage.MAINTENANCE


async def test_apply_modes_on_a_running_machine(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = machines(emulator)[0]
    await bring_up(emulator, machine, cluster_a.controlplane)
    immediate = edit_config(cluster_a.controlplane, lambda d: d["machine"].update(certSANs=["cp.example"]))
    needs_reboot = edit_config(
        cluster_a.controlplane, lambda d: d["machine"].update(token="abcdef.0123456789abcdef")
    )
    async with admin(cluster_a, machine) as client:
        result = await client.apply_configuration(immediate, mode=ApplyMode.AUTO)
        assert result.mode is ApplyMode.NO_REBOOT
        assert machine.config is not None and machine.config.cert_sans == ("cp.example",)

        with pytest.raises(InvalidArgument, match="can't be applied in immediate mode"):
            await client.apply_configuration(needs_reboot, mode=ApplyMode.NO_REBOOT)

        dry = await client.apply_configuration(needs_reboot, dry_run=True)
        assert "skipped in dry-run" in dry.details and "token" in dry.details
        assert machine.config.token != "abcdef.0123456789abcdef"

        staged = await client.apply_configuration(needs_reboot, mode=ApplyMode.STAGED)
        assert staged.mode is ApplyMode.STAGED
        assert machine.config.token != "abcdef.0123456789abcdef"
        assert machine.record.staged_config is not None

        tried = await client.apply_configuration(
            edit_config(cluster_a.controlplane, lambda d: d["machine"].update(certSANs=["try.example"])),
            mode=ApplyMode.TRY,
            try_timeout=0.3,
        )
        assert tried.mode is ApplyMode.TRY and "reverted" in tried.details
        assert machine.config.cert_sans == ("try.example",)
        await asyncio.sleep(0.5)
        assert machine.config is not None and machine.config.cert_sans == ("cp.example",)

        await client.reboot()
    await wait_stage(emulator, machine, MachineStage.REBOOTING)
    await wait_stage(emulator, machine, MachineStage.RUNNING)
    assert machine.config is not None and machine.config.token == "abcdef.0123456789abcdef"

    async with admin(cluster_a, machine) as client:
        auto = await client.apply_configuration(cluster_a.controlplane, mode=ApplyMode.AUTO)
        assert auto.mode is ApplyMode.REBOOT
    await wait_stage(emulator, machine, MachineStage.REBOOTING)
    await wait_stage(emulator, machine, MachineStage.RUNNING)
    assert machine.config is not None and machine.config.token != "abcdef.0123456789abcdef"


async def test_upgrade_changes_the_version(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = machines(emulator)[0]
    await bring_up(emulator, machine, cluster_a.controlplane)
    async with admin(cluster_a, machine) as client:
        with pytest.raises(InvalidArgument):
            await client.upgrade("not an image")
        result = await client.upgrade("ghcr.io/siderolabs/installer:v1.14.1")
        assert result.actor_id
    await wait_stage(emulator, machine, MachineStage.UPGRADING)
    await wait_stage(emulator, machine, MachineStage.RUNNING)
    async with admin(cluster_a, machine) as client:
        assert (await client.version()).tag == "v1.14.1"
        await client.upgrade("ghcr.io/siderolabs/installer:v1.14.2", stage=True)
    await wait_stage(emulator, machine, MachineStage.REBOOTING)
    await wait_stage(emulator, machine, MachineStage.UPGRADING)
    await wait_stage(emulator, machine, MachineStage.RUNNING)
    async with admin(cluster_a, machine) as client:
        assert (await client.version()).tag == "v1.14.2"
        # Talos 1.9 cannot be installed over 1.14: its installer refuses, the machine stays as it is.
        await client.upgrade("ghcr.io/siderolabs/installer:v1.9.0")
    await wait_stage(emulator, machine, MachineStage.UPGRADING)
    await emulator.wait_for(lambda: machine.stage is MachineStage.RUNNING and bool(machine.last_error), 10)
    assert "cannot be installed over" in machine.last_error
    assert machine.record.talos_version == "v1.14.2"


async def test_failed_upgrade_rolls_back_and_says_so(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = machines(emulator)[0]
    await bring_up(emulator, machine, cluster_a.controlplane)
    before = machine.record.talos_version
    await machine.inject("fail-upgrade")
    async with admin(cluster_a, machine) as client:
        actor = (await client.upgrade("ghcr.io/siderolabs/installer:v1.14.1")).actor_id
    await wait_stage(emulator, machine, MachineStage.UPGRADING)
    await emulator.wait_for(lambda: machine.stage is MachineStage.RUNNING and bool(machine.last_error), 10)
    async with admin(cluster_a, machine) as client:
        assert (await client.version()).tag == before
        stop = await _first(
            client, lambda e: isinstance(e.payload, SequenceEvent) and e.payload.action == "STOP", actor
        )
    assert isinstance(stop.payload, SequenceEvent)
    assert "rolled back" in stop.payload.error


async def _first(client: MachineClient, match, actor_id: str = "") -> MachineEvent:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(5):
        async for event in client.events(tail_events=-1, actor_id=actor_id):
            if match(event):
                return event
    raise AssertionError("no such event")


async def test_events_tell_the_stages(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = machines(emulator)[0]
    await bring_up(emulator, machine, cluster_a.controlplane)
    async with admin(cluster_a, machine) as client:
        stages = []
        async with asyncio.timeout(5):
            async for event in client.events(tail_events=-1):
                if isinstance(event.payload, MachineStatus):
                    stages.append(event.payload.stage)
                    if event.payload.stage is MachineStage.RUNNING:
                        break
        assert stages[:2] == [MachineStage.BOOTING, MachineStage.MAINTENANCE]
        assert MachineStage.INSTALLING in stages and stages[-1] is MachineStage.RUNNING
        last = (await _first(client, lambda e: True)).id
        assert [e async for e in _take(client.events(tail_id=last), 0)] == []


async def _take(stream, n: int):  # type: ignore[no-untyped-def]
    """At most ``n`` events, giving up after a short wait."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(0.3):
            count = 0
            async for event in stream:
                if count >= n:
                    return
                count += 1
                yield event


async def test_reset_reboot_and_shutdown(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    first, second = machines(emulator)[:2]
    await bring_up(emulator, first, cluster_a.controlplane)
    await bring_up(emulator, second, cluster_a.controlplane)
    async with admin(cluster_a, first) as client:
        await client.reset(graceful=True, reboot=True)
    await wait_stage(emulator, first, MachineStage.RESETTING)
    await wait_stage(emulator, first, MachineStage.MAINTENANCE)
    assert first.record.config is None and not first.record.installed
    async with MachineClient.insecure(first.record.endpoint) as client:
        await client.version()

    async with admin(cluster_a, second) as client:
        # Wiping only EPHEMERAL keeps the config: the machine reboots into its cluster again.
        await client.reset(system_partitions=("EPHEMERAL",), reboot=True)
    await wait_stage(emulator, second, MachineStage.REBOOTING)
    await wait_stage(emulator, second, MachineStage.RUNNING)
    assert second.record.config is not None and second.record.installed

    async with admin(cluster_a, second, retries=0) as client:
        await client.shutdown()
        await wait_stage(emulator, second, MachineStage.UNKNOWN)
        assert not second.record.powered_on
        with pytest.raises(Unavailable):
            await client.version()
    second.power_on()
    await wait_stage(emulator, second, MachineStage.RUNNING)
    async with admin(cluster_a, second) as client:
        await client.reset(graceful=False, reboot=False)
    await emulator.wait_for(lambda: not second.record.powered_on, 5)
    second.power_on()
    await wait_stage(emulator, second, MachineStage.MAINTENANCE)


async def test_etcd_and_kubeconfig(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    cp1, cp2, cp3, worker = machines(emulator)[:4]
    for machine in (cp1, cp2, cp3):
        await bring_up(emulator, machine, cluster_a.controlplane)
    await bring_up(emulator, worker, cluster_a.worker)
    async with admin(cluster_a, cp1) as client:
        with pytest.raises(FailedPrecondition):
            await client.etcd_member_list()
        with pytest.raises(FailedPrecondition, match="control plane"):
            await client.bootstrap(node=worker.address)
        await client.bootstrap()
        with pytest.raises(AlreadyExists, match="etcd data directory is not empty"):
            await client.bootstrap(node=cp2.address)
        members = await client.etcd_member_list()
        assert {m.hostname for m in members} == {cp1.hostname, cp2.hostname, cp3.hostname}
        # Each member tells its own status: which member leads, its database, its raft position.
        statuses = [await client.etcd_status(node=m.address) for m in (cp1, cp2, cp3)]
        assert {s.member_id for s in statuses} == {m.id for m in members}
        assert len({s.leader for s in statuses}) == 1 and statuses[0].leader in {m.id for m in members}
        assert all(s.db_size > 0 and s.raft_index > 0 for s in statuses)
        before = statuses[0]
        assert await client.etcd_forfeit_leadership() in {cp2.hostname, cp3.hostname}
        after = await client.etcd_status()
        assert after.leader != before.leader and after.raft_term > before.raft_term
        assert await client.etcd_snapshot()
        kubeconfig = yaml.safe_load(await client.kubeconfig())
        assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://")
        assert kubeconfig["users"][0]["user"]["client-certificate-data"]
        # A member whose machine is gone is removed by id, from another member.
        gone = next(m.id for m in await client.etcd_member_list() if m.hostname == cp3.hostname)
        await cp3.power_off()
        with pytest.raises(NotFound):
            await client.etcd_remove_member_by_id(12345)
        await client.etcd_remove_member_by_id(gone)
        assert {m.hostname for m in await client.etcd_member_list()} == {cp1.hostname, cp2.hostname}
        # Scale-down as herder does it: leave etcd, then reset the machine.
        await client.etcd_leave_cluster(node=cp2.address)
        await client.reset(graceful=True, reboot=True, node=cp2.address)
        await wait_stage(emulator, cp2, MachineStage.MAINTENANCE)
        assert [m.hostname for m in await client.etcd_member_list()] == [cp1.hostname]
        with pytest.raises(FailedPrecondition, match="control plane"):
            await client.etcd_member_list(node=worker.address)


async def test_etcd_recover_into_a_fresh_cluster(
    emulator: Emulator, cluster_a: ClusterConfigs, cluster_b: ClusterConfigs
) -> None:
    old, new = machines(emulator)[:2]
    await bring_up(emulator, old, cluster_a.controlplane)
    await bring_up(emulator, new, cluster_b.controlplane)
    async with admin(cluster_a, old) as client:
        await client.bootstrap()
        assert old.cluster is not None
        await old.cluster.keyspace.create("/registry/configmaps/default/kept", b"value")
        snapshot = await client.etcd_snapshot()
    async with admin(cluster_b, new) as client:
        with pytest.raises(FailedPrecondition):
            await client.bootstrap(recover_etcd=True)
        await client.etcd_recover(snapshot)
        await client.bootstrap(recover_etcd=True)
    assert new.cluster is not None
    assert new.cluster.keyspace.dump().get("/registry/configmaps/default/kept") == "value"


async def test_node_targeting_proxies_within_the_cluster(
    emulator: Emulator, cluster_a: ClusterConfigs, cluster_b: ClusterConfigs
) -> None:
    cp, worker, stranger = machines(emulator)[:3]
    await wait_stage(emulator, worker, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(worker.record.endpoint) as client:
        await client.apply_configuration(cluster_a.worker)
    # A worker gets its API certificate from a control plane's trustd: it waits for one.
    await emulator.wait_for(lambda: bool(worker.unmet), 5)
    assert worker.stage is MachineStage.BOOTING
    await bring_up(emulator, cp, cluster_a.controlplane)
    await wait_stage(emulator, worker, MachineStage.RUNNING)
    await bring_up(emulator, stranger, cluster_b.controlplane)
    async with admin(cluster_a, cp, retries=0) as client:
        assert (await client.version(node=worker.address)).node == worker.address
        assert "kubelet" in {s.id for s in await client.service_list(node=worker.hostname)}
        with pytest.raises(Unavailable, match="authentication handshake failed"):
            await client.version(node=stranger.address)
        with pytest.raises(Unavailable):
            await client.version(node="127.0.0.254")


async def test_only_idempotent_calls_are_retried(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = machines(emulator)[0]
    await bring_up(emulator, machine, cluster_a.controlplane)
    await machine.power_off()
    async with admin(cluster_a, machine, retries=4, retry_backoff=0.1) as client:
        with pytest.raises(Unavailable):
            await client.apply_configuration(cluster_a.controlplane)
        # The machine comes back while Version is being retried.
        asyncio.get_running_loop().call_later(0.3, machine.power_on)
        assert (await client.version()).tag


async def test_calls_time_out_on_a_partitioned_machine(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    machine = machines(emulator)[0]
    await bring_up(emulator, machine, cluster_a.controlplane)
    await machine.inject("partition")
    async with admin(cluster_a, machine, timeout=0.5, retries=0) as client:
        with pytest.raises(DeadlineExceeded):
            await client.version()
    await machine.inject("heal")
    async with admin(cluster_a, machine) as client:
        assert (await client.version()).tag
