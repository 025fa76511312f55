"""ClusterTeardown's decisions: a live cluster carries its finalizer; a deleted one has its sets, hand-made
nodes and patches deleted (not another controller's outputs), says which machines it waits for (the
unreachable ones by their own words), and goes once no member is left; an aborted import goes although
locked, its machines untouched."""

from __future__ import annotations

from herder.controllers.clusters.cluster_machine_teardown import ClusterMachineTeardownController
from herder.controllers.clusters.cluster_teardown import CLUSTER_FINALIZER, ClusterTeardownController
from herder.resources.meta import CONTROLLER_ANNOTATION
from herder.runtime.controller import ObjectKey
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import ABORTED_IMPORT, Fleet
from tests.controllers.site import Site, names, obj


async def deleted(site: Site, fleet: Fleet) -> None:
    await site.reconcile(ClusterTeardownController(), fleet.key)  # its finalizer, as from its creation
    await site.store.delete("Cluster", fleet.name, "default")


async def test_a_live_cluster_gets_its_finalizer_and_keeps_everything(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await site.reconcile(ClusterTeardownController(), fleet.key)
    cluster = await site.get("Cluster", fleet.name)
    assert cluster is not None and cluster.metadata.finalizers == [CLUSTER_FINALIZER]
    assert await site.get("MachineSet", "workers") is not None


async def test_a_deleted_cluster_takes_down_its_objects_and_waits_for_its_machines(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await fleet.machine("w1")
    await fleet.node("w1", "workers")
    await fleet.member("w1")
    await fleet.member("w2", teardown="resetting the machine to maintenance mode")
    labels = {"herder.dev/cluster": fleet.name}
    await site.create(
        obj("ConfigPatch", "users", spec={"data": "machine: {}\n"}, metadata={"labels": labels})
    )
    await site.create(
        obj(
            "ConfigPatch",
            "managed",
            spec={"data": "machine: {}\n"},
            metadata={"labels": labels, "annotations": {CONTROLLER_ANNOTATION: "ManagedControlPlane"}},
        )
    )
    await deleted(site, fleet)
    teardown = ClusterTeardownController()
    await site.reconcile(teardown, fleet.key)
    await site.reconcile(teardown, fleet.key)
    assert await site.get("MachineSet", "workers") is None
    node = await site.get("MachineSetNode", "w1")
    assert node is None or node.metadata.deletion_timestamp
    assert names((await site.store.list("ConfigPatch", "default")).items) == ["managed"]  # not its own
    status = await site.status("Cluster", fleet.name)
    assert status["teardown"] == "waiting for 2 machine(s) to be reset: w1, w2"
    cluster = await site.get("Cluster", fleet.name)
    assert [t for t in await site.told(cluster) if t[1] == "Destroying"] == [
        ("Normal", "Destroying", "tearing down 2 machine(s)")
    ]


async def test_unreachable_machines_are_why_the_teardown_waits(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    why = "machine w1 is unreachable; it is released once herder reaches it again, or by `herder machine release w1 --force`"
    await fleet.member("w1", teardown=why)
    await fleet.member("w2", teardown="resetting the machine to maintenance mode")
    await deleted(site, fleet)
    await site.reconcile(ClusterTeardownController(), fleet.key)
    assert (await site.status("Cluster", fleet.name))["teardown"] == why


async def test_a_cluster_with_no_member_left_goes(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await deleted(site, fleet)
    await site.reconcile(ClusterTeardownController(), fleet.key)
    assert await site.get("Cluster", fleet.name) is None
    assert ("Normal", "Destroyed", "every machine is back in maintenance mode") in await site.told()


async def test_an_aborted_import_is_taken_down_although_locked_and_lets_its_machines_go(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(annotations=ABORTED_IMPORT)
    await fleet.machine_set("workers")
    await fleet.member("w1")
    await deleted(site, fleet)
    await site.reconcile(ClusterTeardownController(), fleet.key)
    assert await site.get("MachineSet", "workers") is None
    assert (await site.status("Cluster", fleet.name))[
        "teardown"
    ] == "waiting for 1 machine(s) to be let go: w1"
    # Its node's going deletes the member (garbage collection); its teardown lets it go at once.
    await site.store.delete("ClusterMachine", "w1", "default")
    members = ClusterMachineTeardownController(fleet.keys, ClientPool(dialer=site.machines, keep=0))
    await site.reconcile(members, ObjectKey("ClusterMachine", "default", "w1"))
    assert site.machines.calls == []
    await site.reconcile(ClusterTeardownController(), fleet.key)
    assert await site.get("Cluster", fleet.name) is None
