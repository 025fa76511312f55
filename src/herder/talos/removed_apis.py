"""The API versions each Kubernetes minor release stopped serving, from Kubernetes' deprecated API migration
guide (releases 1.25 to 1.36; 1.33 to 1.36 removed none of the guide's APIs): what an upgrade strands —
objects that clients and manifests still write in a version the target no longer serves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RemovedAPI:
    removed_in: tuple[int, int]
    """The Kubernetes release (major, minor) that no longer serves it."""
    api_version: str
    kind: str
    replacement: str
    """The apiVersion to move to, or what replaces the kind."""


def _in(minor: int, api_version: str, replacement: str, *kinds: str) -> list[RemovedAPI]:
    return [RemovedAPI((1, minor), api_version, kind, replacement) for kind in kinds]


REMOVED_APIS: tuple[RemovedAPI, ...] = (
    *_in(25, "batch/v1beta1", "batch/v1", "CronJob"),
    *_in(25, "discovery.k8s.io/v1beta1", "discovery.k8s.io/v1", "EndpointSlice"),
    *_in(25, "events.k8s.io/v1beta1", "events.k8s.io/v1", "Event"),
    *_in(25, "autoscaling/v2beta1", "autoscaling/v2", "HorizontalPodAutoscaler"),
    *_in(25, "policy/v1beta1", "policy/v1", "PodDisruptionBudget"),
    *_in(25, "policy/v1beta1", "none: Pod Security Admission replaces it", "PodSecurityPolicy"),
    *_in(25, "node.k8s.io/v1beta1", "node.k8s.io/v1", "RuntimeClass"),
    *_in(
        26,
        "flowcontrol.apiserver.k8s.io/v1beta1",
        "flowcontrol.apiserver.k8s.io/v1 (v1beta2 before 1.29)",
        "FlowSchema",
        "PriorityLevelConfiguration",
    ),
    *_in(26, "autoscaling/v2beta2", "autoscaling/v2", "HorizontalPodAutoscaler"),
    *_in(27, "storage.k8s.io/v1beta1", "storage.k8s.io/v1", "CSIStorageCapacity"),
    *_in(
        29,
        "flowcontrol.apiserver.k8s.io/v1beta2",
        "flowcontrol.apiserver.k8s.io/v1",
        "FlowSchema",
        "PriorityLevelConfiguration",
    ),
    *_in(
        32,
        "flowcontrol.apiserver.k8s.io/v1beta3",
        "flowcontrol.apiserver.k8s.io/v1",
        "FlowSchema",
        "PriorityLevelConfiguration",
    ),
)


def minor_of(version: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version (``1.33.0``, ``v1.34``); ``ValueError`` naming it otherwise."""
    parts = version.strip().removeprefix("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"invalid Kubernetes version {version!r}: expected e.g. 1.34.1") from None


def removed_between(current: str, target: str) -> list[RemovedAPI]:
    """The APIs an upgrade from ``current`` to ``target`` stops serving (none for a patch or a downgrade)."""
    low, high = minor_of(current), minor_of(target)
    return [api for api in REMOVED_APIS if low < api.removed_in <= high]
