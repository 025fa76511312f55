"""Config apply: each ClusterMachine's generated config is applied to its machine through the Talos API,
and again whenever the config changes.

A machine in maintenance mode gets its config without a client certificate (it then installs and boots
into the cluster); a configured one with herder's certificate from the cluster's Talos CA, in AUTO mode
(no reboot when none is needed). The applied config's hash is kept on ``status.configHash``, and the config
itself, as a redacted diff, in the machine's MachineConfigHistory (``config_history``). A failed
apply keeps its error and attempt count on ``status.apply`` (and in a Warning event) and is retried with
backoff until an attempt succeeds; nothing wipes the error before that.

A configured machine that runs its generated config already (a machine of an imported cluster) is not
given it again: its running config is read first and, when it says the same, recorded as applied
("adopted"), locked cluster or not, as that changes nothing on the machine.

Nothing is applied to the machines of a locked cluster (``herder.dev/locked``) until it is unlocked.
A changed config rolls out: a locked machine gets no updates; a machine waiting for its Talos upgrade
gets its new config after it; control planes take theirs one at a time while etcd is healthy, and
workers as many at once as their set's ``updateStrategy`` allows, counting the machines that are not
ready or still rebooting for a config they were given; none while a health check of the cluster fails. (What the member's machine is doing, and whether
it is ready, is ``cluster_machine_readiness``'s.)
"""

from __future__ import annotations

import asyncio

import yaml

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters import config_history
from herder.controllers.kubernetes.health_checks import health_hold
from herder.controllers.members import cluster_of, labelled, lock_changes, locked_cluster, machine_of
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ApplyStatus,
    ClusterMachineConfigSpec,
    ClusterMachineSpec,
    ClusterMachineStatus,
    ClusterStatus,
    MachineSetNodeSpec,
    MachineSetSpec,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    on_change,
    same_name,
)
from herder.runtime.index import LabelIndex
from herder.runtime.outputs import Writes
from herder.talos.config_import import same_config
from herder.talos.machine import ApplyMode, MachineAPIError
from herder.talos.machine.pool import ClientPool
from herder.workqueue import retry_delay

# Retries of a failed apply: doubling from a second, at most every five minutes.
RETRY_FIRST, RETRY_MAX = 1.0, 300.0
# How soon an update held back by its rollout looks for room again.
ROLLOUT_WAIT = 2.0


