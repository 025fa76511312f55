"""MachineSetProvisioning's decisions: a machine set of an auto-provisioning class owns a
MachineRequestSet of its name and size, of its cluster's Talos version and extensions; a change of the
class reaches it; a set leaving the class lets its request set go; a request set of that name that is not
the set's is left alone, and said."""

from __future__ import annotations

from herder.controllers.provisioning.machine_set_provisioning import MachineSetProvisioningController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from tests.controllers.provisioned import PROVIDER, TALOS, provider, request_set
from tests.controllers.site import Site, obj

CLUSTER = {"herder.dev/cluster": "alpha"}


async def _auto_workers(site: Site, size: int = 2) -> Resource:
    await site.create(
        provider(),
        obj(
            "Cluster",
            "alpha",
            spec={
                "talosVersion": TALOS,
                "kubernetesVersion": "1.33.0",
                "systemExtensions": ["siderolabs/iscsi-tools"],
            },
        ),
        obj(
            "MachineClass",
            "auto",
            spec={"autoProvision": {"providerID": PROVIDER, "providerData": {"cpus": 2}}},
        ),
    )
    (made,) = await site.create(
        obj(
            "MachineSet",
            "alpha-workers",
            spec={"role": "worker", "machineClass": {"name": "auto", "size": size}},
            metadata={"labels": CLUSTER},
        )
    )
    return made


async def test_an_auto_provisioned_set_owns_a_request_set_of_its_size(site: Site) -> None:
    controller = MachineSetProvisioningController()
    workers = await _auto_workers(site)
    await site.reconcile(controller, ObjectKey.of(workers))
    owned = await site.get("MachineRequestSet", "alpha-workers")
    assert owned is not None
    assert owned.metadata.controller_ref().name == "alpha-workers"  # type: ignore[union-attr]
    spec = owned.spec or {}
    assert (spec["providerID"], spec["machineCount"], spec["talosVersion"]) == (PROVIDER, 2, TALOS)
    assert spec["providerData"] == {"cpus": 2}
    assert spec["schematic"]["extensions"] == ["siderolabs/iscsi-tools"]
    assert owned.metadata.labels["herder.dev/machine-set"] == "alpha-workers"


async def test_a_class_change_reaches_its_sets_and_a_set_off_the_class_lets_its_request_set_go(
    site: Site,
) -> None:
    controller = MachineSetProvisioningController()
    workers = await _auto_workers(site)
    await site.show(controller, workers)
    await site.reconcile(controller, ObjectKey.of(workers))
    machine_class = await site.get("MachineClass", "auto")
    assert machine_class is not None
    assert await site.show(controller, machine_class) == [ObjectKey.of(workers)]
    current = await site.get("MachineSet", "alpha-workers")
    assert current is not None
    static = current.clone()
    static.spec = {"role": "worker", "machines": []}
    moved = await site.store.update(static)
    assert await site.show(controller, moved, before=current) == [ObjectKey.of(workers)]
    assert await site.show(controller, machine_class) == []  # no longer the class's
    await site.reconcile(controller, ObjectKey.of(workers))
    assert await site.get("MachineRequestSet", "alpha-workers") is None


async def test_a_request_set_of_the_name_that_is_not_the_sets_is_left_alone(site: Site) -> None:
    controller = MachineSetProvisioningController()
    workers = await _auto_workers(site, size=1)
    await site.create(request_set("alpha-workers", 1))  # a user's, made first
    await site.reconcile(controller, ObjectKey.of(workers))
    theirs = await site.get("MachineRequestSet", "alpha-workers")
    assert theirs is not None and theirs.metadata.owner_references == []
    assert (theirs.spec or {})["machineCount"] == 1
    assert ("Warning", "MachineRequestSetTaken") in [e[:2] for e in await site.told(workers)]
