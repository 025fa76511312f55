"""ConfigApply's decisions: a first config goes to a machine in maintenance mode; a changed one rolls out
unless the machine is locked, waits for its Talos upgrade, or its rollout has no room; a failed apply
keeps its error and attempt count, backs off, and is cleared only by an attempt that succeeds."""

from __future__ import annotations

from herder.controllers.clusters.config_apply import RETRY_FIRST, ROLLOUT_WAIT, ConfigApplyController
from herder.runtime.controller import ObjectKey
from herder.talos.machine import ApplyMode, ApplyResult, Unavailable
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import Fleet, ready
from tests.controllers.site import Site

APPLIED = {"configHash": "c1", "stage": "Running", "ready": True}


def controller(site: Site, fleet: Fleet) -> ConfigApplyController:
    return ConfigApplyController(fleet.keys, ClientPool(dialer=site.machines, keep=0))


def key(uuid: str) -> ObjectKey:
    return ObjectKey("ClusterMachine", "default", uuid)


def applies(site: Site, mode: ApplyMode = ApplyMode.NO_REBOOT) -> None:
    site.machines.answer("apply_configuration", ApplyResult(mode, ""))


async def test_a_machine_in_maintenance_gets_its_first_config_without_a_client_certificate(
    site: Site,
) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    await fleet.machine("w1", stage="Maintenance")
    member = await fleet.member("w1")
    await fleet.config(member, "c1")
    applies(site, ApplyMode.REBOOT)
    assert await site.reconcile(controller(site, fleet), key("w1")) is None
    (call,) = site.machines.made("apply_configuration")
    assert (call.endpoint, call.secure, call.args) == (fleet.endpoint("w1"), False, ("# config c1\n",))
    status = await site.status("ClusterMachine", "w1")
    assert status["configHash"] == "c1"
    # A machine in maintenance always installs and reboots: that is not a reboot its rollout waits for.
    assert status["apply"] == {**status["apply"], "attempts": 0, "lastError": "", "rebooting": False}
    assert status["apply"]["appliedAt"].startswith("2026-01-01T00:00:00")
    # Part of its joining, and in its history: no Event of its own.
    assert await site.told(member) == []


