"""A template from a live cluster, such that syncing it changes nothing (``diff`` prints nothing).

Patches are written inline with their names as ``idOverride`` (as Omni exports them): as a map when the
patch is one config document that reads back to the same text, else as its text. What a template
cannot say (a set not named ``<cluster>-<name>``, a set whose machines were bound by hand, a patch or
node setting for a machine its set picks from a class, ``herder.dev/`` labels) is an error naming the
object, never a template that would quietly undo it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from herder.resources import Resource
from herder.resources.backups import DEFAULT_RETENTION, DEFAULT_STORE
from herder.resources.clusters import (
    CLUSTER,
    LOCKED_ANNOTATION,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterSpec,
    MachineSetNodeSpec,
    MachineSetSpec,
    Strategy,
    control_plane_set_name,
    is_locked,
)
from herder.resources.configuration import CONFIG_PATCH, ConfigPatchSpec
from herder.resources.machines import CLUSTER_LABEL, CLUSTER_MACHINE_LABEL, MACHINE_SET_LABEL
from herder.resources.manifests import (
    CLUSTER_HEALTH_CHECK,
    CLUSTER_MANIFEST,
    ClusterHealthCheckSpec,
    ClusterManifestSpec,
)
from herder.talos.documents import dump_documents, load_documents
from herder.templates.documents import DEFAULT_WORKERS
from herder.templates.plan import owned_view, plan, template_objects
from herder.templates.render import DEFAULT_NAMESPACE
from herder.templates.template import parse_template
from herder.templates.validation import validate
from herder.templates.yaml_text import dump, dump_all

_DEFAULTS = MachineSetSpec(role="worker")


class Unexportable(ValueError):
    """A live cluster that a template cannot express; ``problems`` names every object in the way."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def export_template(cluster: Resource, objects: list[Resource]) -> str:
    """The template of ``cluster`` from its live objects (any of the cluster's kinds; what is not the
    template's is skipped); raises ``Unexportable`` listing what a template cannot say."""
    owned = template_objects(cluster.name, [cluster, *objects])
    problems: list[str] = []
    sets = {o.name: o for o in owned if o.kind == MACHINE_SET.kind}
    nodes = [o for o in owned if o.kind == MACHINE_SET_NODE.kind]
    static = {uuid: name for name, s in sets.items() for uuid in (s.spec or {}).get("machines") or ()}
    patches: dict[str, list[dict[str, Any]]] = {}
    for patch in sorted((o for o in owned if o.kind == CONFIG_PATCH.kind), key=lambda p: p.name):
        target = _patch_owner(patch, cluster.name, sets, static, problems)
        if target is not None:
            patches.setdefault(target, []).append(_patch(patch, problems))
    documents = [_cluster(cluster, patches.get("", []), problems)]
    kubernetes = _kubernetes(cluster.name, owned, problems)
    if kubernetes:
        documents[0]["kubernetes"].update(kubernetes)
    managed = CLUSTER.spec_of(cluster, ClusterSpec).managed
    if managed is not None:
        # The platform's control plane set is a controller's, so not among ``owned``: the Cluster says it.
        documents.append({"kind": "ControlPlane", "managed": managed.model_dump(mode="json")})
    control_planes = control_plane_set_name(cluster.name)
    order = sorted(sets, key=lambda n: (n != control_planes, n))
    for name in order:
        document = _machine_set(cluster.name, sets[name], patches.get(f"set/{name}", []), problems)
        if document is not None:
            documents.append(document)
    for node in sorted(nodes, key=lambda n: n.name):
        document = _machine(node, patches.get(f"machine/{node.name}", []), problems)
        if document is not None:
            documents.append(document)
    for uuid in sorted(static.keys() - {n.name for n in nodes}):
        if f"machine/{uuid}" in patches:
            documents.append({"kind": "Machine", "name": uuid, "patches": patches[f"machine/{uuid}"]})
    if problems:
        raise Unexportable(problems)
    text = dump_all(documents)
    _check_round_trip(cluster.name, text, owned, cluster.namespace or DEFAULT_NAMESPACE)
    return text


def _check_round_trip(name: str, text: str, live: list[Resource], namespace: str) -> None:
    """Refuse a template that would not sync back to exactly ``live``: it fails its own checks (a patch
    herder would refuse, say), or its objects differ."""
    template, problems = parse_template(text, Path(f"<export of {name}>"))
    desired = validate(template, problems, namespace)
    if problems.errors:
        raise Unexportable([str(e) for e in problems.errors])
    changes = plan(name, desired, live)
    if not changes.in_sync:
        raise Unexportable(
            [f"the template would change {c.kind} {c.name}:\n{c.diff()}" for c in changes.changes]
        )


