"""The emulated Kubernetes of one cluster: its API server (``krm`` with the core kinds, over the cluster's
emulated etcd keyspace) and what its kubelets and controllers would write there.

``sync`` brings the API's objects in line with the cluster's machines, as the real components would:
- each running machine's kubelet registers its Node (labels, taints, capacity, versions, Ready), unless
  its config skips node registration; a machine that stops answering (reset, off, partitioned, rebooting)
  leaves its Node NotReady, as the node lifecycle controller marks it, and its pods not ready; both
  report Events (RegisteredNode, NodeReady, NodeNotReady);
- control planes' kubelets mirror their static pods (kube-apiserver, kube-controller-manager,
  kube-scheduler) with the images of their own config;
- the DaemonSets kube-proxy and kube-flannel run a pod per node, the CoreDNS Deployment two replicas on
  Ready nodes (a new image is a new ReplicaSet, hence new pod names), all shaped like the manifests a
  Talos control plane renders at bootstrap, with the workloads' status counted from their pods;
- what a fresh cluster has: the namespaces, the ``kubernetes`` and ``kube-dns`` Services, the bootstrap
  token Secret, ``kube-root-ca.crt``;
- pods anyone else creates are placed by a small scheduler (taints, nodeSelector, least loaded) and run
  by their node's kubelet; no controllers run for other workloads (a Deployment of one's own gets no pods).

Writes are skipped while etcd has no quorum (they would be refused) and made once it is back.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import logging
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herder.emu.cluster.kube_api import (
    PORT,
    SERVICE_NAMES,
    ApiEndpoint,
    ClientCertificatePolicy,
    serving_certificate,
    with_health_checks,
)
from herder.emu.cluster.kube_facts import KubeFacts, image_version
from herder.emu.cluster.state import Cluster
from herder.krm import discovery
from herder.krm.app import build_app
from herder.resources import KindInfo, Resource, now_rfc3339
from herder.resources.kubernetes import (
    CONFIG_MAP,
    DAEMON_SET,
    DEPLOYMENT,
    NODE,
    POD,
    SECRET,
    SERVICE,
    kubernetes_registry,
)
from herder.state.errors import NotFound, StateError
from herder.state.store import Store
from herder.talos.pki import CertificateAndKey

log = logging.getLogger(__name__)

KUBE_SYSTEM = "kube-system"
NAMESPACES = ("default", KUBE_SYSTEM, "kube-public", "kube-node-lease")
COREDNS_REPLICAS = 2
RETRY_DELAY = 0.5
"""Seconds before a sync cut short by a failed write runs again."""
FLANNEL_IMAGE = "ghcr.io/siderolabs/flannel:v0.26.7"
CONTAINERD = "containerd://2.1.4"
_TIMES = frozenset(
    {"lastHeartbeatTime", "lastTransitionTime", "startTime", "startedAt", "lastProbeTime", "finishedAt"}
)
_OWNER_KINDS = frozenset({"Node", "DaemonSet", "ReplicaSet"})
"""The owners of the pods the emulated components run (mirror pods, add-ons); other pods are anyone's."""


@dataclass(frozen=True)
class Kubelet:
    """What one machine's kubelet knows: who it is, how it is configured, and whether it is up."""

    uuid: str
    hostname: str
    address: str
    talos_version: str
    cpus: int
    memory_mib: int
    disk_bytes: int
    control_plane: bool
    facts: KubeFacts
    kubernetes_ca: CertificateAndKey | None
    """The cluster's Kubernetes CA as its config carries it (with the key on control planes)."""
    up: bool
    """The machine runs, reachable: its kubelet answers and its etcd member (on a control plane) is up."""

    @property
    def name(self) -> str:
        """Its Node's name."""
        return self.hostname.lower()


def _apiserver_names(kubelet: Kubelet) -> list[str]:
    """What a control plane's kube-apiserver certificate names: the node's address, localhost, the
    ``kubernetes`` Service's names and address, and the config's SANs (the endpoint's host among them)."""
    facts = kubelet.facts
    return [
        kubelet.address,
        "localhost",
        "127.0.0.1",
        *SERVICE_NAMES,
        f"{SERVICE_NAMES[-1]}.{facts.dns_domain}",
        facts.service_ip(1),
        *facts.apiserver_sans,
    ]


