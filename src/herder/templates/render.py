"""Translation of a template into herder's objects, as Omni translates one into its resources:

- ``Cluster`` → a Cluster (``talos.version`` → ``spec.talosVersion``, ``kubernetes.version`` →
  ``spec.kubernetesVersion``, ``kubernetes.endpoint`` → ``spec.endpoint``, ``features.diskEncryption``
  and ``features.kubeSpan`` → ``spec.features``);
- ``ControlPlane`` → the MachineSet ``<cluster>-control-planes`` (role ``controlplane``) — or, with
  ``managed.enabled``, the Cluster's ``spec.controlPlane.managed`` (the platform makes the set) —, ``Workers`` →
  a MachineSet ``<cluster>-<name>`` (role ``worker``): ``machines`` → ``spec.machines``, ``machineClass``
  → ``spec.machineClass``, the strategies → the same spec fields (a strategy without a type keeps
  Omni's default type: Rolling, except Unset for deletes);
- each listed machine → the state of its MachineSetNode (which the set's allocation creates): ``locked``
  and ``install.disk`` of its ``Machine`` document, and that document's labels and annotations;
- patches → ConfigPatches named as Omni names them (``200-<cluster>-<name>``, ``400-<set>-<name>``,
  ``400-<cluster>-<uuid>-<name>``, the weight counting up within a list; or ``idOverride``), labelled for
  their layer, with the patch's name as their description.

Every object carries the ``herder.dev/managed-by: cluster-templates`` annotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from herder.resources import Resource
from herder.resources.backups import duration_seconds
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_TEMPLATES,
    LOCKED_ANNOTATION,
    MACHINE_SET,
    MACHINE_SET_NODE,
    MANAGED_BY_ANNOTATION,
    control_plane_set_name,
)
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import (
    CLUSTER_LABEL,
    CLUSTER_MACHINE_LABEL,
    MACHINE_SET_LABEL,
    ROLE_LABEL,
)
from herder.resources.manifests import CLUSTER_HEALTH_CHECK, CLUSTER_MANIFEST
from herder.templates.documents import (
    ClusterDoc,
    ControlPlaneDoc,
    MachineDoc,
    PatchDoc,
    StrategyDoc,
    WorkersDoc,
)
from herder.templates.template import Source, Template

CLUSTER_PATCH_WEIGHT = 200
SET_PATCH_WEIGHT = 400
MACHINE_PATCH_WEIGHT = 400
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Rendered:
    """An object made from a template, with where it came from (for errors about it)."""

    resource: Resource
    source: Source
    field: str
    """The document's field the object comes from: ``""`` for the document itself, ``patches[1]``…"""


def set_name(cluster: str, document: ControlPlaneDoc | WorkersDoc) -> str:
    if isinstance(document, ControlPlaneDoc):
        return control_plane_set_name(cluster)
    return f"{cluster}-{document.name}"


def patch_id(weight: int, prefix: str, patch: PatchDoc) -> str:
    """The ConfigPatch name of a patch: its ``idOverride``, else Omni's ``%03d-<prefix>-<name>`` made a
    valid object name (lowercase; a lone ``.`` stays, any other run of characters but letters and
    digits becomes ``-``)."""
    if patch.id_override:
        return patch.id_override
    name = re.sub(r"[^a-z0-9]+", lambda m: "." if m.group() == "." else "-", patch.title.lower())
    return re.sub(r"-{2,}", "-", f"{weight:03d}-{prefix}-{name}")[:253].strip("-.")


