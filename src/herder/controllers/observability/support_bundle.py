"""Support bundles: one zip of what someone helping with a cluster needs (``herder cluster support NAME``,
the Cluster's ``support`` action, the UI's button), as the caller may see it:

    README.txt                   what is inside, and what could not be gathered
    cluster.yaml                 the Cluster
    objects/KIND/NAME.yaml       every object of the cluster (labelled with it, owned by it, or a request of
                                 one of its request sets); a sensitive kind's without its spec
    conditions.txt               every object's conditions, one a line
    rollouts.yaml                the cluster's rollouts and each machine's upgrade
    events.yaml                  the Events of those objects, oldest first
    audit.yaml                   the audit entries of those objects (for Admins and Support)
    machines/UUID/logs.txt       the last lines herder kept of each machine's service logs, while in the
    machines/UUID/dmesg.txt      cluster, and of its kernel log
    etcd/members.yaml            etcd's members and each control plane's etcd status, asked of the
    etcd/status.yaml             machines now (for a managed control plane, Support only)
    kubernetes/version.json      what the cluster's Kubernetes API says of itself and its nodes, asked now
    kubernetes/nodes.yaml
    versions.yaml                herder's version, the cluster's Talos and Kubernetes, each machine's

Hidden objects are left out below Support, as the API leaves them out. Nothing secret goes in: a
sensitive kind's spec (the secrets bundle, generated configs) is left out, and every file is passed
through the cluster's ``Redactor`` (its bundle's tokens and keys, and whatever looks like a secret).
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import yaml

import herder
from herder.controllers.cluster_keys import ClusterKeys, ClusterSecretsView
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.resources import Resource
from herder.resources.access import AUDIT_EVENT, HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.audit_labels import AUDIT_NAME_LABEL, audit_label_value
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    ClusterMachineStatus,
    ClusterSpec,
    ClusterStatus,
)
from herder.resources.kubernetes import EVENT
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineStatus
from herder.resources.provisioning import MACHINE_REQUEST, MACHINE_REQUEST_SET, MACHINE_REQUEST_SET_LABEL
from herder.resources.status import AnyConditions, dump_status, status_of
from herder.state.machine_logs import KERNEL, LogScope, MachineLogs
from herder.state.store import Store
from herder.talos.machine import MachineAPIError
from herder.talos.machine.pool import ClientPool
from herder.talos.redaction import Redactor, bundle_secrets

LOG_LINES = 5000
"""The last lines of each machine's logs (and of its kernel log) a bundle holds."""
CALL_TIMEOUT = 10.0
_NOT_BUNDLED = frozenset({EVENT.kind, AUDIT_EVENT.kind})
# The audit entries of a cluster's objects go to those who administer it (an Admin rule on the cluster
# too): who did what to it is theirs to know; a Reader or Operator of it is not told who else acts on it.
_READS_AUDIT = frozenset({"Admin", "Support"})


def _sees_hidden(role: str) -> bool:
    return role == "Support"


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


@dataclass
class _Bundle:
    redact: Redactor
    files: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def add(self, path: str, text: str) -> None:
        self.files[path] = self.redact(text)

    def zip(self) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, text in sorted(self.files.items()):
                archive.writestr(path, text)
        return out.getvalue()