async def test_a_failed_apply_keeps_its_error_backs_off_and_is_cleared_by_a_success(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    await fleet.machine("w1", stage="Maintenance")
    member = await fleet.member("w1")
    await fleet.config(member, "c1")
    apply = controller(site, fleet)
    site.machines.fail("apply_configuration", Unavailable("connection refused"))
    first = await site.reconcile(apply, key("w1"))
    site.clock.advance(60)
    second = await site.reconcile(apply, key("w1"))
    assert first is not None and first.requeue_after == RETRY_FIRST
    assert second is not None and second.requeue_after == 2 * RETRY_FIRST
    status = await site.status("ClusterMachine", "w1")
    assert status.get("configHash", "") == ""
    assert status["apply"] == {
        **status["apply"],
        "attempts": 2,
        "lastError": "connection refused",
        "lastErrorTime": "2026-01-01T00:01:00Z",
    }
    told = await site.told(member)
    assert ("Warning", "ApplyFailed", "attempt 1: connection refused") in told
    assert ("Warning", "ApplyFailed", "attempt 2: connection refused") in told

    site.machines.failures.clear()
    applies(site)
    assert await site.reconcile(apply, key("w1")) is None
    status = await site.status("ClusterMachine", "w1")
    assert status["configHash"] == "c1"
    assert (status["apply"]["attempts"], status["apply"]["lastError"]) == (0, "")
    # Told after the Warnings of the attempts that failed.
    assert (await site.told(member))[-1] == (
        "Normal",
        "ConfigApplied",
        "config c1 applied in maintenance mode",
    )


async def test_a_locked_machine_gets_no_update(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await fleet.machine("w1")
    await fleet.node("w1", "workers", locked=True)
    member = await fleet.member("w1", **APPLIED)
    await fleet.config(member, "c2")
    applies(site)
    assert await site.reconcile(controller(site, fleet), key("w1")) is None
    assert site.machines.made("apply_configuration") == []
    assert (await site.status("ClusterMachine", "w1"))["configHash"] == "c1"


async def test_an_update_waits_for_the_machines_talos_upgrade(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await fleet.machine("w1")  # runs v1.13.0
    moved = await fleet.member("w1", talos="v1.13.1", **APPLIED)
    await fleet.config(moved, "c2")
    await fleet.machine("w2", talos="v1.13.1")
    upgrading = await fleet.member(
        "w2",
        talos="v1.13.1",
        upgrade={"target": "v1.13.1", "fromVersion": "v1.13.0", "requestedAt": "2026-01-01T00:00:00Z"},
        **APPLIED,
    )
    await fleet.config(upgrading, "c2")
    applies(site)
    apply = controller(site, fleet)
    assert await site.reconcile(apply, key("w1")) is None
    assert await site.reconcile(apply, key("w2")) is None
    assert site.machines.made("apply_configuration") == []

    # A failed upgrade holds the update no longer: the machine gets its config on the version it runs.
    upgrade = (await site.status("ClusterMachine", "w2"))["upgrade"]
    await site.set_status(upgrading, upgrade={**upgrade, "error": "the new system did not boot"})
    await site.reconcile(apply, key("w2"))
    assert [c.endpoint for c in site.machines.made("apply_configuration")] == [fleet.endpoint("w2")]


async def test_workers_update_as_many_at_once_as_their_set_allows(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers", updateStrategy={"type": "Rolling", "rolling": {"maxParallelism": 1}})
    for uuid in ("w1", "w2"):
        await fleet.machine(uuid)
        await fleet.config(await fleet.member(uuid, **APPLIED), "c2")
    rebooting = await site.get("ClusterMachine", "w2")
    assert rebooting is not None
    # w2 got c2 already, and reboots for it.
    await site.set_status(
        rebooting, configHash="c2", apply={"appliedAt": "2026-01-01T00:00:00.000000Z", "rebooting": True}
    )
    applies(site)
    apply = controller(site, fleet)
    held = await site.reconcile(apply, key("w1"))
    assert held is not None and held.requeue_after == ROLLOUT_WAIT
    assert site.machines.made("apply_configuration") == []

    # w2 comes back from its reboot (a new connection): it is in service again, and w1 has room.
    machine = await site.get("Machine", "w2")
    assert machine is not None
    await site.set_status(machine, connectedAt="2026-01-01T00:00:05.000000Z")
    await site.reconcile(apply, key("w2"))
    assert (await site.status("ClusterMachine", "w2"))["apply"]["rebooting"] is False
    assert await site.reconcile(apply, key("w1")) is None
    assert [c.endpoint for c in site.machines.made("apply_configuration")] == [fleet.endpoint("w1")]


async def test_control_planes_update_one_at_a_time_and_only_while_etcd_is_healthy(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(etcd_healthy=False)
    for uuid in ("cp1", "cp2"):
        await fleet.machine(uuid)
        await fleet.config(await fleet.member(uuid, "controlplane", **APPLIED), "c2")
    applies(site, ApplyMode.REBOOT)
    apply = controller(site, fleet)
    held = await site.reconcile(apply, key("cp1"))
    assert held is not None and held.requeue_after == ROLLOUT_WAIT
    assert site.machines.made("apply_configuration") == []

    await site.set_status(cluster, conditions=[ready("EtcdHealthy")])
    assert await site.reconcile(apply, key("cp1")) is None
    (call,) = site.machines.made("apply_configuration")
    assert call.secure  # a configured machine is reached with herder's certificate
    assert (await site.status("ClusterMachine", "cp1"))["apply"]["rebooting"] is True
    # cp1 reboots for its config: cp2 waits for it.
    held = await site.reconcile(apply, key("cp2"))
    assert held is not None and held.requeue_after == ROLLOUT_WAIT
    assert len(site.machines.made("apply_configuration")) == 1


async def test_a_configured_machine_that_runs_its_config_already_has_it_adopted_not_applied(
    site: Site,
) -> None:
    fleet = Fleet(site)
    await fleet.cluster(annotations={"herder.dev/locked": "true"})  # adopting changes nothing: locked or not
    await fleet.machine("w1")
    member = await fleet.member("w1")
    await fleet.config(member, "c1")
    site.machines.answer("running_config", b"# config c1\n")
    assert await site.reconcile(controller(site, fleet), key("w1")) is None
    assert site.machines.made("apply_configuration") == []
    (read,) = site.machines.made("running_config")
    assert read.secure  # a configured machine is read with herder's certificate
    status = await site.status("ClusterMachine", "w1")
    assert status["configHash"] == "c1" and status["apply"]["appliedAt"].startswith("2026-01-01T00:00:00")
    told = await site.told(member)
    assert ("Normal", "ConfigAdopted", "config c1 is the one the machine runs") in told


async def test_a_configured_machine_that_runs_another_config_gets_its_own(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("w1")
    member = await fleet.member("w1")
    await fleet.config(member, "c1")
    site.machines.answer("running_config", b"version: v1alpha1\nmachine: {type: worker}\n")
    applies(site)
    await site.reconcile(controller(site, fleet), key("w1"))
    (call,) = site.machines.made("apply_configuration")
    assert call.secure and call.args == ("# config c1\n",)
    assert (await site.status("ClusterMachine", "w1"))["configHash"] == "c1"