def _short_hash(*parts: str, length: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "big")
    out = []
    for _ in range(length):
        value, index = divmod(value, len(alphabet))
        out.append(alphabet[index])
    return "".join(out)


def _strip_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_times(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_strip_times(v) for v in value]
    return value


class ClusterKubernetes:
    """One cluster's Kubernetes API, served by each of its control planes that runs kube-apiserver, and the
    emulated components that write to it."""

    def __init__(self, cluster: Cluster, resync: Callable[[], None]) -> None:
        """``resync`` asks for another sync: someone else's pod needs scheduling, or a sync was cut short."""
        self.cluster = cluster
        self._resync = resync
        self._watcher: asyncio.Task[None] | None = None
        self.registry = kubernetes_registry()
        self.store = Store(cluster.keyspace, self.registry)
        # build_app keeps this dict: updating it in place changes what /version answers (an upgrade).
        self.version = discovery.version_info()
        app = build_app(self.registry, self.store, ClientCertificatePolicy(), version_info=self.version)
        self._app = with_health_checks(app, cluster.has_quorum)
        self.endpoints: dict[str, ApiEndpoint] = {}
        """The API servers serving now, by the uuid of the control plane that runs each."""
        self._started = False
        self._seeded = False
        self._ca_pem = ""

    async def start(self, ca: CertificateAndKey) -> None:
        """Open the API's store and the scheduler's watch of pods (once)."""
        if self._started:
            return
        self._started = True
        self._ca_pem = ca.crt.decode()
        await self.store.start()
        self._watcher = asyncio.get_running_loop().create_task(self._watch_pods())

    async def serve(self, ca: CertificateAndKey, apiservers: list[Kubelet]) -> None:
        """Run kube-apiserver on exactly these control planes: each listens on its own address and port 6443
        with its own serving certificate, and every other one stops (refusing connections, cutting the open
        ones)."""
        wanted = {k.uuid: k for k in apiservers}
        for uuid, endpoint in list(self.endpoints.items()):
            if uuid not in wanted or wanted[uuid].address != endpoint.host:
                del self.endpoints[uuid]
                await endpoint.close()
        for kubelet in apiservers:
            if kubelet.uuid in self.endpoints:
                continue
            endpoint = ApiEndpoint(self._app, kubelet.address, PORT)
            try:
                await endpoint.start(serving_certificate(ca, _apiserver_names(kubelet)), ca.crt)
            except OSError as e:
                # The address is still held (by the API server of the machine's previous cluster, say).
                log.warning("kube-apiserver on %s: %s; trying again", endpoint.url, e)
                asyncio.get_running_loop().call_later(RETRY_DELAY, self._resync)
                continue
            self.endpoints[kubelet.uuid] = endpoint

    async def _watch_pods(self) -> None:
        """The scheduler's watch: a pod of someone else's (not the emulated components') needs a sync."""
        while True:
            try:
                async for event in self.store.watch(POD):
                    if event.type in ("ADDED", "MODIFIED") and not _managed(event.object):
                        self._resync()
            except StateError:
                # Fell behind the retained history: look at every pod once, then watch again.
                self._resync()
                await asyncio.sleep(0.1)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for endpoint in self.endpoints.values():
            await endpoint.close()
        self.endpoints.clear()
        await self.store.close()

    # --- sync ---

    async def sync(self, kubelets: list[Kubelet], cluster_facts: KubeFacts | None) -> None:
        """Make the API's objects follow the machines (while a control plane serves the API)."""
        if cluster_facts is not None:
            self.version.update(discovery.version_info(cluster_facts.apiserver_version))
        if not self.endpoints or not self.cluster.has_quorum():
            return
        try:
            if not self._seeded and cluster_facts is not None:
                await self._seed(cluster_facts)
                self._seeded = True
            nodes = await self._sync_nodes(kubelets)
            await self._sync_pods(nodes, kubelets, cluster_facts)
        except StateError:
            # etcd lost quorum (the sync after it is back finishes the job), or someone changed an object
            # between its read and its write: then sync again, after a pause in case it keeps failing.
            if self.cluster.has_quorum():
                asyncio.get_running_loop().call_later(RETRY_DELAY, self._resync)

    async def _put(self, info: KindInfo, desired: dict[str, Any]) -> Resource:
        """Create or update an object to ``desired``; unchanged fields (timestamps aside) are not written.

        What others set is kept, as the kubelet keeps it: labels, annotations and spec fields it does not
        manage (a cordon's ``unschedulable``)."""
        meta = desired["metadata"]
        try:
            current = await self.store.get(info, meta["name"], meta.get("namespace"))
        except NotFound:
            return await self.store.create(Resource.from_dict(desired))
        now = current.to_dict()
        merged = {**now, **{k: v for k, v in desired.items() if k != "status"}}
        merged["metadata"] = {**now["metadata"], **meta}
        for key in ("labels", "annotations"):
            merged["metadata"][key] = {**now["metadata"].get(key, {}), **meta.get(key, {})}
        if "spec" in desired:
            merged["spec"] = {**now.get("spec", {}), **desired["spec"]}
        if _strip_times({k: v for k, v in merged.items() if k != "status"}) != _strip_times(
            {k: v for k, v in now.items() if k != "status"}
        ):
            current = await self.store.update(Resource.from_dict(merged))
        status = desired.get("status")
        if status is not None and _strip_times(status) != _strip_times(current.status or {}):
            updated = current.clone()
            updated.status = status
            current = await self.store.update_status(updated)
        return current

    async def _create_missing(self, info: KindInfo, desired: dict[str, Any]) -> None:
        meta = desired["metadata"]
        try:
            await self.store.get(info, meta["name"], meta.get("namespace"))
        except NotFound:
            await self.store.create(Resource.from_dict(desired))

    async def _seed(self, facts: KubeFacts) -> None:
        for name in NAMESPACES:
            await self._create_missing(
                self.registry.get("Namespace"),
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )
        await self._create_missing(
            SERVICE,
            _service(
                "kubernetes",
                "default",
                facts.service_ip(1),
                [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                None,
                {"component": "apiserver", "provider": "kubernetes"},
            ),
        )
        if facts.coredns:
            await self._create_missing(
                SERVICE,
                _service(
                    "kube-dns",
                    KUBE_SYSTEM,
                    facts.service_ip(10),
                    [
                        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                        {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                    ],
                    {"k8s-app": "kube-dns"},
                    {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
                ),
            )
        token_id, _, token_secret = facts.bootstrap_token.partition(".")
        if token_id and token_secret:
            await self._create_missing(SECRET, _bootstrap_token(token_id, token_secret))
        if self._ca_pem:
            for namespace in NAMESPACES:
                await self._create_missing(
                    CONFIG_MAP,
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "kube-root-ca.crt", "namespace": namespace},
                        "data": {"ca.crt": self._ca_pem},
                    },
                )

    async def _sync_nodes(self, kubelets: list[Kubelet]) -> list[Resource]:
        registering = {k.uuid: k for k in kubelets if k.facts.register_node}
        before = {n.name: _ready(n) for n in (await self.store.list(NODE)).items}
        for kubelet in registering.values():
            if kubelet.up:
                await self._put(NODE, _node(kubelet))
        nodes = (await self.store.list(NODE)).items
        out = []
        for node in nodes:
            owner = registering.get(str(((node.status or {}).get("nodeInfo") or {}).get("systemUUID")))
            if owner is None or not owner.up or owner.name != node.name:
                node = await self._put(NODE, _node_lost(node))
            out.append(node)
            for reason, message, source in _node_events(node.name, before.get(node.name), _ready(node)):
                await self.store.create(Resource.from_dict(_event(node, reason, message, source)))
        return out

    async def _sync_pods(
        self, nodes: list[Resource], kubelets: list[Kubelet], facts: KubeFacts | None
    ) -> None:
        by_uuid = {k.uuid: k for k in kubelets if k.up and k.facts.register_node}
        existing = {p.name: p for p in (await self.store.list(POD, KUBE_SYSTEM)).items if _managed(p)}
        daemons = _daemons(facts)
        owners = {
            name: (await self._put(DAEMON_SET, _daemon_set(name, labels, container))).metadata.uid or ""
            for name, labels, container in daemons
        }
        desired: dict[str, dict[str, Any]] = {}
        ready_nodes: list[Resource] = []
        for node in nodes:
            uuid = str(((node.status or {}).get("nodeInfo") or {}).get("systemUUID"))
            kubelet = by_uuid.get(uuid)
            if kubelet is None or kubelet.name != node.name:
                # Nobody runs this node's pods any more: they stay, not ready, as Kubernetes shows them.
                for stale in existing.values():
                    if (stale.spec or {}).get("nodeName") == node.name:
                        desired[stale.name] = _not_ready(stale)
                continue
            ready_nodes.append(node)
            for wanted in _node_pods(node, kubelet, daemons, owners):
                desired[wanted["metadata"]["name"]] = wanted
        if facts is not None and facts.coredns:
            await self._put(DEPLOYMENT, _deployment(facts))
            for wanted in _coredns(existing, ready_nodes, facts):
                desired[wanted["metadata"]["name"]] = wanted
        pods = [await self._put(POD, wanted) for wanted in desired.values()]
        for name in existing:
            if name not in desired:
                await self.store.delete(POD, name, KUBE_SYSTEM)
        await self._workload_status(pods, len(nodes), daemons, facts)
        await self._run_others_pods(ready_nodes, facts)

    async def _run_others_pods(self, ready_nodes: list[Resource], facts: KubeFacts | None) -> None:
        """Pods anyone else creates: the scheduler places each on a Ready node it may run on (taints,
        nodeSelector; the least loaded first), and that node's kubelet runs it; a pod whose node stopped
        answering is not ready any more, one that fits nowhere stays Pending."""
        ready = {n.name: n for n in ready_nodes}
        load: dict[str, int] = dict.fromkeys(ready, 0)
        others = []
        for pod in (await self.store.list(POD)).items:
            node_name = (pod.spec or {}).get("nodeName")
            if node_name in load:
                load[node_name] += 1
            if not _managed(pod) and not pod.metadata.deletion_timestamp:
                others.append(pod)
        for pod in others:
            data = pod.to_dict()
            node_name = data["spec"].get("nodeName")
            if node_name and node_name not in ready:
                if _pod_is_ready(pod):
                    await self._put(POD, _not_ready(pod))
                continue
            node = ready.get(node_name) if node_name else _place(data, list(ready.values()), load)
            if node is None:
                data["status"] = _unschedulable(len(ready))
            else:
                load[node.name] = load.get(node.name, 0) + (0 if node_name else 1)
                data["spec"]["nodeName"] = node.name
                host_ip = _internal_ip(node)
                if facts is None or data["spec"].get("hostNetwork"):
                    pod_ip = host_ip
                else:
                    pod_ip = _pod_ip(facts, pod.name)
                data["status"] = _running(data["spec"]["containers"], host_ip, pod_ip)
            # Only a change is written: each write is seen by the watch that asks for this sync.
            placed = node is not None and not node_name
            if placed or _strip_times(data["status"]) != _strip_times(pod.status or {}):
                await self._put(POD, data)

    async def _workload_status(
        self,
        pods: list[Resource],
        nodes: int,
        daemons: list[tuple[str, dict[str, str], dict[str, Any]]],
        facts: KubeFacts | None,
    ) -> None:
        """The DaemonSets' and the Deployment's status, counted from their pods as their controllers do."""

        def counts(app: str, image: str) -> tuple[int, int, int]:
            mine = [p for p in pods if p.metadata.labels.get("k8s-app") == app]
            ready = sum(1 for p in mine if _pod_is_ready(p))
            updated = sum(1 for p in mine if (p.spec or {})["containers"][0]["image"] == image)
            return len(mine), ready, updated

        for name, labels, container in daemons:
            current, ready, updated = counts(name, container["image"])
            status = {
                "desiredNumberScheduled": nodes,
                "currentNumberScheduled": current,
                "numberMisscheduled": 0,
                "numberReady": ready,
                "updatedNumberScheduled": updated,
                "numberAvailable": ready,
                "observedGeneration": 1,
            }
            await self._put(DAEMON_SET, {**_daemon_set(name, labels, container), "status": status})
        if facts is not None and facts.coredns:
            current, ready, updated = counts("kube-dns", facts.coredns_image)
            status = {
                "replicas": current,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": 1,
            }
            await self._put(DEPLOYMENT, {**_deployment(facts), "status": status})


# --- objects ---


def _owner(kind: str, name: str, uid: str) -> dict[str, Any]:
    api_version = "v1" if kind == "Node" else "apps/v1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _service(
    name: str,
    namespace: str,
    ip: str,
    ports: list[dict[str, Any]],
    selector: dict[str, str] | None,
    labels: dict[str, str],
) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "ports": ports}
    if selector:
        spec["selector"] = selector
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
        "status": {"loadBalancer": {}},
    }


