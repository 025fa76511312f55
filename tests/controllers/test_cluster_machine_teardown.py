"""ClusterMachineTeardown's decisions: a leaving machine is reset and let go once it is back in maintenance;
a control plane of a cluster that stays first leaves etcd, and only while etcd is healthy; an unreachable
machine holds its member, saying why, until an Admin forces its release (which removes a control plane's
etcd member through one that runs); a member of an aborted import goes at once, its machine untouched."""

from __future__ import annotations

from herder.controllers.clusters.cluster_machine_teardown import ClusterMachineTeardownController
from herder.resources.machines import FORCE_RELEASE_ANNOTATION
from herder.runtime.controller import ObjectKey
from herder.talos.machine import EtcdMember, WipeMode
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import ABORTED_IMPORT, Fleet, ready
from tests.controllers.site import Site

KEY = ObjectKey("ClusterMachine", "default", "m1")


def controller(site: Site, fleet: Fleet) -> ClusterMachineTeardownController:
    return ClusterMachineTeardownController(fleet.keys, ClientPool(dialer=site.machines, keep=0))


def calls(site: Site) -> list[tuple[str, str]]:
    return [(c.endpoint, c.method) for c in site.machines.calls]


async def teardown(site: Site, fleet: Fleet) -> tuple[float | None, str]:
    """One reconcile: its requeue, and what the member says it waits for."""
    result = await site.reconcile(controller(site, fleet), KEY)
    member = await site.get("ClusterMachine", "m1")
    return (result.requeue_after if result else None), (
        (member.status or {}).get("teardown", "") if member else "gone"
    )


async def test_a_worker_is_reset_then_released_once_back_in_maintenance(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    machine = await fleet.machine("m1")
    member = await fleet.leave(await fleet.member("m1", configHash="c1"))
    assert await teardown(site, fleet) == (None, "resetting the machine to maintenance mode")
    (reset,) = site.machines.made("reset")
    assert reset.endpoint == fleet.endpoint("m1") and reset.secure
    assert reset.kwargs == {"graceful": False, "reboot": True, "wipe_mode": WipeMode.SYSTEM_DISK}
    # On its way back: nothing more is asked of it.
    await site.set_status(machine, stage="Resetting")
    assert await teardown(site, fleet) == (None, "resetting the machine to maintenance mode")
    await site.set_status(machine, stage="Maintenance", maintenance=True)
    assert await teardown(site, fleet) == (None, "gone")
    assert len(site.machines.made("reset")) == 1
    told = [reason for _, reason, _ in await site.told(member)]
    assert told == ["Resetting", "Released"]


async def test_a_control_plane_leaves_etcd_before_its_reset_and_only_while_etcd_is_healthy(
    site: Site,
) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(etcd_healthy=False)
    await fleet.machine("m1")
    await fleet.leave(await fleet.member("m1", "controlplane", configHash="c1", etcdMember=True))
    assert await teardown(site, fleet) == (5.0, "waiting for etcd to be healthy before leaving it")
    assert site.machines.calls == []

    await site.set_status(cluster, conditions=[ready("EtcdHealthy")])
    assert await teardown(site, fleet) == (None, "resetting the machine to maintenance mode")
    here = fleet.endpoint("m1")
    assert calls(site) == [(here, "etcd_forfeit_leadership"), (here, "etcd_leave_cluster"), (here, "reset")]


async def test_an_unreachable_machine_holds_its_member_and_says_how_to_let_it_go(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", connected=False, stage="Unreachable")
    member = await fleet.leave(await fleet.member("m1", configHash="c1"))
    waits = (
        "machine m1 is unreachable; it is released once herder reaches it again, or by "
        "`herder machine release m1 --force`"
    )
    assert await teardown(site, fleet) == (30, waits)
    assert await teardown(site, fleet) == (30, waits)
    assert site.machines.calls == []
    assert await site.told(member) == [("Warning", "TeardownBlocked", waits)]


async def test_a_forced_release_lets_the_member_go_without_a_reset(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine(
        "m1", connected=False, stage="Unreachable", annotations={FORCE_RELEASE_ANNOTATION: "true"}
    )
    member = await fleet.leave(await fleet.member("m1", configHash="c1"))
    assert await teardown(site, fleet) == (None, "gone")
    assert site.machines.calls == []
    machine = await site.get("Machine", "m1")
    assert machine is not None and FORCE_RELEASE_ANNOTATION not in machine.metadata.annotations
    assert ("Warning", "ForceReleased", "machine m1 released without a reset") in await site.told(member)


async def test_a_forced_release_of_a_control_plane_removes_its_etcd_member_through_another(
    site: Site,
) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster()
    await fleet.machine(
        "m1", connected=False, stage="Unreachable", annotations={FORCE_RELEASE_ANNOTATION: "1"}
    )
    await fleet.machine("cp2")
    await fleet.member("cp2", "controlplane", configHash="c1", etcdMember=True)
    await fleet.leave(await fleet.member("m1", "controlplane", configHash="c1", etcdMember=True))
    gone, staying = fleet.endpoint("m1").split(":")[0], fleet.endpoint("cp2").split(":")[0]
    site.machines.answer(
        "etcd_member_list",
        [
            EtcdMember(0x1A, "m1", (f"https://{gone}:2380",), (), False),
            EtcdMember(0x2B, "cp2", (f"https://{staying}:2380",), (), False),
        ],
    )
    assert await teardown(site, fleet) == (None, "gone")
    (removed,) = site.machines.made("etcd_remove_member_by_id")
    assert (removed.endpoint, removed.args) == (fleet.endpoint("cp2"), (0x1A,))
    assert ("Normal", "EtcdMemberRemoved", "etcd member 1a of machine m1 removed") in await site.told(cluster)


async def test_a_forced_control_plane_waits_for_another_that_runs_to_remove_its_member(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine(
        "m1", connected=False, stage="Unreachable", annotations={FORCE_RELEASE_ANNOTATION: "1"}
    )
    await fleet.machine("cp2", connected=False, stage="Unreachable")
    await fleet.member("cp2", "controlplane", configHash="c1", etcdMember=True)
    await fleet.leave(await fleet.member("m1", "controlplane", configHash="c1", etcdMember=True))
    assert await teardown(site, fleet) == (
        5.0,
        "waiting for a running control plane to remove its etcd member",
    )


async def test_a_machine_never_configured_is_released_at_once(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Maintenance")
    await fleet.leave(await fleet.member("m1"))
    assert await teardown(site, fleet) == (None, "gone")
    assert site.machines.calls == []


async def test_a_member_of_an_aborted_import_is_released_untouched_although_locked(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(annotations=ABORTED_IMPORT)
    await fleet.machine("m1")
    member = await fleet.leave(await fleet.member("m1", "controlplane", configHash="c1", etcdMember=True))
    assert await teardown(site, fleet) == (None, "gone")
    assert site.machines.calls == []
    assert await site.told(member) == [("Normal", "Released", "machine m1 left as it runs (import aborted)")]
