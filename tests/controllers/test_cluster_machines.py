"""ClusterMachineController's decisions: a MachineSetNode becomes a ClusterMachine of the cluster's versions
and labels its Machine; a node that goes takes its member with it, and keeps the machine's UUID taken until
the member has been torn down."""

from __future__ import annotations

from herder.controllers.clusters.cluster_machines import (
    NODE_FINALIZER,
    TEARDOWN_FINALIZER,
    ClusterMachineController,
)
from herder.runtime.controller import ObjectKey
from tests.controllers.fleet import KUBERNETES, TALOS, Fleet
from tests.controllers.site import Site

NODE = ObjectKey("MachineSetNode", "default", "m1")


async def test_a_node_becomes_a_member_of_the_cluster_and_labels_its_machine(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Maintenance")
    await fleet.machine_set("workers")
    node = await fleet.node("m1", "workers")
    await site.reconcile(ClusterMachineController(), NODE)
    member = await site.get("ClusterMachine", "m1")
    assert member is not None
    assert member.spec == {"role": "worker", "talosVersion": TALOS, "kubernetesVersion": KUBERNETES}
    assert member.metadata.labels == {
        "herder.dev/cluster": "alpha",
        "herder.dev/machine-set": "workers",
        "herder.dev/role": "worker",
    }
    assert member.metadata.finalizers == [TEARDOWN_FINALIZER]
    assert member.metadata.controller_ref() is not None
    assert member.metadata.controller_ref().name == "m1"  # type: ignore[union-attr]
    machine = await site.get("Machine", "m1")
    assert machine is not None
    assert machine.metadata.labels == {"herder.dev/cluster": "alpha", "herder.dev/machine-set": "workers"}
    found = await site.get("MachineSetNode", "m1")
    assert found is not None and found.metadata.finalizers == [NODE_FINALIZER]
    assert ("Normal", "Joined", "machine m1 joins cluster alpha as worker") in await site.told(node)


async def test_a_node_the_allocation_made_is_told_once_by_the_allocation(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Maintenance")
    workers = await fleet.machine_set("workers")
    node = await fleet.node("m1", "workers")
    owned = node.clone()
    owned.metadata.owner_references = [site.context(ClusterMachineController()).reference_to(workers)]
    node = await site.store.update(owned)
    await site.reconcile(ClusterMachineController(), NODE)
    assert await site.get("ClusterMachine", "m1") is not None
    assert await site.told(node) == []


async def test_a_node_that_goes_takes_its_member_and_then_lets_the_machine_go(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Maintenance")
    await fleet.machine_set("workers")
    await fleet.node("m1", "workers")
    membership = ClusterMachineController()
    await site.reconcile(membership, NODE)
    await site.store.delete("MachineSetNode", "m1", "default")
    await site.reconcile(membership, NODE)
    member = await site.get("ClusterMachine", "m1")
    assert member is not None and member.metadata.deletion_timestamp  # its teardown resets the machine
    assert await site.get("MachineSetNode", "m1") is not None  # the UUID stays taken meanwhile

    without = member.clone()
    without.metadata.finalizers = []
    await site.store.update(without)  # the teardown let it go
    await site.reconcile(membership, NODE)
    assert await site.get("MachineSetNode", "m1") is None
    machine = await site.get("Machine", "m1")
    assert machine is not None and machine.metadata.labels == {}


async def test_a_machine_still_leaving_an_earlier_membership_waits(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1")
    await fleet.machine_set("workers")
    await fleet.leave(await fleet.member("m1", "controlplane", machine_set="old"))
    await fleet.node("m1", "workers")
    await site.reconcile(ClusterMachineController(), NODE)
    member = await site.get("ClusterMachine", "m1")
    assert member is not None and member.metadata.labels["herder.dev/machine-set"] == "old"
    machine = await site.get("Machine", "m1")
    assert machine is not None and "herder.dev/machine-set" not in machine.metadata.labels
