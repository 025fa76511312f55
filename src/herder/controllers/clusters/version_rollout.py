"""Version rollouts: when a Cluster's ``talosVersion`` or ``kubernetesVersion`` changes, its machines are
moved to it a few at a time, by setting each ClusterMachine's own version (which the config generation,
the config apply and the Talos upgrade then carry out).

Talos moves first, then Kubernetes. Control planes go first, one at a time, each only while etcd has
every member healthy and every control plane is ready; then workers, as many at once as their machine
set's ``upgradeStrategy`` allows. A machine whose Talos upgrade failed stops the rollout: nothing else
moves until the cluster's version changes (setting the old one back cancels the rollout, and the
machines already moved are brought back). Each rollout, and the config rollout of changed patches, is
shown on the Cluster's ``status.rollouts``: what it does, how many machines are done, why it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from herder.controllers.clusters.members import cluster_changes, cluster_machines, machine_sets
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    MACHINE_SET,
    ClusterSpec,
    MachineSetSpec,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL
from herder.resources.status import condition_true
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes

_FIELDS = {"Talos": "talosVersion", "Kubernetes": "kubernetesVersion"}


class VersionRolloutController(Controller):
    name = "VersionRollout"
    primary = CLUSTER.kind
    outputs = (
        Writes(CLUSTER.kind, "status.rollouts"),
        Writes(CLUSTER_MACHINE.kind, "spec.talosVersion", "spec.kubernetesVersion"),
    )
    concurrency = 4
    watches = (
        Watch(CLUSTER.kind, cluster_changes("bootstrap", "conditions")),
        Watch(
            CLUSTER_MACHINE.kind,
            on_change(
                labelled_owner(CLUSTER.kind, CLUSTER_LABEL),
                "spec",
                "status.ready",
                "status.talosVersion",
                "status.configHash",
                "status.upgrade",
                "status.apply.lastError",
                "metadata.deletionTimestamp",
            ),
        ),
        # A set's upgrade strategy is all a rollout reads of it.
        Watch(
            MACHINE_SET.kind,
            on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "spec", "metadata.deletionTimestamp"),
        ),
    )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        if not ((cluster.status or {}).get("bootstrap") or {}).get("completedAt"):
            return None  # a cluster that is still forming gets the versions it was created with
        spec = CLUSTER.spec_of(cluster, ClusterSpec)
        members = [m for m in await cluster_machines(ctx, cluster) if not m.metadata.deletion_timestamp]
        configs = {
            m.name: await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, m.namespace, m.name))
            for m in members
        }
        strategies = {
            s.name: MACHINE_SET.spec_of(s, MachineSetSpec).upgrade_strategy
            for s in await machine_sets(ctx, cluster)
        }
        rollouts = []
        talos = await self._roll(ctx, cluster, "Talos", spec.talos_version, members, strategies, _talos_done)
        rollouts.append(talos)
        kubernetes_done = _kubernetes_done(configs)
        if talos["state"] == "Done":
            rollouts.append(
                await self._roll(
                    ctx, cluster, "Kubernetes", spec.kubernetes_version, members, strategies, kubernetes_done
                )
            )
        rollouts.append(_config_rollout(members, configs))

        def record(_: Resource, status: dict[str, Any]) -> None:
            status["rollouts"] = [r for r in rollouts if r["state"] != "Done" or r["total"]]

        await ctx.mutate_status(key, record)
        return None

    async def _roll(
        self,
        ctx: Context,
        cluster: Resource,
        kind: str,
        target: str,
        members: list[Resource],
        strategies: dict[str, Any],
        is_done: Callable[[Resource, str], bool],
    ) -> dict[str, Any]:
        field = _FIELDS[kind]
        done = [m for m in members if is_done(m, target)]
        moved = [m for m in members if (m.spec or {}).get(field) == target]
        waiting = [m for m in members if (m.spec or {}).get(field) != target]
        failed = [m for m in moved if _upgrade_failed(m, target)] if kind == "Talos" else []
        report = {"kind": kind, "target": target, "done": len(done), "total": len(members)}
        if not waiting and len(done) == len(members):
            return {**report, "state": "Done", "message": f"every machine runs {kind} {target}"}
        if failed:
            error = ((failed[0].status or {}).get("upgrade") or {}).get("error", "")
            message = (
                f"stopped: the upgrade of machine {failed[0].name} to {target} failed: {error}; "
                "change the cluster's talosVersion (back) to go on"
            )
            return {**report, "state": "Stopped", "message": message}
        control_planes = [m for m in members if (m.spec or {}).get("role") == "controlplane"]
        cp_waiting = [m for m in waiting if m in control_planes]
        in_flight = [m for m in moved if not is_done(m, target)]
        if cp_waiting or any(m in control_planes for m in in_flight):
            if any(m in control_planes for m in in_flight):
                first = next(m for m in in_flight if m in control_planes)
                return {
                    **report,
                    "state": "Rolling",
                    "message": f"control plane {first.name} is moving to {target}",
                }
            if not condition_true(cluster.status, "EtcdHealthy") or not all(
                (m.status or {}).get("ready") for m in control_planes
            ):
                return {
                    **report,
                    "state": "Rolling",
                    "message": "waiting for etcd and every control plane to be healthy",
                }
            await self._move(ctx, cp_waiting[0], field, target)
            return {
                **report,
                "state": "Rolling",
                "message": f"moving control plane {cp_waiting[0].name} to {target}",
            }
        moving = []
        for set_name, strategy in sorted(strategies.items()):
            in_set = [m for m in members if m.metadata.labels.get(MACHINE_SET_LABEL) == set_name]
            busy = sum(1 for m in in_flight if m in in_set)
            room = strategy.parallelism(len(in_set)) - busy
            for member in [m for m in waiting if m in in_set][: max(room, 0)]:
                await self._move(ctx, member, field, target)
                moving.append(member.name)
        message = (
            f"moving {', '.join(moving)} to {target}"
            if moving
            else f"{len(in_flight)} machine(s) moving to {target}"
        )
        return {**report, "state": "Rolling", "message": message}

    async def _move(self, ctx: Context, member: Resource, field: str, target: str) -> None:
        def move(m: Resource) -> None:
            m.spec = {**(m.spec or {}), field: target}

        await ctx.mutate(ObjectKey.of(member), move)
        what = "Talos" if field == "talosVersion" else "Kubernetes"
        await ctx.event(
            member, "Normal", f"{what}Rollout", f"moving machine {member.name} to {what} {target}"
        )


def _talos_done(member: Resource, target: str) -> bool:
    status = member.status or {}
    return (
        (member.spec or {}).get("talosVersion") == target
        and status.get("talosVersion") == target
        and bool(status.get("ready"))
    )


def _upgrade_failed(member: Resource, target: str) -> bool:
    upgrade = (member.status or {}).get("upgrade") or {}
    return upgrade.get("target") == target and bool(upgrade.get("error"))


def _kubernetes_done(configs: dict[str, Resource | None]) -> Callable[[Resource, str], bool]:
    """A machine runs a Kubernetes version once a config made for it is applied and it is ready."""

    def done(member: Resource, target: str) -> bool:
        config = configs.get(member.name)
        spec = (config.spec or {}) if config is not None else {}
        status = member.status or {}
        return (
            (member.spec or {}).get("kubernetesVersion") == target
            and spec.get("kubernetesVersion") == target
            and status.get("configHash") == spec.get("hash")
            and bool(status.get("ready"))
        )

    return done


def _config_rollout(members: list[Resource], configs: dict[str, Resource | None]) -> dict[str, Any]:
    """How far the newest generated configs are applied."""
    current = [
        m
        for m in members
        if (c := configs.get(m.name)) is not None
        and (m.status or {}).get("configHash") == (c.spec or {}).get("hash")
    ]
    failing = [m for m in members if ((m.status or {}).get("apply") or {}).get("lastError")]
    report = {"kind": "Config", "done": len(current), "total": len(members)}
    if len(current) == len(members):
        return {**report, "total": 0, "state": "Done", "message": "every machine runs its newest config"}
    if failing:
        error = ((failing[0].status or {}).get("apply") or {}).get("lastError", "")
        return {**report, "state": "Stopped", "message": f"machine {failing[0].name}: {error}"}
    return {**report, "state": "Rolling", "message": f"{len(members) - len(current)} machine(s) to update"}
