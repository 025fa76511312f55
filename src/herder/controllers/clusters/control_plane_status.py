"""Control plane health: each bootstrapped Cluster's ControlPlaneStatus — etcd's members, their health, the
leader, quorum and database sizes; each control plane's API server, controller manager and scheduler
(from their static pods); the load balancer — with conditions and reasons, measured whenever a control
plane changes and every few seconds, less often (up to once a minute) while it stays healthy and
unchanged; a probe that finds nothing new writes nothing. It also tells each control plane's
ClusterMachine whether it is an etcd member, and exports Prometheus metrics per cluster (etcd members
healthy, leader changes, API server reachability). The Cluster's own conditions are made from it, so a control plane that degrades shows
there within seconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.cluster_probes import (
    COMPONENTS,
    EtcdReport,
    KubernetesReport,
    machine_clients,
    probe_etcd,
    probe_kubernetes,
)
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.controllers.members import cluster_changes, control_planes
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    ClusterMachineStatus,
    ClusterSpec,
    ClusterStatus,
)
from herder.resources.control_planes import (
    CONTROL_PLANE_STATUS,
    ComponentHealth,
    ControlPlaneStatusStatus,
    EtcdHealth,
    EtcdMemberHealth,
    LoadBalancerHealth,
)
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import dump_status, status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Owns, Writes
from herder.talos.machine.pool import MachineDialer, dial
from herder.workqueue import retry_delay

HEALTHY_EVERY = 10.0
UNHEALTHY_EVERY = 5.0
QUIET_EVERY = 60.0
"""The longest wait between probes of a healthy control plane: each probe that finds it healthy and
unchanged doubles the wait from ``healthy_every`` up to this; a change or a failure makes it short again at
once (and a control plane that changes stage is probed then, whatever the wait)."""
API_GRACE = 30.0
"""Seconds a new cluster's Kubernetes API may take to answer after its bootstrap before its status says it
is unreachable: it usually answers within seconds, and saying so first was two writes (this status and the
Cluster's) for nothing. Until then the status stays as it was (etcd not bootstrapped yet), and the probe
is made again every ``API_GRACE_RETRY`` seconds."""
API_GRACE_RETRY = 2.0
REFRESH_FIGURES_AFTER = 600.0
"""Seconds after which etcd's figures that move on their own (raft index, database size) are written
though nothing else changed: a live etcd's raft index moves with every write, and rewriting the status
for it at every probe of every cluster would be a store write and an event for each watcher."""
_FIGURES = ("raftIndex", "dbSize")

ETCD_MEMBERS = Gauge("herder_cluster_etcd_members", "etcd members of a cluster", ["namespace", "cluster"])
ETCD_HEALTHY = Gauge(
    "herder_cluster_etcd_members_healthy", "etcd members that answer", ["namespace", "cluster"]
)
LEADER_CHANGES = Counter(
    "herder_cluster_etcd_leader_changes", "etcd elections herder saw", ["namespace", "cluster"]
)
API_REACHABLE = Gauge(
    "herder_cluster_apiserver_reachable", "1 while herder reaches the API", ["namespace", "cluster"]
)
_METRICS = (ETCD_MEMBERS, ETCD_HEALTHY, LEADER_CHANGES, API_REACHABLE)

# (namespace, cluster) → (endpoint, backends, healthy) of its load balancer, if herder runs one.
BalancerHealth = Callable[[str, str], tuple[str, int, int] | None]

_NAMES = {
    "kube-apiserver": "apiServer",
    "kube-controller-manager": "controllerManager",
    "kube-scheduler": "scheduler",
}
_CONDITIONS = {
    "kube-apiserver": ("APIServersReady", "API server"),
    "kube-controller-manager": ("ControllerManagersReady", "controller manager"),
    "kube-scheduler": ("SchedulersReady", "scheduler"),
}


class ControlPlaneStatusController(Controller):
    name = "ControlPlaneStatus"
    primary = CLUSTER.kind
    outputs = (
        Owns(CONTROL_PLANE_STATUS.kind, "status"),
        Writes(CLUSTER_MACHINE.kind, "status.etcdMember"),
    )
    # Probes mostly wait for machines to answer: many at once keep a forming cluster's etcd members
    # from waiting for a turn to be seen.
    concurrency = 24

    def __init__(
        self,
        keys: ClusterKeys,
        balancers: BalancerHealth,
        *,
        healthy_every: float = HEALTHY_EVERY,
        dialer: MachineDialer = dial,
        kubernetes: KubernetesClients | None = None,
    ) -> None:
        self._keys = keys
        self._balancers = balancers
        self._healthy_every = healthy_every
        self._leaders: dict[tuple[str, str], int] = {}
        self._elections: dict[tuple[str, str], int] = {}
        # Healthy probes in a row that found nothing new, per cluster (absent: the last was not healthy).
        self._quiet: dict[tuple[str, str], int] = {}
        self._machines = machine_clients(dialer)
        self._kubernetes = kubernetes or KubernetesClients()
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes("bootstrap", "endpoint")),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(
                    labelled_owner(CLUSTER.kind, CLUSTER_LABEL),
                    "status.stage",
                    "status.configHash",
                    "metadata.deletionTimestamp",
                ),
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        where = (key.namespace or "default", key.name)
        if cluster is None:
            self._leaders.pop(where, None)
            self._elections.pop(where, None)
            self._quiet.pop(where, None)
            for metric in _METRICS:
                with contextlib.suppress(KeyError):
                    metric.remove(*where)
            return None
        if cluster.metadata.deletion_timestamp:
            return None
        view = await self._keys.of(cluster)
        status = status_of(cluster, ClusterStatus)
        if view is None or not status.bootstrapped:
            await self._write(
                ctx, cluster, None, None, None, "NotBootstrapped", "etcd is not bootstrapped yet"
            )
            return None
        known, running = await control_planes(ctx, cluster)
        etcd = await probe_etcd(self._machines, running, view.talos, known)
        await self._mark_members(ctx, cluster, running, etcd)
        endpoint = CLUSTER.spec_of(cluster, ClusterSpec).endpoint or status.endpoint
        kubernetes = await probe_kubernetes(self._kubernetes, endpoint, view.kubernetes) if endpoint else None
        balancer = self._balancers(*where)
        self._measure(where, etcd, kubernetes)
        if kubernetes is not None and not kubernetes.reachable and await _api_starting(ctx, cluster, status):
            return Result(requeue_after=API_GRACE_RETRY)
        healthy, changed = await self._write(ctx, cluster, etcd, kubernetes, balancer, "", "")
        if not healthy:
            self._quiet.pop(where, None)
            return Result(requeue_after=UNHEALTHY_EVERY)
        quiet = self._quiet[where] = 0 if changed or where not in self._quiet else self._quiet[where] + 1
        return Result(requeue_after=retry_delay(quiet + 1, self._healthy_every, QUIET_EVERY))

    async def shutdown(self) -> None:
        await self._machines.close()
        await self._kubernetes.close()

    async def _mark_members(
        self, ctx: Context, cluster: Resource, running: dict[str, str], etcd: EtcdReport
    ) -> None:
        if not etcd.listed:
            return  # it says nothing about who is a member
        for uuid in running.values():
            joined = uuid in etcd.machines
            member = await ctx.get(ObjectKey(CLUSTER_MACHINE.kind, cluster.namespace, uuid))
            if member is None or status_of(member, ClusterMachineStatus).etcd_member == joined:
                continue

            def record(_: Resource, status: ClusterMachineStatus, joined: bool = joined) -> None:
                status.etcd_member = joined

            await ctx.mutate_status(ObjectKey.of(member), ClusterMachineStatus, record)
            if joined:
                await ctx.event(member, "Normal", "MemberJoined", f"machine {uuid} joined etcd")

    def _measure(self, where: tuple[str, str], etcd: EtcdReport, kubernetes: KubernetesReport | None) -> None:
        ETCD_MEMBERS.labels(*where).set(len(etcd.members))
        ETCD_HEALTHY.labels(*where).set(
            sum(1 for m in etcd.members if m.status is not None and not m.status.errors)
        )
        API_REACHABLE.labels(*where).set(1 if kubernetes is not None and kubernetes.reachable else 0)
        before = self._leaders.get(where)
        if etcd.leader:
            if before is not None and before != etcd.leader:
                LEADER_CHANGES.labels(*where).inc()
                self._elections[where] = self._elections.get(where, 0) + 1
            self._leaders[where] = etcd.leader

    async def _write(
        self,
        ctx: Context,
        cluster: Resource,
        etcd: EtcdReport | None,
        kubernetes: KubernetesReport | None,
        balancer: tuple[str, int, int] | None,
        pending_reason: str,
        pending_message: str,
    ) -> tuple[bool, bool]:
        """Write the cluster's ControlPlaneStatus; whether every condition is good, and whether anything
        but etcd's moving figures changed."""
        key = ObjectKey(CONTROL_PLANE_STATUS.kind, cluster.namespace, cluster.name)
        verdicts = _verdicts(etcd, kubernetes, balancer, pending_reason, pending_message)
        elections = self._elections.get((cluster.namespace or "default", cluster.name), 0)
        measured = _etcd_health(etcd, elections) if etcd is not None else None
        components = _components(kubernetes) if kubernetes is not None else None
        served = (
            LoadBalancerHealth(endpoint=balancer[0], backends=balancer[1], healthy=balancer[2])
            if balancer
            else None
        )
        now = ctx.clock.rfc3339()
        changed = False

        def record(_: Resource, status: ControlPlaneStatusStatus) -> None:
            nonlocal changed
            before = dump_status(status)
            figures = status.etcd
            if measured is not None:
                status.etcd = measured
            if components is not None:
                status.components = components
            if served is not None:
                status.load_balancer = served
            for kind, (ok, reason, message) in verdicts.items():
                status.set_condition(kind, ok, reason, message, now=now)
            # A probe that found nothing new writes nothing (checkedAt is when one last did): every
            # probe of every cluster would be a write and an event for each watcher.
            after = dump_status(status)
            changed = _seen(after) != _seen(before)
            if changed:
                status.checked_at = now
            elif after != before:
                age = ctx.clock.age(status.checked_at)
                if age is None or age > REFRESH_FIGURES_AFTER:
                    status.checked_at = now
                else:
                    status.etcd = figures

        if await ctx.get(key) is None:
            # Made with its first verdicts: one write, not two.
            first = ControlPlaneStatusStatus()
            record(cluster, first)
            made = {"name": cluster.name, "namespace": cluster.namespace}
            await ctx.apply_output(
                cluster,
                Resource.model_validate(
                    {
                        "apiVersion": CONTROL_PLANE_STATUS.api_version,
                        "kind": CONTROL_PLANE_STATUS.kind,
                        "metadata": made,
                        "status": dump_status(first),
                    }
                ),
            )
        else:
            await ctx.mutate_status(key, ControlPlaneStatusStatus, record)
        return all(ok for ok, _, _ in verdicts.values()), changed


async def _api_starting(ctx: Context, cluster: Resource, status: ClusterStatus) -> bool:
    """Whether the cluster's API is still within its grace after the bootstrap (``API_GRACE``): never
    measured since (its status still says etcd is not bootstrapped) and bootstrapped a moment ago."""
    current = await ctx.get(ObjectKey(CONTROL_PLANE_STATUS.kind, cluster.namespace, cluster.name))
    found = status_of(current, ControlPlaneStatusStatus).condition("APIReachable") if current else None
    if found is None or found.reason != "NotBootstrapped":
        return False
    age = ctx.clock.age(status.bootstrap.completed_at) if status.bootstrap is not None else None
    return age is not None and age < API_GRACE


def _seen(status: dict[str, Any]) -> dict[str, Any]:
    """A status as a change is told: without the time it was checked and etcd's moving figures."""
    etcd = status.get("etcd") or {}
    members = [{k: v for k, v in m.items() if k not in _FIGURES} for m in etcd.get("members") or ()]
    return {**{k: v for k, v in status.items() if k != "checkedAt"}, "etcd": {**etcd, "members": members}}


def _etcd_health(etcd: EtcdReport, elections: int) -> EtcdHealth:
    return EtcdHealth(
        members=[
            EtcdMemberHealth(
                machine=m.machine,
                id=f"{m.id:x}",
                healthy=m.status is not None and not m.status.errors,
                leader=m.id == etcd.leader,
                db_size=m.status.db_size if m.status is not None else 0,
                raft_index=m.status.raft_index if m.status is not None else 0,
                errors=[m.error] if m.error else list(m.status.errors if m.status else ()),
            )
            for m in etcd.members
        ],
        leader=next((m.machine for m in etcd.members if m.id == etcd.leader), ""),
        quorum=etcd.quorum,
        leader_changes=elections,
    )


def _components(kubernetes: KubernetesReport) -> list[ComponentHealth]:
    return [
        ComponentHealth.model_validate(
            {"machine": "", "address": host, **{_NAMES[c]: states.get(c, False) for c in COMPONENTS}}
        )
        for host, states in sorted(kubernetes.components.items())
    ]


def _verdicts(
    etcd: EtcdReport | None,
    kubernetes: KubernetesReport | None,
    balancer: tuple[str, int, int] | None,
    pending_reason: str,
    pending_message: str,
) -> dict[str, tuple[bool | None, str, str]]:
    if etcd is None:
        return {
            kind: (False, pending_reason, pending_message)
            for kind in ("EtcdHealthy", "APIReachable", "Ready")
        }
    out: dict[str, tuple[bool | None, str, str]] = {
        "EtcdHealthy": (etcd.healthy, "Healthy" if etcd.healthy else "Unhealthy", etcd.message),
    }
    if kubernetes is None:
        out["APIReachable"] = (False, "NoEndpoint", "the cluster has no endpoint yet")
    else:
        out["APIReachable"] = (
            kubernetes.reachable,
            "Reachable" if kubernetes.reachable else "Unreachable",
            kubernetes.message,
        )
        for component, (kind, what) in _CONDITIONS.items():
            if not kubernetes.components:
                # No static pod mirrors: the control planes do not register as nodes, or no node is up.
                out[kind] = (None, "NotMirrored", "no static pod mirrors to tell (nodes not registered)")
                continue
            down = sorted(h for h, states in kubernetes.components.items() if not states.get(component))
            out[kind] = (
                not down,
                "Ready" if not down else "NotReady",
                f"{what} not ready on {', '.join(down)}" if down else "",
            )
    if balancer is not None:
        endpoint, backends, healthy = balancer
        out["LoadBalancerReady"] = (
            healthy > 0,
            "Healthy" if healthy else "NoHealthyBackend",
            f"{healthy}/{backends} API servers behind {endpoint} answer",
        )
    bad = [(kind, message) for kind, (ok, _, message) in out.items() if ok is False]
    out["Ready"] = (False, bad[0][0], bad[0][1]) if bad else (True, "Healthy", "")
    return out
