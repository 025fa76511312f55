"""Version rollouts: when a Cluster's ``talosVersion`` or ``kubernetesVersion`` changes, its machines are
moved to it a few at a time, by setting each ClusterMachine's own version (which the config generation,
the config apply and the Talos upgrade then carry out).

Talos moves first, then Kubernetes. Control planes go first, one at a time, each only while etcd has
every member healthy and every control plane is ready; then workers, as many at once as their machine
set's ``upgradeStrategy`` allows. A machine whose Talos upgrade failed stops the rollout: nothing else
moves until the cluster's version changes (setting the old one back cancels the rollout, and the
machines already moved are brought back). Each rollout, and the config rollout of changed patches, is
shown on the Cluster's ``status.rollouts``: what it does, how many machines are done, why it stopped.
A health check that has not passed (``health_checks``) holds every rollout, and a Kubernetes minor upgrade
waits for its pre-checks (``pre_checks``): the rollout is ``Held``, naming what it waits for.
Nothing moves on a locked cluster (``herder.dev/locked``): its unfinished rollouts say they wait for it.
"""

from __future__ import annotations

from typing import Literal

from herder.controllers.kubernetes.health_checks import health_hold
from herder.controllers.kubernetes.pre_checks import pre_checks_passed
from herder.controllers.members import (
    cluster_changes,
    cluster_machines,
    is_control_plane,
    locked_message,
    machine_sets,
)
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    MACHINE_SET,
    ClusterMachineConfigSpec,
    ClusterMachineSpec,
    ClusterMachineStatus,
    ClusterSpec,
    ClusterStatus,
    MachineSetSpec,
    Rollout,
    Strategy,
    is_locked,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes

VersionKind = Literal["Talos", "Kubernetes"]
_FIELDS: dict[VersionKind, str] = {"Talos": "talosVersion", "Kubernetes": "kubernetesVersion"}


class _Member:
    """A ClusterMachine as a rollout reads it: its wanted versions, its status, its newest config."""

    def __init__(self, obj: Resource, config: Resource | None) -> None:
        self.obj = obj
        self.name = obj.name
        self.spec = CLUSTER_MACHINE.spec_of(obj, ClusterMachineSpec)
        self.status = status_of(obj, ClusterMachineStatus)
        self.config = CLUSTER_MACHINE_CONFIG.spec_of(config, ClusterMachineConfigSpec) if config else None
        self.machine_set = obj.metadata.labels.get(MACHINE_SET_LABEL)

    def wants(self, kind: VersionKind) -> str:
        return self.spec.talos_version if kind == "Talos" else self.spec.kubernetes_version

    def runs(self, kind: VersionKind, target: str) -> bool:
        """Whether it has moved to ``target`` and is ready on it: Talos once its machine runs that version;
        Kubernetes once a config made for that version is applied."""
        if self.wants(kind) != target or not self.status.ready:
            return False
        if kind == "Talos":
            return self.status.talos_version == target
        config = self.config
        return (
            config is not None
            and config.kubernetes_version == target
            and self.status.config_hash == config.hash
        )

    def upgrade_failed(self, target: str) -> bool:
        upgrade = self.status.upgrade
        return upgrade is not None and upgrade.target == target and bool(upgrade.error)


