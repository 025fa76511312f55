"""Discovery documents: ``/version``, ``/api``, ``/apis`` and each group version's resource list.

Only the legacy documents are served. Clients that ask for aggregated discovery first
(``application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``) also accept plain
``application/json`` and fall back to these when the answer's content type says so.
"""

from __future__ import annotations

import platform
from typing import Any

from herder.resources import KindInfo, KindRegistry

# What every kind supports; Kubernetes clients read this list to know which commands may be used.
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


def version_info(git_version: str = "v1.32.0+herder") -> dict[str, str]:
    """A Kubernetes-shaped ``/version`` answer; kubectl's dispatcher picks its client by major.minor."""
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": f"python{platform.python_version()}",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{platform.machine()}",
    }


def group_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def api_versions(registry: KindRegistry) -> dict[str, Any]:
    """``/api``: the versions of the core group."""
    return {"kind": "APIVersions", "versions": registry.groups().get("", [])}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": group_version(name, v), "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(registry: KindRegistry) -> dict[str, Any]:
    """``/apis``: every named group with its versions."""
    groups = [_group(name, versions) for name, versions in registry.groups().items() if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: KindRegistry, group: str) -> dict[str, Any] | None:
    """``/apis/{group}``, or None when the group is not served."""
    versions = registry.groups().get(group) if group else None
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def _resource(info: KindInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": VERBS,
    }
    if info.short_names:
        out["shortNames"] = list(info.short_names)
    if info.categories:
        out["categories"] = list(info.categories)
    return out


def api_resource_list(registry: KindRegistry, group: str, version: str) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/{group}/{version}``, or None when that group version is not served."""
    kinds = [k for k in registry if k.group == group and k.version == version]
    if not kinds:
        return None
    resources = []
    for info in kinds:
        resources.append(_resource(info))
        if info.has_status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": STATUS_VERBS,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": resources,
    }
