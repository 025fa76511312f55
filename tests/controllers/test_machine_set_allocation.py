"""MachineSetAllocation's decisions: bind, release, short of machines, unlimited."""

from __future__ import annotations

from herder.controllers.clusters.machine_set_allocation import MachineSetAllocationController
from herder.runtime.controller import ObjectKey
from tests.controllers.site import Site, names, obj

CLUSTER = {"herder.dev/cluster": "alpha"}


def cluster() -> object:
    return obj("Cluster", "alpha", spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"})


def machine(uuid: str, **labels: str) -> object:
    return obj("Machine", uuid, spec={"endpoint": f"127.0.0.{len(uuid)}:50000"}, metadata={"labels": labels})


async def free(site: Site, *uuids: str, **labels: str) -> None:
    for uuid in uuids:
        (made,) = await site.create(machine(uuid, **labels))
        await site.set_status(made, connected=True, stage="Maintenance")


async def test_a_static_set_binds_the_machines_it_lists_and_says_which_are_missing(site: Site) -> None:
    await site.create(cluster())
    await free(site, "m1")
    await free(site, "m2", **{"herder.dev/cluster": "beta"})  # still leaving another cluster
    (workers,) = await site.create(
        obj(
            "MachineSet",
            "alpha-workers",
            spec={"role": "worker", "machines": ["m1", "m2"]},
            metadata={"labels": CLUSTER},
        )
    )
    await site.reconcile(MachineSetAllocationController(), ObjectKey.of(workers))
    nodes = (await site.store.list("MachineSetNode", "default")).items
    assert names(nodes) == ["m1"]
    assert nodes[0].metadata.controller_ref().name == "alpha-workers"  # type: ignore[union-attr]
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
        obj(
            "MachineSet",
            "alpha-workers",
            spec={"role": "worker", "machineClass": {"name": "pool-a", "size": 2}},
            metadata={"labels": CLUSTER},
        )
    )
    await site.reconcile(MachineSetAllocationController(), ObjectKey.of(workers))
    assert names((await site.store.list("MachineSetNode", "default")).items) == ["m1", "m2"]
    assert "allocation" not in await site.status("MachineSet", "alpha-workers")