class VersionRolloutController(Controller):
    name = "VersionRollout"
    primary = CLUSTER.kind
    outputs = (
        Writes(CLUSTER.kind, "status.rollouts"),
        Writes(CLUSTER_MACHINE.kind, "spec.talosVersion", "spec.kubernetesVersion"),
    )
    concurrency = 4
    # Its counts change in bursts (a new cluster's machines come up within a moment of each other), each
    # once a write; a rollout waits as long for its next machine.
    settle = 1.0
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
        status = status_of(cluster, ClusterStatus)
        if not status.bootstrapped:
            return None  # a cluster that is still forming gets the versions it was created with
        spec = CLUSTER.spec_of(cluster, ClusterSpec)
        members = [
            _Member(m, await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, m.namespace, m.name)))
            for m in await cluster_machines(ctx, cluster)
            if not m.metadata.deletion_timestamp
        ]
        created_with = all(
            m.wants("Talos") == spec.talos_version and m.wants("Kubernetes") == spec.kubernetes_version
            for m in members
        )
        running = all(
            m.runs("Talos", spec.talos_version) and m.runs("Kubernetes", spec.kubernetes_version)
            for m in members
        )
        if not status.rollouts and created_with and not running:
            # Bootstrapped, still forming: nothing is rolling, its members come up with the versions they
            # were made with (their Ready conditions say how far). Shown once they run them, in one write
            # rather than one per member ready.
            return None
        strategies = {
            s.name: MACHINE_SET.spec_of(s, MachineSetSpec).upgrade_strategy
            for s in await machine_sets(ctx, cluster)
        }
        healthy = status.condition_true("EtcdHealthy")
        held = health_hold(cluster)
        locked = locked_message(cluster.name) if is_locked(cluster) else ""
        talos = await self._roll(ctx, healthy, "Talos", spec.talos_version, members, strategies, locked, held)
        rollouts = [talos]
        if talos.state == "Done":
            pre_checks = status.condition("UpgradePreChecks")
            held_k8s = held or (
                ""
                if pre_checks_passed(cluster)
                else f"held: upgrade pre-checks: {pre_checks.message if pre_checks else 'not run yet'}"
            )
            rollouts.append(
                await self._roll(
                    ctx, healthy, "Kubernetes", spec.kubernetes_version, members, strategies, locked, held_k8s
                )
            )
        config = _config_rollout(members, held)
        if locked and config.state != "Done":
            config = config.model_copy(update={"state": "Rolling", "message": "waiting: " + locked})
        rollouts.append(config)
        shown = [r for r in rollouts if r.state != "Done" or r.total]

        def record(_: Resource, current: ClusterStatus) -> None:
            current.rollouts = shown

        await ctx.mutate_status(key, ClusterStatus, record)
        return None

    async def _roll(
        self,
        ctx: Context,
        etcd_healthy: bool,
        kind: VersionKind,
        target: str,
        members: list[_Member],
        strategies: dict[str, Strategy],
        locked: str,
        held: str = "",
    ) -> Rollout:
        """``held``: why no machine may move now (in-flight ones finish)."""
        done = [m for m in members if m.runs(kind, target)]
        moved = [m for m in members if m.wants(kind) == target]
        waiting = [m for m in members if m.wants(kind) != target]
        failed = [m for m in moved if m.upgrade_failed(target)] if kind == "Talos" else []

        def report(state: Literal["Rolling", "Done", "Stopped", "Held"], message: str) -> Rollout:
            return Rollout(
                kind=kind, target=target, done=len(done), total=len(members), state=state, message=message
            )

        if not waiting and len(done) == len(members):
            return report("Done", f"every machine runs {kind} {target}")
        if locked:
            return report("Rolling", "waiting: " + locked)
        if failed:
            upgrade = failed[0].status.upgrade
            error = upgrade.error if upgrade is not None else ""
            return report(
                "Stopped",
                f"stopped: the upgrade of machine {failed[0].name} to {target} failed: {error}; "
                "change the cluster's talosVersion (back) to go on",
            )
        control_planes = [m for m in members if is_control_plane(m.obj)]
        cp_waiting = [m for m in waiting if m in control_planes]
        in_flight = [m for m in moved if not m.runs(kind, target)]
        cp_in_flight = [m for m in in_flight if m in control_planes]
        if cp_in_flight:
            return report("Rolling", f"control plane {cp_in_flight[0].name} is moving to {target}")
        if held:
            return report("Held", held)
        if cp_waiting:
            if not etcd_healthy or not all(m.status.ready for m in control_planes):
                return report("Rolling", "waiting for etcd and every control plane to be healthy")
            await self._move(ctx, cp_waiting[0], kind, target)
            return report("Rolling", f"moving control plane {cp_waiting[0].name} to {target}")
        moving = []
        for set_name, strategy in sorted(strategies.items()):
            in_set = [m for m in members if m.machine_set == set_name]
            busy = sum(1 for m in in_flight if m in in_set)
            room = strategy.parallelism(len(in_set)) - busy
            for member in [m for m in waiting if m in in_set][: max(room, 0)]:
                await self._move(ctx, member, kind, target)
                moving.append(member.name)
        message = (
            f"moving {', '.join(moving)} to {target}"
            if moving
            else f"{len(in_flight)} machine(s) moving to {target}"
        )
        return report("Rolling", message)

    async def _move(self, ctx: Context, member: _Member, kind: VersionKind, target: str) -> None:
        field = _FIELDS[kind]

        def move(m: Resource) -> None:
            m.spec = {**(m.spec or {}), field: target}

        await ctx.mutate(ObjectKey.of(member.obj), move)
        await ctx.event(
            member.obj, "Normal", f"{kind}Rollout", f"moving machine {member.name} to {kind} {target}"
        )


def _config_rollout(members: list[_Member], held: str = "") -> Rollout:
    """How far the newest generated configs are applied (``held``: why changed ones wait)."""
    current = [m for m in members if m.config is not None and m.status.config_hash == m.config.hash]
    failing = [m for m in members if m.status.apply.last_error]
    done, total = len(current), len(members)
    if done == total:
        return Rollout(kind="Config", done=done, state="Done", message="every machine runs its newest config")
    if failing:
        error = failing[0].status.apply.last_error
        return Rollout(
            kind="Config",
            done=done,
            total=total,
            state="Stopped",
            message=f"machine {failing[0].name}: {error}",
        )
    if held:
        return Rollout(kind="Config", done=done, total=total, state="Held", message=held)
    return Rollout(
        kind="Config", done=done, total=total, state="Rolling", message=f"{total - done} machine(s) to update"
    )