def _descriptors(
    obj: Resource, what: str, problems: list[str], *, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    view = owned_view(obj)["metadata"]
    labels = {k: v for k, v in (view.get("labels") or {}).items() if k not in skip}
    herders = sorted(k for k in labels if k.startswith("herder.dev/"))
    if herders:
        problems.append(f"{what} has labels a template cannot set: {', '.join(herders)}")
    out: dict[str, Any] = {}
    if labels:
        out["labels"] = labels
    if view.get("annotations"):
        out["annotations"] = view["annotations"]
    return out


def _cluster(cluster: Resource, patches: list[dict[str, Any]], problems: list[str]) -> dict[str, Any]:
    spec = CLUSTER.spec_of(cluster, ClusterSpec)
    kubernetes: dict[str, Any] = {"version": f"v{spec.kubernetes_version}"}
    if spec.endpoint:
        kubernetes["endpoint"] = spec.endpoint
    document: dict[str, Any] = {
        "kind": "Cluster",
        "name": cluster.name,
        **_descriptors(cluster, f"Cluster {cluster.name}", problems),
        "kubernetes": kubernetes,
        "talos": {"version": spec.talos_version},
    }
    features: dict[str, Any] = {
        key: True
        for key, on in (
            ("diskEncryption", spec.features.disk_encryption),
            ("kubeSpan", spec.features.kube_span),
        )
        if on
    }
    if spec.backups is not None:
        backups: dict[str, Any] = {"interval": spec.backups.interval}
        if spec.backups.retention != DEFAULT_RETENTION:
            backups["retention"] = spec.backups.retention
        if spec.backups.store != DEFAULT_STORE:
            backups["store"] = spec.backups.store
        features["backupConfiguration"] = backups
    if features:
        document["features"] = features
    if spec.system_extensions:
        document["systemExtensions"] = list(spec.system_extensions)
    annotations = document.get("annotations") or {}
    if LOCKED_ANNOTATION in annotations:
        # The lock is the template's ``locked``, not an annotation a template may carry.
        del annotations[LOCKED_ANNOTATION]
        if not annotations:
            document.pop("annotations")
        if is_locked(cluster):
            document["locked"] = True
    if patches:
        document["patches"] = patches
    return document


def _strategy(strategy: Strategy, default: Strategy) -> dict[str, Any] | None:
    if strategy == default:
        return None
    out: dict[str, Any] = {}
    if strategy.type != default.type:
        out["type"] = strategy.type
    if strategy.rolling.max_parallelism != default.rolling.max_parallelism:
        out["rolling"] = {"maxParallelism": strategy.rolling.max_parallelism}
    return out


def _machine_set(
    cluster: str, machine_set: Resource, patches: list[dict[str, Any]], problems: list[str]
) -> dict[str, Any] | None:
    spec = MACHINE_SET.spec_of(machine_set, MachineSetSpec)
    what = f"MachineSet {machine_set.name}"
    if spec.role == "controlplane":
        document: dict[str, Any] = {"kind": "ControlPlane"}
    elif machine_set.name.startswith(f"{cluster}-"):
        name = machine_set.name.removeprefix(f"{cluster}-")
        document = {"kind": "Workers", **({} if name == DEFAULT_WORKERS else {"name": name})}
    else:
        problems.append(f"{what}: a template names a worker set {cluster}-NAME")
        return None
    document.update(_descriptors(machine_set, what, problems, skip=(CLUSTER_LABEL,)))
    if spec.machine_class is not None:
        document["machineClass"] = spec.machine_class.model_dump(mode="json")
    elif spec.machines is not None:
        document["machines"] = list(spec.machines)
    else:
        problems.append(f"{what}: its machines were bound by hand; a template lists them (set spec.machines)")
    if spec.bootstrap_spec is not None:
        document["bootstrapSpec"] = spec.bootstrap_spec.model_dump(mode="json", by_alias=True)
    if spec.system_extensions:
        document["systemExtensions"] = list(spec.system_extensions)
    strategies = [("upgradeStrategy", spec.upgrade_strategy, _DEFAULTS.upgrade_strategy)]
    if spec.role == "worker":
        strategies += [
            ("updateStrategy", spec.update_strategy, _DEFAULTS.update_strategy),
            ("deleteStrategy", spec.delete_strategy, _DEFAULTS.delete_strategy),
        ]
    elif (spec.update_strategy, spec.delete_strategy) != (
        _DEFAULTS.update_strategy,
        _DEFAULTS.delete_strategy,
    ):
        problems.append(f"{what}: a template gives the control plane no updateStrategy or deleteStrategy")
    for key, strategy, default in strategies:
        mapped = _strategy(strategy, default)
        if mapped is not None:
            document[key] = mapped
    if patches:
        document["patches"] = patches
    return document


def _machine(node: Resource, patches: list[dict[str, Any]], problems: list[str]) -> dict[str, Any] | None:
    spec = MACHINE_SET_NODE.spec_of(node, MachineSetNodeSpec)
    document: dict[str, Any] = {"kind": "Machine", "name": node.name}
    document.update(_descriptors(node, f"MachineSetNode {node.name}", problems))
    if spec.locked:
        document["locked"] = True
    if spec.install_disk:
        document["install"] = {"disk": spec.install_disk}
    if patches:
        document["patches"] = patches
    return document if len(document) > 2 else None


def _patch_owner(
    patch: Resource, cluster: str, sets: dict[str, Resource], static: dict[str, str], problems: list[str]
) -> str | None:
    """Where a patch goes in the template: ``""`` (the cluster), ``set/NAME`` or ``machine/UUID``."""
    labels = patch.metadata.labels
    if CLUSTER_MACHINE_LABEL in labels:
        uuid = labels[CLUSTER_MACHINE_LABEL]
        if uuid in static:
            return f"machine/{uuid}"
        problems.append(
            f"ConfigPatch {patch.name}: machine {uuid} is in no set of cluster {cluster} that lists its "
            "machines, and only those can have Machine documents"
        )
        return None
    if MACHINE_SET_LABEL in labels:
        name = labels[MACHINE_SET_LABEL]
        if name in sets:
            return f"set/{name}"
        problems.append(f"ConfigPatch {patch.name}: machine set {name} is not a set of cluster {cluster}")
        return None
    return ""


def _patch(patch: Resource, problems: list[str]) -> dict[str, Any]:
    spec = CONFIG_PATCH.spec_of(patch, ConfigPatchSpec)
    layer = (CLUSTER_LABEL, MACHINE_SET_LABEL, CLUSTER_MACHINE_LABEL)
    out: dict[str, Any] = {"idOverride": patch.name}
    if spec.description:
        out["name"] = spec.description
    out.update(_descriptors(patch, f"ConfigPatch {patch.name}", problems, skip=layer))
    out["inline"] = _inline(spec.data)
    return out


def _inline(data: str) -> dict[str, Any] | str:
    """A patch's text as a map when it is one document that comes back as the same text, else as is."""
    try:
        documents = load_documents(data)
    except yaml.YAMLError:
        return data
    if len(documents) != 1 or not isinstance(documents[0], dict) or dump_documents(documents) != data:
        return data
    try:
        back = load_documents(dump(documents[0]))
    except yaml.YAMLError:
        return data
    return documents[0] if back == documents else data


def _kubernetes(cluster: str, owned: list[Resource], problems: list[str]) -> dict[str, Any]:
    """The Cluster document's ``kubernetes.manifests`` and ``kubernetes.healthchecks``, from the live ones."""
    out: dict[str, Any] = {}
    prefix = f"{cluster}-"
    manifests, checks = [], []
    for obj in sorted(owned, key=lambda o: o.name):
        if obj.kind not in (CLUSTER_MANIFEST.kind, CLUSTER_HEALTH_CHECK.kind):
            continue
        what = f"{obj.kind} {obj.name}"
        if not obj.name.startswith(prefix):
            problems.append(f"{what}: a template names it {prefix}NAME")
            continue
        if view_has_descriptors(obj):
            problems.append(f"{what}: a template gives it no labels or annotations of its own")
        name = obj.name.removeprefix(prefix)
        if obj.kind == CLUSTER_MANIFEST.kind:
            spec = CLUSTER_MANIFEST.spec_of(obj, ClusterManifestSpec)
            entry: dict[str, Any] = {"name": name, "mode": spec.mode}
            if spec.namespace:
                entry["namespace"] = spec.namespace
            entry["inline"] = spec.manifests
            manifests.append(entry)
        else:
            check = CLUSTER_HEALTH_CHECK.spec_of(obj, ClusterHealthCheckSpec)
            checks.append({"name": name, "interval": check.interval, "job": check.job})
    if manifests:
        out["manifests"] = manifests
    if checks:
        out["healthchecks"] = checks
    return out


def view_has_descriptors(obj: Resource) -> bool:
    """Whether an object has labels (besides its cluster's) or annotations a template would have made."""
    metadata = owned_view(obj)["metadata"]
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k != CLUSTER_LABEL}
    return bool(labels or metadata.get("annotations"))
