"""ManagedControlPlane's decisions: a managed cluster's outputs (the hidden request set, the read-only
control plane set allocating from it, the hidden system patches), its condition as the control planes
come up, an offer withdrawn, and what a cluster being deleted keeps."""

from __future__ import annotations

from herder.controllers.managed.control_planes import ManagedControlPlaneController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey, Result
from tests.controllers.managed import HIDDEN, managed_site
from tests.controllers.provisioned import TALOS, condition
from tests.controllers.site import Site, names

PROVISIONING = "size xs: control plane machines are being provisioned; ControlPlaneReady says how far"


async def _owned(site: Site, kind: str) -> list[Resource]:
    return [
        o
        for o in (await site.store.list(kind, "default")).items
        if o.metadata.annotations.get("herder.dev/controller") == "ManagedControlPlane"
    ]


async def test_a_managed_cluster_gets_its_hidden_request_set_control_plane_set_and_patches(
    site: Site,
) -> None:
    cluster = await managed_site(site)
    await site.reconcile(ManagedControlPlaneController(), ObjectKey.of(cluster))
    (request_set,) = await _owned(site, "MachineRequestSet")
    assert request_set.name == "herder-alpha-control-planes"
    assert request_set.metadata.labels["herder.dev/hidden"] == "true"
    assert (request_set.spec or {})["providerID"] == HIDDEN
    assert (request_set.spec or {})["machineCount"] == 1
    assert (request_set.spec or {})["providerData"] == {"cpus": 2}
    assert (request_set.spec or {})["talosVersion"] == TALOS
    (machine_set,) = await _owned(site, "MachineSet")
    assert machine_set.name == "alpha-control-planes"
    assert machine_set.metadata.annotations["herder.dev/read-only"] == "true"
    assert "herder.dev/hidden" not in machine_set.metadata.labels
    assert (machine_set.spec or {})["role"] == "controlplane"
    patches = await _owned(site, "ConfigPatch")
    assert names(patches) == ["herder-alpha-control-planes", "herder-alpha-kubespan"]
    assert all(p.metadata.labels["herder.dev/hidden"] == "true" for p in patches)
    assert all(
        ref.name == "alpha"
        for o in (request_set, machine_set, *patches)
        for ref in o.metadata.owner_references
    )
    managed = condition(await site.status("Cluster", "alpha"), "ManagedControlPlane")
    assert (managed["status"], managed["reason"]) == ("False", "ProvisioningControlPlanes")
    assert HIDDEN not in managed["message"]
    assert [e[:2] for e in await site.told(cluster)] == [("Normal", "ProvisioningControlPlanes")]


async def test_the_cluster_says_ready_once_its_control_plane_set_is(site: Site) -> None:
    controller = ManagedControlPlaneController()
    cluster = await managed_site(site)
    await site.reconcile(controller, ObjectKey.of(cluster))
    machine_set = await site.get("MachineSet", "alpha-control-planes")
    assert machine_set is not None
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "1/1 machines ready"}
    await site.set_status(machine_set, conditions=[{**ready, "lastTransitionTime": site.clock.rfc3339()}])
    await site.reconcile(controller, ObjectKey.of(cluster))
    managed = condition(await site.status("Cluster", "alpha"), "ManagedControlPlane")
    assert (managed["status"], managed["message"]) == ("True", "1 managed control plane(s) ready")
    # Again: nothing new to write or tell.
    before = await site.get("Cluster", "alpha")
    await site.reconcile(controller, ObjectKey.of(cluster))
    after = await site.get("Cluster", "alpha")
    assert before is not None and after is not None
    assert after.metadata.resource_version == before.metadata.resource_version
    # Told once, by the cluster's ControlPlaneReady: no Event of this condition repeats it.
    assert [e[1] for e in await site.told(cluster)] == ["ProvisioningControlPlanes"]


