"""A cluster's status you can act on: its phase, its machines (total, ready, wanted), and the conditions
``ControlPlaneReady``, ``EtcdHealthy``, ``KubernetesAPIReady`` and ``Ready``, each with a reason and message.

It is recomputed whenever a member or machine set changes, and etcd and the Kubernetes API are probed
again every little while (sooner while something is wrong). The etcd probe also tells each control
plane's ClusterMachine whether it is an etcd member. A condition that flips is told in an Event.
"""

from __future__ import annotations

import time
from typing import Any

from herder.controllers.clusters.cluster_keys import ClusterKeys
from herder.controllers.clusters.cluster_probes import EtcdHealth, probe_etcd, probe_kubernetes
from herder.controllers.clusters.members import cluster_machines, machine_of, machine_sets
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, MACHINE_SET, ClusterSpec
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec
from herder.resources.status import find_condition, set_condition
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change

HEALTHY_EVERY = 30.0
UNHEALTHY_EVERY = 5.0
# Events come in bursts while a cluster forms: probes younger than this are reused.
PROBE_REUSE = 2.0
_CONDITIONS = ("ControlPlaneReady", "EtcdHealthy", "KubernetesAPIReady", "Ready")


class ClusterStatusController(Controller):
    name = "ClusterStatus"
    concurrency = 8

    def __init__(self, keys: ClusterKeys, *, healthy_every: float = HEALTHY_EVERY) -> None:
        self._keys = keys
        self._healthy_every = healthy_every
        self._probed: dict[ObjectKey, tuple[float, tuple[bool, str, str], tuple[bool, str, str]]] = {}
        self.watches = (
            Watch(CLUSTER.kind),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(
                    labelled_owner(CLUSTER.kind, CLUSTER_LABEL),
                    "status.ready",
                    "status.conditions",
                    "status.etcdMember",
                    "metadata.deletionTimestamp",
                ),
            ),
            Watch(MACHINE_SET.kind, labelled_owner(CLUSTER.kind, CLUSTER_LABEL)),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            self._probed.pop(key, None)
            return None
        if cluster.metadata.deletion_timestamp:
            return None  # its teardown tells how it goes
        status = cluster.status or {}
        sets = await machine_sets(ctx, cluster)
        members = await cluster_machines(ctx, cluster)
        staying = [m for m in members if not m.metadata.deletion_timestamp]
        wanted = sum(_wanted(s) for s in sets if not s.metadata.deletion_timestamp)
        ready = sum(1 for m in staying if (m.status or {}).get("ready"))
        phase, verdicts = await self._health(ctx, cluster, sets, staying, wanted, ready)
        if len(staying) < len(members) and phase != "Provisioning":
            phase = "ScalingDown"

        def record(_: Resource, current: dict[str, Any]) -> None:
            current["phase"] = phase
            current["machines"] = {"total": len(staying), "ready": ready, "wanted": wanted}
            current["observedGeneration"] = cluster.metadata.generation or 0
            conditions = list(current.get("conditions") or [])
            for kind, (ok, reason, message) in verdicts.items():
                set_condition(conditions, kind, ok, reason, message)
            current["conditions"] = conditions

        updated = await ctx.mutate_status(key, record)
        if updated is not None:
            await _tell_flips(ctx, updated, status)
        all_good = all(ok for ok, _, _ in verdicts.values())
        return Result(requeue_after=self._healthy_every if all_good else UNHEALTHY_EVERY)

    async def _health(
        self,
        ctx: Context,
        cluster: Resource,
        sets: list[Resource],
        members: list[Resource],
        wanted: int,
        ready: int,
    ) -> tuple[str, dict[str, tuple[bool, str, str]]]:
        status = cluster.status or {}
        bootstrapped = bool((status.get("bootstrap") or {}).get("completedAt"))
        control_planes = [m for m in members if (m.spec or {}).get("role") == "controlplane"]
        cp_ready = [m for m in control_planes if (m.status or {}).get("ready")]
        verdicts: dict[str, tuple[bool, str, str]] = {}
        if not control_planes:
            verdicts["ControlPlaneReady"] = (
                False,
                "NoControlPlanes",
                "the cluster has no control plane machine",
            )
        elif len(cp_ready) < len(control_planes):
            first = next(m for m in control_planes if not (m.status or {}).get("ready"))
            first_ready = find_condition((first.status or {}).get("conditions"), "Ready") or {}
            verdicts["ControlPlaneReady"] = (
                False,
                "ControlPlanesNotReady",
                f"{len(cp_ready)}/{len(control_planes)} ready; {first.name}: {first_ready.get('message') or 'not ready'}",
            )
        else:
            verdicts["ControlPlaneReady"] = (True, "Ready", f"{len(control_planes)} control plane(s) ready")
        view = await self._keys.of(cluster)
        key = ObjectKey.of(cluster)
        probed = self._probed.get(key)
        if not bootstrapped or view is None:
            verdicts["EtcdHealthy"] = (False, "NotBootstrapped", "etcd is not bootstrapped yet")
            verdicts["KubernetesAPIReady"] = (False, "NotBootstrapped", "etcd is not bootstrapped yet")
        elif probed is not None and time.monotonic() - probed[0] < PROBE_REUSE:
            verdicts["EtcdHealthy"], verdicts["KubernetesAPIReady"] = probed[1], probed[2]
        else:
            etcd = await self._probe_etcd(ctx, control_planes, view.talos)
            verdicts["EtcdHealthy"] = (etcd.healthy, "Healthy" if etcd.healthy else "Unhealthy", etcd.message)
            endpoint = CLUSTER.spec_of(cluster, ClusterSpec).endpoint or status.get("endpoint", "")
            served = find_condition(status.get("conditions"), "EndpointReady") or {}
            if served.get("status") == "False":
                verdicts["KubernetesAPIReady"] = (False, "NoEndpoint", str(served.get("message", "")))
            elif endpoint:
                ok, why = await probe_kubernetes(str(endpoint), view.kubernetes)
                verdicts["KubernetesAPIReady"] = (ok, "Reachable" if ok else "Unreachable", why)
            else:
                verdicts["KubernetesAPIReady"] = (False, "NoEndpoint", "the cluster has no endpoint yet")
            self._probed[key] = (time.monotonic(), verdicts["EtcdHealthy"], verdicts["KubernetesAPIReady"])
        short = [s for s in sets if not _set_ready(s)]
        problems = [k for k in _CONDITIONS[:3] if not verdicts[k][0]]
        stopped = [r for r in status.get("rollouts") or () if r.get("state") == "Stopped"]
        if stopped and not problems:
            rollout = stopped[0]
            verdicts["Ready"] = (False, f"{rollout['kind']}RolloutStopped", str(rollout.get("message", "")))
        elif problems or short or ready < wanted:
            what = (
                verdicts[problems[0]][2]
                if problems
                else f"machine set {short[0].name} is not ready"
                if short
                else ""
            )
            verdicts["Ready"] = (
                False,
                problems[0] if problems else "MachinesNotReady",
                what or f"{ready}/{wanted} machines ready",
            )
        else:
            verdicts["Ready"] = (True, "Ready", f"{ready}/{wanted} machines ready")
        if not bootstrapped:
            phase = "Provisioning"
        elif len(members) < wanted:
            phase = "ScalingUp"
        else:
            phase = "Running"
        return phase, verdicts

    async def _probe_etcd(self, ctx: Context, control_planes: list[Resource], credentials: Any) -> EtcdHealth:
        endpoints: dict[str, Resource] = {}
        for member in control_planes:
            machine = await machine_of(ctx, member)
            mstatus = (machine.status or {}) if machine is not None else {}
            if machine is not None and mstatus.get("connected") and mstatus.get("stage") == "Running":
                endpoints[MACHINE.spec_of(machine, MachineSpec).endpoint] = member
        etcd = await probe_etcd(sorted(endpoints), credentials)
        if etcd.message.startswith("cannot list"):
            return etcd  # says nothing about who is a member
        for endpoint, member in endpoints.items():
            joined = endpoint in etcd.members
            if bool((member.status or {}).get("etcdMember")) != joined:

                def record(_: Resource, status: dict[str, Any], joined: bool = joined) -> None:
                    status["etcdMember"] = joined

                await ctx.mutate_status(ObjectKey.of(member), record)
                if joined:
                    await ctx.event(member, "Normal", "MemberJoined", f"machine {member.name} joined etcd")
        return etcd


def _wanted(machine_set: Resource) -> int:
    spec = machine_set.spec or {}
    if spec.get("machines") is not None:
        return len(spec["machines"])
    size = (spec.get("machineClass") or {}).get("size")
    if isinstance(size, int):
        return size
    return int(((machine_set.status or {}).get("machines") or {}).get("total") or 0)


def _set_ready(machine_set: Resource) -> bool:
    found = find_condition((machine_set.status or {}).get("conditions"), "Ready")
    return found is not None and found.get("status") == "True"


async def _tell_flips(ctx: Context, cluster: Resource, before: dict[str, Any]) -> None:
    for kind in _CONDITIONS:
        now = find_condition((cluster.status or {}).get("conditions"), kind) or {}
        was = find_condition(before.get("conditions"), kind) or {}
        if now.get("status") != was.get("status") and now.get("status") in ("True", "False"):
            good = now["status"] == "True"
            if not good and not was:
                continue  # a new cluster is not ready yet: nothing went wrong
            await ctx.event(
                cluster,
                "Normal" if good else "Warning",
                kind if good else f"{kind}Lost",
                now.get("message") or now.get("reason", ""),
            )