def _bootstrap_token(token_id: str, token_secret: str) -> dict[str, Any]:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": KUBE_SYSTEM},
        "type": "bootstrap.kubernetes.io/token",
        "data": {
            "token-id": b64(token_id),
            "token-secret": b64(token_secret),
            "usage-bootstrap-authentication": b64("true"),
            "usage-bootstrap-signing": b64("true"),
            "auth-extra-groups": b64("system:bootstrappers:nodes"),
        },
    }


def _conditions(status: str, reason: str, message: str) -> list[dict[str, Any]]:
    now = now_rfc3339()
    pressures = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    out = []
    for kind, ok_reason, ok_message in pressures:
        known = status == "True"
        out.append(
            {
                "type": kind,
                "status": "False" if known else "Unknown",
                "reason": ok_reason if known else reason,
                "message": ok_message if known else message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
    out.append(
        {
            "type": "Ready",
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return out


def _node(kubelet: Kubelet) -> dict[str, Any]:
    facts = kubelet.facts
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": kubelet.name,
        "kubernetes.io/os": "linux",
        **dict(facts.labels),
    }
    taints = [{"key": k, **({"value": v} if v else {}), "effect": e} for k, v, e in facts.taints]
    spec: dict[str, Any] = {"podCIDR": _pod_cidr(facts, kubelet.uuid)}
    spec["podCIDRs"] = [spec["podCIDR"]]
    if taints:
        spec["taints"] = taints
    resources = {
        "cpu": str(kubelet.cpus),
        "memory": f"{kubelet.memory_mib * 1024}Ki",
        "ephemeral-storage": f"{kubelet.disk_bytes // 1024}Ki",
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": kubelet.name,
            "labels": labels,
            "annotations": {"talos.dev/owned-labels": "[]", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": _conditions("True", "KubeletReady", "kubelet is posting ready status"),
            "addresses": [
                {"type": "InternalIP", "address": kubelet.address},
                {"type": "Hostname", "address": kubelet.name},
            ],
            "nodeInfo": {
                "machineID": hashlib.sha256(kubelet.uuid.encode()).hexdigest()[:32],
                "systemUUID": kubelet.uuid,
                "bootID": "",
                "kernelVersion": "6.12.48-talos",
                "osImage": f"Talos ({kubelet.talos_version})",
                "containerRuntimeVersion": CONTAINERD,
                "kubeletVersion": facts.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def _node_lost(node: Resource) -> dict[str, Any]:
    """The node lifecycle controller's verdict on a node whose kubelet stopped posting status."""
    data = node.to_dict()
    status = dict(data.get("status") or {})
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "Unknown":
        status["conditions"] = _conditions(
            "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
        )
    data["status"] = status
    return data


def _ready(node: Resource) -> str | None:
    conditions = (node.status or {}).get("conditions") or ()
    return next((str(c.get("status")) for c in conditions if c.get("type") == "Ready"), None)


def _node_events(name: str, was: str | None, now: str | None) -> list[tuple[str, str, str]]:
    """What the node controller and the kubelet report when a node appears or its readiness changes:
    (reason, message, source)."""
    events = []
    if was is None:
        events.append(
            ("RegisteredNode", f"Node {name} event: Registered Node {name} in Controller", "node-controller")
        )
    if now == "True" and was != "True":
        events.append(("NodeReady", f"Node {name} status is now: NodeReady", "kubelet"))
    elif now != "True" and was == "True":
        events.append(("NodeNotReady", f"Node {name} status is now: NodeNotReady", "node-controller"))
    return events


def _event(node: Resource, reason: str, message: str, source: str) -> dict[str, Any]:
    now = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # Named as Kubernetes names events: the object's name and the time in nanoseconds, in hex.
        "metadata": {"name": f"{node.name}.{time.time_ns():x}", "namespace": "default"},
        # Kubernetes names a node by its name in events (the kubelet knows no uid).
        "involvedObject": {"kind": "Node", "name": node.name, "uid": node.name, "apiVersion": "v1"},
        "reason": reason,
        "message": message,
        "source": {"component": source, "host": node.name} if source == "kubelet" else {"component": source},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": "Normal",
        "reportingComponent": source,
        "reportingInstance": node.name if source == "kubelet" else "",
    }


def _pod_cidr(facts: KubeFacts, uuid: str) -> str:
    network = ipaddress.ip_network(facts.pod_subnet, strict=False)
    subnets = 1 << max(24 - network.prefixlen, 0)
    index = int(hashlib.sha256(uuid.encode()).hexdigest(), 16) % subnets
    return str(network.network_address + index * 256) + "/24"


def _pod_ip(facts: KubeFacts, name: str) -> str:
    network = ipaddress.ip_network(facts.pod_subnet, strict=False)
    offset = int(hashlib.sha256(name.encode()).hexdigest(), 16) % (network.num_addresses - 2)
    return str(network.network_address + 1 + offset)


def _pod(
    name: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    containers: list[dict[str, Any]],
    node: Resource | None,
    pod_ip: str | None,
    *,
    annotations: dict[str, str] | None = None,
    host_network: bool = False,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": containers,
        "priorityClassName": "system-node-critical" if host_network else "system-cluster-critical",
        "restartPolicy": "Always",
    }
    if host_network:
        spec["hostNetwork"] = True
    if tolerations:
        spec["tolerations"] = tolerations
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": KUBE_SYSTEM,
        "labels": labels,
        "ownerReferences": [owner],
    }
    if annotations:
        metadata["annotations"] = annotations
    if node is None:
        status: dict[str, Any] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/0 nodes are available: no Ready node.",
                }
            ],
            "qosClass": "Burstable",
        }
    else:
        spec["nodeName"] = node.name
        host_ip = _internal_ip(node)
        ip = host_ip if host_network else pod_ip
        status = _running(containers, host_ip, ip or host_ip)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def _managed(pod: Resource) -> bool:
    return pod.namespace == KUBE_SYSTEM and any(r.kind in _OWNER_KINDS for r in pod.metadata.owner_references)


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for toleration in tolerations:
        exists = toleration.get("operator") == "Exists"
        if toleration.get("key", "") not in ("", taint.get("key")) or (
            not toleration.get("key") and not exists
        ):
            continue
        if not exists and toleration.get("value", "") != taint.get("value", ""):
            continue
        if toleration.get("effect") in (None, "", taint.get("effect")):
            return True
    return False


def _place(pod: dict[str, Any], nodes: list[Resource], load: dict[str, int]) -> Resource | None:
    """The node the scheduler picks: schedulable, tolerated taints, matching nodeSelector, least loaded."""
    spec = pod["spec"]
    tolerations = spec.get("tolerations") or []
    selector = spec.get("nodeSelector") or {}
    fitting = [
        n
        for n in nodes
        if not (n.spec or {}).get("unschedulable")
        and all(
            t.get("effect") == "PreferNoSchedule" or _tolerates(tolerations, t)
            for t in (n.spec or {}).get("taints") or ()
        )
        and all(n.metadata.labels.get(k) == v for k, v in selector.items())
    ]
    return min(fitting, key=lambda n: (load.get(n.name, 0), n.name), default=None)


def _unschedulable(nodes: int) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": f"0/{nodes} nodes are available: no node fits the pod.",
            }
        ],
        "qosClass": "BestEffort",
    }


