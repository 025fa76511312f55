"""What ``sync`` changes to make a cluster's live objects what its template says, and what ``diff`` shows.

A template owns, of its cluster: the Cluster; the MachineSets, ClusterManifests, ClusterHealthChecks and
ConfigPatches labelled
``herder.dev/cluster=<name>`` (a patch targeting a machine by ``herder.dev/machine`` is that machine's,
not the cluster's); and the state of the MachineSetNodes of its sets that list their machines (the
allocation creates and deletes those nodes, the template sets their lock, install disk, labels and
annotations). Objects a controller owns (``herder.dev/controller``) are never the template's, and a name
the template would take that belongs to anything else is a conflict, not an update.

Of each object, the template owns its spec, its labels (a node's ``herder.dev/`` labels are its
allocation's) and its annotations, except herder's (``herder.dev/``) and kubectl's; those are kept as
they are, and so is everything else (finalizers, owners, status); but a Cluster's lock
(``herder.dev/locked``, the template's ``locked``) is the template's. Writes carry the template's mark.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_TEMPLATES,
    LOCKED_ANNOTATION,
    MACHINE_SET,
    MACHINE_SET_NODE,
    MANAGED_BY_ANNOTATION,
    MachineSetNodeSpec,
)
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import CLUSTER_LABEL, MACHINE_LABEL, MACHINE_SET_LABEL
from herder.resources.manifests import CLUSTER_HEALTH_CHECK, CLUSTER_MANIFEST, MANIFEST_KINDS
from herder.resources.meta import CONTROLLER_ANNOTATION
from herder.templates.yaml_text import dump

_FOREIGN_ANNOTATIONS = ("herder.dev/", "kubectl.kubernetes.io/")
# The order writes go in: patches before the sets, so a machine's first config already has them.
WRITE_ORDER = (
    CLUSTER.kind,
    CONFIG_PATCH.kind,
    MACHINE_SET.kind,
    MACHINE_SET_NODE.kind,
    CLUSTER_MANIFEST.kind,
    CLUSTER_HEALTH_CHECK.kind,
)
DELETE_ORDER = (MACHINE_SET.kind, CONFIG_PATCH.kind, CLUSTER_MANIFEST.kind, CLUSTER_HEALTH_CHECK.kind)
Action = Literal["create", "update", "delete"]
MANIFEST_KIND_NAMES = tuple(k.kind for k in MANIFEST_KINDS)


def template_objects(cluster: str, objects: Iterable[Resource]) -> list[Resource]:
    """Of the given live objects, those the template of ``cluster`` owns."""
    objects = list(objects)
    static_sets = {
        o.name
        for o in objects
        if o.kind == MACHINE_SET.kind and (o.spec or {}).get("machines") is not None and _of(o, cluster)
    }
    out = []
    for obj in objects:
        if CONTROLLER_ANNOTATION in obj.metadata.annotations:
            continue
        labels = obj.metadata.labels
        if obj.kind == CLUSTER.kind:
            keep = obj.name == cluster
        elif obj.kind == CONFIG_PATCH.kind:
            keep = _of(obj, cluster) and MACHINE_LABEL not in labels
        elif obj.kind == MACHINE_SET_NODE.kind:
            keep = _of(obj, cluster) and labels.get(MACHINE_SET_LABEL) in static_sets
        else:
            keep = obj.kind in (MACHINE_SET.kind, *MANIFEST_KIND_NAMES) and _of(obj, cluster)
        if keep:
            out.append(obj)
    return out


def _of(obj: Resource, cluster: str) -> bool:
    return obj.metadata.labels.get(CLUSTER_LABEL) == cluster


def _owned_annotations(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if _owned(k)}


def _owned(annotation: str) -> bool:
    return annotation == LOCKED_ANNOTATION or not annotation.startswith(_FOREIGN_ANNOTATIONS)


def owned_view(obj: Resource) -> dict[str, Any]:
    """The part of an object the template owns, as ``diff`` shows it."""
    labels = dict(obj.metadata.labels)
    if obj.kind == MACHINE_SET_NODE.kind:
        labels = {k: v for k, v in labels.items() if not k.startswith("herder.dev/")}
    metadata: dict[str, Any] = {"name": obj.name}
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    annotations = _owned_annotations(obj.metadata.annotations)
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    return {"kind": obj.kind, "metadata": metadata, "spec": obj.spec or {}}


@dataclass(frozen=True)
class Change:
    action: Action
    kind: str
    name: str
    write: Resource | None
    """What to send: the new object, or (update) the live one with the template's parts replaced."""
    live: Resource | None

    def diff(self) -> str:
        """A unified diff of what the template owns, live → template."""
        before = dump(owned_view(self.live)).splitlines(keepends=True) if self.live else []
        after = dump(owned_view(self.write)).splitlines(keepends=True) if self.write else []
        where = f"{self.kind}/{self.name}"
        return "".join(
            difflib.unified_diff(
                before,
                after if self.action != "delete" else [],
                fromfile=f"live/{where}" if self.live else "/dev/null",
                tofile=f"template/{where}" if self.action != "delete" else "/dev/null",
            )
        )


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    pending_nodes: list[Resource] = field(default_factory=list)
    """The state of nodes the allocation has not made yet (only those with something to set)."""
    conflicts: list[str] = field(default_factory=list)

    @property
    def writes(self) -> list[Change]:
        return [c for c in self.changes if c.action != "delete"]

    @property
    def deletes(self) -> list[Change]:
        return [c for c in self.changes if c.action == "delete"]

    @property
    def in_sync(self) -> bool:
        return not self.changes and not self.pending_nodes


