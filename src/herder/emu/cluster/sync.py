"""What the emulated components of one cluster write to its API, as the real ones would, on every sync:

- each running machine's kubelet registers its Node (labels, taints, capacity, versions, Ready), unless
  its config skips node registration; a machine that stops answering (reset, off, partitioned, rebooting)
  leaves its Node NotReady, as the node lifecycle controller marks it, and its pods not ready; both
  report Events (RegisteredNode, NodeReady, NodeNotReady);
- control planes' kubelets mirror their static pods (kube-apiserver, kube-controller-manager,
  kube-scheduler) with the images of their own config;
- the DaemonSets kube-proxy and kube-flannel run a pod per node, the CoreDNS Deployment two replicas on
  Ready nodes (a new image is a new ReplicaSet, hence new pod names), with the workloads' status counted
  from their pods;
- what a fresh cluster has, once, with the default RBAC roles and bindings (``rbac_defaults``), and the
  objects of the config's ``cluster.inlineManifests``, created when missing, as Talos applies them;
- pods anyone else creates are placed and run (``scheduler``).

The objects are those of ``manifests``. Writes are skipped while etcd has no quorum (they would be refused)
and made once it is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import yaml

from herder.emu.cluster import scheduler
from herder.emu.cluster.kube_facts import KubeFacts
from herder.emu.cluster.kubelet import Kubelet
from herder.emu.cluster.manifests import (
    KUBE_SYSTEM,
    NAMESPACES,
    Daemon,
    addon_daemons,
    bootstrap_token,
    coredns_deployment,
    coredns_pods,
    daemon_set,
    is_component_pod,
    kube_dns_service,
    kubernetes_service,
    lost_node,
    namespace,
    node_event,
    node_events,
    node_pods,
    node_readiness,
    not_ready,
    pod_is_ready,
    registered_node,
    root_ca,
    strip_times,
)
from herder.emu.cluster.rbac import CLUSTER_ROLE, CLUSTER_ROLE_BINDING
from herder.emu.cluster.rbac_defaults import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES
from herder.emu.cluster.state import Cluster
from herder.resources import KindInfo, Resource
from herder.resources.core import NAMESPACE
from herder.resources.kubernetes import CONFIG_MAP, DAEMON_SET, DEPLOYMENT, NODE, POD, SECRET, SERVICE
from herder.state.errors import NotFound, StateError
from herder.state.store import Store

log = logging.getLogger(__name__)

RETRY_DELAY = 0.5
"""Seconds before a sync cut short by a failed write runs again."""


class Components:
    """The kubelets and controllers of one cluster, as far as the API sees them: what they write there."""

    def __init__(self, store: Store, cluster: Cluster, resync: Callable[[], None]) -> None:
        """``resync`` asks for another sync: a sync was cut short."""
        self.store = store
        self.cluster = cluster
        self._resync = resync
        self._seeded = False
        self._rbac_seeded = False
        self._manifests: tuple[str, ...] = ()
        self.ca_pem = ""
        """The cluster's Kubernetes CA certificate, which ``kube-root-ca.crt`` publishes."""

    async def sync(self, kubelets: list[Kubelet], cluster_facts: KubeFacts | None) -> None:
        """Make the API's objects follow the machines (call it while a control plane serves the API)."""
        if not self.cluster.has_quorum():
            return
        try:
            if not self._seeded and cluster_facts is not None:
                await self._seed(cluster_facts)
                self._seeded = True
            nodes = await self._sync_nodes(kubelets)
            await self._sync_pods(nodes, kubelets, cluster_facts)
            if not self._rbac_seeded:
                await self._seed_rbac()
                self._rbac_seeded = True
            if cluster_facts is not None and cluster_facts.inline_manifests != self._manifests:
                await self._apply_manifests(cluster_facts.inline_manifests)
                self._manifests = cluster_facts.inline_manifests
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
        if strip_times({k: v for k, v in merged.items() if k != "status"}) != strip_times(
            {k: v for k, v in now.items() if k != "status"}
        ):
            current = await self.store.update(Resource.from_dict(merged))
        status = desired.get("status")
        if status is not None and strip_times(status) != strip_times(current.status or {}):
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
        """What a fresh cluster has, created once (what others changed since stays)."""
        for name in NAMESPACES:
            await self._create_missing(NAMESPACE, namespace(name))
        await self._create_missing(SERVICE, kubernetes_service(facts))
        if facts.coredns:
            await self._create_missing(SERVICE, kube_dns_service(facts))
        token_id, _, token_secret = facts.bootstrap_token.partition(".")
        if token_id and token_secret:
            await self._create_missing(SECRET, bootstrap_token(token_id, token_secret))
        if self.ca_pem:
            for name in NAMESPACES:
                await self._create_missing(CONFIG_MAP, root_ca(name, self.ca_pem))

    async def _seed_rbac(self) -> None:
        """The default roles and bindings, created once (after the nodes: they need not wait for them)."""
        for role in CLUSTER_ROLES:
            await self._create_missing(CLUSTER_ROLE, role)
        for binding in CLUSTER_ROLE_BINDINGS:
            await self._create_missing(CLUSTER_ROLE_BINDING, binding)

    async def _apply_manifests(self, manifests: tuple[str, ...]) -> None:
        """The config's inline manifests, as Talos applies them: each object created when it is missing,
        never changed once it exists (an object of a kind this API does not serve is left out)."""
        for text in manifests:
            try:
                documents = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
            except yaml.YAMLError as exc:
                log.warning("cluster %s: an inline manifest is no YAML: %s", self.cluster.id, exc)
                continue
            for document in documents:
                group, _, version = str(document.get("apiVersion") or "").rpartition("/")
                kind = str(document.get("kind") or "")
                if kind not in self.store.registry or self.store.registry.get(kind).group != group:
                    log.info(
                        "cluster %s: inline manifest of kind %s/%s is not served; left out",
                        self.cluster.id,
                        version,
                        kind,
                    )
                    continue
                info = self.store.registry.get(kind)
                if info.namespaced:
                    document.setdefault("metadata", {}).setdefault("namespace", "default")
                await self._create_missing(info, document)

    async def _sync_nodes(self, kubelets: list[Kubelet]) -> list[Resource]:
        registering = {k.uuid: k for k in kubelets if k.facts.register_node}
        before = {n.name: node_readiness(n) for n in (await self.store.list(NODE)).items}
        for kubelet in registering.values():
            if kubelet.up:
                await self._put(NODE, registered_node(kubelet))
        nodes = (await self.store.list(NODE)).items
        out = []
        for node in nodes:
            owner = registering.get(str(((node.status or {}).get("nodeInfo") or {}).get("systemUUID")))
            if owner is None or not owner.up or owner.name != node.name:
                node = await self._put(NODE, lost_node(node))
            out.append(node)
            for reason, message, source in node_events(
                node.name, before.get(node.name), node_readiness(node)
            ):
                await self.store.create(Resource.from_dict(node_event(node, reason, message, source)))
        return out

    async def _sync_pods(
        self, nodes: list[Resource], kubelets: list[Kubelet], facts: KubeFacts | None
    ) -> None:
        by_uuid = {k.uuid: k for k in kubelets if k.up and k.facts.register_node}
        existing = {p.name: p for p in (await self.store.list(POD, KUBE_SYSTEM)).items if is_component_pod(p)}
        daemons = addon_daemons(facts)
        owners = {
            name: (await self._put(DAEMON_SET, daemon_set(name, labels, container))).metadata.uid or ""
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
                        desired[stale.name] = not_ready(stale)
                continue
            ready_nodes.append(node)
            for wanted in node_pods(node, kubelet, daemons, owners):
                desired[wanted["metadata"]["name"]] = wanted
        if facts is not None and facts.coredns:
            await self._put(DEPLOYMENT, coredns_deployment(facts))
            for wanted in coredns_pods(existing, ready_nodes, facts):
                desired[wanted["metadata"]["name"]] = wanted
        pods = [await self._put(POD, wanted) for wanted in desired.values()]
        for name in existing:
            if name not in desired:
                await self.store.delete(POD, name, KUBE_SYSTEM)
        await self._workload_status(pods, len(nodes), daemons, facts)
        await self._run_others_pods(ready_nodes, facts)

    async def _run_others_pods(self, ready_nodes: list[Resource], facts: KubeFacts | None) -> None:
        """Pods anyone else creates, as the scheduler places them and their node's kubelet runs them."""
        pods = (await self.store.list(POD)).items
        for desired in scheduler.others_pods(pods, ready_nodes, facts):
            await self._put(POD, desired)

    async def _workload_status(
        self,
        pods: list[Resource],
        nodes: int,
        daemons: list[Daemon],
        facts: KubeFacts | None,
    ) -> None:
        """The DaemonSets' and the Deployment's status, counted from their pods as their controllers do."""

        def counts(app: str, image: str) -> tuple[int, int, int]:
            mine = [p for p in pods if p.metadata.labels.get("k8s-app") == app]
            ready = sum(1 for p in mine if pod_is_ready(p))
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
            await self._put(DAEMON_SET, {**daemon_set(name, labels, container), "status": status})
        if facts is not None and facts.coredns:
            current, ready, updated = counts("kube-dns", facts.coredns_image)
            status = {
                "replicas": current,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": 1,
            }
            await self._put(DEPLOYMENT, {**coredns_deployment(facts), "status": status})