def _internal_ip(node: Resource) -> str:
    addresses = (node.status or {}).get("addresses") or ()
    return next((str(a["address"]) for a in addresses if a.get("type") == "InternalIP"), "")


def _running(containers: list[dict[str, Any]], host_ip: str, pod_ip: str) -> dict[str, Any]:
    now = now_rfc3339()
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": c["image"].split(":")[0]
                + "@sha256:"
                + hashlib.sha256(c["image"].encode()).hexdigest(),
                "containerID": "containerd://" + hashlib.sha256((pod_ip + c["name"]).encode()).hexdigest(),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in containers
        ],
    }


def _not_ready(pod: Resource) -> dict[str, Any]:
    """A pod on a node that stopped answering: the node lifecycle controller marks it not ready."""
    data = pod.to_dict()
    status = dict(data.get("status") or {})
    status["conditions"] = [
        {**c, "status": "False"} if c.get("type") in ("Ready", "ContainersReady") else c
        for c in status.get("conditions") or ()
    ]
    status["containerStatuses"] = [{**c, "ready": False} for c in status.get("containerStatuses") or ()]
    data["status"] = status
    return data


def _container(name: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "command": command,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
    }


def _daemons(facts: KubeFacts | None) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """The DaemonSets of the cluster's add-ons: name, extra pod labels, container."""
    if facts is None:
        return []
    daemons = []
    if facts.proxy:
        command = ["/usr/local/bin/kube-proxy", "--proxy-mode=iptables"]
        daemons.append(("kube-proxy", {"tier": "node"}, _container("kube-proxy", facts.proxy_image, command)))
    if facts.flannel:
        command = ["/opt/bin/flanneld", "--ip-masq", "--kube-subnet-mgr"]
        container = _container("kube-flannel", FLANNEL_IMAGE, command)
        daemons.append(("kube-flannel", {"tier": "node", "app": "flannel"}, container))
    return daemons