class SupportBundles:
    def __init__(
        self, store: Store, keys: ClusterKeys, logs: MachineLogs | None, *, clients: ClientPool | None = None
    ) -> None:
        self._store = store
        self._keys = keys
        self._logs = logs
        self._clients = (
            clients if clients is not None else ClientPool(keep=0, timeout=CALL_TIMEOUT, retries=0)
        )

    async def bundle(self, cluster: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        """The zip of ``cluster`` as ``user`` (of ``role`` on it) may see it (the ``support`` action)."""
        view = await self._keys.of(cluster)
        bundle = _Bundle(Redactor(bundle_secrets(view.bundle) if view is not None else ()))
        objects = await self._objects(cluster, role)
        bundle.add("cluster.yaml", _yaml(cluster.to_dict()))
        for obj in objects:
            bundle.add(f"objects/{obj.kind}/{obj.name}.yaml", _yaml(self._shown(obj)))
        bundle.add("conditions.txt", _conditions([cluster, *objects]))
        bundle.add("rollouts.yaml", _yaml(_rollouts(cluster, objects)))
        involved = {(o.kind, o.namespace or "", o.name) for o in [cluster, *objects]}
        bundle.add("events.yaml", _yaml(await self._events(cluster.namespace, involved, role)))
        if role in _READS_AUDIT:
            bundle.add("audit.yaml", _yaml(await self._audit(involved)))
        else:
            bundle.missing.append(f"audit.yaml: the audit trail is for Admins and Support, not {role}")
        machines = [o for o in objects if o.kind == MACHINE.kind]
        await asyncio.to_thread(self._machine_logs, bundle, cluster, machines, role)
        managed = CLUSTER.spec_of(cluster, ClusterSpec).managed is not None
        if view is None:
            bundle.missing.append("etcd, kubernetes: the cluster has no secrets yet")
        else:
            # Asked of the cluster now, at once: a machine that does not answer costs one timeout.
            asked = [self._kubernetes(bundle, view, cluster)]
            if managed and not _sees_hidden(role):
                bundle.missing.append("etcd: the control plane is managed by the platform (Support only)")
            else:
                asked.append(self._etcd(bundle, view, objects))
            await asyncio.gather(*asked)
        bundle.add("versions.yaml", _yaml(_versions(cluster, objects)))
        bundle.add("README.txt", _readme(cluster, user, role, bundle))
        return await asyncio.to_thread(bundle.zip)

    async def _objects(self, cluster: Resource, role: str) -> list[Resource]:
        """The cluster's objects the caller may see, by kind and name."""
        found: list[Resource] = []
        request_sets: set[str] = set()
        uid = cluster.metadata.uid
        for info in self._store.registry:
            if not info.namespaced or info.kind in _NOT_BUNDLED or info.kind == CLUSTER.kind:
                continue
            for obj in (await self._store.list(info, cluster.namespace)).items:
                owner = obj.metadata.controller_ref()
                ours = obj.metadata.labels.get(CLUSTER_LABEL) == cluster.name or (
                    owner is not None and owner.kind == CLUSTER.kind and owner.uid == uid
                )
                if info.kind == MACHINE_REQUEST.kind:
                    continue  # known once the request sets are
                if ours and (HIDDEN_LABEL not in obj.metadata.labels or _sees_hidden(role)):
                    found.append(obj)
                    if info.kind == MACHINE_REQUEST_SET.kind:
                        request_sets.add(obj.name)
        if request_sets:
            for obj in (await self._store.list(MACHINE_REQUEST, cluster.namespace)).items:
                hidden = HIDDEN_LABEL in obj.metadata.labels and not _sees_hidden(role)
                if obj.metadata.labels.get(MACHINE_REQUEST_SET_LABEL) in request_sets and not hidden:
                    found.append(obj)
        return sorted(found, key=lambda o: (o.kind, o.name))

    def _shown(self, obj: Resource) -> dict[str, Any]:
        data = obj.to_dict()
        data["metadata"].pop("managedFields", None)
        info = self._store.registry.get(obj.kind)
        if info.sensitive:
            data["spec"] = "(left out: a sensitive kind)"
        return data

    async def _events(
        self, namespace: str | None, involved: set[tuple[str, str, str]], role: str
    ) -> list[dict[str, Any]]:
        events = []
        for event in (await self._store.list(EVENT, namespace)).items:
            extra = event.model_extra or {}
            about = extra.get("involvedObject") or {}
            key = (str(about.get("kind", "")), str(about.get("namespace", "")), str(about.get("name", "")))
            if key in involved and (HIDDEN_LABEL not in event.metadata.labels or _sees_hidden(role)):
                events.append(
                    {
                        "time": extra.get("lastTimestamp") or event.metadata.creation_timestamp,
                        "type": extra.get("type"),
                        "reason": extra.get("reason"),
                        "object": f"{key[0]}/{key[2]}",
                        "message": extra.get("message"),
                        "count": extra.get("count", 1),
                    }
                )
        return sorted(events, key=lambda e: str(e["time"] or ""))

    async def _audit(self, involved: set[tuple[str, str, str]]) -> list[dict[str, Any]]:
        # The trail is long: ask for the entries labelled with these names, when every name is a label.
        labels = {audit_label_value(name) for _, _, name in involved}
        selector = None if None in labels else f"{AUDIT_NAME_LABEL} in ({','.join(sorted(map(str, labels)))})"
        entries = []
        for entry in (await self._store.list(AUDIT_EVENT, label_selector=selector)).items:
            spec = entry.spec or {}
            if (spec.get("kind", ""), spec.get("namespace", ""), spec.get("name", "")) in involved:
                entries.append(spec)
        return sorted(entries, key=lambda e: str(e.get("time", "")))

    def _machine_logs(self, bundle: _Bundle, cluster: Resource, machines: list[Resource], role: str) -> None:
        if self._logs is None:
            bundle.missing.append("machines/*: this server keeps no machine logs")
            return
        namespace = cluster.namespace or "default"

        def allowed(scope: LogScope) -> bool:
            private = scope.hidden or scope.managed
            return scope.cluster == cluster.name and (not private or _sees_hidden(role))

        for machine in machines:
            if READ_ONLY_ANNOTATION in machine.metadata.annotations and not _sees_hidden(role):
                bundle.missing.append(f"machines/{machine.name}: managed by the platform (Support only)")
                continue
            for name, sources in (("logs.txt", None), ("dmesg.txt", [KERNEL])):
                entries = self._logs.entries(
                    namespace, machine.name, allowed=allowed, sources=sources, tail=LOG_LINES
                )
                bundle.add(
                    f"machines/{machine.name}/{name}",
                    "".join(e.line(prefixed=sources is None, timestamps=True) for e in entries),
                )

    async def _etcd(self, bundle: _Bundle, view: ClusterSecretsView, objects: list[Resource]) -> None:
        members = [
            o
            for o in objects
            if o.kind == CLUSTER_MACHINE.kind and (o.spec or {}).get("role") == "controlplane"
        ]
        endpoints = {
            o.name: str((o.spec or {}).get("endpoint", ""))
            for o in objects
            if o.kind == MACHINE.kind and (o.spec or {}).get("endpoint")
        }
        listed: Any = None
        statuses: dict[str, Any] = {}
        for member in members:
            endpoint = endpoints.get(member.name)
            if not endpoint:
                continue
            try:
                async with self._clients.client(endpoint, view.talos) as client:
                    if listed is None:
                        listed = [asdict(m) | {"id": f"{m.id:x}"} for m in await client.etcd_member_list()]
                    status = await client.etcd_status()
                    statuses[member.name] = asdict(status) | {
                        "member_id": f"{status.member_id:x}",
                        "leader": f"{status.leader:x}",
                    }
            except (MachineAPIError, OSError) as exc:
                statuses[member.name] = {"error": str(exc)}
        if listed is None:
            bundle.missing.append("etcd/members.yaml: no control plane answered")
        else:
            bundle.add("etcd/members.yaml", _yaml(_plain(listed)))
        bundle.add("etcd/status.yaml", _yaml(_plain(statuses)))

    async def _kubernetes(self, bundle: _Bundle, view: ClusterSecretsView, cluster: Resource) -> None:
        endpoint = (
            status_of(cluster, ClusterStatus).endpoint or CLUSTER.spec_of(cluster, ClusterSpec).endpoint or ""
        )
        if not endpoint:
            bundle.missing.append("kubernetes/*: the cluster has no Kubernetes API endpoint yet")
            return
        clients = KubernetesClients(keep=1)
        try:
            client = clients.client(endpoint, view.kubernetes)
            for path, name, shape in (
                ("/version", "kubernetes/version.json", _as_json),
                ("/api/v1/nodes", "kubernetes/nodes.yaml", _nodes),
            ):
                try:
                    answer = await client.get(endpoint.rstrip("/") + path)
                    answer.raise_for_status()
                    bundle.add(name, shape(answer.json()))
                except (httpx.HTTPError, OSError, ValueError) as exc:
                    bundle.missing.append(f"{name}: {endpoint}{path}: {exc}")
        finally:
            await clients.close()


def _as_json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def _nodes(data: Any) -> str:
    nodes = []
    for node in data.get("items") or ():
        status = node.get("status") or {}
        nodes.append(
            {
                "name": (node.get("metadata") or {}).get("name"),
                "kubeletVersion": (status.get("nodeInfo") or {}).get("kubeletVersion"),
                "osImage": (status.get("nodeInfo") or {}).get("osImage"),
                "addresses": status.get("addresses"),
                "conditions": [
                    {k: c.get(k) for k in ("type", "status", "reason", "message")}
                    for c in status.get("conditions") or ()
                ],
            }
        )
    return _yaml(nodes)


def _plain(data: Any) -> Any:
    """Tuples as lists, for YAML."""
    if isinstance(data, dict):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    return data


def _conditions(objects: list[Resource]) -> str:
    lines = ["KIND/NAME\tTYPE\tSTATUS\tREASON\tSINCE\tMESSAGE"]
    for obj in objects:
        for c in status_of(obj, AnyConditions).conditions:
            lines.append(
                "\t".join(
                    str(x)
                    for x in (
                        f"{obj.kind}/{obj.name}",
                        c.get("type", ""),
                        c.get("status", ""),
                        c.get("reason", ""),
                        c.get("lastTransitionTime", ""),
                        str(c.get("message", "")).replace("\n", " "),
                    )
                )
            )
    return "\n".join(lines) + "\n"


def _rollouts(cluster: Resource, objects: list[Resource]) -> dict[str, Any]:
    upgrades = {
        o.name: dump_status(upgrade)
        for o in objects
        if o.kind == CLUSTER_MACHINE.kind
        and (upgrade := status_of(o, ClusterMachineStatus).upgrade) is not None
    }
    rollouts = [dump_status(r) for r in status_of(cluster, ClusterStatus).rollouts]
    return {"rollouts": rollouts, "machineUpgrades": upgrades}


def _versions(cluster: Resource, objects: list[Resource]) -> dict[str, Any]:
    spec = CLUSTER.spec_of(cluster, ClusterSpec)
    machines: dict[str, dict[str, Any]] = {}
    for obj in objects:
        if obj.kind == MACHINE.kind:
            machines.setdefault(obj.name, {})["talos"] = status_of(obj, MachineStatus).talos_version
        elif obj.kind == CLUSTER_MACHINE.kind:
            entry = machines.setdefault(obj.name, {})
            entry["desiredTalos"] = (obj.spec or {}).get("talosVersion", "")
            entry["kubernetes"] = (obj.spec or {}).get("kubernetesVersion", "")
    return {
        "herder": herder.__version__,
        "cluster": {
            "talos": spec.talos_version,
            "kubernetes": spec.kubernetes_version,
            "talosContract": status_of(cluster, ClusterStatus).talos_contract,
        },
        "machines": machines,
    }


def _readme(cluster: Resource, user: str, role: str, bundle: _Bundle) -> str:
    made = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"Support bundle of cluster {cluster.namespace}/{cluster.name}",
        f"Made by herder {herder.__version__} at {made} for {user} (role {role} on the cluster).",
        "",
        "What is inside:",
        "  cluster.yaml               the Cluster, with its status: conditions, rollouts, backups",
        "  objects/KIND/NAME.yaml     each object of the cluster (a sensitive kind's spec left out)",
        "  conditions.txt             every object's conditions, one a line",
        "  rollouts.yaml              the cluster's rollouts and each machine's upgrade",
        "  events.yaml                the Events of those objects, oldest first",
        "  audit.yaml                 the audit entries of those objects (Admins and Support)",
        "  machines/UUID/logs.txt     the last lines herder kept of the machine's service logs (time herder",
        "                             received each, its service), while it was in this cluster",
        "  machines/UUID/dmesg.txt    the last lines of its kernel log",
        "  etcd/members.yaml          etcd's members, as a control plane says now",
        "  etcd/status.yaml           each control plane's etcd status now",
        "  kubernetes/version.json    the Kubernetes API's version, asked now",
        "  kubernetes/nodes.yaml      its nodes: kubelet versions, addresses, conditions",
        "  versions.yaml              herder's version, the cluster's Talos and Kubernetes, each machine's",
        "",
        "Secrets are left out: the cluster's secrets bundle and generated configs are not in it, and every",
        "file was searched for the cluster's tokens and keys (and whatever looks like a secret), which read",
        "<redacted>. Objects hidden from your role are left out.",
        "",
        f"Files ({len(bundle.files) + 1}):",
        *(f"  {path}" for path in sorted([*bundle.files, "README.txt"])),
    ]
    if bundle.missing:
        lines += ["", "Not gathered:", *(f"  {what}" for what in bundle.missing)]
    return "\n".join(lines) + "\n"
