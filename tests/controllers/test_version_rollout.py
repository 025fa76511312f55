"""VersionRollout's decisions: a new version moves the control planes one at a time behind etcd's health,
then the workers by their set's upgrade strategy; Talos before Kubernetes; a failed upgrade stops the
rollout, visibly; the config rollout shows how far the newest configs are applied."""

from __future__ import annotations

import asyncio
from typing import Any

from herder.controllers.clusters.version_rollout import VersionRolloutController
from herder.resources import Resource
from tests.controllers.fleet import KUBERNETES, TALOS, Fleet, ready
from tests.controllers.site import Site, eventually

TARGET = "v1.13.2"


async def formed(site: Site, *, workers: int = 2, parallelism: int = 1) -> Fleet:
    """A bootstrapped, healthy cluster of two control planes and ``workers`` workers, every one ready."""
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers", upgradeStrategy={"rolling": {"maxParallelism": parallelism}})
    roles = [("cp1", "controlplane"), ("cp2", "controlplane")] + [
        (f"w{i}", "worker") for i in range(1, workers + 1)
    ]
    for uuid, role in roles:
        member = await fleet.member(uuid, role, configHash="c1", ready=True, talosVersion=TALOS)
        await fleet.config(member, "c1")
    return fleet


async def change(site: Site, fleet: Fleet, **spec: str) -> None:
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    changed = cluster.clone()
    changed.spec = {**(cluster.spec or {}), **spec}
    await site.store.update(changed)


async def roll(site: Site, fleet: Fleet) -> dict[str, dict[str, Any]]:
    await site.reconcile(VersionRolloutController(), fleet.key)
    return {r["kind"]: r for r in (await site.status("Cluster", fleet.name))["rollouts"]}


async def wanted(site: Site, field: str = "talosVersion") -> dict[str, str]:
    members = (await site.store.list("ClusterMachine", "default")).items
    return {m.name: (m.spec or {})[field] for m in members}


async def upgraded(site: Site, uuid: str, version: str = TARGET, **status: Any) -> Resource:
    member = await site.get("ClusterMachine", uuid)
    assert member is not None
    return await site.set_status(member, talosVersion=version, **status)


