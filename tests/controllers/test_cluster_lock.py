"""A locked cluster (``herder.dev/locked``), controller by controller: the Locked condition says so (and that
a delete waits); nothing is applied, upgraded, bootstrapped, allocated, released, reset or torn down while
it is locked, and unlocking wakes each of them; machine locks keep working beside it."""

from __future__ import annotations

from herder.controllers.clusters.bootstrap import BootstrapController
from herder.controllers.clusters.cluster_lock import ClusterLockController
from herder.controllers.clusters.cluster_machine_teardown import ClusterMachineTeardownController
from herder.controllers.clusters.cluster_teardown import CLUSTER_FINALIZER, ClusterTeardownController
from herder.controllers.clusters.config_apply import ConfigApplyController
from herder.controllers.clusters.machine_set_allocation import MachineSetAllocationController
from herder.controllers.clusters.talos_upgrade import TalosUpgradeController
from herder.controllers.clusters.version_rollout import VersionRolloutController
from herder.resources import Resource
from herder.resources.clusters import LOCKED_ANNOTATION, is_locked
from herder.resources.status import find_condition
from herder.runtime.controller import ObjectKey
from herder.talos.machine import ApplyMode, ApplyResult
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import TALOS, Fleet
from tests.controllers.site import Site, names

LOCKED = "cluster alpha is locked (herder.dev/locked): `herder cluster unlock alpha` lets it go on"


async def lock(site: Site, fleet: Fleet, value: str | None = "true") -> tuple[Resource, Resource]:
    """Lock (None: unlock) the cluster; the cluster before and after."""
    before = await site.get("Cluster", fleet.name)
    assert before is not None
    changed = before.clone()
    if value is None:
        changed.metadata.annotations.pop(LOCKED_ANNOTATION, None)
    else:
        changed.metadata.annotations[LOCKED_ANNOTATION] = value
    return before, await site.store.update(changed)


def member_key(uuid: str) -> ObjectKey:
    return ObjectKey("ClusterMachine", "default", uuid)


async def locked_condition(site: Site, fleet: Fleet) -> dict[str, str] | None:
    return find_condition((await site.status("Cluster", fleet.name)).get("conditions"), "Locked")


def test_any_value_but_false_locks() -> None:
    cluster = Resource.model_validate(
        {"apiVersion": "herder.dev/v1alpha1", "kind": "Cluster", "metadata": {}}
    )
    assert not is_locked(cluster)
    for value, locked in (("true", True), ("", True), ("yes", True), ("False", False), ("false", False)):
        cluster.metadata.annotations[LOCKED_ANNOTATION] = value
        assert is_locked(cluster) is locked, value


async def test_the_locked_condition_shows_the_lock_and_a_waiting_delete(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    controller = ClusterLockController()
    await site.reconcile(controller, fleet.key)
    assert await locked_condition(site, fleet) is None  # never locked: no condition at all

    await lock(site, fleet)
    await site.reconcile(controller, fleet.key)
    condition = await locked_condition(site, fleet)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "Locked")
    assert condition["message"] == "herder changes nothing on the cluster's machines: " + LOCKED

    await site.reconcile(ClusterTeardownController(), fleet.key)  # its finalizer
    await site.store.delete("Cluster", fleet.name, "default")
    await site.reconcile(controller, fleet.key)
    condition = await locked_condition(site, fleet)
    assert condition is not None
    assert (condition["reason"], condition["message"]) == (
        "DeleteWaitsForUnlock",
        "the delete waits: " + LOCKED,
    )

    await lock(site, fleet, None)
    await site.reconcile(controller, fleet.key)
    condition = await locked_condition(site, fleet)
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "Unlocked")
    cluster = await site.get("Cluster", fleet.name)
    told = [reason for _, reason, _ in await site.told(cluster)]
    assert told == ["Locked", "DeleteWaitsForUnlock", "Unlocked"]