async def test_getting_the_machines_is_one_message_of_the_cluster(site: Site) -> None:
    controller = ManagedControlPlaneController()
    cluster = await managed_site(site)
    await site.reconcile(controller, ObjectKey.of(cluster))
    first = await site.get("Cluster", "alpha")
    machine_set = await site.get("MachineSet", "alpha-control-planes")
    assert first is not None and machine_set is not None
    for reason, told in (
        ("ScalingUp", "0/1 machines allocated"),
        ("MachinesMissing", "1 more machine(s) wanted: the platform is provisioning them"),
    ):
        # The set's steps while it gets its machines all say the same on the cluster: no write each.
        waiting = {"type": "Ready", "status": "False", "reason": reason, "message": told}
        machine_set = await site.set_status(
            machine_set, conditions=[{**waiting, "lastTransitionTime": site.clock.rfc3339()}]
        )
        await site.reconcile(controller, ObjectKey.of(cluster))
        now = await site.get("Cluster", "alpha")
        assert now is not None and now.metadata.resource_version == first.metadata.resource_version
    managed = condition(await site.status("Cluster", "alpha"), "ManagedControlPlane")
    assert managed["message"] == PROVISIONING


async def test_each_control_plane_step_is_not_written_on_the_cluster_again(site: Site) -> None:
    controller = ManagedControlPlaneController()
    cluster = await managed_site(site)
    await site.reconcile(controller, ObjectKey.of(cluster))
    machine_set = await site.get("MachineSet", "alpha-control-planes")
    assert machine_set is not None
    # Getting its machines and their coming up are one message: not a write more once they are there.
    versions = [(await site.get("Cluster", "alpha")).metadata.resource_version]  # type: ignore[union-attr]
    for step in ("installing", "rebooting"):
        # The set tells each machine's progress (so does the Cluster's ControlPlaneReady condition).
        waiting = {
            "type": "Ready",
            "status": "False",
            "reason": "MachinesNotReady",
            "message": f"0/1 ready; m1: {step}",
        }
        await site.set_status(
            machine_set,
            machines={"total": 1, "ready": 0, "wanted": 1},
            conditions=[{**waiting, "lastTransitionTime": site.clock.rfc3339()}],
        )
        await site.reconcile(controller, ObjectKey.of(cluster))
        versions.append((await site.get("Cluster", "alpha")).metadata.resource_version)  # type: ignore[union-attr]
    managed = condition(await site.status("Cluster", "alpha"), "ManagedControlPlane")
    assert (managed["reason"], managed["message"]) == ("ProvisioningControlPlanes", PROVISIONING)
    assert len(set(versions)) == 1


async def test_an_offer_withdrawn_is_a_warning_and_looked_at_again(site: Site) -> None:
    controller = ManagedControlPlaneController()
    cluster = await managed_site(site)
    assert await site.show(controller, cluster) == [ObjectKey.of(cluster)]
    await site.reconcile(controller, ObjectKey.of(cluster))
    provider = await site.get("InfraProvider", HIDDEN, None)
    assert provider is not None
    withdrawn = provider.clone()
    withdrawn.spec = {k: v for k, v in (withdrawn.spec or {}).items() if k != "managedControlPlanes"}
    await site.store.update(withdrawn)
    # The provider's change reaches the clusters of its offering.
    assert await site.show(controller, withdrawn) == [ObjectKey.of(cluster)]
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=10.0)
    managed = condition(await site.status("Cluster", "alpha"), "ManagedControlPlane")
    assert (managed["status"], managed["reason"]) == ("False", "NotOffered")
    assert managed["message"] == "managed control planes: offering emu is no longer offered"
    assert ("Warning", "NotOffered", managed["message"]) in await site.told(cluster)


async def test_a_cluster_being_deleted_loses_its_control_plane_set_and_patches_first(site: Site) -> None:
    controller = ManagedControlPlaneController()
    cluster = await managed_site(site)
    await site.show(controller, cluster)
    await site.reconcile(controller, ObjectKey.of(cluster))
    held = (await site.get("Cluster", "alpha")).clone()  # type: ignore[union-attr]
    held.metadata.finalizers = ["test.herder.dev/hold"]
    await site.store.update(held)
    await site.store.delete("Cluster", "alpha", "default")
    await site.reconcile(controller, ObjectKey.of(cluster))
    assert await _owned(site, "MachineSet") == []
    assert await _owned(site, "ConfigPatch") == []
    # Its machines are reset before they are destroyed: the request set goes with the cluster itself.
    assert names(await _owned(site, "MachineRequestSet")) == ["herder-alpha-control-planes"]
