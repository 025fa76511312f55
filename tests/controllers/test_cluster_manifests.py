"""ClusterManifest's decisions, against a workload cluster's API in process: nothing is applied before the
cluster can take it (and the manifest says why); a sync applies in dependency order, records the inventory,
``Ready`` and the Cluster's ``ManifestsApplied``; drift (what an apply changed back, or recreated) is
reverted and told, a quiet resync tells nothing; what the manifest drops is pruned; a failure names the
object where it is and keeps the inventory (and a dry run plans no prune of it); a deleted manifest prunes
its objects before it goes."""

from __future__ import annotations

from typing import Any

from herder.controllers.kubernetes.manifest_sync import plan
from herder.controllers.kubernetes.manifests import (
    FINALIZER,
    WAIT_EVERY,
    ClusterManifestController,
    workload_api,
)
from herder.resources import Resource
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.manifests import ClusterManifestSpec, ClusterManifestStatus
from herder.runtime.controller import ObjectKey, Result
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site, obj
from tests.controllers.workload import ENDPOINT, Workload, cluster_of

RESYNC = 60.0
REFUSED = f"{ENDPOINT}: ConnectError: connection refused"
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
DEFINITION = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}
WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "gear"}, "spec": {"size": 3}}
SETTINGS = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}}


async def _manifest(site: Site, *objects: dict[str, Any], cluster: str = "alpha") -> Resource:
    labels = {CLUSTER_LABEL: cluster} if cluster else {}
    (made,) = await site.create(
        obj(
            "ClusterManifest",
            "alpha-base",
            spec={"mode": "full", "namespace": "team", "manifests": list(objects)},
            metadata={"labels": labels},
        )
    )
    return made


def _controller(fleet: Fleet, api: Workload) -> ClusterManifestController:
    return ClusterManifestController(fleet.keys, RESYNC, clients=api)


KEY = ObjectKey("ClusterManifest", "default", "alpha-base")


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or () if c["type"] == kind)


