"""MachineSetAllocation's decisions: bind, release, short of machines, unlimited, and a control plane's
release gated on etcd's health and on the control planes that stay."""

from __future__ import annotations

import asyncio

from herder.controllers.clusters.machine_set_allocation import MachineSetAllocationController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from herder.state.store import WatchEvent
from tests.controllers.site import Site, eventually, names, obj

CLUSTER = {"herder.dev/cluster": "alpha"}


def cluster() -> Resource:
    return obj("Cluster", "alpha", spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"})


def machine(uuid: str, **labels: str) -> Resource:
    return obj("Machine", uuid, spec={"endpoint": f"127.0.0.{len(uuid)}:50000"}, metadata={"labels": labels})


def worker_set(name: str, spec: dict[str, object]) -> Resource:
    """A worker MachineSet of cluster alpha."""
    return obj("MachineSet", name, spec={"role": "worker", **spec}, metadata={"labels": CLUSTER})


async def free(site: Site, *uuids: str, **labels: str) -> None:
    for uuid in uuids:
        (made,) = await site.create(machine(uuid, **labels))
        await site.set_status(made, connected=True, stage="Maintenance")


async def staying(site: Site) -> list[str]:
    """The names of the set's nodes not being deleted (a released one waits for membership's finalizer)."""
    listed = (await site.store.list("MachineSetNode", "default")).items
    return names([n for n in listed if not n.metadata.deletion_timestamp])


async def test_a_static_set_binds_the_machines_it_lists_and_says_which_are_missing(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1")
    await free(site, "m2", **{"herder.dev/cluster": "beta"})  # still leaving another cluster
    (workers,) = await site.create(worker_set("alpha-workers", {"machines": ["m1", "m2"]}))
    await site.reconcile(MachineSetAllocationController(), ObjectKey.of(workers))
    nodes = (await site.store.list("MachineSetNode", "default")).items
    assert names(nodes) == ["m1"]
    assert nodes[0].metadata.controller_ref().name == "alpha-workers"  # type: ignore[union-attr]
    # Membership's finalizer comes with the node: no second write adds it.
    assert nodes[0].metadata.finalizers == ["herder.dev/cluster-machine"]
    assert (await site.status("MachineSet", "alpha-workers"))["allocation"] == {
        "missing": ["m2"],
        "reason": "machine m2 is still being released from cluster beta",
    }
    assert ("Normal", "Allocated", "machine m1 allocated") in await site.told(workers)


async def test_a_class_set_takes_free_matching_machines_up_to_its_size(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1", "m2", "m3", pool="a")
    await free(site, "m4", pool="b")
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))
    (workers,) = await site.create(
        worker_set("alpha-workers", {"machineClass": {"name": "pool-a", "size": 2}})
    )
    await site.reconcile(MachineSetAllocationController(), ObjectKey.of(workers))
    assert await staying(site) == ["m1", "m2"]
    assert "allocation" not in await site.status("MachineSet", "alpha-workers")


async def test_an_unlimited_class_set_takes_every_free_matching_machine(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1", "m2", "m3", pool="a")
    (busy,) = await site.create(machine("m4", pool="a"))
    await site.set_status(busy, connected=True, stage="Running")  # runs a config: not free
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))
    (workers,) = await site.create(
        worker_set("alpha-workers", {"machineClass": {"name": "pool-a", "size": "unlimited"}})
    )
    await site.reconcile(MachineSetAllocationController(), ObjectKey.of(workers))
    assert await staying(site) == ["m1", "m2", "m3"]
    assert "allocation" not in await site.status("MachineSet", "alpha-workers")


async def test_a_set_short_of_machines_says_how_many_and_why(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1", pool="a")
    (away,) = await site.create(machine("m2", pool="a"))
    await site.set_status(away, connected=False, stage="Unreachable")
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))
    (workers,) = await site.create(
        worker_set("alpha-workers", {"machineClass": {"name": "pool-a", "size": 3}})
    )
    allocation = MachineSetAllocationController()
    await site.reconcile(allocation, ObjectKey.of(workers))
    assert await staying(site) == ["m1"]
    assert (await site.status("MachineSet", "alpha-workers"))["allocation"] == {
        "missing": [],
        "reason": "2 more machine(s) wanted from class pool-a: 2 match its selector, 0 of them free "
        "(connected, in maintenance, in no cluster)",
    }
    # A machine that becomes free wakes the set that waits for one.
    (freed,) = await site.create(machine("m3", pool="a"))
    before = freed
    freed = await site.set_status(freed, connected=True, stage="Maintenance")
    woken = list(allocation.watches[2].map(WatchEvent("MODIFIED", freed, before)))
    assert woken == [ObjectKey.of(workers)]


