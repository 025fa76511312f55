"""ClusterStatus's verdicts: phase, machine counts and the conditions ControlPlaneReady, EtcdHealthy,
KubernetesAPIReady and Ready, each naming what the cluster waits for; a loss is told as a Warning, and
only Ready as it comes (its steps are its conditions'); a cluster being deleted says what its teardown waits for."""

from __future__ import annotations

import asyncio
from typing import Any

from herder.controllers.clusters.cluster_status import ClusterStatusController
from herder.controllers.clusters.machine_set_status import MachineSetStatusController
from herder.resources import Resource
from tests.controllers.fleet import Fleet, ready
from tests.controllers.site import Site, eventually, obj


async def verdicts(site: Site, fleet: Fleet) -> dict[str, Any]:
    await site.reconcile(ClusterStatusController(), fleet.key)
    status = await site.status("Cluster", fleet.name)
    conditions = {c["type"]: (c["status"] == "True", c["reason"], c["message"]) for c in status["conditions"]}
    return {"phase": status["phase"], "machines": status["machines"], **conditions}


async def health(site: Site, fleet: Fleet, etcd: bool = True, api: bool = True) -> Resource:
    """The ControlPlaneStatus its controller measured."""
    found = await site.get("ControlPlaneStatus", fleet.name)
    if found is None:
        (found,) = await site.create(obj("ControlPlaneStatus", fleet.name))
    return await site.set_status(
        found,
        conditions=[
            ready("EtcdHealthy", etcd, "Healthy" if etcd else "Unhealthy", "" if etcd else "cp2: no answer"),
            ready("APIReachable", api, "Reachable" if api else "Unreachable", "" if api else "timed out"),
        ],
    )


async def running(site: Site, *, workers: int = 1) -> Fleet:
    """A bootstrapped cluster of two ready control planes and ready workers, measured healthy."""
    fleet = Fleet(site)
    cluster = await fleet.cluster()
    await site.set_status(cluster, conditions=[ready("EndpointReady", reason="Serving")])
    # Sets of hand-made nodes: they want the machines they have, as their status counts them.
    for machine_set, count in (
        (await fleet.control_plane_set(), 2),
        (await fleet.machine_set("workers"), workers),
    ):
        await site.set_status(
            machine_set, machines={"total": count, "ready": count}, conditions=[ready("Ready")]
        )
    for uuid in ("cp1", "cp2"):
        await fleet.member(uuid, "controlplane", ready=True, conditions=[ready("Ready")])
    for i in range(1, workers + 1):
        await fleet.member(f"w{i}", ready=True, conditions=[ready("Ready")])
    await health(site, fleet)
    return fleet


