"""UpgradePreChecks' decisions, against a workload cluster's API in process: before a minor Kubernetes
upgrade, an object served only in an API version the target removes holds it, named with its
replacement (where the replacement is served too, only if it was last written in the removed version), for the generation it was decided at; the skip annotation lets the upgrade go (told once as a
Warning); a patch upgrade is not held (nor its cluster asked); an API that cannot be reached holds the
upgrade saying why, until a later check succeeds."""

from __future__ import annotations

from typing import Any

from herder.controllers.kubernetes.pre_checks import (
    RECHECK_EVERY,
    UpgradePreChecksController,
    pre_checks_passed,
)
from herder.resources import Resource
from herder.resources.manifests import SKIP_PRE_CHECKS_ANNOTATION
from herder.runtime.controller import Result
from tests.controllers.fleet import TALOS, Fleet
from tests.controllers.site import Site
from tests.controllers.workload import ENDPOINT, Workload, cluster_of

CURRENT, TARGET = "1.31.4", "1.32.0"
FLOW = "flowcontrol.apiserver.k8s.io"


def _definition(group: str, version: str, kind: str, scope: str = "Cluster") -> dict[str, Any]:
    """A definition standing in for kube-apiserver's own serving of ``kind`` in ``version`` only."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": scope,
            "versions": [{"name": version, "served": True, "storage": True}],
        },
    }


async def _upgrading(
    site: Site,
    target: str = TARGET,
    current: str = CURRENT,
    *,
    talos: str = TALOS,
    annotations: dict[str, str] | None = None,
) -> Fleet:
    """Cluster alpha, its one machine at ``current``, asked to move to ``target``."""
    fleet = await cluster_of(site, kubernetesVersion=target, talosVersion=talos)
    await fleet.member("cp1", "controlplane", kubernetes=current)
    if annotations:
        cluster = await _cluster(site)
        await site.store.update(
            cluster.model_copy(
                update={"metadata": cluster.metadata.model_copy(update={"annotations": annotations})}
            )
        )
    return fleet


async def _flow_schema(api: Workload) -> None:
    """A FlowSchema that Kubernetes 1.31 serves in v1beta3 (and v1), which 1.32 serves in v1 only; here
    v1beta3 is all that is served."""
    await api.put(_definition(FLOW, "v1beta3", "FlowSchema"))
    await api.put(
        {"apiVersion": f"{FLOW}/v1beta3", "kind": "FlowSchema", "metadata": {"name": "exempt-probes"}}
    )


async def _cluster(site: Site) -> Resource:
    found = await site.get("Cluster", "alpha")
    assert found is not None
    return found


async def _verdict(site: Site) -> dict[str, Any]:
    status = await site.status("Cluster", "alpha")
    return next(c for c in status.get("conditions") or () if c["type"] == "UpgradePreChecks")


def _controller(fleet: Fleet, api: Workload) -> UpgradePreChecksController:
    return UpgradePreChecksController(fleet.keys, clients=api)


async def test_an_object_in_a_removed_api_version_holds_a_minor_upgrade_naming_it(
    site: Site, cluster_api: Workload
) -> None:
    await _flow_schema(cluster_api)
    fleet = await _upgrading(site)
    controller = _controller(fleet, cluster_api)
    assert await site.reconcile(controller, fleet.key) == Result(requeue_after=RECHECK_EVERY)
    verdict = await _verdict(site)
    assert (verdict["status"], verdict["reason"]) == ("False", "RemovedAPIs")
    assert verdict["message"] == (
        f"the upgrade from {CURRENT} to {TARGET} would strand 1 object(s): "
        f"FlowSchema exempt-probes ({FLOW}/v1beta3): use {FLOW}/v1"
    )
    assert not pre_checks_passed(await _cluster(site))
    assert [t for t in await site.told(await _cluster(site)) if t[1] == "RemovedAPIs"] == [
        ("Warning", "RemovedAPIs", verdict["message"])
    ]

    # Once it is gone from the removed version (moved to its replacement), the upgrade may go.
    await cluster_api.store.delete("FlowSchema", "exempt-probes")
    assert await site.reconcile(controller, fleet.key) is None
    verdict = await _verdict(site)
    assert (verdict["status"], verdict["reason"], verdict["message"]) == (
        "True",
        "Passed",
        f"no objects in API versions removed by {TARGET}",
    )
    assert pre_checks_passed(await _cluster(site))


async def test_where_the_replacement_is_served_too_only_objects_last_written_in_the_removed_version_hold(
    site: Site, cluster_api: Workload
) -> None:
    # kube-apiserver 1.31 serves every FlowSchema in v1beta3 and v1 alike: it is the version an object was
    # last written in (its managedFields) that a 1.32 client would stumble on.
    await cluster_api.put(_definition(FLOW, "v1beta3", "FlowSchema"))
    cluster_api.also_serve(f"{FLOW}/v1", "FlowSchema")
    for name, written_in in (("moved", "v1"), ("left-behind", "v1beta3")):
        await cluster_api.put(
            {
                "apiVersion": f"{FLOW}/v1beta3",
                "kind": "FlowSchema",
                "metadata": {
                    "name": name,
                    "managedFields": [
                        {"manager": "kubectl", "operation": "Update", "apiVersion": f"{FLOW}/{written_in}"}
                    ],
                },
            }
        )
    fleet = await _upgrading(site)
    await site.reconcile(_controller(fleet, cluster_api), fleet.key)
    assert (await _verdict(site))["message"] == (
        f"the upgrade from {CURRENT} to {TARGET} would strand 1 object(s): "
        f"FlowSchema left-behind ({FLOW}/v1beta3): use {FLOW}/v1"
    )


async def test_a_namespaced_object_is_named_with_its_namespace(site: Site, cluster_api: Workload) -> None:
    await cluster_api.put(_definition("storage.k8s.io", "v1beta1", "CSIStorageCapacity", "Namespaced"))
    await cluster_api.put(
        {
            "apiVersion": "storage.k8s.io/v1beta1",
            "kind": "CSIStorageCapacity",
            "metadata": {"name": "fast-ssd", "namespace": "kube-system"},
        }
    )
    # An older cluster: what 1.27 removed.
    fleet = await _upgrading(site, "1.27.16", "1.26.15", talos="v1.9.5")
    await site.reconcile(_controller(fleet, cluster_api), fleet.key)
    assert (await _verdict(site))["message"] == (
        "the upgrade from 1.26.15 to 1.27.16 would strand 1 object(s): "
        "CSIStorageCapacity kube-system/fast-ssd (storage.k8s.io/v1beta1): use storage.k8s.io/v1"
    )


async def test_a_patch_upgrade_is_not_held(site: Site, cluster_api: Workload) -> None:
    await _flow_schema(cluster_api)
    fleet = await _upgrading(site, target="1.31.5")
    assert await site.reconcile(_controller(fleet, cluster_api), fleet.key) is None
    verdict = await _verdict(site)
    assert (verdict["status"], verdict["reason"], verdict["message"]) == (
        "True",
        "NoMinorUpgrade",
        "no minor upgrade to check (Kubernetes 1.31.5)",
    )
    assert pre_checks_passed(await _cluster(site))
    assert cluster_api.endpoints == []


async def test_a_verdict_is_for_the_generation_it_was_decided_at(site: Site, cluster_api: Workload) -> None:
    fleet = await _upgrading(site)
    await site.reconcile(_controller(fleet, cluster_api), fleet.key)
    cluster = await _cluster(site)
    assert pre_checks_passed(cluster)
    await site.store.update(
        cluster.model_copy(update={"spec": {**(cluster.spec or {}), "kubernetesVersion": "1.33.0"}})
    )
    assert not pre_checks_passed(await _cluster(site))


async def test_the_skip_annotation_lets_a_held_upgrade_go_and_is_told_once(
    site: Site, cluster_api: Workload
) -> None:
    await _flow_schema(cluster_api)
    fleet = await _upgrading(
        site, annotations={SKIP_PRE_CHECKS_ANNOTATION: "the FlowSchema is moved by hand"}
    )
    controller = _controller(fleet, cluster_api)
    assert await site.reconcile(controller, fleet.key) is None
    await site.reconcile(controller, fleet.key)
    verdict = await _verdict(site)
    assert (verdict["status"], verdict["reason"], verdict["message"]) == (
        "True",
        "Skipped",
        f"pre-checks of the upgrade to {TARGET} skipped ({SKIP_PRE_CHECKS_ANNOTATION})",
    )
    assert pre_checks_passed(await _cluster(site))
    assert [t for t in await site.told(await _cluster(site)) if t[1] == "PreChecksSkipped"] == [
        ("Warning", "PreChecksSkipped", f"the upgrade to Kubernetes {TARGET} skips its pre-checks")
    ]
    assert cluster_api.endpoints == []


async def test_an_unreachable_api_holds_the_upgrade_saying_why_until_a_check_succeeds(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await _upgrading(site)
    controller = _controller(fleet, cluster_api)
    cluster_api.down = True
    why = f"cannot check the upgrade to {TARGET}: {ENDPOINT}: ConnectError: connection refused"
    for _ in range(2):
        assert await site.reconcile(controller, fleet.key) == Result(requeue_after=RECHECK_EVERY)
        verdict = await _verdict(site)
        assert (verdict["status"], verdict["reason"], verdict["message"]) == ("False", "CheckFailed", why)
        assert not pre_checks_passed(await _cluster(site))
    assert [t for t in await site.told(await _cluster(site)) if t[1] == "CheckFailed"] == [
        ("Warning", "CheckFailed", why)
    ]

    cluster_api.down = False
    assert await site.reconcile(controller, fleet.key) is None
    assert (await _verdict(site))["reason"] == "Passed"
    assert pre_checks_passed(await _cluster(site))
