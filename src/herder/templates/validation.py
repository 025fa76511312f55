"""Checking a whole template, offline, before anything is sent: Omni's rules for the set of documents
(one Cluster, one ControlPlane, unique Workers names, a machine in at most one set, every Machine document
used, no locked control plane machine), the fields herder ignores or refuses, the version policy, the
objects the template makes (checked as the server would check them), and the patches against the
cluster's Talos contract."""

from __future__ import annotations

from collections import Counter
from functools import cache

from herder.resources import InvalidObject, KindRegistry, Resource
from herder.resources.catalog import herder_registry
from herder.resources.clusters import CLUSTER, MACHINE_SET, MACHINE_SET_NODE
from herder.talos.contracts import UnknownTalosVersion, VersionContract
from herder.talos.versions import check_compatibility
from herder.templates.documents import ClusterDoc, ControlPlaneDoc, MachineDoc, WorkersDoc, marked_fields
from herder.templates.patch_checks import check_patches
from herder.templates.problems import Problems
from herder.templates.render import DEFAULT_NAMESPACE, Rendered, render_sources
from herder.templates.template import STAND_IN, Template

# Where a field of a rendered Cluster comes from in the Cluster document.
_CLUSTER_FIELDS = {
    "spec.talosVersion": "talos.version",
    "spec.kubernetesVersion": "kubernetes.version",
    "spec.endpoint": "kubernetes.endpoint",
    "metadata.name": "name",
}


_VERSION_FIELDS = ("talos.version", "kubernetes.version")


@cache
def _registry() -> KindRegistry:
    return herder_registry()


def validate(template: Template, problems: Problems, namespace: str = DEFAULT_NAMESPACE) -> list[Resource]:
    """Add every problem of the template to ``problems``; the objects it makes, as the server would
    store them (meaningful only when no error was found)."""
    for source in template.sources:
        for path, mark, message in marked_fields(source.document):
            (problems.warn if mark == "ignored" else problems.error)(source.label, path, message)
    _structure(template, problems)
    cluster = template.cluster.name if template.cluster is not None else STAND_IN
    rendered = render_sources(template, cluster, namespace)
    resources = _checked(rendered, problems)
    # A malformed version is reported by the Cluster's own check; the policy speaks of well-formed ones.
    if template.cluster is not None and not any(e.field in _VERSION_FIELDS for e in problems.errors):
        _versions(template, problems)
    check_patches(template, problems)
    return resources


def _structure(template: Template, problems: Problems) -> None:
    for kind, what in ((ClusterDoc, "Cluster"), (ControlPlaneDoc, "ControlPlane")):
        count = len(template.of(kind)) + template.unreadable.count(what)
        if count != 1:
            problems.error("", "", f"a template has exactly one {what} document, found {count}")
    names = Counter(w.name for w in template.workers)
    for source, workers in template.of(WorkersDoc):
        if names[workers.name] > 1:
            problems.error(source.label, "name", f'another Workers document is named "{workers.name}"')
    owners: dict[str, str] = {}
    control_planes: set[str] = set()
    for source, document in [*template.of(ControlPlaneDoc), *template.of(WorkersDoc)]:
        if document.machines and document.machine_class is not None:
            problems.error(source.label, "machineClass", "machines and machineClass are mutually exclusive")
        if isinstance(document, ControlPlaneDoc) and _managed(document):
            _managed_control_plane(source.label, document, problems)
        elif isinstance(document, ControlPlaneDoc):
            control_planes.update(document.machines)
            if not document.machines and document.machine_class is None:
                problems.error(
                    source.label, "machines", "the control plane lists machines or uses a machineClass"
                )
        for i, uuid in enumerate(document.machines):
            if uuid in owners:
                problems.error(source.label, f"machines[{i}]", f"machine {uuid} is also in {owners[uuid]}")
            else:
                owners[uuid] = source.label
    seen: set[str] = set()
    for source, machine in template.of(MachineDoc):
        if machine.name in seen:
            problems.error(source.label, "name", f"another Machine document is for machine {machine.name}")
        seen.add(machine.name)
        if machine.name not in owners:
            problems.error(
                source.label, "name", f"machine {machine.name} is not used by the ControlPlane or any Workers"
            )
        if machine.locked and machine.name in control_planes:
            problems.error(source.label, "locked", "a control plane machine cannot be locked")


def _managed(document: ControlPlaneDoc) -> bool:
    return document.managed is not None and document.managed.enabled


def _managed_control_plane(label: str, document: ControlPlaneDoc, problems: Problems) -> None:
    """A managed control plane is the platform's: its machines, their patches and their restore too."""
    why = "a managed control plane's machines are the platform's"
    for field, given in (
        ("machines", bool(document.machines)),
        ("machineClass", document.machine_class is not None),
        ("patches", bool(document.patches)),
        ("bootstrapSpec", document.bootstrap_spec is not None),
    ):
        if given:
            problems.error(label, field, f"not allowed with managed.enabled: {why}")


def _versions(template: Template, problems: Problems) -> None:
    cluster = template.cluster
    assert cluster is not None
    label = template.source_of(cluster).label
    try:
        VersionContract.parse(cluster.talos.version)
    except UnknownTalosVersion as exc:
        problems.error(label, "talos.version", str(exc))
        return
    verdict = check_compatibility(cluster.talos.version, cluster.kubernetes.version)
    if not verdict:
        problems.error(label, "kubernetes.version", verdict.reason)


def _checked(rendered: list[Rendered], problems: Problems) -> list[Resource]:
    """The rendered objects as the server would store them; an error for each that it would refuse, and
    for each name made twice."""
    out: list[Resource] = []
    made: dict[tuple[str, str], Rendered] = {}
    for item in rendered:
        obj = item.resource
        first = made.setdefault((obj.kind, obj.name), item)
        # A set or node made twice is a Workers name or machine used twice, which the rules report.
        if first is not item:
            if obj.kind not in (MACHINE_SET.kind, MACHINE_SET_NODE.kind):
                where = f"{first.source.label}" + (f" {first.field}" if first.field else "")
                problems.error(
                    item.source.label, item.field, f"{obj.kind} {obj.name} is also made by {where}"
                )
            continue
        try:
            out.append(_registry().for_object(obj).validate(obj))
        except InvalidObject as exc:
            for cause in exc.causes:
                field = _field_of(item, cause.field)
                # A field the template's reading found wrong is made of a stand-in: said once is enough.
                if not any(e.document == item.source.label and e.field == field for e in problems.errors):
                    problems.error(item.source.label, field, cause.message)
    return out


def _field_of(item: Rendered, field: str) -> str:
    """The template field behind a field of a rendered object."""
    if item.field.startswith("kubernetes."):
        return item.field + "." + field.removeprefix("spec.") if field.startswith("spec.") else item.field
    if item.resource.kind == CLUSTER.kind:
        for prefix, mapped in _CLUSTER_FIELDS.items():
            if field.startswith(prefix):
                return mapped + field[len(prefix) :]
        return field.removeprefix("spec.")
    if item.field:
        return item.field
    return "name" if field == "metadata.name" else field.removeprefix("spec.")
