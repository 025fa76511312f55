"""``herder cluster import``: take over a running Talos cluster herder did not make.

The CLI reads every machine of the talosconfig's context through the Talos API (its UUID, Talos version,
hardware and running config), rebuilds the secrets bundle from a control plane's config, generates each
machine's config as herder's controllers will (``cluster_machine_config``) and derives the per-machine
ConfigPatches that make it the running one, checking that the result says exactly what the machine runs.
Only then does it create anything: the Machines, the patches, the Cluster (``herder.dev/locked``,
``herder.dev/imported``) just before its static MachineSets (admission wants it first; nothing acts on
the others before it), and it hands the bundle in (the Cluster's ``import`` action). The API has no
transaction over several objects: a failure part way removes what was created, in reverse order, the
Cluster as ``--abort`` does (marked ``herder.dev/import-aborted``, so that its teardown lets the machines
go as they run: a locked Cluster's plain delete would wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herder.cli.errors import fail
from herder.cli.kubeconfigs import KubeconfigOption
from herder.cli.quick import connect_rest, one_line_failures

if TYPE_CHECKING:
    from herder.client.rest import Kind, Rest
    from herder.talos.talosconfig import Talosconfig


@dataclass(frozen=True)
class RunningMachine:
    """What the import read of one machine."""

    uuid: str
    endpoint: str
    talos_version: str
    config: str
    hardware: dict[str, Any] | None = None


@dataclass
class Plan:
    name: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    bundle: str = ""
    contract: str = ""
    differences: dict[str, list[str]] = field(default_factory=dict)
    """Per machine, the fields its patches carry (what herder's config alone would say otherwise)."""
    errors: list[str] = field(default_factory=list)
    """What cannot be reproduced, one line each naming the machine and the field."""


def _role(config_docs: list[dict[str, Any]]) -> str:
    legacy = next((d for d in config_docs if "machine" in d), {})
    kind = (legacy.get("machine") or {}).get("type", "")
    return "controlplane" if kind in ("controlplane", "init") else "worker"


def _find(docs: list[dict[str, Any]], legacy_path: str, kind: str, path: str) -> str:
    from herder.talos.config_import import field_at

    legacy = next((d for d in docs if "apiVersion" not in d), {})
    value = field_at(legacy, legacy_path)
    if not value:
        typed = next((d for d in docs if d.get("kind") == kind), {})
        value = field_at(typed, path)
    return value if isinstance(value, str) else ""


def plan_import(machines: list[RunningMachine], name: str = "", namespace: str = "default") -> Plan:
    """The objects an import of ``machines`` creates, or why it cannot (``Plan.errors``)."""
    from herder.controllers.clusters.cluster_machine_config import default_disk, system_layers
    from herder.resources.clusters import IMPORTED_ANNOTATION, LOCKED_ANNOTATION
    from herder.resources.machines import CLUSTER_LABEL, CLUSTER_MACHINE_LABEL, Hardware
    from herder.resources.schematic import Schematic, installer_image
    from herder.talos.config_import import bundle_from_config, derive_patches, differences, first_difference
    from herder.talos.contracts import VersionContract
    from herder.talos.documents import load_documents
    from herder.talos.generate import ConfigInput, GenerateError, MachineType, generate_documents
    from herder.talos.patch_layers import LayeredPatch, PatchLayer, apply_layers
    from herder.talos.patches import PatchError
    from herder.talos.secrets import InvalidSecrets, dump_secrets

    plan = Plan(name)
    docs = {m.uuid: load_documents(m.config) for m in machines}
    roles = {m.uuid: _role(docs[m.uuid]) for m in machines}
    control_planes = [m for m in machines if roles[m.uuid] == "controlplane"]
    if not control_planes:
        plan.errors.append("no control plane among the machines: the secrets bundle is read from one")
        return plan
    first = control_planes[0]
    try:
        bundle = bundle_from_config(first.config)
    except InvalidSecrets as exc:
        plan.errors.append(f"machine {first.uuid}: {exc}")
        return plan
    versions = {m.talos_version for m in machines}
    if len(versions) > 1:
        plan.errors.append(f"the machines run different Talos versions ({', '.join(sorted(versions))})")
        return plan
    talos = versions.pop()
    cp_docs = docs[first.uuid]
    cluster_name = _find(cp_docs, "cluster.clusterName", "KubeClusterConfig", "clusterName")
    endpoint = _find(cp_docs, "cluster.controlPlane.endpoint", "KubeClusterConfig", "endpoint")
    kubelet = _find(cp_docs, "machine.kubelet.image", "KubeletConfig", "image")
    kubernetes = kubelet.rpartition(":v")[2] if ":v" in kubelet else ""
    if name and name != cluster_name:
        # The configs say the cluster's name (cluster.clusterName, in its certificates and discovery too),
        # and herder's config of a Cluster says the Cluster's: another would change every machine's.
        plan.errors.append(
            f"--name {name}: the Talos cluster is named {cluster_name!r} (cluster.clusterName), and an "
            "imported Cluster takes that name: leave --name out"
        )
        return plan
    plan.name = cluster_name
    contract = VersionContract.parse(talos)
    plan.contract = str(contract)
    plan.bundle = dump_secrets(bundle)
    sets: dict[str, list[str]] = {"controlplane": [], "worker": []}
    patches: list[dict[str, Any]] = []
    for machine in machines:
        role = roles[machine.uuid]
        sets[role].append(machine.uuid)
        hardware = Hardware.model_validate(machine.hardware) if machine.hardware else None
        try:
            base = generate_documents(
                ConfigInput(
                    cluster_name=plan.name,
                    endpoint=endpoint,
                    kubernetes_version=kubernetes,
                    contract=contract,
                    secrets=bundle,
                    install_disk=default_disk(hardware),
                    install_image=installer_image(Schematic(), talos),
                ),
                MachineType(role),
            )
        except GenerateError as exc:
            plan.errors.append(f"machine {machine.uuid}: cannot generate herder's config: {exc}")
            continue
        system = system_layers(contract, role)
        with_system = load_documents(apply_layers(base, system))
        remove, add = derive_patches(with_system, docs[machine.uuid])
        plan.differences[machine.uuid] = differences(with_system, docs[machine.uuid])
        mine = [
            LayeredPatch(PatchLayer.CLUSTER_MACHINE, f"{plan.name}-import-{i}-{machine.uuid}", text)
            for i, text in enumerate((remove, add))
            if text
        ]
        try:
            made = apply_layers(base, [*system, *mine])
        except PatchError as exc:
            # A patch may not change what herder owns (cluster.controlPlane.endpoint, machine.install.disk…).
            plan.errors.append(f"machine {machine.uuid}: cannot reproduce its config: {exc}")
            continue
        left = first_difference(made, machine.config)
        if left:
            plan.errors.append(f"machine {machine.uuid}: cannot reproduce its config: {left} differs")
            continue
        for patch in mine:
            patches.append(
                {
                    "apiVersion": "herder.dev/v1alpha1",
                    "kind": "ConfigPatch",
                    "metadata": {
                        "name": patch.name,
                        "namespace": namespace,
                        "labels": {CLUSTER_LABEL: plan.name, CLUSTER_MACHINE_LABEL: machine.uuid},
                    },
                    "spec": {"data": patch.text},
                }
            )
    meta = {"namespace": namespace, "labels": {CLUSTER_LABEL: plan.name}}
    cluster = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {
            "name": plan.name,
            "namespace": namespace,
            "annotations": {LOCKED_ANNOTATION: "true", IMPORTED_ANNOTATION: "talosconfig"},
        },
        "spec": {"talosVersion": talos, "kubernetesVersion": kubernetes, "endpoint": endpoint},
    }
    # The Cluster just before its sets (admission wants it first): nothing acts on the others before it.
    plan.objects = [
        *(
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "Machine",
                # An abort removes the Machines the import registered (not those herder knew before).
                "metadata": {
                    "name": m.uuid,
                    "namespace": namespace,
                    "annotations": {IMPORTED_ANNOTATION: plan.name},
                },
                "spec": {"endpoint": m.endpoint},
            }
            for m in machines
        ),
        *patches,
        cluster,
        *(
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "MachineSet",
                "metadata": {
                    "name": f"{plan.name}-{kind}s".replace("controlplanes", "control-planes"),
                    **meta,
                },
                "spec": {"role": kind, "machines": sorted(uuids)},
            }
            for kind, uuids in sets.items()
            if uuids
        ),
    ]
    return plan