async def test_a_shrunk_class_set_releases_its_newest_machines(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1", "m2", "m3", pool="a")
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))
    (workers,) = await site.create(
        worker_set("alpha-workers", {"machineClass": {"name": "pool-a", "size": 3}})
    )
    allocation = MachineSetAllocationController()
    await site.reconcile(allocation, ObjectKey.of(workers))
    site.clock.advance(1)
    await resize(site, workers, {"machineClass": {"name": "pool-a", "size": 1}})
    assert await site.reconcile(allocation, ObjectKey.of(workers)) is None
    # The newest go (m3 and m2, bound last), both at once: the set's delete strategy is Unset.
    assert await staying(site) == ["m1"]
    told = await site.told(workers)
    assert ("Normal", "Releasing", "machine m3 leaves the set") in told
    assert ("Normal", "Releasing", "machine m2 leaves the set") in told


async def test_a_control_plane_leaves_only_while_etcd_is_healthy_and_the_others_are_ready(site: Site) -> None:
    (alpha,) = await site.create(cluster())
    await site.set_status(alpha, conditions=[etcd_healthy(False)])
    await free(site, "cp1", "cp2", "cp3")
    (control_planes,) = await site.create(
        obj(
            "MachineSet",
            "alpha-control-planes",
            spec={"role": "controlplane", "machines": ["cp1", "cp2", "cp3"]},
            metadata={"labels": CLUSTER},
        )
    )
    allocation = MachineSetAllocationController()
    key = ObjectKey.of(control_planes)
    await site.reconcile(allocation, key)
    for uuid in ("cp1", "cp2", "cp3"):
        (member,) = await site.create(
            obj(
                "ClusterMachine",
                uuid,
                spec={"role": "controlplane", "talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"},
                metadata={"labels": {**CLUSTER, "herder.dev/machine-set": "alpha-control-planes"}},
            )
        )
        await site.set_status(member, ready=uuid != "cp2")
    await resize(site, control_planes, {"machines": ["cp1", "cp2"]})
    gated = await site.reconcile(allocation, key)
    assert gated is not None and gated.requeue_after == 2.0
    await site.set_status(alpha, conditions=[etcd_healthy(True)])
    gated = await site.reconcile(allocation, key)  # cp2, which stays, is not ready
    assert gated is not None and gated.requeue_after == 2.0
    assert await staying(site) == ["cp1", "cp2", "cp3"]

    cp2 = await site.get("ClusterMachine", "cp2")
    assert cp2 is not None
    await site.set_status(cp2, ready=True)
    assert await site.reconcile(allocation, key) is None
    assert await staying(site) == ["cp1", "cp2"]


