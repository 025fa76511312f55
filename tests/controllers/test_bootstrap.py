"""Bootstrap's decisions: etcd is bootstrapped exactly once, on the control plane recorded before the call;
a failed call is retried on that machine only, even when another one runs; a call that got through before
a crash counts, and is not sent again when the machine says its etcd runs."""

from __future__ import annotations

from herder.controllers.clusters.bootstrap import BootstrapController
from herder.talos.machine import AlreadyExists, EtcdMemberStatus, FailedPrecondition, Unavailable
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site


def controller(site: Site, fleet: Fleet) -> BootstrapController:
    return BootstrapController(fleet.keys, clients=ClientPool(dialer=site.machines, keep=0))


async def control_planes(fleet: Fleet, *uuids: str, stage: str = "Running") -> None:
    for uuid in uuids:
        await fleet.machine(uuid, stage=stage)
        await fleet.member(uuid, "controlplane", configHash="c1")


async def test_etcd_is_bootstrapped_once_on_the_first_running_control_plane(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(bootstrapped=False)
    await control_planes(fleet, "cp2", "cp1")
    bootstrap = controller(site, fleet)
    assert await site.reconcile(bootstrap, fleet.key) is None
    (call,) = site.machines.made("bootstrap")
    assert (call.endpoint, call.secure) == (fleet.endpoint("cp1"), True)
    assert (await site.status("Cluster", "alpha"))["bootstrap"] == {
        "machine": "cp1",
        "requestedAt": "2026-01-01T00:00:00Z",
        "completedAt": "2026-01-01T00:00:00Z",
    }
    assert ("Normal", "Bootstrapped", "etcd bootstrapped on machine cp1") in await site.told(cluster)

    site.clock.advance(60)
    await site.reconcile(bootstrap, fleet.key)
    assert len(site.machines.made("bootstrap")) == 1


async def test_nothing_is_chosen_before_a_control_plane_runs_its_config(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    await control_planes(fleet, "cp1", stage="Installing")
    await site.reconcile(controller(site, fleet), fleet.key)
    assert "bootstrap" not in await site.status("Cluster", "alpha")
    assert site.machines.made("bootstrap") == []


async def test_a_failed_bootstrap_is_retried_on_the_recorded_machine_only(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(bootstrapped=False)
    await control_planes(fleet, "cp1", "cp2")
    bootstrap = controller(site, fleet)
    site.machines.fail("bootstrap", Unavailable("connection reset"), fleet.endpoint("cp1"))
    site.machines.fail("etcd_status", FailedPrecondition("etcd is not running on this node"))
    result = await site.reconcile(bootstrap, fleet.key)
    assert result is not None and result.requeue_after == 5.0
    assert (await site.status("Cluster", "alpha"))["bootstrap"]["completedAt"] == ""
    assert ("Warning", "BootstrapFailed", "on machine cp1: connection reset") in await site.told(cluster)

    # cp1 goes down; cp2 runs, but is never asked: a second etcd would be a second cluster.
    cp1 = await site.get("Machine", "cp1")
    assert cp1 is not None
    await site.set_status(cp1, connected=False, stage="Unreachable")
    assert await site.reconcile(bootstrap, fleet.key) is None
    assert [c.endpoint for c in site.machines.made("bootstrap")] == [fleet.endpoint("cp1")]

    # cp1 is back, and had bootstrapped after all (the answer was lost): that is success.
    await site.set_status(cp1, connected=True, stage="Running")
    del site.machines.failures[(fleet.endpoint("cp1"), "bootstrap")]
    site.machines.fail("bootstrap", AlreadyExists("etcd is bootstrapped"))
    assert await site.reconcile(bootstrap, fleet.key) is None
    assert [c.endpoint for c in site.machines.made("bootstrap")] == [fleet.endpoint("cp1")] * 2
    assert (await site.status("Cluster", "alpha"))["bootstrap"]["completedAt"] == "2026-01-01T00:00:00Z"


async def test_a_choice_recorded_before_a_crash_asks_whether_etcd_runs_before_calling(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    await control_planes(fleet, "cp1")
    cluster = await site.get("Cluster", "alpha")
    assert cluster is not None
    # What a replica killed after its call got through leaves: the choice, no completion.
    await site.set_status(cluster, bootstrap={"machine": "cp1", "requestedAt": "2026-01-01T00:00:00Z"})
    site.machines.answer("etcd_status", EtcdMemberStatus(0xABC, 0xABC, 4096, 2048, 10, 2, False))
    assert await site.reconcile(controller(site, fleet), fleet.key) is None
    assert site.machines.made("bootstrap") == []
    assert (await site.status("Cluster", "alpha"))["bootstrap"]["completedAt"] == "2026-01-01T00:00:00Z"