def load_context(talosconfig: Path, context: str | None) -> Talosconfig:
    """The talosconfig with ``context`` (default: its current one) selected; a one-line error naming the
    option otherwise."""
    from herder.talos.talosconfig import TalosconfigError, load_talosconfig_file

    if not talosconfig.is_file():
        raise ValueError(f"--talosconfig {talosconfig}: no such file")
    try:
        config = load_talosconfig_file(talosconfig)
    except TalosconfigError as exc:
        raise ValueError(f"--talosconfig {talosconfig}: {exc}") from None
    if context is not None:
        if context not in config.contexts:
            known = ", ".join(sorted(config.contexts)) or "none"
            raise ValueError(f"--context {context}: not in {talosconfig} (its contexts: {known})")
        config = dataclasses.replace(config, context=context)
    try:
        current = config.current()
    except TalosconfigError as exc:
        raise ValueError(f"--talosconfig {talosconfig}: {exc}") from None
    if not (current.nodes or current.endpoints):
        raise ValueError(
            f"--talosconfig {talosconfig}: context {config.context!r} names no nodes or endpoints"
        )
    return config


async def read_machines(config: Talosconfig, timeout: float = 15) -> list[RunningMachine]:
    """Each node of the selected context, as it runs (its endpoint: the node's address on Talos's port)."""
    from herder.controllers.clusters.machine_facts import read_facts
    from herder.talos.machine import Credentials, MachineClient

    current = config.current()
    nodes = list(current.nodes or current.endpoints)

    async def one(node: str) -> RunningMachine:
        endpoint = node if ":" in node else f"{node}:50000"
        # Each machine asked directly, not through the context's first node.
        credentials = Credentials(current.ca, current.crt, current.key)
        async with MachineClient(endpoint, credentials=credentials, timeout=timeout) as client:
            info = await client.system_information()
            version = await client.version()
            running = await client.running_config()
            facts = await read_facts(client)
        return RunningMachine(
            uuid=info.uuid.lower(),
            endpoint=endpoint,
            talos_version=version.tag,
            config=running.decode(),
            hardware=facts.get("hardware"),
        )

    return list(await asyncio.gather(*(one(n) for n in nodes)))