def etcd_healthy(ok: bool) -> dict[str, str]:
    return {
        "type": "EtcdHealthy",
        "status": "True" if ok else "False",
        "reason": "Healthy" if ok else "Unhealthy",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


async def resize(site: Site, machine_set: object, spec: dict[str, object]) -> None:
    assert isinstance(machine_set, Resource)
    current = await site.get("MachineSet", machine_set.name)
    assert current is not None
    changed = current.clone()
    changed.spec = {**(current.spec or {}), **spec}
    await site.store.update(changed)


async def test_a_set_of_a_request_set_names_it_while_it_provisions_and_tells_its_refusals(site: Site) -> None:
    await site.create(cluster())
    await site.create(obj("InfraProvider", "emu", namespaced=False, spec={}))
    (pool,) = await site.create(
        obj(
            "MachineRequestSet",
            "pool",
            spec={"providerID": "emu", "talosVersion": "v1.13.0", "machineCount": 2},
        )
    )
    (workers,) = await site.create(worker_set("workers", {"machineRequestSet": "pool"}))
    allocation = MachineSetAllocationController()
    provisioning = "2 more machine(s) wanted from machine request set pool: being provisioned "
    provisioning += "(machine request set pool says how far)"
    for ok, reason, told in (
        (False, "Provisioning", "0/2 provisioned; pool-a: Pending"),
        (False, "Provisioning", "1/2 provisioned; pool-b: Provisioning: booting"),
        # Provisioned, not connected yet: still on their way.
        (True, "Provisioned", "2 machine(s) provisioned"),
    ):
        # Its progress is the request set's to tell: the machine set is not written at each step.
        pool = await site.set_status(pool, conditions=[ready_condition(ok, reason, told)])
        await site.reconcile(allocation, ObjectKey.of(workers))
        assert (await site.status("MachineSet", "workers"))["allocation"]["reason"] == provisioning
    # What can keep the set waiting for good is told as the request set tells it.
    for reason, told in (
        ("RequestsFailing", "0/2 provisioned; pool-a: Provisioning: the cloud is out of capacity"),
        ("RequestsRefused", "spec.talosVersion: not offered"),
    ):
        pool = await site.set_status(pool, conditions=[ready_condition(False, reason, told)])
        await site.reconcile(allocation, ObjectKey.of(workers))
        assert (await site.status("MachineSet", "workers"))["allocation"]["reason"] == (
            f"2 more machine(s) wanted from machine request set pool: {told}"
        )


async def test_machines_made_for_the_set_are_bound_without_an_event_each(site: Site) -> None:
    await site.create(cluster())
    await site.create(obj("InfraProvider", "emu", namespaced=False, spec={}))
    await site.create(
        obj(
            "MachineRequestSet",
            "pool",
            spec={"providerID": "emu", "talosVersion": "v1.13.0", "machineCount": 2},
        )
    )
    await free(site, "m1", "m2", **{"herder.dev/machine-request-set": "pool"})
    await free(site, "m3", pool="a")
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))
    (made,) = await site.create(worker_set("workers", {"machineRequestSet": "pool"}))
    (chosen,) = await site.create(worker_set("others", {"machineClass": {"name": "pool-a", "size": 1}}))
    allocation = MachineSetAllocationController()
    await site.reconcile(allocation, ObjectKey.of(made))
    await site.reconcile(allocation, ObjectKey.of(chosen))
    assert await staying(site) == ["m1", "m2", "m3"]
    # The provider made m1 and m2 for the set: their nodes say it. A machine picked by a selector is told.
    assert [r for _, r, _ in await site.told(made)] == []
    assert ("Normal", "Allocated", "machine m3 allocated") in await site.told(chosen)


def ready_condition(ok: bool, reason: str, message: str) -> dict[str, str]:
    return {"type": "Ready", "status": str(ok), "reason": reason, "message": message}


async def test_a_machine_bound_already_but_not_labelled_yet_is_no_new_bind(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1", "m2", pool="a")
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))
    (workers,) = await site.create(
        worker_set("alpha-workers", {"machineClass": {"name": "pool-a", "size": 1}})
    )
    allocation = MachineSetAllocationController()
    await site.reconcile(allocation, ObjectKey.of(workers))
    # m1 is bound; membership has not labelled it with its cluster yet, so it still looks free.
    await resize(site, workers, {"machineClass": {"name": "pool-a", "size": 2}})
    await site.reconcile(allocation, ObjectKey.of(workers))
    assert await staying(site) == ["m1", "m2"]
    assert "allocation" not in await site.status("MachineSet", "alpha-workers")
    told = [message for _, reason, message in await site.told(workers) if reason == "Allocated"]
    assert told == ["machine m1 allocated", "machine m2 allocated"]


async def test_machines_that_come_together_are_bound_in_one_write_of_the_set(site: Site) -> None:
    await site.create(cluster())
    await site.create(obj("MachineClass", "pool-a", spec={"selector": {"matchLabels": {"pool": "a"}}}))

    def allocation(machine_set: Resource) -> object:
        return (machine_set.status or {}).get("allocation")

    async with (
        site.writes("MachineSet", allocation) as written,
        site.running(MachineSetAllocationController()),
    ):
        await site.create(worker_set("alpha-workers", {"machineClass": {"name": "pool-a", "size": 2}}))
        await eventually(lambda: len(written) == 2)  # created, then short of both
        for uuid in ("m1", "m2"):  # a provider's machines connect within a moment of each other
            await free(site, uuid, pool="a")
            await asyncio.sleep(0.1)
        await eventually(lambda: written[-1] is None)
        await asyncio.sleep(1.5)
    assert await staying(site) == ["m1", "m2"]
    assert [a if a is None else a["reason"][:20] for a in written] == [None, "2 more machine(s) wa", None]
