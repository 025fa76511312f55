"""What keeps the emulator's clusters following their machines: etcd member health from machine state,
control planes joining etcd once they can, the emulated Kubernetes API of each cluster (at an address the
emulator publishes), and the cluster's state persisted after it changes.

Every change of a machine (stage, power, partition) or of a cluster's membership schedules one sync of
that cluster; syncs of one cluster never overlap and changes during a sync cause one more.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from herder.emu.cluster import Cluster
from herder.emu.kube_config import KubeFacts, kube_facts
from herder.emu.kubernetes import ClusterKubernetes, Kubelet
from herder.talos.machine.types import MachineStage

if TYPE_CHECKING:
    from herder.emu.emulator import Emulator
    from herder.emu.machine import Machine

log = logging.getLogger(__name__)

API_HOST = "127.0.0.1"
"""Where the clusters' Kubernetes APIs listen, each on its own port."""
SAVE_DELAY = 0.2
"""Writes to a cluster's keyspace are persisted together, this long after the first."""


class ClusterServices:
    """Per cluster: etcd health from its machines, its emulated Kubernetes API, and its persistence."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.kubernetes: dict[str, ClusterKubernetes] = {}
        self._seen: dict[str, str] = {}
        """The cluster each machine was last seen in: a reset machine's cluster still needs a sync."""
        self._pending: set[str] = set()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._saves: dict[str, asyncio.TimerHandle] = {}
        self._stopped = False

    # --- wiring ---

    def adopt(self, cluster: Cluster) -> None:
        """Give a cluster (new or loaded) its view of the machines and its change notifications."""
        cluster_id = cluster.id
        cluster.member_up = lambda uuid: self.etcd_up(uuid, cluster_id)
        cluster.changed = lambda: self._cluster_changed(cluster_id)
        cluster.keyspace.written = lambda: self._save_later(cluster_id)

    def etcd_up(self, uuid: str, cluster_id: str) -> bool:
        machine = self.emulator.machines.get(uuid)
        return (
            machine is not None
            and machine.stage is MachineStage.RUNNING
            and machine.config is not None
            and machine.config.cluster_id == cluster_id
            and not self.emulator.network.is_partitioned(uuid)
        )

    def machine_changed(self, machine: Machine) -> None:
        previous = self._seen.pop(machine.uuid, None)
        if machine.stage is MachineStage.BOOTING:
            # A machine that left etcd may join again once it has rebooted.
            for cluster in self.emulator.clusters.values():
                cluster.removed.discard(machine.uuid)
        if machine.config is not None:
            if machine.uuid in self.emulator.machines:
                self._seen[machine.uuid] = machine.config.cluster_id
            self.schedule(machine.config.cluster_id)
        if previous is not None and (machine.config is None or previous != machine.config.cluster_id):
            self.schedule(previous)

    def _cluster_changed(self, cluster_id: str) -> None:
        self._save_later(cluster_id)
        self.schedule(cluster_id)

    # --- the published API ---

    def api(self, cluster: Cluster) -> ClusterKubernetes:
        """The cluster's Kubernetes API (its address is fixed from the first call; it serves once
        bootstrapped): at the cluster's endpoint when that is a loopback address (so the kubeconfig any
        tool generates for the cluster reaches it), else on a port of its own."""
        kube = self.kubernetes.get(cluster.id)
        if kube is None:
            endpoints = [
                m.config.endpoint
                for m in self.emulator.machines_of(cluster.id)
                if m.config is not None and m.config.is_control_plane
            ]
            at_endpoint = _loopback(endpoints[0]) if endpoints else None
            host, port = at_endpoint or (API_HOST, cluster.api_port)
            cluster_id = cluster.id
            kube = ClusterKubernetes(cluster, host, port, lambda: self.schedule(cluster_id))
            self.kubernetes[cluster_id] = kube
            self.emulator.store.save_cluster(cluster)
        return kube

    def summary(self, cluster: Cluster) -> dict[str, Any]:
        """What the control API shows of a cluster: etcd members and health, and the API's address."""
        leader = cluster.current_leader()
        kube = self.kubernetes.get(cluster.id)
        return {
            "id": cluster.id,
            "name": cluster.name,
            "bootstrapped": cluster.bootstrapped,
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
            "kubernetes": kube.url if kube is not None else "",
            "serving": kube.endpoint.serving if kube is not None else False,
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
        cluster = self.emulator.clusters.get(cluster_id)
        if cluster is None:
            return
        machines = self.emulator.machines_of(cluster_id)
        control_planes = [m for m in machines if m.config is not None and m.config.is_control_plane]
        if cluster.bootstrapped:
            for machine in control_planes:
                if self.etcd_up(machine.uuid, cluster_id) and cluster.member_of(machine.uuid) is None:
                    cluster.join(machine.uuid, machine.hostname, machine.address)
        ca = next(
            (m.config.kubernetes_ca for m in control_planes if m.config and m.config.kubernetes_ca), None
        )
        if ca is None or not cluster.bootstrapped:
            return
        kube = self.api(cluster)
        running = [m for m in control_planes if self.etcd_up(m.uuid, cluster_id)]
        facts = _cluster_facts(running)
        await kube.start(ca, facts)
        serving = any(cluster.member_of(m.uuid) is not None for m in running)
        await kube.sync([_kubelet(m, self.etcd_up(m.uuid, cluster_id)) for m in machines], facts, serving)

    # --- persistence ---

    def _save_later(self, cluster_id: str) -> None:
        if cluster_id in self._saves:
            return
        loop = asyncio.get_running_loop()
        self._saves[cluster_id] = loop.call_later(SAVE_DELAY, self._save, cluster_id)

    def _save(self, cluster_id: str) -> None:
        self._saves.pop(cluster_id, None)
        cluster = self.emulator.clusters.get(cluster_id)
        if cluster is not None:
            self.emulator.store.save_cluster(cluster)

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


def _loopback(endpoint: str) -> tuple[str, int] | None:
    """Host and port of an endpoint URL on a loopback IPv4 address, which the emulator can listen on."""
    try:
        parts = urlsplit(endpoint)
        address = ipaddress.ip_address(parts.hostname or "")
        port = parts.port or 443
    except ValueError:
        return None
    return (str(address), port) if address.version == 4 and address.is_loopback else None


def _cluster_facts(running_control_planes: list[Machine]) -> KubeFacts | None:
    """The add-ons' settings (kube-proxy, CoreDNS, the API version): those of the first running control
    plane, as the manifests were rendered by one."""
    first = min(running_control_planes, key=lambda m: m.uuid, default=None)
    return kube_facts(first.config) if first is not None and first.config is not None else None


def _kubelet(machine: Machine, up: bool) -> Kubelet:
    assert machine.config is not None
    hardware = machine.record.hardware
    return Kubelet(
        uuid=machine.uuid,
        name=machine.hostname.lower(),
        address=machine.address,
        talos_version=machine.record.talos_version,
        cpus=hardware.cpus,
        memory_mib=hardware.memory_mib,
        disk_bytes=int(hardware.disks[0]["size"]) if hardware.disks else 0,
        control_plane=machine.config.is_control_plane,
        facts=kube_facts(machine.config),
        up=up,
    )