def _template(labels: dict[str, str], containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": {"containers": containers, **spec}}


def _daemon_set(name: str, labels: dict[str, str], container: dict[str, Any]) -> dict[str, Any]:
    selector = {"k8s-app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": KUBE_SYSTEM, "labels": {**selector, **labels}},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": _template(
                {**selector, **labels}, [container], hostNetwork=True, tolerations=[{"operator": "Exists"}]
            ),
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        },
    }


def _deployment(facts: KubeFacts) -> dict[str, Any]:
    selector = {"k8s-app": "kube-dns"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "coredns",
            "namespace": KUBE_SYSTEM,
            "labels": {**selector, "kubernetes.io/name": "CoreDNS"},
        },
        "spec": {
            "replicas": COREDNS_REPLICAS,
            "selector": {"matchLabels": selector},
            "template": _template(selector, [_coredns_container(facts)], tolerations=_COREDNS_TOLERATIONS),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        },
    }


def _pod_is_ready(pod: Resource) -> bool:
    statuses = (pod.status or {}).get("containerStatuses") or ()
    return bool(statuses) and all(c.get("ready") for c in statuses)


def _node_pods(
    node: Resource,
    kubelet: Kubelet,
    daemons: list[tuple[str, dict[str, str], dict[str, Any]]],
    owners: dict[str, str],
) -> list[dict[str, Any]]:
    """The static pods a node's kubelet mirrors, and the DaemonSets' pods on it."""
    pods = []
    own = kubelet.facts
    if kubelet.control_plane:
        components = [
            ("kube-apiserver", own.apiserver_image, True),
            ("kube-controller-manager", own.controller_manager_image, own.controller_manager),
            ("kube-scheduler", own.scheduler_image, own.scheduler),
        ]
        for component, image, enabled in components:
            if not enabled:
                continue
            config_hash = hashlib.sha256(f"{component}/{image}".encode()).hexdigest()[:32]
            labels = {
                "app.kubernetes.io/component": "control-plane",
                "app.kubernetes.io/managed-by": "Talos",
                "app.kubernetes.io/name": component,
                "app.kubernetes.io/version": image_version(image).lstrip("v"),
                "component": component,
                "k8s-app": component,
                "tier": "control-plane",
            }
            annotations = {
                "kubernetes.io/config.hash": config_hash,
                "kubernetes.io/config.mirror": config_hash,
                "kubernetes.io/config.source": "file",
            }
            owner = _owner("Node", node.name, node.metadata.uid or "")
            command = [f"/usr/local/bin/{component}"]
            pods.append(
                _pod(
                    f"{component}-{node.name}",
                    labels,
                    owner,
                    [_container(component, image, command)],
                    node,
                    None,
                    annotations=annotations,
                    host_network=True,
                )
            )
    everywhere = [{"operator": "Exists"}]
    for name, extra, container in daemons:
        revision = hashlib.sha256(container["image"].encode()).hexdigest()[:10]
        labels = {
            "k8s-app": name,
            "controller-revision-hash": revision,
            "pod-template-generation": "1",
            **extra,
        }
        pods.append(
            _pod(
                f"{name}-{_short_hash(name, node.name)}",
                labels,
                _owner("DaemonSet", name, owners[name]),
                [container],
                node,
                None,
                host_network=True,
                tolerations=everywhere,
            )
        )
    return pods


