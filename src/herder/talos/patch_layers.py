"""Layered config patches of a cluster machine, applied in herder's order and policed as Omni does.

Patches come in layers, applied system → cluster → machine set → cluster machine → machine, by name
within a layer (so names like ``200-registry`` order them). Patches written by users may not touch what
herder owns: the cluster's secrets and CAs, its endpoint and name, the machine's type and install disk,
the documents that carry those in the multi-document format, and the ``os:admin`` role for Kubernetes
workloads (Omni's ``ValidateConfigPatch`` list, plus the aggregator and etcd CAs, which are in the
secrets bundle too). System patches are herder's own and are not policed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from herder.talos.documents import LEGACY_KIND, document_id
from herder.talos.patches import (
    DeleteSelector,
    JSON6902Patch,
    Patch,
    PatchError,
    apply_patches,
    load_patch,
)


class PatchLayer(IntEnum):
    """Where a patch comes from; lower layers apply first."""

    SYSTEM = 0
    CLUSTER = 1
    MACHINE_SET = 2
    CLUSTER_MACHINE = 3
    MACHINE = 4


@dataclass(frozen=True)
class LayeredPatch:
    """A named patch text of one layer."""

    layer: PatchLayer
    name: str
    text: str


class ForbiddenPatch(PatchError):
    """A patch touching a field or document that herder owns."""

    def __init__(self, patch: str, path: str) -> None:
        super().__init__(f"config patch {patch!r} may not change {path}")
        self.patch = patch
        self.path = path


def _paths(*dotted: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(p.split(".")) for p in dotted)


FORBIDDEN_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    LEGACY_KIND: _paths(
        "cluster.clusterName",
        "cluster.id",
        "cluster.controlPlane.endpoint",
        "cluster.token",
        "cluster.secret",
        "cluster.aescbcEncryptionSecret",
        "cluster.secretboxEncryptionSecret",
        "cluster.ca",
        "cluster.acceptedCAs",
        "cluster.aggregatorCA",
        "cluster.serviceAccount",
        "cluster.etcd.ca",
        "machine.token",
        "machine.ca",
        "machine.acceptedCAs",
        "machine.type",
        "machine.install.disk",
        "machine.install.extensions",
    ),
    "KubeServiceAccountConfig": _paths("issuer.privateKey"),
}
"""Fields a user patch may not set or delete, per document kind."""

FORBIDDEN_KINDS = frozenset(
    {
        "UnattendedInstallConfig",
        "DiscoveryIdentityConfig",
        "KubeClusterConfig",
        "KubeEtcdEncryptionConfig",
        "KubeAPIServerCAConfig",
        "KubeAggregatorCAConfig",
    }
)
"""Documents a user patch may not carry or delete."""

ADMIN_ROLE = "os:admin"
_ROLE_PATHS: dict[str, tuple[str, ...]] = {
    LEGACY_KIND: ("machine", "features", "kubernetesTalosAPIAccess", "allowedRoles"),
    "KubeTalosAPIAccessConfig": ("allowedRoles",),
}


def ordered(patches: Iterable[LayeredPatch]) -> list[LayeredPatch]:
    """Patches in application order: by layer, then by name."""
    return sorted(patches, key=lambda p: (p.layer, p.name))


def apply_layers(config: str | Sequence[dict[str, Any]], layers: Iterable[LayeredPatch]) -> str:
    """Apply layered patches in order to a generated config (its YAML, or its documents as
    ``patches.load_config`` reads them); refuses user patches touching owned paths."""
    loaded: list[Patch] = []
    for layered in ordered(layers):
        try:
            patch = load_patch(layered.text)
        except PatchError as exc:
            raise PatchError(f"config patch {layered.name!r}: {exc}") from exc
        if layered.layer != PatchLayer.SYSTEM:
            check_allowed(patch, layered.name)
        loaded.append(patch)
    return apply_patches(config, loaded)


def check_allowed(patch: Patch, name: str) -> None:
    """Raise ``ForbiddenPatch`` naming the first owned path or document the patch touches."""
    if isinstance(patch, JSON6902Patch):
        for operation in patch.operations:
            _check_operation(operation, name)
        return
    for step in patch.steps:
        if isinstance(step, DeleteSelector):
            kind, path = step.document.kind, step.path
            value: Any = None
        else:
            kind, path, value = document_id(step).kind, (), step
        if kind in FORBIDDEN_KINDS:
            raise ForbiddenPatch(name, f"{kind} documents")
        for forbidden in FORBIDDEN_PATHS.get(kind, ()):
            if (value is None and _related(path, forbidden)) or _present(value, forbidden):
                raise ForbiddenPatch(name, _describe(kind, forbidden))
        roles = _ROLE_PATHS.get(kind)
        if roles and _grants_admin(_subtree(value, roles)):
            raise ForbiddenPatch(name, f"the {ADMIN_ROLE} role in {_describe(kind, roles)}")


def _check_operation(operation: dict[str, Any], name: str) -> None:
    # A JSON 6902 patch only ever applies to a single-document config, that is the legacy document.
    if operation["op"] == "test":
        return
    pointers = [operation["path"], *([operation["from"]] if operation["op"] == "move" else [])]
    for pointer in pointers:
        path = _pointer_path(pointer)
        for forbidden in FORBIDDEN_PATHS[LEGACY_KIND]:
            if _related(path, forbidden):
                raise ForbiddenPatch(name, _describe(LEGACY_KIND, forbidden))
    roles = _ROLE_PATHS[LEGACY_KIND]
    path = _pointer_path(operation["path"])
    value = operation.get("value")
    granted = value if path[: len(roles)] == roles else _subtree(value, roles[len(path) :])
    if _related(path, roles) and _grants_admin(granted):
        raise ForbiddenPatch(name, f"the {ADMIN_ROLE} role in {_describe(LEGACY_KIND, roles)}")


def _pointer_path(pointer: str) -> tuple[str, ...]:
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:])


def _related(path: tuple[str, ...], forbidden: tuple[str, ...]) -> bool:
    """Whether changing ``path`` changes ``forbidden``: one is the other or an ancestor of it."""
    common = min(len(path), len(forbidden))
    return path[:common] == forbidden[:common]


def _subtree(value: Any, path: tuple[str, ...]) -> Any:
    for segment in path:
        if not isinstance(value, dict):
            return None
        value = value.get(segment)
    return value


def _present(value: Any, path: tuple[str, ...]) -> bool:
    return value is not None and _subtree(value, path) is not None


def _grants_admin(roles: Any) -> bool:
    return roles == ADMIN_ROLE or (isinstance(roles, list) and ADMIN_ROLE in roles)


def _describe(kind: str, path: tuple[str, ...]) -> str:
    dotted = ".".join(path)
    return dotted if kind == LEGACY_KIND else f"{kind}.{dotted}"
