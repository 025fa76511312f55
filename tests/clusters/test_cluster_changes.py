"""Which Cluster changes wake a controller that watches Clusters through ``cluster_changes``: its spec,
its metadata's lifecycle, and the status fields it names; not the status the other controllers write."""

from __future__ import annotations

from typing import Any

from herder.controllers.members import cluster_changes
from herder.resources import Resource
from herder.state.store import WatchEvent


def _cluster(status: dict[str, Any], **meta: Any) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "echo", "namespace": "default", "resourceVersion": "7", **meta},
            "spec": {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"},
            "status": status,
        }
    )


def _woken(before: Resource, after: Resource, *fields: str) -> bool:
    return bool(list(cluster_changes(*fields)(WatchEvent("MODIFIED", after, before))))


def test_only_the_fields_a_controller_reads_wake_it() -> None:
    base = _cluster({"phase": "Provisioning", "bootstrap": {"machine": "a"}})
    later = base.model_copy(update={"status": {**(base.status or {}), "phase": "Running"}})
    later.metadata = base.metadata.model_copy(update={"resource_version": "8"})
    assert not _woken(base, later, "bootstrap")  # another controller's phase, a new resourceVersion
    assert _woken(base, later, "phase")
    booted = base.model_copy(update={"status": {"bootstrap": {"machine": "a", "completedAt": "now"}}})
    assert _woken(base, booted, "bootstrap")
    resized = base.model_copy(update={"spec": {**(base.spec or {}), "kubernetesVersion": "1.34.0"}})
    assert _woken(base, resized)
    deleting = _cluster(base.status or {}, deletionTimestamp="2026-12-01T00:00:00Z")
    assert _woken(base, deleting)
    assert list(cluster_changes()(WatchEvent("ADDED", base)))  # a new or deleted cluster always wakes it


def test_a_condition_is_watched_by_its_type() -> None:
    def condition(kind: str, status: str) -> dict[str, str]:
        return {"type": kind, "status": status, "reason": "", "message": "", "lastTransitionTime": "t"}

    base = _cluster({"conditions": [condition("EndpointReady", "True"), condition("Ready", "False")]})
    ready = _cluster({"conditions": [condition("EndpointReady", "True"), condition("Ready", "True")]})
    assert not _woken(base, ready, "conditions[EndpointReady]")  # its own Ready, written by itself
    assert _woken(base, ready, "conditions[Ready]")
    lost = _cluster({"conditions": [condition("Ready", "False")]})
    assert _woken(base, lost, "conditions[EndpointReady]")
