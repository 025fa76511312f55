"""ControlPlaneStatus's decisions: a bootstrapped cluster's etcd is measured through its running control
planes — members, leader, quorum, each member's own word — and shown with reasons; the control planes
learn whether they are etcd members; a probe that finds nothing new writes nothing (etcd's figures that
move on their own, every ten minutes)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from herder.controllers.clusters.control_plane_status import (
    API_GRACE,
    API_GRACE_RETRY,
    REFRESH_FIGURES_AFTER,
    ControlPlaneStatusController,
)
from herder.runtime.controller import Result
from herder.talos.machine import EtcdMember, EtcdMemberStatus, Unavailable
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site
from tests.controllers.workload import ENDPOINT, Workload

IDS = {"cp1": 0xA1, "cp2": 0xB2}


def controller(site: Site, fleet: Fleet) -> ControlPlaneStatusController:
    return ControlPlaneStatusController(fleet.keys, lambda namespace, cluster: None, dialer=site.machines)


async def control_planes(site: Site, fleet: Fleet, *, down: tuple[str, ...] = ()) -> None:
    """cp1 and cp2, each an etcd member (cp1 the leader), those in ``down`` unreachable."""
    for uuid in IDS:
        if uuid in down:
            await fleet.machine(uuid, connected=False, stage="Unreachable")
        else:
            await fleet.machine(uuid)
        await fleet.member(uuid, "controlplane", configHash="c1")
    members = [
        EtcdMember(IDS[u], u, (f"https://{fleet.endpoint(u).split(':')[0]}:2380",), (), False) for u in IDS
    ]
    site.machines.answer("etcd_member_list", members)
    for uuid, member_id in IDS.items():
        site.machines.answer("etcd_status", etcd_status(member_id, IDS["cp1"]), fleet.endpoint(uuid))


def etcd_status(member_id: int, leader: int, *errors: str) -> EtcdMemberStatus:
    return EtcdMemberStatus(member_id, leader, 1 << 20, 1 << 19, 42, 2, False, errors)


async def measured(site: Site, fleet: Fleet, probe: ControlPlaneStatusController) -> dict[str, Any]:
    await site.reconcile(probe, fleet.key)
    return await site.status("ControlPlaneStatus", fleet.name)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


async def test_a_cluster_not_bootstrapped_says_so(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    async with site.writes("ControlPlaneStatus", lambda made: made.status) as written:
        status = await measured(site, fleet, controller(site, fleet))
        await asyncio.sleep(0.1)
    pending = ("False", "NotBootstrapped", "etcd is not bootstrapped yet")
    assert conditions(status) == {"EtcdHealthy": pending, "APIReachable": pending, "Ready": pending}
    assert written == [status]  # made with its first verdicts, in one write
    assert site.machines.calls == []


async def test_a_healthy_etcd_is_shown_member_by_member(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await control_planes(site, fleet)
    probe = controller(site, fleet)
    status = await measured(site, fleet, probe)
    etcd = status["etcd"]
    assert (etcd["leader"], etcd["quorum"], etcd["leaderChanges"]) == ("cp1", True, 0)
    assert [(m["machine"], m["id"], m["healthy"], m["leader"], m["dbSize"]) for m in etcd["members"]] == [
        ("cp1", "a1", True, True, 1 << 20),
        ("cp2", "b2", True, False, 1 << 20),
    ]
    found = conditions(status)
    assert found["EtcdHealthy"] == ("True", "Healthy", "")
    # No endpoint to ask the Kubernetes API at: that is why the control plane is not Ready.
    assert found["APIReachable"] == ("False", "NoEndpoint", "the cluster has no endpoint yet")
    assert found["Ready"] == ("False", "APIReachable", "the cluster has no endpoint yet")
    for uuid in IDS:
        assert (await site.status("ClusterMachine", uuid))["etcdMember"] is True
        member = await site.get("ClusterMachine", uuid)
        assert ("Normal", "MemberJoined", f"machine {uuid} joined etcd") in await site.told(member)


async def test_a_member_whose_machine_is_down_is_named(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await control_planes(site, fleet, down=("cp2",))
    status = await measured(site, fleet, controller(site, fleet))
    assert conditions(status)["EtcdHealthy"] == ("False", "Unhealthy", "cp2: its machine does not run")
    assert status["etcd"]["quorum"] is False  # one of two members answers
    down = next(m for m in status["etcd"]["members"] if m["machine"] == "cp2")
    assert (down["healthy"], down["errors"]) == (False, ["its machine does not run"])


async def test_a_member_reporting_errors_and_a_second_leader_are_unhealthy(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await control_planes(site, fleet)
    site.machines.answer("etcd_status", etcd_status(IDS["cp2"], IDS["cp2"], "NOSPACE"), fleet.endpoint("cp2"))
    status = await measured(site, fleet, controller(site, fleet))
    assert conditions(status)["EtcdHealthy"] == (
        "False",
        "Unhealthy",
        "cp2: NOSPACE; etcd members follow different leaders",
    )


async def test_etcd_that_cannot_be_listed_says_why_and_leaves_membership_as_it_was(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await control_planes(site, fleet)
    probe = controller(site, fleet)
    await measured(site, fleet, probe)
    site.machines.fail("etcd_member_list", Unavailable("connection refused"))
    status = await measured(site, fleet, probe)
    healthy, reason, message = conditions(status)["EtcdHealthy"]
    assert (healthy, reason) == ("False", "Unhealthy")
    assert message.startswith("cannot list etcd members: 127.0.9.1: connection refused")
    assert (await site.status("ClusterMachine", "cp1"))["etcdMember"] is True


async def test_an_unchanged_probe_writes_nothing(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await control_planes(site, fleet)
    probe = controller(site, fleet)

    async def written() -> str:
        return (await site.get("ControlPlaneStatus", fleet.name)).metadata.resource_version  # type: ignore[union-attr]

    first = await measured(site, fleet, probe)
    version = await written()
    # etcd's raft index moves with every write to it: that alone is written only every ten minutes.
    for uuid, member_id in IDS.items():
        moved = dataclasses.replace(etcd_status(member_id, IDS["cp1"]), raft_index=43)
        site.machines.answer("etcd_status", moved, fleet.endpoint(uuid))
    site.clock.advance(30)
    assert await measured(site, fleet, probe) == first
    assert await written() == version
    site.clock.advance(REFRESH_FIGURES_AFTER)
    refreshed = await measured(site, fleet, probe)
    assert [m["raftIndex"] for m in refreshed["etcd"]["members"]] == [43, 43]
    assert refreshed["checkedAt"] == "2026-01-01T00:10:30Z"
    # Nothing new however long after: nothing written, checkedAt included.
    version = await written()
    site.clock.advance(2 * REFRESH_FIGURES_AFTER)
    assert await measured(site, fleet, probe) == refreshed
    assert await written() == version


async def test_a_new_leader_is_counted(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await control_planes(site, fleet)
    probe = controller(site, fleet)
    await measured(site, fleet, probe)
    for uuid, member_id in IDS.items():
        site.machines.answer("etcd_status", etcd_status(member_id, IDS["cp2"]), fleet.endpoint(uuid))
    etcd = (await measured(site, fleet, probe))["etcd"]
    assert (etcd["leader"], etcd["leaderChanges"]) == ("cp2", 1)


async def test_a_new_clusters_api_is_unreachable_only_past_its_grace(
    site: Site, cluster_api: Workload
) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(bootstrapped=False)
    await site.set_status(cluster, endpoint=ENDPOINT)
    await control_planes(site, fleet)
    probe = ControlPlaneStatusController(
        fleet.keys, lambda namespace, cluster: None, dialer=site.machines, kubernetes=cluster_api
    )
    pending = conditions(await measured(site, fleet, probe))
    cluster_api.down = True  # its API server is starting
    await site.set_status(
        cluster,
        bootstrap={
            "machine": "cp1",
            "requestedAt": site.clock.rfc3339(),
            "completedAt": site.clock.rfc3339(),
        },
    )
    before = await site.get("ControlPlaneStatus", fleet.name)
    assert await site.reconcile(probe, fleet.key) == Result(requeue_after=API_GRACE_RETRY)
    after = await site.get("ControlPlaneStatus", fleet.name)
    assert before is not None and after is not None
    assert after.metadata.resource_version == before.metadata.resource_version
    assert conditions(await site.status("ControlPlaneStatus", fleet.name)) == pending
    site.clock.advance(API_GRACE)
    found = conditions(await measured(site, fleet, probe))
    assert found["APIReachable"][:2] == ("False", "Unreachable")
