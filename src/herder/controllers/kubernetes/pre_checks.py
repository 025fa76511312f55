"""Kubernetes upgrade pre-checks: before a cluster's Kubernetes moves to a newer minor, the objects of its
workload cluster that the target would strand (written in an API version the target removes: the Talos
library's table) hold the upgrade, named on the Cluster's ``UpgradePreChecks`` condition with their
replacement. The condition carries the generation it was decided for, so a rollout never moves on a
verdict about another version. The ``herder.dev/skip-pre-checks`` annotation (an Operator's audited write)
lets the upgrade go regardless; the skip is told as a Warning Event.
"""

from __future__ import annotations

from dataclasses import dataclass

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.kubernetes.manifests import workload_api
from herder.controllers.kubernetes.workload import WorkloadAPI, WorkloadError
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.controllers.members import cluster_changes, cluster_machines
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, ClusterMachineSpec, ClusterSpec, ClusterStatus
from herder.resources.manifests import SKIP_PRE_CHECKS_ANNOTATION
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.talos.removed_apis import minor_of, removed_between

CONDITION = "UpgradePreChecks"
RECHECK_EVERY = 15.0


@dataclass(frozen=True)
class Stranded:
    kind: str
    namespace: str
    name: str
    api_version: str
    replacement: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where} ({self.api_version}): use {self.replacement}"


async def stranded(api: WorkloadAPI, current: str, target: str) -> list[Stranded]:
    """The objects an upgrade from ``current`` to ``target`` would strand: those of an API version it removes
    — where the replacement serves the same objects, only those last written in the removed version."""
    out = []
    for removed in removed_between(current, target):
        if await api.resource(removed.api_version, removed.kind) is None:
            continue
        replacement_served = await api.resource(removed.replacement.split(" ")[0], removed.kind) is not None
        for obj in await api.list(removed.api_version, removed.kind):
            fields = (obj.get("metadata") or {}).get("managedFields") or ()
            if replacement_served and not any(f.get("apiVersion") == removed.api_version for f in fields):
                continue
            metadata = obj.get("metadata") or {}
            out.append(
                Stranded(
                    removed.kind,
                    str(metadata.get("namespace") or ""),
                    str(metadata.get("name") or ""),
                    removed.api_version,
                    removed.replacement,
                )
            )
    return out


def pre_checks_passed(cluster: Resource) -> bool:
    """Whether the Cluster's Kubernetes upgrade, at its current generation, passed its pre-checks."""
    found = status_of(cluster, ClusterStatus).condition(CONDITION)
    return (
        found is not None
        and found.status == "True"
        and found.observed_generation == (cluster.metadata.generation or 0)
    )


class UpgradePreChecksController(Controller):
    name = "UpgradePreChecks"
    primary = CLUSTER.kind
    outputs = (Writes(CLUSTER.kind, f"status.conditions[{CONDITION}]"),)
    concurrency = 2
    watches = (Watch(CLUSTER.kind, cluster_changes("bootstrap", "endpoint")),)

    def __init__(self, keys: ClusterKeys, clients: KubernetesClients | None = None) -> None:
        self._keys = keys
        self._clients = clients or KubernetesClients()

    async def shutdown(self) -> None:
        await self._clients.close()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        if not status_of(cluster, ClusterStatus).bootstrapped:
            return None
        target = CLUSTER.spec_of(cluster, ClusterSpec).kubernetes_version
        versions = [
            CLUSTER_MACHINE.spec_of(m, ClusterMachineSpec).kubernetes_version
            for m in await cluster_machines(ctx, cluster)
        ]
        current = min(versions, key=minor_of, default=target)
        if minor_of(target) <= minor_of(current):
            await self._verdict(
                ctx, cluster, True, "NoMinorUpgrade", f"no minor upgrade to check (Kubernetes {target})"
            )
            return None
        if SKIP_PRE_CHECKS_ANNOTATION in cluster.metadata.annotations:
            before = status_of(cluster, ClusterStatus).condition(CONDITION)
            await self._verdict(
                ctx,
                cluster,
                True,
                "Skipped",
                f"pre-checks of the upgrade to {target} skipped ({SKIP_PRE_CHECKS_ANNOTATION})",
            )
            if before is None or before.reason != "Skipped":
                await ctx.event(
                    cluster,
                    "Warning",
                    "PreChecksSkipped",
                    f"the upgrade to Kubernetes {target} skips its pre-checks",
                )
            return None
        api, why = await workload_api(self._keys, self._clients, cluster)
        try:
            if api is None:
                raise WorkloadError(0, why)
            found = await stranded(api, current, target)
        except WorkloadError as exc:
            await self._verdict(
                ctx, cluster, False, "CheckFailed", f"cannot check the upgrade to {target}: {exc}"
            )
            return Result(requeue_after=RECHECK_EVERY)
        if found:
            listed = "; ".join(str(s) for s in found)
            message = f"the upgrade from {current} to {target} would strand {len(found)} object(s): {listed}"
            await self._verdict(ctx, cluster, False, "RemovedAPIs", message)
            return Result(requeue_after=RECHECK_EVERY)
        await self._verdict(ctx, cluster, True, "Passed", f"no objects in API versions removed by {target}")
        return None

    async def _verdict(self, ctx: Context, cluster: Resource, ok: bool, reason: str, message: str) -> None:
        generation = cluster.metadata.generation or 0

        def record(_: Resource, status: ClusterStatus) -> None:
            status.set_condition(
                CONDITION, ok, reason, message, observed_generation=generation, now=ctx.clock.rfc3339()
            )

        before = status_of(cluster, ClusterStatus).condition(CONDITION)
        await ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, record)
        if not ok and (before is None or before.reason != reason):
            await ctx.event(cluster, "Warning", reason, message)