async def test_a_forming_cluster_keeps_the_versions_it_was_created_with(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    await fleet.member("cp1", "controlplane")
    await change(site, fleet, talosVersion=TARGET)
    await site.reconcile(VersionRolloutController(), fleet.key)
    assert await wanted(site) == {"cp1": TALOS}


async def test_control_planes_move_one_at_a_time_then_workers_by_their_strategy(site: Site) -> None:
    fleet = await formed(site, workers=3, parallelism=2)
    await change(site, fleet, talosVersion=TARGET)
    rollout = (await roll(site, fleet))["Talos"]
    assert rollout == {
        "kind": "Talos",
        "target": TARGET,
        "done": 0,
        "total": 5,
        "state": "Rolling",
        "message": f"moving control plane cp1 to {TARGET}",
    }
    assert (await roll(site, fleet))["Talos"]["message"] == f"control plane cp1 is moving to {TARGET}"
    assert await wanted(site) == {"cp1": TARGET, "cp2": TALOS, "w1": TALOS, "w2": TALOS, "w3": TALOS}

    await upgraded(site, "cp1")
    assert (await roll(site, fleet))["Talos"]["message"] == f"moving control plane cp2 to {TARGET}"
    await upgraded(site, "cp2")
    rollout = (await roll(site, fleet))["Talos"]
    assert (rollout["done"], rollout["message"]) == (2, f"moving w1, w2 to {TARGET}")
    assert await wanted(site) == {"cp1": TARGET, "cp2": TARGET, "w1": TARGET, "w2": TARGET, "w3": TALOS}
    assert (await roll(site, fleet))["Talos"]["message"] == f"2 machine(s) moving to {TARGET}"

    for uuid in ("w1", "w2"):
        await upgraded(site, uuid)
    assert (await roll(site, fleet))["Talos"]["message"] == f"moving w3 to {TARGET}"
    await upgraded(site, "w3")
    rollout = (await roll(site, fleet))["Talos"]
    assert (rollout["state"], rollout["done"], rollout["message"]) == (
        "Done",
        5,
        f"every machine runs Talos {TARGET}",
    )
    member = await site.get("ClusterMachine", "w3")
    assert ("Normal", "TalosRollout", f"moving machine w3 to Talos {TARGET}") in await site.told(member)


async def test_a_control_plane_moves_only_while_etcd_and_every_control_plane_are_healthy(site: Site) -> None:
    fleet = await formed(site)
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    await site.set_status(cluster, conditions=[ready("EtcdHealthy", False)])
    await change(site, fleet, talosVersion=TARGET)
    waiting = "waiting for etcd and every control plane to be healthy"
    assert (await roll(site, fleet))["Talos"]["message"] == waiting

    await site.set_status(cluster, conditions=[ready("EtcdHealthy")])
    await upgraded(site, "cp2", TALOS, ready=False)
    assert (await roll(site, fleet))["Talos"]["message"] == waiting
    assert set((await wanted(site)).values()) == {TALOS}


async def test_a_failed_upgrade_stops_the_rollout_until_the_version_changes(site: Site) -> None:
    fleet = await formed(site)
    await change(site, fleet, talosVersion=TARGET)
    await roll(site, fleet)
    error = "the machine came back on v1.13.0: the new system did not boot"
    upgrade = {"target": TARGET, "fromVersion": TALOS, "requestedAt": "2026-01-01T00:00:00Z", "error": error}
    await upgraded(site, "cp1", TALOS, upgrade=upgrade)
    rollout = (await roll(site, fleet))["Talos"]
    assert rollout["state"] == "Stopped"
    assert rollout["message"] == (
        f"stopped: the upgrade of machine cp1 to {TARGET} failed: {error}; "
        "change the cluster's talosVersion (back) to go on"
    )
    assert await wanted(site) == {"cp1": TARGET, "cp2": TALOS, "w1": TALOS, "w2": TALOS}

    # Set back: the machine already moved is brought back.
    await change(site, fleet, talosVersion=TALOS)
    await roll(site, fleet)
    assert set((await wanted(site)).values()) == {TALOS}


async def pre_checks(site: Site, fleet: Fleet, ok: bool = True, message: str = "") -> None:
    """The verdict of the upgrade pre-checks on the cluster's current generation."""
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    condition = {
        "type": "UpgradePreChecks",
        "status": "True" if ok else "False",
        "reason": "Passed" if ok else "RemovedAPIs",
        "message": message,
        "observedGeneration": cluster.metadata.generation,
    }
    others = [c for c in (cluster.status or {}).get("conditions") or () if c["type"] != "UpgradePreChecks"]
    await site.set_status(cluster, conditions=[*others, condition])


async def health(site: Site, fleet: Fleet, state: str, message: str = "") -> None:
    """The verdict of the cluster's one health check, as the HealthCheck controller writes it."""
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None
    await site.set_status(cluster, healthChecks=[{"name": "dns", "state": state, "message": message}])


async def test_a_kubernetes_minor_upgrade_waits_for_its_pre_checks(site: Site) -> None:
    fleet = await formed(site, workers=1)
    await change(site, fleet, kubernetesVersion="1.34.0")
    rollout = (await roll(site, fleet))["Kubernetes"]
    assert rollout["state"] == "Held"
    assert rollout["message"] == "held: upgrade pre-checks: not run yet"
    await pre_checks(site, fleet, ok=False, message="FlowSchema x (flowcontrol.apiserver.k8s.io/v1beta3)")
    rollout = (await roll(site, fleet))["Kubernetes"]
    assert (
        rollout["message"] == "held: upgrade pre-checks: FlowSchema x (flowcontrol.apiserver.k8s.io/v1beta3)"
    )
    assert await wanted(site, "kubernetesVersion") == {"cp1": KUBERNETES, "cp2": KUBERNETES, "w1": KUBERNETES}


async def test_a_health_check_that_has_not_passed_holds_every_rollout(site: Site) -> None:
    fleet = await formed(site, workers=1)
    await health(site, fleet, "Failed", "the Job failed")
    await change(site, fleet, talosVersion=TARGET)
    rollout = (await roll(site, fleet))["Talos"]
    assert rollout["state"] == "Held"
    assert rollout["message"] == "held: health check dns failed (the Job failed)"
    assert set((await wanted(site)).values()) == {TALOS}
    await health(site, fleet, "Pending")
    assert (await roll(site, fleet))["Talos"]["message"] == "held: health check dns has not passed yet"
    await health(site, fleet, "Passed")
    assert (await roll(site, fleet))["Talos"]["message"] == f"moving control plane cp1 to {TARGET}"


async def test_kubernetes_moves_once_talos_is_done(site: Site) -> None:
    fleet = await formed(site, workers=1)
    await change(site, fleet, kubernetesVersion="1.34.0")
    await pre_checks(site, fleet)
    rollouts = await roll(site, fleet)
    assert rollouts["Talos"]["state"] == "Done"
    assert rollouts["Kubernetes"]["message"] == "moving control plane cp1 to 1.34.0"
    assert await wanted(site, "kubernetesVersion") == {"cp1": "1.34.0", "cp2": KUBERNETES, "w1": KUBERNETES}
    # Done for a machine once a config made for the version is applied to it.
    cp1 = await site.get("ClusterMachine", "cp1")
    assert cp1 is not None
    await site.store.delete("ClusterMachineConfig", "cp1", "default")
    await fleet.config(cp1, "c2", kubernetes="1.34.0")
    assert (await roll(site, fleet))["Kubernetes"]["message"] == "control plane cp1 is moving to 1.34.0"
    await site.set_status(cp1, configHash="c2")
    assert (await roll(site, fleet))["Kubernetes"] == {
        "kind": "Kubernetes",
        "target": "1.34.0",
        "done": 1,
        "total": 3,
        "state": "Rolling",
        "message": "moving control plane cp2 to 1.34.0",
    }


async def test_the_config_rollout_shows_machines_behind_and_the_first_failure(site: Site) -> None:
    fleet = await formed(site)
    assert "Config" not in await roll(site, fleet)  # every machine runs its newest config
    for uuid in ("w1", "w2"):
        await site.store.delete("ClusterMachineConfig", uuid, "default")
        member = await site.get("ClusterMachine", uuid)
        assert member is not None
        await fleet.config(member, "c2")
    assert (await roll(site, fleet))["Config"] == {
        "kind": "Config",
        "target": "",
        "done": 2,
        "total": 4,
        "state": "Rolling",
        "message": "2 machine(s) to update",
    }
    w2 = await site.get("ClusterMachine", "w2")
    assert w2 is not None
    await site.set_status(w2, apply={"attempts": 2, "lastError": "connection refused"})
    config = (await roll(site, fleet))["Config"]
    assert (config["state"], config["message"]) == ("Stopped", "machine w2: connection refused")


async def test_a_forming_cluster_shows_its_rollouts_once_its_members_run_its_versions(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()  # bootstrapped; its members still come up
    member = await fleet.member("cp1", "controlplane", configHash="c1")
    await fleet.config(member, "c1")
    assert await roll(site, fleet) == {}  # nothing moves: what there is to tell is its members' to tell
    await site.set_status(member, ready=True, talosVersion=TALOS)
    rollouts = await roll(site, fleet)
    assert [(r["kind"], r["state"], r["done"]) for r in rollouts.values()] == [
        ("Talos", "Done", 1),
        ("Kubernetes", "Done", 1),
    ]


async def test_members_coming_up_together_are_one_write_of_the_rollouts(site: Site) -> None:
    fleet = await formed(site, workers=0)
    await roll(site, fleet)  # its rollouts are shown
    members = [await fleet.member(uuid, configHash="c1") for uuid in ("w1", "w2", "w3")]
    for member in members:
        await fleet.config(member, "c1")

    def talos(cluster: Resource) -> list[tuple[int, str]]:
        rollouts = (cluster.status or {}).get("rollouts", [])
        return [(r["done"], r["state"]) for r in rollouts if r["kind"] == "Talos"]

    async with site.writes("Cluster", talos) as written, site.running(VersionRolloutController()):
        await eventually(lambda: written == [[(2, "Rolling")]])
        # New members come up within a moment of each other (as a new set's do).
        for member in members:
            await site.set_status(member, ready=True, talosVersion=TALOS)
            await asyncio.sleep(0.1)
        await eventually(lambda: written[-1:] == [[(5, "Done")]])
        await asyncio.sleep(1.5)
    assert written == [[(2, "Rolling")], [(5, "Done")]]