def import_cluster(
    talosconfig: Annotated[
        Path | None, typer.Option("--talosconfig", help="The cluster's talosconfig.", show_default=False)
    ] = None,
    context: Annotated[
        str | None,
        typer.Option("--context", help="Its context (default: the current one).", show_default=False),
    ] = None,
    name: Annotated[
        str,
        typer.Option(
            "--name",
            help="The Cluster's name; it must be the Talos cluster's (cluster.clusterName), the default.",
            show_default=False,
        ),
    ] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be made; make nothing.")
    ] = False,
    abort: Annotated[
        str,
        typer.Option(
            "--abort",
            metavar="NAME",
            help="Remove herder's objects of imported cluster NAME, leaving its machines as they run.",
            show_default=False,
        ),
    ] = "",
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of the cluster.")
    ] = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Take over a running Talos cluster herder did not make (Admin): its machines keep the configs they
    run (nothing is applied, nothing reboots) and the cluster is locked until `herder cluster unlock`.
    With --abort NAME, herder lets an imported cluster go again: its objects are removed, its machines
    are neither reset nor changed."""
    if abort:
        if talosconfig is not None or dry_run or context is not None or name:
            raise fail(
                "--abort: takes the cluster's name only (no --talosconfig, --context, --name, --dry-run)"
            )
        with one_line_failures(), connect_rest(kubeconfig) as rest:
            released = abort_import(rest, abort, namespace)
        typer.echo(
            f"import of cluster {abort} aborted: herder's objects removed, with the {released} Machines the "
            "import registered; the machines left as they run"
        )
        return
    if talosconfig is None:
        raise fail("--talosconfig: required, the talosconfig of the cluster to import")
    with one_line_failures():
        machines = asyncio.run(read_machines(load_context(talosconfig, context)))
        plan = plan_import(machines, name, namespace)
    if dry_run:
        for obj in plan.objects:
            typer.echo(f"would create {obj['kind']} {obj['metadata']['name']}")
        for uuid, fields in plan.differences.items():
            for what in fields:
                typer.echo(f"machine {uuid}: patched: {what}")
        for error in plan.errors:
            typer.echo(f"cannot reproduce: {error}")
        raise typer.Exit(1 if plan.errors else 0)
    if plan.errors:
        for error in plan.errors[:-1]:
            typer.echo(f"error: {error}", err=True)
        raise fail(plan.errors[-1] + " (nothing was created)")
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        create_import(rest, plan, namespace)
    typer.echo(
        f"cluster {plan.name} imported ({len(machines)} machines, locked): `herder cluster unlock {plan.name}` "
        "hands it to herder"
    )


def _free(machine: dict[str, Any]) -> None:
    """A Machine herder knows already may be imported only when it is in no cluster."""
    from herder.resources.machines import CLUSTER_LABEL

    cluster = (machine.get("metadata", {}).get("labels") or {}).get(CLUSTER_LABEL)
    if cluster:
        raise ValueError(f"machine {machine['metadata']['name']}: it is in cluster {cluster} already")


def create_import(rest: Rest, plan: Plan, namespace: str) -> None:
    """Create what ``plan`` says, the Cluster last but its sets, then hand the bundle in; on a failure,
    remove what was made (the Cluster as an abort does) and raise a one-line ``ValueError``."""
    from herder.client.errors import AlreadyExists, ApiError, NotFound

    clusters = rest.kind("clusters")
    try:
        rest.request("GET", clusters.path(namespace, plan.name))
    except NotFound:
        pass
    else:
        raise ValueError(f"--name {plan.name}: a cluster of that name exists already")
    made: list[tuple[Kind, str]] = []
    try:
        for obj in plan.objects:
            kind = rest.kind_of(obj["apiVersion"], obj["kind"])
            try:
                rest.request("POST", kind.path(namespace), body=obj)
            except AlreadyExists:
                if obj["kind"] != "Machine":
                    raise
                _free(rest.request("GET", kind.path(namespace, obj["metadata"]["name"])))
                continue  # registered already (herder machine add, a provider): it is taken as it is
            made.append((kind, obj["metadata"]["name"]))
        rest.request(
            "POST",
            clusters.path(namespace, plan.name, "import"),
            body={"bundle": plan.bundle, "talosContract": plan.contract},
        )
    except (ApiError, OSError, ValueError) as exc:
        said = f"{exc.reason or exc.code}: {exc.message}" if isinstance(exc, ApiError) else str(exc)
        try:
            _undo(rest, plan.name, namespace, made)
        except (ApiError, OSError, ValueError) as undo:
            raise ValueError(
                f"{said}; and what the import made could not all be removed ({undo}): "
                f"`herder cluster import --abort {plan.name}` removes it, the machines untouched"
            ) from None
        raise ValueError(f"{said} (what the import made was removed again)") from None


def _undo(rest: Rest, name: str, namespace: str, made: list[tuple[Kind, str]]) -> None:
    """What a failed import made goes again, in reverse; its Cluster as an abort does, its machines
    untouched (a locked Cluster's plain delete would wait)."""
    from herder.client.errors import NotFound

    clusters = rest.kind("clusters")
    if any(kind.kind == clusters.kind for kind, _ in made):
        _abort_cluster(rest, clusters, name, namespace)
    for kind, obj_name in reversed(made):
        if kind.kind != clusters.kind:
            with contextlib.suppress(NotFound):
                rest.request("DELETE", kind.path(namespace, obj_name))


ABORT_TIMEOUT = 120.0


def _abort_cluster(
    rest: Rest, clusters: Kind, name: str, namespace: str, timeout: float = ABORT_TIMEOUT
) -> None:
    """Mark the Cluster aborted (and locked, so that nothing acts on its machines meanwhile), delete it and
    wait until its teardown, which lets its machines go without a reset, has removed it."""
    from herder.client.errors import NotFound
    from herder.client.rest import MERGE_PATCH
    from herder.resources.clusters import IMPORT_ABORTED_ANNOTATION, LOCKED_ANNOTATION

    marks = {LOCKED_ANNOTATION: "true", IMPORT_ABORTED_ANNOTATION: "true"}
    rest.request(
        "PATCH",
        clusters.path(namespace, name),
        body={"metadata": {"annotations": marks}},
        content_type=MERGE_PATCH,
    )
    rest.request("DELETE", clusters.path(namespace, name))
    deadline = time.monotonic() + timeout
    while True:
        try:
            shown = rest.request("GET", clusters.path(namespace, name))
        except NotFound:
            return
        if time.monotonic() > deadline:
            waiting = (shown.get("status") or {}).get("teardown") or "its teardown has not begun"
            raise ValueError(f"cluster {name}: still being removed after {timeout:.0f} s: {waiting}")
        time.sleep(0.5)


def abort_import(rest: Rest, name: str, namespace: str) -> int:
    """Remove herder's objects of imported cluster ``name`` (its machines left as they run) and the Machines
    its import registered; how many of those."""
    from herder.client.errors import NotFound
    from herder.resources.clusters import IMPORTED_ANNOTATION
    from herder.resources.machines import CLUSTER_LABEL

    clusters = rest.kind("clusters")
    try:
        cluster = rest.request("GET", clusters.path(namespace, name))
    except NotFound:
        raise ValueError(f"--abort {name}: no cluster of that name in namespace {namespace}") from None
    if IMPORTED_ANNOTATION not in (cluster["metadata"].get("annotations") or {}):
        raise ValueError(
            f"--abort {name}: cluster {name} was not imported (no {IMPORTED_ANNOTATION}); "
            f"`kubectl delete cluster {name}` tears it down, resetting its machines"
        )
    _abort_cluster(rest, clusters, name, namespace)
    machines = rest.kind("machines")
    released = 0
    for machine in rest.request("GET", machines.path(namespace)).get("items", []):
        meta = machine["metadata"]
        if (meta.get("annotations") or {}).get(IMPORTED_ANNOTATION) != name or (meta.get("labels") or {}).get(
            CLUSTER_LABEL
        ):
            continue
        with contextlib.suppress(NotFound):
            rest.request("DELETE", machines.path(namespace, meta["name"]))
        released += 1
    return released


__all__ = [
    "Plan",
    "RunningMachine",
    "abort_import",
    "import_cluster",
    "load_context",
    "plan_import",
    "read_machines",
]
