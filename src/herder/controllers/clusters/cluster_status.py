"""A cluster's status you can act on: its phase, its machines (total, ready, wanted), and the conditions
``ControlPlaneReady``, ``EtcdHealthy``, ``KubernetesAPIReady`` and ``Ready``, each with a reason and message.

It is recomputed whenever a member, a machine set or the cluster's ControlPlaneStatus (where etcd and the
Kubernetes API are measured) changes. A condition that flips is told in an Event.
"""

from __future__ import annotations

from typing import Any

from herder.controllers.clusters.members import cluster_changes, cluster_machines, machine_sets
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, MACHINE_SET, ClusterStatus
from herder.resources.control_planes import CONTROL_PLANE_STATUS
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import find_condition, set_condition
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    labelled_owner,
    on_change,
    same_name,
)
from herder.runtime.outputs import Writes

_CONDITIONS = ("ControlPlaneReady", "EtcdHealthy", "KubernetesAPIReady", "Ready")


class ClusterStatusController(Controller):
    name = "ClusterStatus"
    primary = CLUSTER.kind
    outputs = (
        Writes(
            CLUSTER.kind,
            "status.phase",
            "status.machines",
            "status.observedGeneration",
            *(f"status.conditions[{kind}]" for kind in _CONDITIONS),
        ),
    )
    concurrency = 8

    def __init__(self) -> None:
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes("bootstrap", "conditions", "rollouts", "teardown")),
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
            Watch(CONTROL_PLANE_STATUS.kind, on_change(same_name(CLUSTER.kind), "status.conditions")),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            return None
        if cluster.metadata.deletion_timestamp:
            await self._destroying(ctx, cluster)
            return None
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
        return None

    async def _destroying(self, ctx: Context, cluster: Resource) -> None:
        """A cluster being deleted is not ready, for what its teardown waits for."""

        def record(_: Resource, status: ClusterStatus) -> None:
            status.phase = "Destroying"
            why = status.teardown or "tearing down the cluster's machines"
            status.set_condition("Ready", False, "Destroying", why, now=ctx.clock.rfc3339())

        await ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, record)

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
        health = await ctx.get(ObjectKey(CONTROL_PLANE_STATUS.kind, cluster.namespace, cluster.name))
        checked = (health.status or {}).get("conditions") if health is not None else None
        served = find_condition(status.get("conditions"), "EndpointReady") or {}
        for kind, source in (("EtcdHealthy", "EtcdHealthy"), ("KubernetesAPIReady", "APIReachable")):
            found = find_condition(checked, source) if bootstrapped else None
            if kind == "KubernetesAPIReady" and served.get("status") == "False":
                verdicts[kind] = (False, "NoEndpoint", str(served.get("message", "")))
            elif found is None:
                verdicts[kind] = (False, "NotBootstrapped", "etcd is not bootstrapped yet")
            else:
                verdicts[kind] = (
                    found.get("status") == "True",
                    str(found.get("reason")),
                    str(found.get("message")),
                )
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


def _wanted(machine_set: Resource) -> int:
    spec = machine_set.spec or {}
    if spec.get("machines") is not None:
        return len(spec["machines"])
    size = (spec.get("machineClass") or {}).get("size")
    if isinstance(size, int):
        return size
    counted = ((machine_set.status or {}).get("machines") or {}).get("wanted")
    if spec.get("machineRequestSet") and counted is not None:
        return int(counted)  # its request set's machine count, as its status says
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
