"""What keeps the emulator's clusters following their machines: etcd member health from machine state,
control planes joining etcd once they can, the emulated Kubernetes API of each cluster (served by each
control plane that runs, on its own address and port 6443, as kube-apiserver is), and the cluster's state
persisted after it changes.

Every change of a machine (stage, power, partition) or of a cluster's membership schedules one sync of
that cluster; syncs of one cluster never overlap and changes during a sync cause one more. What the
services know of machines comes through ``ClusterMachines``, which the emulator provides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from herder.emu.cluster.kube_api import PORT
from herder.emu.cluster.kube_facts import KubeFacts
from herder.emu.cluster.kubelet import Kubelet
from herder.emu.cluster.kubernetes import ClusterKubernetes
from herder.emu.cluster.state import Cluster, url_host


class ClusterMachines(Protocol):
    """What the cluster services need of the machines and of the emulator's persistence."""

    def running(self, uuid: str, cluster_id: str) -> bool:
        """Whether that machine runs, reachable, configured for that cluster (its etcd and kubelet are up)."""
        ...

    def kubelets(self, cluster_id: str) -> list[Kubelet]:
        """The kubelets of the machines configured for that cluster, as they are now."""
        ...

    def save_cluster(self, cluster: Cluster) -> None: ...


log = logging.getLogger(__name__)

SAVE_DELAY = 0.2
"""Writes to a cluster's keyspace are persisted together, this long after the first."""


