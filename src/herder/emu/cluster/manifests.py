"""The objects the emulated Kubernetes components of a cluster write, shaped as the real ones write them: a
kubelet's Node (and its verdict when the kubelet is lost) and the Events about it, the control planes' mirror
pods, the add-ons Talos renders at bootstrap (the kube-proxy and kube-flannel DaemonSets, the CoreDNS
Deployment and their pods), what a fresh cluster has (namespaces, the ``kubernetes`` and ``kube-dns``
Services, the bootstrap token Secret, ``kube-root-ca.crt``), and the status a kubelet reports for a pod it
runs. Plain data, no I/O: ``sync`` writes them.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import time
import uuid as uuidlib
from typing import Any

from herder.emu.cluster.kube_facts import KubeFacts, image_version
from herder.emu.cluster.kubelet import Kubelet
from herder.resources import Resource, now_rfc3339

KUBE_SYSTEM = "kube-system"
NAMESPACES = ("default", KUBE_SYSTEM, "kube-public", "kube-node-lease")
COREDNS_REPLICAS = 2
FLANNEL_IMAGE = "ghcr.io/siderolabs/flannel:v0.26.7"
CONTAINERD = "containerd://2.1.4"
_TIMES = frozenset(
    {"lastHeartbeatTime", "lastTransitionTime", "startTime", "startedAt", "lastProbeTime", "finishedAt"}
)
_OWNER_KINDS = frozenset({"Node", "DaemonSet", "ReplicaSet"})
"""The owners of the pods the emulated components run (mirror pods, add-ons); other pods are anyone's."""

Daemon = tuple[str, dict[str, str], dict[str, Any]]
"""An add-on DaemonSet: its name, its pods' extra labels, its container."""


def short_hash(*parts: str, length: int = 5) -> str:
    """A name suffix as Kubernetes makes them (consonants and digits), derived from ``parts``."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "big")
    out = []
    for _ in range(length):
        value, index = divmod(value, len(alphabet))
        out.append(alphabet[index])
    return "".join(out)


def strip_times(value: Any) -> Any:
    """``value`` without its timestamps: what tells whether a write would change anything."""
    if isinstance(value, dict):
        return {k: strip_times(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [strip_times(v) for v in value]
    return value


# --- what a fresh cluster has ---


def namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def kubernetes_service(facts: KubeFacts) -> dict[str, Any]:
    """The ``kubernetes`` Service: the API server at the service network's first address."""
    return service(
        "kubernetes",
        "default",
        facts.service_ip(1),
        [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
        None,
        {"component": "apiserver", "provider": "kubernetes"},
    )


def kube_dns_service(facts: KubeFacts) -> dict[str, Any]:
    """CoreDNS's Service, at the service network's tenth address."""
    return service(
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
    )


def root_ca(namespace: str, ca_pem: str) -> dict[str, Any]:
    """``kube-root-ca.crt``, which the root CA cert publisher puts in every namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "namespace": namespace},
        "data": {"ca.crt": ca_pem},
    }


# --- the components' objects ---


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


def service(
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


def bootstrap_token(token_id: str, token_secret: str) -> dict[str, Any]:
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


def registered_node(kubelet: Kubelet) -> dict[str, Any]:
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


def lost_node(node: Resource) -> dict[str, Any]:
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


def node_readiness(node: Resource) -> str | None:
    conditions = (node.status or {}).get("conditions") or ()
    return next((str(c.get("status")) for c in conditions if c.get("type") == "Ready"), None)


def node_events(name: str, was: str | None, now: str | None) -> list[tuple[str, str, str]]:
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


def node_event(node: Resource, reason: str, message: str, source: str) -> dict[str, Any]:
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


def pod_address(facts: KubeFacts, name: str) -> str:
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
        host_ip = internal_ip(node)
        ip = host_ip if host_network else pod_ip
        status = running_status(containers, host_ip, ip or host_ip)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def is_component_pod(pod: Resource) -> bool:
    return pod.namespace == KUBE_SYSTEM and any(r.kind in _OWNER_KINDS for r in pod.metadata.owner_references)


def internal_ip(node: Resource) -> str:
    addresses = (node.status or {}).get("addresses") or ()
    return next((str(a["address"]) for a in addresses if a.get("type") == "InternalIP"), "")


def running_status(containers: list[dict[str, Any]], host_ip: str, pod_ip: str) -> dict[str, Any]:
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


def not_ready(pod: Resource) -> dict[str, Any]:
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


def addon_daemons(facts: KubeFacts | None) -> list[Daemon]:
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


def daemon_set(name: str, labels: dict[str, str], container: dict[str, Any]) -> dict[str, Any]:
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


def coredns_deployment(facts: KubeFacts) -> dict[str, Any]:
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


def pod_is_ready(pod: Resource) -> bool:
    statuses = (pod.status or {}).get("containerStatuses") or ()
    return bool(statuses) and all(c.get("ready") for c in statuses)


def node_pods(
    node: Resource,
    kubelet: Kubelet,
    daemons: list[Daemon],
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
                f"{name}-{short_hash(name, node.name)}",
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


def coredns_pods(
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
        name = f"{replica_set}-{short_hash(replica_set, str(index))}"
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
            pod_address(facts, name),
            tolerations=_COREDNS_TOLERATIONS,
        )
        for name, node in zip(names, placements, strict=True)
    ]