def render_sources(template: Template, cluster: str, namespace: str = DEFAULT_NAMESPACE) -> list[Rendered]:
    """Every object of the template, in template order, for the cluster named ``cluster`` (the name of
    its one Cluster document, or a stand-in when it has none, so that the rest is still checked)."""
    in_docs = {m.name: m for m in template.machines}
    out: list[Rendered] = []
    for source in template.sources:
        document = source.document
        if isinstance(document, ClusterDoc):
            if document is template.cluster:
                out.append(Rendered(_cluster(document, template.control_plane, namespace), source, ""))
                out += _patches(template, source, namespace, cluster, CLUSTER_PATCH_WEIGHT, cluster, {})
                out += _kubernetes(template, source, document, namespace, cluster)
        elif isinstance(document, ControlPlaneDoc) and document.managed and document.managed.enabled:
            continue  # the platform makes the control plane set (see Cluster.spec.controlPlane.managed)
        elif isinstance(document, ControlPlaneDoc | WorkersDoc):
            machine_set = _machine_set(cluster, document, namespace)
            out.append(Rendered(machine_set, source, ""))
            for i, uuid in enumerate(document.machines if document.machine_class is None else ()):
                node = _node(machine_set, uuid, in_docs.get(uuid), namespace)
                out.append(Rendered(node, source, f"machines[{i}]"))
            labels = {MACHINE_SET_LABEL: machine_set.name}
            out += _patches(template, source, namespace, cluster, SET_PATCH_WEIGHT, machine_set.name, labels)
        elif isinstance(document, MachineDoc):
            prefix = f"{cluster}-{document.name}"
            labels = {CLUSTER_MACHINE_LABEL: document.name}
            out += _patches(template, source, namespace, cluster, MACHINE_PATCH_WEIGHT, prefix, labels)
    return out


def _object(kind: Any, name: str, namespace: str, labels: dict[str, str], annotations: dict[str, str]) -> Any:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {**annotations, MANAGED_BY_ANNOTATION: CLUSTER_TEMPLATES},
        },
    }


def _cluster(document: ClusterDoc, control_plane: ControlPlaneDoc | None, namespace: str) -> Resource:
    spec: dict[str, Any] = {
        "talosVersion": document.talos.version,
        "kubernetesVersion": document.kubernetes.version,
        "features": {
            "diskEncryption": document.features.disk_encryption,
            "kubeSpan": document.features.kube_span,
        },
        "systemExtensions": list(document.system_extensions),
    }
    if document.kubernetes.endpoint:
        spec["endpoint"] = document.kubernetes.endpoint
    managed = control_plane.managed if control_plane is not None else None
    if managed is not None and managed.enabled:
        spec["controlPlane"] = {
            "managed": {"enabled": True, "provider": managed.provider, "size": managed.size}
        }
    backups = document.features.backup_configuration
    if backups is not None and backups.interval and duration_seconds(backups.interval) > 0:
        spec["backups"] = {
            "interval": backups.interval,
            **({"retention": backups.retention} if backups.retention is not None else {}),
            **({"store": backups.store} if backups.store is not None else {}),
        }
    annotations = dict(document.annotations)
    if document.locked:
        annotations[LOCKED_ANNOTATION] = "true"
    data = _object(CLUSTER, document.name, namespace, dict(document.labels), annotations)
    return Resource.model_validate({**data, "spec": spec})


def _strategy(strategy: StrategyDoc | None, default_type: str) -> dict[str, Any] | None:
    if strategy is None:
        return None
    out: dict[str, Any] = {"type": strategy.type or default_type}
    if strategy.rolling is not None and strategy.rolling.max_parallelism is not None:
        out["rolling"] = {"maxParallelism": strategy.rolling.max_parallelism}
    return out


