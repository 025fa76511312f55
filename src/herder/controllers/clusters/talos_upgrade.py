"""Talos upgrades of single machines: a running ClusterMachine whose ``spec.talosVersion`` differs from the
version its machine runs is upgraded in place with the Talos Upgrade call (the installer image of that
version), as ``talosctl upgrade`` does, once.

The request is recorded on ``status.upgrade`` (target, the version it came from, when) before it is
sent. The machine then reboots, and herder's link to it reconnects: a machine that comes back on the new
version is done; one that comes back on the old version (its new system did not boot), that does not go
down within a while (Talos refused), or that stays away, has failed. A failure is kept with its reason
on ``status.upgrade`` and in a Warning event, and the machine is not tried again for that version: the
rollout stops there until the cluster's version changes. No upgrade starts on a locked cluster
(``herder.dev/locked``); one already under way is followed to its end.
"""

from __future__ import annotations

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.installer import member_installer
from herder.controllers.members import cluster_of, lock_changes, locked_cluster, machine_of
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    ClusterMachineSpec,
    ClusterMachineStatus,
    UpgradeStatus,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    on_change,
    same_name,
)
from herder.runtime.index import LabelIndex
from herder.runtime.outputs import Writes
from herder.talos.machine import MachineAPIError
from herder.talos.machine.pool import ClientPool

# A machine that has not gone down this long after an upgrade was asked of it did not start it.
START_TIMEOUT = 120.0
# A machine out of reach this long after an upgrade was asked of it did not come back.
RETURN_TIMEOUT = 900.0
# How often an upgrade in flight is looked at while nothing else brings it back.
FOLLOW_EVERY = 10.0


class TalosUpgradeController(Controller):
    name = "TalosUpgrade"
    primary = CLUSTER_MACHINE.kind
    outputs = (Writes(CLUSTER_MACHINE.kind, "status.upgrade"),)
    concurrency = 8

    def __init__(
        self, keys: ClusterKeys, *, start_timeout: float = START_TIMEOUT, clients: ClientPool | None = None
    ) -> None:
        self._keys = keys
        self._clients = clients if clients is not None else ClientPool(keep=8, timeout=60)
        self._start_timeout = start_timeout
        self._members = LabelIndex(CLUSTER_MACHINE.kind, CLUSTER_LABEL)
        self.watches = (
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(self._members.track, "spec", "status.configHash", "metadata.deletionTimestamp"),
            ),
            # Unlocking a cluster lets its held back upgrades start.
            Watch(CLUSTER.kind, lock_changes(self._members.by_name())),
            Watch(
                MACHINE.kind,
                on_change(
                    same_name(CLUSTER_MACHINE.kind),
                    "status.talosVersion",
                    "status.stage",
                    "status.connected",
                    "status.connectedAt",
                ),
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        member = await ctx.get(key)
        if member is None or member.metadata.deletion_timestamp:
            return None
        target = CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec).talos_version
        status = status_of(member, ClusterMachineStatus)
        upgrade = status.upgrade
        machine = await machine_of(ctx, member)
        if machine is None or not status.config_hash:
            return None
        reached = status_of(machine, MachineStatus)
        running = reached.talos_version
        if upgrade is not None and upgrade.target == target:
            if upgrade.error:
                return None  # failed for this version: not tried again
            return await self._follow(ctx, member, upgrade, reached)
        if not reached.running or running == target or not running:
            if upgrade is not None:
                await self._record(ctx, key, None)  # the target moved on (or back): nothing is pending
            return None
        if await locked_cluster(ctx, member):
            return None
        return await self._start(ctx, member, machine, target, running)

    async def _start(
        self, ctx: Context, member: Resource, machine: Resource, target: str, running: str
    ) -> Result | None:
        cluster = await cluster_of(ctx, member)
        view = await self._keys.of(cluster) if cluster is not None else None
        if view is None:
            return None
        requested = UpgradeStatus(target=target, fromVersion=running, requestedAt=ctx.clock.micro())
        await self._record(ctx, ObjectKey.of(member), requested)
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        image = await member_installer(ctx, member, target)
        try:
            async with self._clients.client(endpoint, view.talos) as client:
                await client.upgrade(image)
        except MachineAPIError as exc:
            await self._fail(ctx, member, requested, f"the upgrade was refused: {exc}")
            return None
        await ctx.event(member, "Normal", "Upgrading", f"upgrading Talos from {running} to {target}")
        return Result(requeue_after=self._start_timeout)

    async def _follow(
        self, ctx: Context, member: Resource, upgrade: UpgradeStatus, reached: MachineStatus
    ) -> Result | None:
        target, running = upgrade.target, reached.talos_version
        if reached.running and running == target:
            await self._record(ctx, ObjectKey.of(member), None)
            await ctx.event(member, "Normal", "Upgraded", f"Talos {target} runs")
            return None
        came_back = reached.connected_at > upgrade.requested_at
        waited = ctx.clock.age(upgrade.requested_at) or 0.0
        if reached.running and came_back:
            await self._fail(
                ctx, member, upgrade, f"the machine came back on {running}: the new system did not boot"
            )
        elif reached.running and waited > self._start_timeout:
            await self._fail(ctx, member, upgrade, f"the machine did not start the upgrade in {waited:.0f}s")
        elif not reached.running and waited > RETURN_TIMEOUT:
            await self._fail(ctx, member, upgrade, f"the machine did not come back in {waited:.0f}s")
        else:
            return Result(requeue_after=FOLLOW_EVERY)
        return None

    async def _fail(self, ctx: Context, member: Resource, upgrade: UpgradeStatus, error: str) -> None:
        await self._record(ctx, ObjectKey.of(member), upgrade.model_copy(update={"error": error}))
        await ctx.event(member, "Warning", "UpgradeFailed", f"upgrade to {upgrade.target} failed: {error}")

    async def _record(self, ctx: Context, key: ObjectKey, upgrade: UpgradeStatus | None) -> None:
        def record(_: Resource, status: ClusterMachineStatus) -> None:
            status.upgrade = upgrade

        await ctx.mutate_status(key, ClusterMachineStatus, record)