class ConfigApplyController(Controller):
    name = "ConfigApply"
    primary = CLUSTER_MACHINE.kind
    outputs = (Writes(CLUSTER_MACHINE.kind, "status.apply", "status.configHash"), config_history.OUTPUT)
    concurrency = 8

    def __init__(self, keys: ClusterKeys, clients: ClientPool | None = None) -> None:
        self._keys = keys
        self._clients = clients if clients is not None else ClientPool(keep=32, timeout=30)
        self._locks: dict[str, asyncio.Lock] = {}
        self._members = LabelIndex(CLUSTER_MACHINE.kind, CLUSTER_LABEL)
        self.watches = (
            # Its versions (an upgrade goes first) and the upgrade's progress.
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(self._members.track, "spec", "status.upgrade", "metadata.deletionTimestamp"),
            ),
            # Unlocking a cluster lets its held back configs go.
            Watch(CLUSTER.kind, lock_changes(self._members.by_name())),
            Watch(CLUSTER_MACHINE_CONFIG.kind, controller_owner(CLUSTER_MACHINE.kind)),
            # Where the machine is, whether it answers, the version it runs, when it came back.
            Watch(
                MACHINE.kind,
                on_change(
                    same_name(CLUSTER_MACHINE.kind),
                    "spec",
                    "status.connected",
                    "status.maintenance",
                    "status.talosVersion",
                    "status.connectedAt",
                ),
            ),
            Watch(MACHINE_SET_NODE.kind, same_name(CLUSTER_MACHINE.kind)),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        member = await ctx.get(key)
        if member is None or member.metadata.deletion_timestamp:
            return None
        machine = await machine_of(ctx, member)
        if machine is None:
            return None
        status = status_of(member, ClusterMachineStatus)
        reached = status_of(machine, MachineStatus)
        if status.apply.rebooting and reached.connected_at > status.apply.applied_at:
            await ctx.mutate_status(key, ClusterMachineStatus, _came_back)
        config = await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, key.namespace, key.name))
        if config is None or not reached.connected:
            return None
        wanted = CLUSTER_MACHINE_CONFIG.spec_of(config, ClusterMachineConfigSpec)
        if (
            not status.config_hash
            and not reached.maintenance
            and await self._adopt(ctx, member, machine, wanted)
        ):
            return None
        if wanted.hash == status.config_hash or await locked_cluster(ctx, member):
            return None
        if not status.config_hash:
            retry = await self._apply(ctx, member, status, machine, reached, wanted)
        else:
            retry = await self._update(ctx, member, status, machine, reached, wanted)
        return Result(requeue_after=retry) if retry is not None else None

    async def _adopt(
        self, ctx: Context, member: Resource, machine: Resource, config: ClusterMachineConfigSpec
    ) -> bool:
        """Record ``config`` as applied when the machine runs it already; whether it does."""
        cluster = await cluster_of(ctx, member)
        view = await self._keys.of(cluster) if cluster is not None else None
        if view is None:
            return False
        try:
            async with self._clients.client(
                MACHINE.spec_of(machine, MachineSpec).endpoint, view.talos
            ) as client:
                running = (await client.running_config()).decode("utf-8", "replace")
        except MachineAPIError:
            return False  # then it is applied as to any configured machine
        try:
            if not same_config(running, config.config):
                return False
        except yaml.YAMLError:
            return False
        adopted = ApplyStatus(applied_at=ctx.clock.micro())

        def record(_: Resource, current: ClusterMachineStatus) -> None:
            current.config_hash = config.hash
            current.apply = adopted

        await config_history.record_applied(
            ctx, member, config.config, config.hash, config.talos_version, "adopted"
        )
        await ctx.mutate_status(ObjectKey.of(member), ClusterMachineStatus, record)
        await ctx.event(
            member, "Normal", "ConfigAdopted", f"config {config.hash[:12]} is the one the machine runs"
        )
        return True

    async def _update(
        self,
        ctx: Context,
        member: Resource,
        status: ClusterMachineStatus,
        machine: Resource,
        reached: MachineStatus,
        config: ClusterMachineConfigSpec,
    ) -> float | None:
        """Apply a changed config to a configured machine when its rollout lets it: not locked, not in the
        middle of a Talos upgrade, and (control planes one at a time behind a healthy etcd, workers by
        their set's ``updateStrategy``) without taking more machines down at once than allowed."""
        node = await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, member.namespace, member.name))
        if node is not None and MACHINE_SET_NODE.spec_of(node, MachineSetNodeSpec).locked:
            return None  # a locked machine gets no updates until it is unlocked (its node's event)
        upgrade = status.upgrade
        wanted = CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec)
        if wanted.talos_version != reached.talos_version or (upgrade is not None and not upgrade.error):
            return None  # upgraded first, updated after (the upgrade's events bring us back)
        cluster = await cluster_of(ctx, member)
        if cluster is not None and health_hold(cluster):
            return ROLLOUT_WAIT  # a failing health check holds config rollouts until it passes
        async with self._rollout_lock(member, wanted):
            if not await self._room(ctx, member, wanted):
                return ROLLOUT_WAIT
            return await self._apply(ctx, member, status, machine, reached, config)

    def _rollout_lock(self, member: Resource, wanted: ClusterMachineSpec) -> asyncio.Lock:
        # Decisions of one set (or one cluster's control planes) are taken one at a time, so that two
        # members cannot both find room for the last place.
        labels = member.metadata.labels
        scope = (
            f"{member.namespace}/{labels.get(CLUSTER_LABEL)}/control-planes"
            if wanted.role == "controlplane"
            else f"{member.namespace}/{labels.get(MACHINE_SET_LABEL)}"
        )
        return self._locks.setdefault(scope, asyncio.Lock())

    async def _room(self, ctx: Context, member: Resource, wanted: ClusterMachineSpec) -> bool:
        cluster = await cluster_of(ctx, member)
        if cluster is None:
            return False
        if wanted.role == "controlplane":
            if not status_of(cluster, ClusterStatus).condition_true("EtcdHealthy"):
                return False
            peers = [
                m
                for m in await labelled(
                    ctx, CLUSTER_MACHINE.kind, member.namespace, CLUSTER_LABEL, cluster.name
                )
                if CLUSTER_MACHINE.spec_of(m, ClusterMachineSpec).role == "controlplane"
                and m.name != member.name
            ]
            allowed = 1
        else:
            set_name = member.metadata.labels.get(MACHINE_SET_LABEL, "")
            peers = [
                m
                for m in await labelled(
                    ctx, CLUSTER_MACHINE.kind, member.namespace, MACHINE_SET_LABEL, set_name
                )
                if m.name != member.name
            ]
            machine_set = await ctx.get(ObjectKey(MACHINE_SET.kind, member.namespace, set_name))
            strategy = (
                MACHINE_SET.spec_of(machine_set, MachineSetSpec).update_strategy if machine_set else None
            )
            allowed = strategy.parallelism(len(peers) + 1) if strategy is not None else 1
        down = sum(1 for m in peers if _down(status_of(m, ClusterMachineStatus)))
        return down < allowed

    async def _apply(
        self,
        ctx: Context,
        member: Resource,
        status: ClusterMachineStatus,
        machine: Resource,
        reached: MachineStatus,
        config: ClusterMachineConfigSpec,
    ) -> float | None:
        """Apply the config; None on success, else how long to wait before trying again."""
        credentials = None
        if not reached.maintenance:
            cluster = await cluster_of(ctx, member)
            view = await self._keys.of(cluster) if cluster is not None else None
            if view is None:
                return None
            credentials = view.talos
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        key = ObjectKey.of(member)
        try:
            async with self._clients.client(endpoint, credentials) as client:
                result = await client.apply_configuration(config.config, mode=ApplyMode.AUTO)
        except MachineAPIError as exc:
            error = str(exc)
            attempts = status.apply.attempts + 1
            when = ctx.clock.rfc3339()

            def failed(_: Resource, current: ClusterMachineStatus) -> None:
                current.apply.attempts = attempts
                current.apply.last_error = error
                current.apply.last_error_time = when

            await ctx.mutate_status(key, ClusterMachineStatus, failed)
            await ctx.event(member, "Warning", "ApplyFailed", f"attempt {attempts}: {error}")
            return retry_delay(attempts, RETRY_FIRST, RETRY_MAX)
        applied = ApplyStatus(
            applied_at=ctx.clock.micro(),
            rebooting=not reached.maintenance and result.mode == ApplyMode.REBOOT,
        )

        def succeeded(_: Resource, current: ClusterMachineStatus) -> None:
            current.config_hash = config.hash
            current.apply = applied

        how = (
            "in maintenance mode"
            if reached.maintenance
            else f"({result.mode.name.lower().replace('_', ' ')})"
        )
        # Recorded before the status says so: a crash in between applies it again, and records it again.
        mode = "maintenance" if reached.maintenance else result.mode.name.lower().replace("_", " ")
        await config_history.record_applied(
            ctx, member, config.config, config.hash, config.talos_version, mode
        )
        await ctx.mutate_status(key, ClusterMachineStatus, succeeded)
        if status.config_hash or status.apply.attempts or not reached.maintenance:
            # A new member's first config, applied at the first attempt, is part of its joining (which
            # the allocation tells): its history records it, and an Event each was a write per machine.
            # A change, and a success after failed attempts (after their Warnings), are told.
            await ctx.event(member, "Normal", "ConfigApplied", f"config {config.hash[:12]} applied {how}")
        return None


def _came_back(_: Resource, status: ClusterMachineStatus) -> None:
    """The machine came back from the reboot its new config asked for."""
    status.apply.rebooting = False


def _down(status: ClusterMachineStatus) -> bool:
    """Whether a member is out of service for a rollout: not running, or rebooting for its new config.
    (One that runs and merely waits for its own new config is in service.)"""
    return status.stage != "Running" or status.apply.rebooting