_COREDNS_TOLERATIONS = [
    {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
]


def _coredns_container(facts: KubeFacts) -> dict[str, Any]:
    return _container("coredns", facts.coredns_image, ["/coredns", "-conf", "/etc/coredns/Corefile"])


def _coredns(
    existing: dict[str, Resource], ready_nodes: list[Resource], facts: KubeFacts
) -> list[dict[str, Any]]:
    """The CoreDNS Deployment's replicas: kept where they run on a Ready node with the current image,
    else (re)scheduled, spread over nodes; Pending while no node is Ready."""
    template = hashlib.sha256(facts.coredns_image.encode()).hexdigest()[:10]
    replica_set = f"coredns-{template}"
    uid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"replicaset/{replica_set}"))
    ready = {n.name: n for n in ready_nodes}
    kept = [
        p
        for p in existing.values()
        if p.name.startswith(replica_set + "-") and (p.spec or {}).get("nodeName") in ready
    ][:COREDNS_REPLICAS]
    names = [p.name for p in kept]
    placements: list[Resource | None] = [ready[str((p.spec or {}).get("nodeName"))] for p in kept]
    used = {n.name for n in placements if n is not None}
    # The scheduler spreads the replicas and prefers nodes without taints (CoreDNS tolerates control planes').
    candidates = sorted(
        ready.values(), key=lambda n: (n.name in used, bool((n.spec or {}).get("taints")), n.name)
    )
    index = 0
    while len(names) < COREDNS_REPLICAS:
        name = f"{replica_set}-{_short_hash(replica_set, str(index))}"
        if name not in names:
            names.append(name)
            placements.append(candidates[len(placements) % len(candidates)] if candidates else None)
        index += 1
    labels = {"k8s-app": "kube-dns", "pod-template-hash": template}
    return [
        _pod(
            name,
            labels,
            _owner("ReplicaSet", replica_set, uid),
            [_coredns_container(facts)],
            node,
            _pod_ip(facts, name),
            tolerations=_COREDNS_TOLERATIONS,
        )
        for name, node in zip(names, placements, strict=True)
    ]