async def test_no_config_is_applied_to_a_locked_cluster_and_unlocking_lets_it_go(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await fleet.machine("w1")
    await fleet.machine("w2", stage="Maintenance")
    changed = await fleet.member("w1", configHash="c1", stage="Running", ready=True)
    await fleet.config(changed, "c2")
    first = await fleet.member("w2", machine_set="others")
    await fleet.config(first, "c1")
    apply = ConfigApplyController(fleet.keys, ClientPool(dialer=site.machines, keep=0))
    site.machines.answer("apply_configuration", ApplyResult(ApplyMode.NO_REBOOT, ""))
    await lock(site, fleet)
    for uuid in ("w1", "w2"):
        assert await site.reconcile(apply, member_key(uuid)) is None
    assert site.machines.made("apply_configuration") == []

    # The members' events fed the controller's index; unlocking wakes both of them.
    for uuid in ("w1", "w2"):
        member = await site.get("ClusterMachine", uuid)
        assert member is not None
        await site.show(apply, member)
    locked, unlocked = await lock(site, fleet, None)
    assert await site.show(apply, unlocked, before=locked) == [member_key("w1"), member_key("w2")]
    for uuid in ("w1", "w2"):
        await site.reconcile(apply, member_key(uuid))
    assert sorted(c.endpoint for c in site.machines.made("apply_configuration")) == [
        fleet.endpoint("w1"),
        fleet.endpoint("w2"),
    ]
    # Another annotation's change wakes nobody.
    other = unlocked.clone()
    other.metadata.annotations["note"] = "hello"
    updated = await site.store.update(other)
    assert await site.show(apply, updated, before=unlocked) == []


async def test_a_machine_lock_still_holds_on_an_unlocked_cluster(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await fleet.machine("w1")
    await fleet.node("w1", "workers", locked=True)
    member = await fleet.member("w1", configHash="c1", stage="Running", ready=True)
    await fleet.config(member, "c2")
    await lock(site, fleet)
    await lock(site, fleet, None)
    apply = ConfigApplyController(fleet.keys, ClientPool(dialer=site.machines, keep=0))
    assert await site.reconcile(apply, member_key("w1")) is None
    assert site.machines.made("apply_configuration") == []


async def test_no_upgrade_starts_on_a_locked_cluster(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1")
    await fleet.member("m1", talos="v1.13.2", configHash="c1")
    await lock(site, fleet)
    upgrade = TalosUpgradeController(fleet.keys, clients=ClientPool(dialer=site.machines, keep=0))
    assert await site.reconcile(upgrade, member_key("m1")) is None
    assert site.machines.made("upgrade") == []
    assert (await site.status("ClusterMachine", "m1")).get("upgrade") is None
    await lock(site, fleet, None)
    await site.reconcile(upgrade, member_key("m1"))
    assert len(site.machines.made("upgrade")) == 1


async def test_a_locked_clusters_rollouts_wait_and_keep_it_ready(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(talosVersion="v1.13.2")
    member = await fleet.member("cp1", "controlplane", configHash="c1", ready=True, talosVersion=TALOS)
    await fleet.config(member, "c2")
    await lock(site, fleet)
    await site.reconcile(VersionRolloutController(), fleet.key)
    rollouts = {r["kind"]: r for r in (await site.status("Cluster", fleet.name))["rollouts"]}
    assert (rollouts["Talos"]["state"], rollouts["Talos"]["message"]) == ("Rolling", "waiting: " + LOCKED)
    assert (rollouts["Config"]["state"], rollouts["Config"]["message"]) == ("Rolling", "waiting: " + LOCKED)
    moved = await site.get("ClusterMachine", "cp1")
    assert moved is not None and (moved.spec or {})["talosVersion"] == TALOS  # nothing moved


async def test_a_locked_cluster_is_not_bootstrapped(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(bootstrapped=False)
    await fleet.machine("cp1")
    await fleet.member("cp1", "controlplane", configHash="c1")
    await lock(site, fleet)
    bootstrap = BootstrapController(fleet.keys, clients=ClientPool(dialer=site.machines, keep=0))
    await site.reconcile(bootstrap, fleet.key)
    assert site.machines.made("bootstrap") == []
    assert (await site.status("Cluster", fleet.name)).get("bootstrap") is None
    await lock(site, fleet, None)
    await site.reconcile(bootstrap, fleet.key)
    assert len(site.machines.made("bootstrap")) == 1


async def test_a_locked_clusters_sets_neither_bind_nor_release_and_say_so_when_they_would(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Maintenance")
    await fleet.machine("m2", stage="Maintenance")
    workers = await fleet.machine_set("workers", machines=["m1"])
    allocation = MachineSetAllocationController()
    await site.reconcile(allocation, ObjectKey.of(workers))
    assert names((await site.store.list("MachineSetNode", "default")).items) == ["m1"]
    await site.show(allocation, workers)

    before, locked = await lock(site, fleet)
    assert await site.show(allocation, locked, before=before) == [ObjectKey.of(workers)]
    await site.reconcile(allocation, ObjectKey.of(workers))
    assert (await site.status("MachineSet", "workers")).get("allocation") is None  # nothing pending

    current = await site.get("MachineSet", "workers")
    assert current is not None
    changed = current.clone()
    changed.spec = {**(current.spec or {}), "machines": ["m2"]}
    await site.store.update(changed)
    await site.reconcile(allocation, ObjectKey.of(workers))
    assert names((await site.store.list("MachineSetNode", "default")).items) == ["m1"]
    assert (await site.status("MachineSet", "workers"))["allocation"] == {
        "missing": [],
        "reason": "waiting: " + LOCKED,
    }
    await lock(site, fleet, None)
    await site.reconcile(allocation, ObjectKey.of(workers))
    nodes = (await site.store.list("MachineSetNode", "default")).items
    assert {n.name: bool(n.metadata.deletion_timestamp) for n in nodes}.get("m2") is False


async def test_a_locked_clusters_member_is_not_reset(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1")
    await fleet.leave(await fleet.member("m1", configHash="c1"))
    await lock(site, fleet)
    teardown = ClusterMachineTeardownController(fleet.keys, ClientPool(dialer=site.machines, keep=0))
    assert await site.reconcile(teardown, member_key("m1")) is None
    assert site.machines.made("reset") == []
    assert (await site.status("ClusterMachine", "m1"))["teardown"] == "waiting: " + LOCKED
    await lock(site, fleet, None)
    await site.reconcile(teardown, member_key("m1"))
    assert len(site.machines.made("reset")) == 1


async def test_a_locked_clusters_delete_waits_with_its_finalizer_until_unlocked(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    teardown = ClusterTeardownController()
    await site.reconcile(teardown, fleet.key)
    await lock(site, fleet)
    await site.store.delete("Cluster", fleet.name, "default")
    await site.reconcile(teardown, fleet.key)
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None and cluster.metadata.finalizers == [CLUSTER_FINALIZER]
    assert await site.get("MachineSet", "workers") is not None
    assert (await site.status("Cluster", fleet.name))["teardown"] == "the delete waits: " + LOCKED
    await lock(site, fleet, None)
    await site.reconcile(teardown, fleet.key)
    assert await site.get("MachineSet", "workers") is None
    await site.reconcile(teardown, fleet.key)
    assert await site.get("Cluster", fleet.name) is None