def _machine_set(cluster: str, document: ControlPlaneDoc | WorkersDoc, namespace: str) -> Resource:
    role = "controlplane" if isinstance(document, ControlPlaneDoc) else "worker"
    spec: dict[str, Any] = {"role": role, "systemExtensions": list(document.system_extensions)}
    if document.machine_class is not None:
        spec["machineClass"] = {"name": document.machine_class.name, "size": document.machine_class.size}
    else:
        spec["machines"] = list(document.machines)
    strategies: dict[str, tuple[StrategyDoc | None, str]] = {
        "upgradeStrategy": (document.upgrade_strategy, "Rolling")
    }
    if isinstance(document, ControlPlaneDoc) and document.bootstrap_spec is not None:
        spec["bootstrapSpec"] = {
            "clusterUUID": document.bootstrap_spec.cluster_uuid,
            "snapshot": document.bootstrap_spec.snapshot,
        }
    if isinstance(document, WorkersDoc):
        strategies["updateStrategy"] = (document.update_strategy, "Rolling")
        strategies["deleteStrategy"] = (document.delete_strategy, "Unset")
    for name, (strategy, default_type) in strategies.items():
        mapped = _strategy(strategy, default_type)
        if mapped is not None:
            spec[name] = mapped
    labels = {CLUSTER_LABEL: cluster, **document.labels}
    data = _object(MACHINE_SET, set_name(cluster, document), namespace, labels, dict(document.annotations))
    return Resource.model_validate({**data, "spec": spec})


def _node(machine_set: Resource, uuid: str, document: MachineDoc | None, namespace: str) -> Resource:
    labels = {
        CLUSTER_LABEL: machine_set.metadata.labels[CLUSTER_LABEL],
        MACHINE_SET_LABEL: machine_set.name,
        ROLE_LABEL: str((machine_set.spec or {})["role"]),
        **(document.labels if document else {}),
    }
    annotations = dict(document.annotations) if document else {}
    spec: dict[str, Any] = {"locked": bool(document and document.locked)}
    if document and document.install.disk:
        spec["installDisk"] = document.install.disk
    data = _object(MACHINE_SET_NODE, uuid, namespace, labels, annotations)
    return Resource.model_validate({**data, "spec": spec})


def _patches(
    template: Template,
    source: Source,
    namespace: str,
    cluster: str,
    weight: int,
    prefix: str,
    layer: dict[str, str],
) -> list[Rendered]:
    out = []
    for i, (patch, text) in enumerate(template.patches(source)):
        if text is None:
            continue  # unreadable: already an error
        labels = {CLUSTER_LABEL: cluster, **layer, **patch.labels}
        name = patch_id(weight + i, prefix, patch)
        data = _object(CONFIG_PATCH, name, namespace, labels, dict(patch.annotations))
        spec = {"data": text, "description": patch.name or patch.file}
        out.append(Rendered(Resource.model_validate({**data, "spec": spec}), source, f"patches[{i}]"))
    return out


def manifest_name(cluster: str, name: str) -> str:
    """The ClusterManifest (or ClusterHealthCheck) of a template's manifest (or check) ``name``."""
    return f"{cluster}-{name}"


def _kubernetes(
    template: Template, source: Source, document: ClusterDoc, namespace: str, cluster: str
) -> list[Rendered]:
    """The Cluster document's ``kubernetes.manifests`` and ``kubernetes.healthchecks``."""
    out = []
    labels = {CLUSTER_LABEL: cluster}
    for i, manifest in enumerate(document.kubernetes.manifests):
        objects = template.manifests.get(i)
        if objects is None:
            continue  # unreadable: already an error
        data = _object(CLUSTER_MANIFEST, manifest_name(cluster, manifest.name), namespace, labels, {})
        spec: dict[str, Any] = {"mode": manifest.mode, "namespace": manifest.namespace, "manifests": objects}
        out.append(
            Rendered(Resource.model_validate({**data, "spec": spec}), source, f"kubernetes.manifests[{i}]")
        )
    for i, check in enumerate(document.kubernetes.healthchecks):
        job = template.health_checks.get(i)
        if job is None:
            continue
        data = _object(CLUSTER_HEALTH_CHECK, manifest_name(cluster, check.title), namespace, labels, {})
        check_spec: dict[str, Any] = {"job": job, "interval": check.interval}
        out.append(
            Rendered(
                Resource.model_validate({**data, "spec": check_spec}), source, f"kubernetes.healthchecks[{i}]"
            )
        )
    return out
