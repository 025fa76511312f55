"""What an on-call person is paged on, per cluster, as Prometheus metrics computed from the store when
``/metrics`` is scraped: nothing is written to make them, every replica serves the same numbers, and a
number is never stale (a timestamp is exported, not an age counted by someone who may have stopped).

    herder_cluster_info{namespace,cluster,phase,talos_version,kubernetes_version,managed}   1
    herder_cluster_ready{namespace,cluster}                        1 while its Ready condition is True
    herder_cluster_etcd_quorum_lost{namespace,cluster}             1 when healthy members are fewer than a quorum
    herder_cluster_etcd_quorum_at_risk{namespace,cluster}          1 when one more member lost ends the quorum
                                                                   (of a control plane of more than one member)
    herder_cluster_machines{namespace,cluster}                     its machines
    herder_cluster_machines_unreachable{namespace,cluster}         of them, those herder cannot reach (but for
                                                                   those powered off on purpose)
    herder_cluster_backup_interval_seconds{namespace,cluster}      its backup schedule, if it has one
    herder_cluster_backup_last_success_timestamp_seconds{…}        when its newest backup was taken
    herder_cluster_backup_failures{namespace,cluster}              attempts failed since the last success
    herder_cluster_rollout_stopped{namespace,cluster,kind}         1 for a rollout stopped on a failure
    herder_cluster_rollout_machines{namespace,cluster,kind}        machines a rolling rollout goes through
    herder_cluster_rollout_machines_done{namespace,cluster,kind}   of them, those done
    herder_infra_provider_ready{provider}                          1 while herder deems the provider Ready
    herder_infra_provider_heartbeat_timestamp_seconds{provider}    its last heartbeat
    herder_infra_provider_heartbeat_interval_seconds{provider}     how often it says it beats
    herder_certificate_expiry_timestamp_seconds{namespace,cluster,certificate}
                                                                   when each CA of a cluster's secrets expires,
                                                                   and herder's own serving certificates
                                                                   (namespace and cluster empty)

``deploy/prometheus/herder-rules.yaml`` alerts on them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from herder.controllers.backups.policy import BackupPolicy
from herder.resources import Resource
from herder.resources.backups import duration_seconds
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.resources.clusters import CLUSTER, ClusterSpec, ClusterStatus
from herder.resources.control_planes import CONTROL_PLANE_STATUS, ControlPlaneStatusStatus
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.resources.provisioning import INFRA_PROVIDER, InfraProviderStatus
from herder.resources.status import status_of
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.secrets import load_secrets

log = logging.getLogger(__name__)

_CLUSTER = ["namespace", "cluster"]
# Adds one sample to a family: (family, label values, value).
_Put = Callable[[str, list[str], float], None]
# The CAs of a cluster's secrets bundle, by the name the metric gives them.
_CAS = {"talos": "os", "kubernetes": "k8s", "kubernetes-aggregator": "k8s_aggregator", "etcd": "etcd"}


def _timestamp(stamp: str) -> float | None:
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _expiry(pem: bytes) -> float:
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()


class ClusterMetrics(Collector):
    """The metrics above, as of the last ``refresh``; ``certificates``: herder's own, by name."""

    def __init__(
        self, store: Store, backup_policy: BackupPolicy, certificates: Sequence[tuple[str, Path]] = ()
    ) -> None:
        self._store = store
        self._policy = backup_policy
        self._certificates = list(certificates)
        self._families: list[GaugeMetricFamily] = []
        # (namespace, cluster) → (ClusterSecrets revision, expiry of each CA): parsed once per revision.
        self._cas: dict[tuple[str, str], tuple[int, dict[str, float]]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families

    async def refresh(self) -> None:
        clusters = (await self._store.list(CLUSTER)).items
        planes = {(c.namespace, c.name): c for c in (await self._store.list(CONTROL_PLANE_STATUS)).items}
        machines = (await self._store.list(MACHINE)).items
        providers = (await self._store.list(INFRA_PROVIDER)).items
        families = {
            name: GaugeMetricFamily(name, help, labels=labels)
            for name, help, labels in (
                ("herder_cluster_info", "A cluster, its phase and versions", [*_CLUSTER, "phase", "talos_version", "kubernetes_version", "managed"]),
                ("herder_cluster_ready", "1 while the cluster's Ready condition is True", _CLUSTER),
                ("herder_cluster_etcd_quorum_lost", "1 when fewer etcd members are healthy than a quorum", _CLUSTER),
                ("herder_cluster_etcd_quorum_at_risk", "1 when losing one more etcd member ends the quorum", _CLUSTER),
                ("herder_cluster_machines", "Machines of the cluster", _CLUSTER),
                ("herder_cluster_machines_unreachable", "Machines of the cluster herder cannot reach (not powered off on purpose)", _CLUSTER),
                ("herder_cluster_backup_interval_seconds", "How often the cluster's etcd is backed up", _CLUSTER),
                ("herder_cluster_backup_last_success_timestamp_seconds", "When the cluster's newest etcd backup was taken", _CLUSTER),
                ("herder_cluster_backup_failures", "etcd backup attempts failed since the last success", _CLUSTER),
                ("herder_cluster_rollout_stopped", "1 for a rollout stopped on a failure", [*_CLUSTER, "kind"]),
                ("herder_cluster_rollout_machines", "Machines a rolling rollout goes through", [*_CLUSTER, "kind"]),
                ("herder_cluster_rollout_machines_done", "Machines a rolling rollout is done with", [*_CLUSTER, "kind"]),
                ("herder_infra_provider_ready", "1 while herder deems the infra provider Ready", ["provider"]),
                ("herder_infra_provider_heartbeat_timestamp_seconds", "The infra provider's last heartbeat", ["provider"]),
                ("herder_infra_provider_heartbeat_interval_seconds", "How often the infra provider says it beats", ["provider"]),
                ("herder_certificate_expiry_timestamp_seconds", "When a certificate expires (a cluster's CAs, herder's own)", [*_CLUSTER, "certificate"]),
            )
        }  # fmt: skip

        def put(name: str, labels: list[str], value: float) -> None:
            families[name].add_metric(labels, value)

        by_cluster: dict[tuple[str | None, str], list[Resource]] = {}
        for machine in machines:
            name = machine.metadata.labels.get(CLUSTER_LABEL)
            if name:
                by_cluster.setdefault((machine.namespace, name), []).append(machine)
        for cluster in sorted(clusters, key=lambda c: (c.namespace or "", c.name)):
            where = [cluster.namespace or "", cluster.name]
            spec = CLUSTER.spec_of(cluster, ClusterSpec)
            status = status_of(cluster, ClusterStatus)
            managed = "true" if spec.managed is not None else "false"
            put(
                "herder_cluster_info",
                [*where, status.phase, spec.talos_version, spec.kubernetes_version, managed],
                1,
            )
            put("herder_cluster_ready", where, 1 if status.condition_true("Ready") else 0)
            plane = planes.get((cluster.namespace, cluster.name))
            if plane is not None and status.bootstrap is not None:
                etcd = status_of(plane, ControlPlaneStatusStatus).etcd
                members = len(etcd.members)
                healthy = sum(1 for m in etcd.members if m.healthy)
                quorum = members // 2 + 1
                if members:
                    put("herder_cluster_etcd_quorum_lost", where, 1 if healthy < quorum else 0)
                    put(
                        "herder_cluster_etcd_quorum_at_risk",
                        where,
                        1 if members > 1 and healthy <= quorum else 0,
                    )
            own = by_cluster.get((cluster.namespace, cluster.name), [])
            put("herder_cluster_machines", where, len(own))
            put("herder_cluster_machines_unreachable", where, sum(1 for m in own if _unreachable(m)))
            self._backups(cluster, status, where, put)
            for rollout in status.rollouts:
                labels = [*where, rollout.kind]
                put("herder_cluster_rollout_stopped", labels, 1 if rollout.state == "Stopped" else 0)
                if rollout.state == "Rolling":
                    put("herder_cluster_rollout_machines", labels, rollout.total)
                    put("herder_cluster_rollout_machines_done", labels, rollout.done)
            for certificate, expiry in (await self._cluster_cas(cluster)).items():
                put("herder_certificate_expiry_timestamp_seconds", [*where, certificate], expiry)
        for provider in sorted(providers, key=lambda p: p.name):
            pstatus = status_of(provider, InfraProviderStatus)
            put("herder_infra_provider_ready", [provider.name], 1 if pstatus.condition_true("Ready") else 0)
            beat = _timestamp(pstatus.last_heartbeat)
            if beat is not None:
                put("herder_infra_provider_heartbeat_timestamp_seconds", [provider.name], beat)
            interval = pstatus.heartbeat_interval_seconds
            if interval:
                put("herder_infra_provider_heartbeat_interval_seconds", [provider.name], interval)
        for name, path in self._certificates:
            try:
                expiry = _expiry(path.read_bytes())
            except (OSError, ValueError):
                continue
            put("herder_certificate_expiry_timestamp_seconds", ["", "", name], expiry)
        self._families = list(families.values())

    def _backups(self, cluster: Resource, status: ClusterStatus, where: list[str], put: _Put) -> None:
        schedule = self._policy.schedule(cluster)
        if schedule is not None:
            put("herder_cluster_backup_interval_seconds", where, duration_seconds(schedule.interval))
        backups = status.backups
        if backups is None:
            return
        taken = _timestamp(backups.last_success_time) if backups.last_success_time else None
        if taken is not None:
            put("herder_cluster_backup_last_success_timestamp_seconds", where, taken)
        if schedule is not None or backups.failures:
            put("herder_cluster_backup_failures", where, backups.failures)

    async def _cluster_cas(self, cluster: Resource) -> dict[str, float]:
        key = (cluster.namespace or "", cluster.name)
        try:
            stored = await self._store.read(CLUSTER_SECRETS, cluster.name, cluster.namespace)
        except NotFound:
            self._cas.pop(key, None)
            return {}
        known = self._cas.get(key)
        if known is not None and known[0] == stored.rev:
            return known[1]
        spec = CLUSTER_SECRETS.spec_of(stored.decode(), ClusterSecretsSpec)
        try:
            bundle = await asyncio.to_thread(load_secrets, spec.bundle, check_keys=False)
            expiries = {name: _expiry(getattr(bundle, field).crt) for name, field in _CAS.items()}
        except ValueError as exc:
            log.warning("cluster %s/%s: its secrets' certificates cannot be read: %s", *key, exc)
            expiries = {}
        self._cas[key] = (stored.rev, expiries)
        return expiries


def _unreachable(machine: Resource) -> bool:
    status = status_of(machine, MachineStatus)
    if status.connected:
        return False
    power = MACHINE.spec_of(machine, MachineSpec).power
    return (power is None or power.on) and status.stage not in ("PoweredOff", "Unknown")


_installed: ClusterMetrics | None = None


def install(
    store: Store, backup_policy: BackupPolicy, certificates: Sequence[tuple[str, Path]] = ()
) -> ClusterMetrics:
    """A ``ClusterMetrics`` of ``store`` in the process's Prometheus registry (in place of any earlier
    one: one server a process)."""
    global _installed
    if _installed is not None:
        REGISTRY.unregister(_installed)
    _installed = ClusterMetrics(store, backup_policy, certificates)
    REGISTRY.register(_installed)
    return _installed