class ClusterServices:
    """The emulator's clusters and, per cluster: etcd health from its machines, its emulated Kubernetes API,
    and its persistence."""

    def __init__(self, machines: ClusterMachines) -> None:
        self.machines = machines
        self.clusters: dict[str, Cluster] = {}
        self.kubernetes: dict[str, ClusterKubernetes] = {}
        self._seen: dict[str, str] = {}
        """The cluster each machine was last seen in: a reset machine's cluster still needs a sync."""
        self._pending: set[str] = set()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._saves: dict[str, asyncio.TimerHandle] = {}
        self._stopped = False

    # --- wiring ---

    def cluster(self, cluster_id: str) -> Cluster:
        """The cluster of that id, created on first use."""
        cluster = self.clusters.get(cluster_id)
        if cluster is None:
            cluster = Cluster(cluster_id)
            self.adopt(cluster)
        return cluster

    def adopt(self, cluster: Cluster) -> None:
        """Take a cluster (new or loaded) in: its view of the machines and its change notifications."""
        cluster_id = cluster.id
        self.clusters[cluster_id] = cluster
        cluster.member_up = lambda uuid: self.machines.running(uuid, cluster_id)
        cluster.changed = lambda: self._cluster_changed(cluster_id)
        cluster.keyspace.written = lambda: self._save_later(cluster_id)

    def machine_changed(
        self, uuid: str, cluster_id: str, *, booting: bool = False, gone: bool = False
    ) -> None:
        """A machine (configured for ``cluster_id``, empty if none) changed; ``gone``: it was destroyed."""
        previous = self._seen.pop(uuid, None)
        if booting:
            # A machine that left etcd may join again once it has rebooted.
            for cluster in self.clusters.values():
                cluster.removed.discard(uuid)
        if cluster_id:
            if not gone:
                self._seen[uuid] = cluster_id
            self.schedule(cluster_id)
        if previous is not None and previous != cluster_id:
            self.schedule(previous)

    def _cluster_changed(self, cluster_id: str) -> None:
        self._save_later(cluster_id)
        self.schedule(cluster_id)

    # --- the published API ---

    def summary(self, cluster: Cluster) -> dict[str, Any]:
        """What the control API shows of a cluster: etcd members and health, and where its Kubernetes API
        is served (each member control plane's address, port 6443) and whether it serves there now."""
        leader = cluster.current_leader()
        kube = self.kubernetes.get(cluster.id)
        serving = kube.endpoints if kube is not None else {}
        # kube-apiserver runs on the control planes that are etcd members, while they run.
        apiservers = [
            {
                "url": f"https://{url_host(m.address)}:{PORT}",
                "machine": m.machine,
                "serving": m.machine in serving,
            }
            for m in sorted(cluster.members.values(), key=lambda m: m.address)
        ]
        return {
            "id": cluster.id,
            "name": cluster.name,
            "bootstrapped": cluster.bootstrapped,
            "bootstrapRequests": cluster.bootstrap_requests,
            "quorum": cluster.has_quorum(),
            "leader": f"{leader.id:x}" if leader else "",
            "members": [
                {
                    "id": f"{m.id:x}",
                    "hostname": m.hostname,
                    "machine": m.machine,
                    "healthy": cluster.healthy(m),
                }
                for m in cluster.members.values()
            ],
            "kubernetes": apiservers,
            "serving": bool(serving),
        }

    # --- syncing ---

    def schedule(self, cluster_id: str) -> None:
        if self._stopped:
            return
        self._pending.add(cluster_id)
        if cluster_id not in self._running:
            task = asyncio.get_running_loop().create_task(self._sync_loop(cluster_id))
            self._running[cluster_id] = task

    async def _sync_loop(self, cluster_id: str) -> None:
        try:
            while cluster_id in self._pending:
                self._pending.discard(cluster_id)
                # Let a burst of changes (a reboot's stages, a bootstrap's joins) land first.
                await asyncio.sleep(0)
                try:
                    await self._sync(cluster_id)
                except Exception:
                    # One cluster's trouble must not stop the others; its next change syncs again.
                    log.exception("syncing cluster %s failed", cluster_id)
        finally:
            self._running.pop(cluster_id, None)

    async def _sync(self, cluster_id: str) -> None:
        cluster = self.clusters.get(cluster_id)
        if cluster is None:
            return
        kubelets = self.machines.kubelets(cluster_id)
        control_planes = [k for k in kubelets if k.control_plane]
        if cluster.bootstrapped:
            for kubelet in control_planes:
                if kubelet.up and cluster.member_of(kubelet.uuid) is None:
                    cluster.join(kubelet.uuid, kubelet.hostname, kubelet.address)
        ca = next((k.kubernetes_ca for k in control_planes if k.kubernetes_ca), None)
        if ca is None or not cluster.bootstrapped:
            return
        kube = self.kubernetes.get(cluster_id)
        if kube is None:
            kube = self.kubernetes[cluster_id] = ClusterKubernetes(cluster, lambda: self.schedule(cluster_id))
        running = [k for k in control_planes if k.up]
        facts = _cluster_facts(running)
        if facts is not None:
            kube.apiserver.encryption.use(facts.encryption_keys)
        await kube.start(ca)
        # kube-apiserver runs where etcd does: on the control planes that run and are members.
        await kube.serve(ca, [k for k in running if cluster.member_of(k.uuid) is not None])
        await kube.sync(kubelets, facts)

    # --- persistence ---

    def _save_later(self, cluster_id: str) -> None:
        if cluster_id in self._saves:
            return
        loop = asyncio.get_running_loop()
        self._saves[cluster_id] = loop.call_later(SAVE_DELAY, self._save, cluster_id)

    def _save(self, cluster_id: str) -> None:
        self._saves.pop(cluster_id, None)
        cluster = self.clusters.get(cluster_id)
        if cluster is not None:
            self.machines.save_cluster(cluster)

    async def stop(self) -> None:
        self._stopped = True
        for task in list(self._running.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for cluster_id, handle in list(self._saves.items()):
            handle.cancel()
            self._save(cluster_id)
        for kube in self.kubernetes.values():
            await kube.close()
        self.kubernetes.clear()


def _cluster_facts(running_control_planes: list[Kubelet]) -> KubeFacts | None:
    """The add-ons' settings (kube-proxy, CoreDNS, the API version): those of the first running control
    plane, as the manifests were rendered by one."""
    first = min(running_control_planes, key=lambda k: k.uuid, default=None)
    return first.facts if first is not None else None