async def test_nothing_is_applied_before_the_cluster_is_bootstrapped(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site, reachable=False)
    await _manifest(site, NAMESPACE)
    assert await site.reconcile(_controller(fleet, cluster_api), KEY) == Result(requeue_after=WAIT_EVERY)
    ready = _condition(await site.status("ClusterManifest", "alpha-base"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCluster")
    assert ready["message"] == "the cluster is not bootstrapped yet"
    summary = _condition(await site.status("Cluster", "alpha"), "ManifestsApplied")
    assert summary["status"] == "False"
    assert summary["message"] == "alpha-base: the cluster is not bootstrapped yet"
    assert cluster_api.endpoints == []
    assert await cluster_api.find("Namespace", "team") is None


async def test_a_manifest_naming_no_cluster_says_so(site: Site, cluster_api: Workload) -> None:
    fleet = await cluster_of(site)
    await _manifest(site, NAMESPACE, cluster="")
    assert await site.reconcile(_controller(fleet, cluster_api), KEY) == Result(requeue_after=WAIT_EVERY)
    ready = _condition(await site.status("ClusterManifest", "alpha-base"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoCluster")
    assert ready["message"] == f"label {CLUSTER_LABEL} names no cluster"


async def test_a_sync_applies_in_dependency_order_and_records_the_inventory(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    await _manifest(site, WIDGET, DEFINITION, NAMESPACE)
    assert await site.reconcile(_controller(fleet, cluster_api), KEY) == Result(requeue_after=RESYNC)
    assert cluster_api.endpoints == [ENDPOINT]
    widget = await cluster_api.find("Widget", "gear", "team")
    assert widget is not None and widget.spec == {"size": 3}
    assert [f.manager for f in widget.metadata.managed_fields or ()] == ["herder"]
    manifest = await site.get("ClusterManifest", "alpha-base")
    assert manifest is not None and FINALIZER in manifest.metadata.finalizers
    status = manifest.status or {}
    assert [(o["kind"], o["state"]) for o in status["objects"]] == [
        ("CustomResourceDefinition", "Applied"),
        ("Namespace", "Applied"),
        ("Widget", "Applied"),
    ]
    inventory = {(e["kind"], e.get("namespace", ""), e["name"]): e["uid"] for e in status["inventory"]}
    assert inventory[("Widget", "team", "gear")] == widget.metadata.uid
    assert len(inventory) == 3
    ready = _condition(status, "Ready")
    assert (ready["status"], ready["message"]) == ("True", "3 object(s) applied")
    summary = _condition(await site.status("Cluster", "alpha"), "ManifestsApplied")
    assert (summary["status"], summary["message"]) == ("True", "1 manifest(s) applied")


async def test_drift_is_reverted_and_told_and_a_quiet_resync_tells_nothing(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    manifest = await _manifest(site, NAMESPACE, SETTINGS)
    controller = _controller(fleet, cluster_api)
    await site.reconcile(controller, KEY)
    # The bare Namespace's second apply only records who had its defaulted fields (as Kubernetes does
    # when an applier owns none): not drift.
    await site.reconcile(controller, KEY)
    # Nor is a change to what herder does not apply.
    await cluster_api.edit(
        "/api/v1/namespaces/team/configmaps/settings", {"metadata": {"labels": {"x": "y"}}}
    )
    await site.reconcile(controller, KEY)
    assert [t for t in await site.told(manifest) if t[1] == "DriftReverted"] == []

    await cluster_api.edit("/api/v1/namespaces/team/configmaps/settings", {"data": {"a": "2"}})
    await site.reconcile(controller, KEY)
    reverted = await cluster_api.find("ConfigMap", "settings", "team")
    assert reverted is not None and (reverted.model_extra or {})["data"] == {"a": "1"}
    told = ("Normal", "DriftReverted", "ConfigMap team/settings (v1) was changed in the cluster; re-applied")
    assert [t for t in await site.told(manifest) if t[1] == "DriftReverted"] == [told]

    await cluster_api.store.delete("ConfigMap", "settings", "team")
    await site.reconcile(controller, KEY)
    assert await cluster_api.find("ConfigMap", "settings", "team") is not None
    (event,) = [
        e
        for e in (await site.store.list("Event", None)).items
        if (e.model_extra or {})["reason"] == "DriftReverted"
    ]
    assert (event.model_extra or {})["count"] == 2  # told again (the one Event counted up)


async def test_what_the_manifest_drops_is_pruned(site: Site, cluster_api: Workload) -> None:
    fleet = await cluster_of(site)
    await _manifest(site, NAMESPACE, SETTINGS)
    controller = _controller(fleet, cluster_api)
    await site.reconcile(controller, KEY)
    synced = await site.get("ClusterManifest", "alpha-base")
    assert synced is not None
    await site.store.update(
        synced.model_copy(update={"spec": {**(synced.spec or {}), "manifests": [NAMESPACE]}})
    )
    await site.reconcile(controller, KEY)
    assert await cluster_api.find("ConfigMap", "settings", "team") is None
    assert await cluster_api.find("Namespace", "team") is not None
    status = await site.status("ClusterManifest", "alpha-base")
    assert [(o["kind"], o["state"], o["message"]) for o in status["objects"]] == [
        ("Namespace", "Applied", ""),
        ("ConfigMap", "Pruned", "removed from the manifest"),
    ]
    assert [e["kind"] for e in status["inventory"]] == ["Namespace"]
    assert _condition(status, "Ready")["message"] == "1 object(s) applied, 1 pruned"


async def test_a_failed_sync_names_the_object_and_keeps_the_inventory(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    await _manifest(site, NAMESPACE, SETTINGS)
    controller = _controller(fleet, cluster_api)
    await site.reconcile(controller, KEY)
    applied = (await site.status("ClusterManifest", "alpha-base"))["inventory"]
    cluster_api.down = True
    assert await site.reconcile(controller, KEY) == Result(requeue_after=WAIT_EVERY)
    status = await site.status("ClusterManifest", "alpha-base")
    ready = _condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert ready["message"] == f"Namespace team (v1): {REFUSED} (and 1 more)"
    assert _placed(status) == [("Namespace", "", "team"), ("ConfigMap", "team", "settings")]
    assert status["inventory"] == applied
    summary = _condition(await site.status("Cluster", "alpha"), "ManifestsApplied")
    assert (summary["status"], summary["message"]) == ("False", f"alpha-base: {ready['message']}")
    # Nothing was pruned for an object that could not be looked up.
    assert await cluster_api.find("ConfigMap", "settings", "team") is not None


async def test_an_object_never_applied_is_named_by_what_is_known_of_its_kind(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    await _manifest(site, NAMESPACE, SETTINGS, WIDGET)
    cluster_api.down = True
    await site.reconcile(_controller(fleet, cluster_api), KEY)
    status = await site.status("ClusterManifest", "alpha-base")
    # Kubernetes' own kinds where they go; a custom kind whose scope nobody could tell in no namespace.
    assert _placed(status) == [
        ("Namespace", "", "team"),
        ("ConfigMap", "team", "settings"),
        ("Widget", "", "gear"),
    ]
    assert _condition(status, "Ready")["message"] == f"Namespace team (v1): {REFUSED} (and 2 more)"


async def test_a_dry_run_that_cannot_look_an_object_up_does_not_plan_its_prune(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    manifest = await _manifest(site, NAMESPACE)
    await site.reconcile(_controller(fleet, cluster_api), KEY)
    synced = await site.get("ClusterManifest", "alpha-base")
    cluster = await site.get("Cluster", "alpha")
    assert synced is not None and cluster is not None
    cluster_api.down = True
    api, _ = await workload_api(fleet.keys, cluster_api, cluster)
    assert api is not None
    inventory = ClusterManifestStatus.model_validate(synced.status).inventory
    spec = ClusterManifestSpec.model_validate(manifest.spec)
    assert [str(c) for c in await plan(api, spec, inventory)] == [f"error Namespace team (v1): {REFUSED}"]


def _placed(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(o["kind"], o.get("namespace", ""), o["name"]) for o in status["objects"]]


async def test_a_deleted_manifest_prunes_its_objects_before_it_goes(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    manifest = await _manifest(site, NAMESPACE, SETTINGS)
    controller = _controller(fleet, cluster_api)
    await site.reconcile(controller, KEY)
    await site.store.delete("ClusterManifest", manifest.name, manifest.namespace)
    assert await site.get("ClusterManifest", "alpha-base") is not None  # held by the finalizer
    await site.reconcile(controller, KEY)
    assert await site.get("ClusterManifest", "alpha-base") is None
    assert await cluster_api.find("ConfigMap", "settings", "team") is None
    assert ("Normal", "Pruned", "ConfigMap team/settings (v1): the manifest was deleted") in await site.told(
        manifest
    )