async def test_a_forming_cluster_says_it_has_no_control_plane_and_no_etcd_yet(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    assert await verdicts(site, fleet) == {
        "phase": "Provisioning",
        "machines": {"total": 0, "ready": 0, "wanted": 0},
        "ControlPlaneReady": (False, "NoControlPlanes", "the cluster has no control plane machine"),
        "EtcdHealthy": (False, "NotBootstrapped", "etcd is not bootstrapped yet"),
        "KubernetesAPIReady": (False, "NotBootstrapped", "etcd is not bootstrapped yet"),
        "Ready": (False, "ControlPlaneReady", "the cluster has no control plane machine"),
    }
    cluster = await site.get("Cluster", fleet.name)
    assert await site.told(cluster) == []  # a new cluster that is not ready yet: nothing went wrong


async def test_a_healthy_cluster_is_ready_and_says_so_once(site: Site) -> None:
    fleet = await running(site)
    got = await verdicts(site, fleet)
    assert got == {
        "phase": "Running",
        "machines": {"total": 3, "ready": 3, "wanted": 3},
        "EndpointReady": (True, "Serving", ""),
        "ControlPlaneReady": (True, "Ready", "2 control plane(s) ready"),
        "EtcdHealthy": (True, "Healthy", ""),
        "KubernetesAPIReady": (True, "Reachable", ""),
        "Ready": (True, "Ready", "3/3 machines ready"),
    }
    assert await verdicts(site, fleet) == got
    cluster = await site.get("Cluster", fleet.name)
    told = [(kind, reason) for kind, reason, _ in await site.told(cluster)]
    assert told == [("Normal", "Ready")]  # its conditions tell each step


async def test_a_forming_cluster_tells_only_that_it_is_ready_at_the_end(site: Site) -> None:
    fleet = await running(site)
    w1 = await site.get("ClusterMachine", "w1")
    assert w1 is not None
    w1 = await site.set_status(w1, ready=False, conditions=[ready("Ready", False, "NotRunning", "booting")])
    got = await verdicts(site, fleet)  # its control planes, etcd and API are up; a worker is not
    assert [got[k][0] for k in ("ControlPlaneReady", "EtcdHealthy", "KubernetesAPIReady", "Ready")] == [
        True,
        True,
        True,
        False,
    ]
    cluster = await site.get("Cluster", fleet.name)
    assert await site.told(cluster) == []  # each step is its condition's to tell
    await site.set_status(w1, ready=True, conditions=[ready("Ready")])
    await verdicts(site, fleet)
    assert await site.told(cluster) == [("Normal", "Ready", "3/3 machines ready")]


async def test_a_control_plane_not_ready_is_named_with_its_fault_and_on_its_way_in_one_write(
    site: Site,
) -> None:
    fleet = await running(site)
    cp2 = await site.get("ClusterMachine", "cp2")
    assert cp2 is not None
    versions = []
    for reason, step in (("NotRunning", "machine is booting"), ("EtcdNotJoined", "waiting for etcd")):
        # Each step is the member's own condition's to tell: the cluster is not written again for it.
        await site.set_status(cp2, ready=False, conditions=[ready("Ready", False, reason, step)])
        got = await verdicts(site, fleet)
        why = "1/2 ready; cp2: on its way (its ClusterMachine's Ready condition says how far)"
        assert got["ControlPlaneReady"] == (False, "ControlPlanesNotReady", why)
        assert got["Ready"] == (False, "ControlPlaneReady", why)
        assert got["machines"] == {"total": 3, "ready": 2, "wanted": 3}
        versions.append((await site.get("Cluster", fleet.name)).metadata.resource_version)  # type: ignore[union-attr]
    assert versions[0] == versions[1]
    # A fault is named with its message.
    await site.set_status(
        cp2, ready=False, conditions=[ready("Ready", False, "Unreachable", "machine is unreachable")]
    )
    got = await verdicts(site, fleet)
    assert got["ControlPlaneReady"] == (
        False,
        "ControlPlanesNotReady",
        "1/2 ready; cp2: machine is unreachable",
    )


async def test_losing_etcd_health_is_told_as_a_warning_and_coming_back_as_ready(site: Site) -> None:
    fleet = await running(site)
    await verdicts(site, fleet)
    await health(site, fleet, etcd=False)
    got = await verdicts(site, fleet)
    assert got["EtcdHealthy"] == (False, "Unhealthy", "cp2: no answer")
    assert got["Ready"] == (False, "EtcdHealthy", "cp2: no answer")
    await health(site, fleet)
    await verdicts(site, fleet)
    cluster = await site.get("Cluster", fleet.name)
    # (Ready again is the Event of the first time Ready, counted twice.)
    assert (await site.told(cluster))[-3:] == [
        ("Warning", "EtcdHealthyLost", "cp2: no answer"),
        ("Warning", "ReadyLost", "cp2: no answer"),
        ("Normal", "Ready", "3/3 machines ready"),
    ]


async def test_an_endpoint_herder_cannot_serve_is_why_the_api_is_not_ready(site: Site) -> None:
    fleet = await running(site)
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    problem = "set spec.endpoint, or start herder serve with --cluster-endpoints"
    await site.set_status(cluster, conditions=[ready("EndpointReady", False, "NoEndpoint", problem)])
    got = await verdicts(site, fleet)
    assert got["KubernetesAPIReady"] == (False, "NoEndpoint", problem)
    assert got["Ready"] == (False, "KubernetesAPIReady", problem)


async def test_a_stopped_rollout_or_a_set_short_of_machines_keeps_the_cluster_not_ready(site: Site) -> None:
    fleet = await running(site)
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    workers = await site.get("MachineSet", "workers")
    assert workers is not None
    await site.set_status(workers, conditions=[ready("Ready", False, "MachinesMissing")])
    assert (await verdicts(site, fleet))["Ready"] == (
        False,
        "MachinesNotReady",
        "machine set workers is not ready",
    )
    stopped = {"kind": "Talos", "target": "v1.13.2", "state": "Stopped", "message": "stopped: w1 failed"}
    await site.set_status(cluster, rollouts=[stopped])
    assert (await verdicts(site, fleet))["Ready"] == (False, "TalosRolloutStopped", "stopped: w1 failed")


async def test_machines_wanted_come_from_the_sets_and_leaving_ones_scale_down(site: Site) -> None:
    fleet = await running(site, workers=2)
    workers = await site.get("MachineSet", "workers")
    assert workers is not None
    await site.set_status(workers, machines={"total": 3, "ready": 2})  # a third one is allocated
    got = await verdicts(site, fleet)
    assert (got["phase"], got["machines"]) == ("ScalingUp", {"total": 4, "ready": 4, "wanted": 5})
    assert got["Ready"] == (False, "MachinesNotReady", "4/5 machines ready")
    await site.set_status(workers, machines={"total": 2, "ready": 2})
    leaving = await site.get("ClusterMachine", "w2")
    assert leaving is not None
    await fleet.leave(leaving)
    got = await verdicts(site, fleet)
    assert (got["phase"], got["machines"]) == ("ScalingDown", {"total": 3, "ready": 3, "wanted": 4})


async def test_a_cluster_being_deleted_says_what_its_teardown_waits_for(site: Site) -> None:
    fleet = await running(site)
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    cluster = await site.set_status(cluster, teardown="waiting for 3 machine(s) to be reset: cp1, cp2, w1")
    marked = cluster.clone()
    marked.metadata.finalizers = ["herder.dev/cluster"]
    await site.store.update(marked)
    await site.store.delete("Cluster", fleet.name, "default")
    got = await verdicts(site, fleet)
    assert got["phase"] == "Destroying"
    assert got["Ready"] == (False, "Destroying", "waiting for 3 machine(s) to be reset: cp1, cp2, w1")


async def test_the_last_member_ready_is_one_write_with_its_set_ready_too(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster()
    await site.set_status(cluster, conditions=[ready("EndpointReady", reason="Serving")])
    for uuid in ("cp1", "w1"):
        await fleet.machine(uuid)
    await fleet.control_plane_set(machines=["cp1"])
    await fleet.machine_set("workers", machines=["w1"])
    await fleet.member("cp1", "controlplane", ready=True, conditions=[ready("Ready")])
    w1 = await fleet.member("w1", conditions=[ready("Ready", False, "NotRunning", "machine is booting")])
    await health(site, fleet)

    def seen(cluster: Resource) -> tuple[int, str]:
        status = cluster.status or {}
        found = next(c for c in status.get("conditions", []) if c["type"] == "Ready")
        return status["machines"]["ready"], found["message"]

    summaries = (MachineSetStatusController(), ClusterStatusController())
    async with site.writes("Cluster", seen) as written, site.running(*summaries):
        await eventually(lambda: written[-1:] == [(1, "machine set workers is not ready")])
        before = len(written)
        await site.set_status(w1, ready=True, conditions=[ready("Ready")])
        await eventually(lambda: written[-1:] == [(2, "2/2 machines ready")])
        await asyncio.sleep(2)
    # Not once with the member and again with its set: the cluster reads the set's verdict of the same change.
    assert written[before:] == [(2, "2/2 machines ready")]