def plan(cluster: str, desired: list[Resource], live: list[Resource], taken: Iterable[Resource] = ()) -> Plan:
    """The changes from the template's ``live`` objects (``template_objects``) to ``desired``; ``taken``
    are live objects outside the template that have names it wants (conflicts)."""
    result = Plan()
    live_by = {(o.kind, o.name): o for o in live}
    for other in taken:
        if (other.kind, other.name) not in live_by:
            result.conflicts.append(_conflict(cluster, other))
    blocked = {(o.kind, o.name) for o in taken}
    for obj in sorted(desired, key=lambda o: WRITE_ORDER.index(o.kind)):
        key = (obj.kind, obj.name)
        if key in blocked and key not in live_by:
            continue
        current = live_by.get(key)
        if obj.kind == MACHINE_SET_NODE.kind and not same_binding(current, obj):
            # Not allocated yet (or still in the set it leaves): its state is given once it is.
            if owned_view(obj) != owned_view(_bare_node(obj)):
                result.pending_nodes.append(obj)
            continue
        if current is None:
            result.changes.append(Change("create", obj.kind, obj.name, obj, None))
        elif owned_view(current) != owned_view(obj):
            result.changes.append(Change("update", obj.kind, obj.name, merged(current, obj), current))
    wanted = {(o.kind, o.name) for o in desired}
    for kind in DELETE_ORDER:
        for obj in live:
            if obj.kind == kind and (obj.kind, obj.name) not in wanted:
                result.changes.append(Change("delete", obj.kind, obj.name, None, obj))
    return result


def same_binding(node: Resource | None, desired: Resource) -> bool:
    """Whether a live node binds its machine to the set the template puts it in."""
    return node is not None and node.metadata.labels.get(MACHINE_SET_LABEL) == desired.metadata.labels.get(
        MACHINE_SET_LABEL
    )


def merged(current: Resource, desired: Resource) -> Resource:
    """``current`` with the template's parts taken from ``desired``, and the template's mark."""
    out = current.clone()
    out.spec = desired.spec
    labels = dict(desired.metadata.labels)
    if current.kind == MACHINE_SET_NODE.kind:
        labels = {
            **{k: v for k, v in current.metadata.labels.items() if k.startswith("herder.dev/")},
            **{k: v for k, v in labels.items() if not k.startswith("herder.dev/")},
        }
    out.metadata.labels = labels
    out.metadata.annotations = {
        **{k: v for k, v in current.metadata.annotations.items() if not _owned(k)},
        **_owned_annotations(desired.metadata.annotations),
        MANAGED_BY_ANNOTATION: CLUSTER_TEMPLATES,
    }
    return out


def _bare_node(desired: Resource) -> Resource:
    """A node as its allocation makes it: the template has nothing to change on such a node."""
    out = desired.clone()
    out.spec = MachineSetNodeSpec().model_dump(mode="json", by_alias=True)
    out.metadata.labels = {k: v for k, v in desired.metadata.labels.items() if k.startswith("herder.dev/")}
    out.metadata.annotations = {}
    return out


def _conflict(cluster: str, other: Resource) -> str:
    where = f"{other.kind} {other.name}"
    owner = other.metadata.annotations.get(CONTROLLER_ANNOTATION)
    if owner:
        return (
            f"{where} is managed by controller {owner}: the template of cluster {cluster} may not change it"
        )
    theirs = other.metadata.labels.get(CLUSTER_LABEL)
    if theirs and theirs != cluster:
        return f"{where} belongs to cluster {theirs}: the template of cluster {cluster} may not change it"
    return (
        f"{where} exists and is not an object of cluster {cluster}: rename it in the template, or delete it"
    )
