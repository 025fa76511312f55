"""Teardown: a ClusterMachine being deleted gives its machine back, reset to maintenance mode.

A control plane of a cluster that stays first waits for etcd to be healthy without it, forfeits etcd
leadership and leaves etcd; then the machine is reset (its system disk wiped, rebooted into maintenance)
and herder waits until it reports maintenance again before letting the member go. A machine herder
cannot reach keeps the member (and so its cluster's teardown) waiting, saying so on ``status.teardown``
and in a Warning event, until it comes back or an Admin lets it go with ``herder machine release UUID
--force`` (annotation ``herder.dev/force-release`` on the Machine). A control plane let go so (gone,
unreachable) first has its etcd member removed through a control plane that runs, so that no stray
member is left in a cluster that stays. A member of a locked cluster (``herder.dev/locked``) is neither
reset nor released until the cluster is unlocked; ``status.teardown`` says so. A member of an aborted import
(``herder.dev/import-aborted``) is released at once, its machine left as it runs: herder never made it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.cluster_machines import TEARDOWN_FINALIZER
from herder.controllers.members import (
    cluster_machines,
    cluster_of,
    is_control_plane,
    lock_changes,
    locked_cluster,
    locked_message,
    machine_of,
    running_control_planes,
)
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    ClusterMachineStatus,
    ClusterStatus,
    is_import_aborted,
)
from herder.resources.machines import (
    CLUSTER_LABEL,
    FORCE_RELEASE_ANNOTATION,
    MACHINE,
    MachineSpec,
    MachineStatus,
)
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
from herder.talos.machine import FailedPrecondition, MachineAPIError, WipeMode
from herder.talos.machine.client import split_endpoint
from herder.talos.machine.pool import ClientPool

_RETRY = 5.0


class ClusterMachineTeardownController(Controller):
    name = "ClusterMachineTeardown"
    primary = CLUSTER_MACHINE.kind
    outputs = (
        Writes(CLUSTER_MACHINE.kind, "status.teardown", f"metadata.finalizers[{TEARDOWN_FINALIZER}]"),
        Writes(MACHINE.kind, f"metadata.annotations[{FORCE_RELEASE_ANNOTATION}]"),
    )
    concurrency = 8

    def __init__(self, keys: ClusterKeys, clients: ClientPool | None = None) -> None:
        self._keys = keys
        self._clients = clients if clients is not None else ClientPool(keep=8, timeout=30)
        self._members = LabelIndex(CLUSTER_MACHINE.kind, CLUSTER_LABEL)
        self.watches = (
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(self._members.track, "metadata.deletionTimestamp", "metadata.finalizers"),
            ),
            # Unlocking a cluster lets its members leave.
            Watch(CLUSTER.kind, lock_changes(self._members.by_name())),
            Watch(
                MACHINE.kind,
                on_change(
                    same_name(CLUSTER_MACHINE.kind),
                    "status.stage",
                    "status.connected",
                    "status.maintenance",
                    "metadata.annotations",
                ),
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        member = await ctx.get(key)
        if member is None or not member.metadata.deletion_timestamp:
            return None
        if TEARDOWN_FINALIZER not in member.metadata.finalizers:
            return None
        machine = await machine_of(ctx, member)
        status = status_of(member, ClusterMachineStatus)
        cluster = await cluster_of(ctx, member)
        if cluster is not None and is_import_aborted(cluster):
            await ctx.event(
                member, "Normal", "Released", f"machine {member.name} left as it runs (import aborted)"
            )
            await ctx.remove_finalizer(member, TEARDOWN_FINALIZER)
            return None
        locked = await locked_cluster(ctx, member)
        if locked:
            await self._waiting(ctx, member, status, "waiting: " + locked_message(locked))
            return None
        if machine is None or FORCE_RELEASE_ANNOTATION in machine.metadata.annotations:
            if machine is not None and not await self._removed_from_etcd(ctx, member, status, machine):
                return Result(requeue_after=_RETRY)
            return await self._release(ctx, member, machine, forced=machine is not None)
        reached = status_of(machine, MachineStatus)
        if not status.config_hash or reached.in_maintenance:
            return await self._release(ctx, member, machine, forced=False)
        if not reached.connected:
            await self._waiting(
                ctx,
                member,
                status,
                f"machine {member.name} is unreachable; it is released once herder reaches it again, or by "
                f"`herder machine release {member.name} --force`",
                warn=True,
            )
            return Result(requeue_after=30)
        if reached.stage in ("Resetting", "Rebooting", "Booting", "ShuttingDown"):
            return None  # on its way back to maintenance: its events bring us back
        view = await self._keys.of(cluster) if cluster is not None else None
        staying = cluster is not None and not cluster.metadata.deletion_timestamp
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        try:
            async with self._clients.client(endpoint, view.talos if view else None) as client:
                if is_control_plane(member) and staying and status.etcd_member:
                    assert cluster is not None
                    if not status_of(cluster, ClusterStatus).condition_true("EtcdHealthy"):
                        await self._waiting(
                            ctx, member, status, "waiting for etcd to be healthy before leaving it"
                        )
                        return Result(requeue_after=_RETRY)
                    await self._waiting(ctx, member, status, "leaving etcd")
                    await client.etcd_forfeit_leadership()
                    await client.etcd_leave_cluster()
                    await ctx.event(member, "Normal", "LeftEtcd", f"machine {member.name} left etcd")
                await self._waiting(ctx, member, status, "resetting the machine to maintenance mode")
                await client.reset(graceful=False, reboot=True, wipe_mode=WipeMode.SYSTEM_DISK)
        except FailedPrecondition:
            return Result(requeue_after=_RETRY)  # busy with another sequence: try again shortly
        except MachineAPIError as exc:
            await self._waiting(ctx, member, status, f"reset failed: {exc}", warn=True)
            return Result(requeue_after=_RETRY)
        await ctx.event(member, "Normal", "Resetting", f"machine {member.name} is being reset")
        return None

    async def _removed_from_etcd(
        self, ctx: Context, member: Resource, status: ClusterMachineStatus, machine: Resource
    ) -> bool:
        """A control plane let go without a reset (gone, unreachable) leaves no stray etcd member behind:
        the member of its address is removed through a control plane that runs (EtcdRemoveMemberByID),
        while etcd keeps a quorum without it. Whether nothing (more) is to be done."""
        cluster = await cluster_of(ctx, member)
        if (
            not is_control_plane(member)
            or not status.etcd_member
            or cluster is None
            or cluster.metadata.deletion_timestamp
        ):
            return True
        view = await self._keys.of(cluster)
        gone_host = split_endpoint(MACHINE.spec_of(machine, MachineSpec).endpoint)[0]
        running = {e: u for e, u in (await running_control_planes(ctx, cluster)).items() if u != member.name}
        others = [
            m for m in await cluster_machines(ctx, cluster) if m.name != member.name and is_control_plane(m)
        ]
        if not others:
            return True  # it was the only member: etcd went with it, nobody is left to remove it from
        if view is None or not running:
            await self._waiting(
                ctx,
                member,
                status,
                "waiting for a running control plane to remove its etcd member",
                warn=True,
            )
            return False
        try:
            async with self._clients.client(sorted(running)[0], view.talos) as client:
                stray = [
                    m
                    for m in await client.etcd_member_list()
                    if any(urlsplit(u).hostname == gone_host for u in m.peer_urls)
                ]
                for found in stray:
                    await client.etcd_remove_member_by_id(found.id)
        except MachineAPIError as exc:
            await self._waiting(ctx, member, status, f"cannot remove its etcd member: {exc}", warn=True)
            return False
        for found in stray:
            await ctx.event(
                cluster,
                "Normal",
                "EtcdMemberRemoved",
                f"etcd member {found.id:x} of machine {member.name} removed",
            )
        return True

    async def _waiting(
        self, ctx: Context, member: Resource, status: ClusterMachineStatus, why: str, *, warn: bool = False
    ) -> None:
        """Say on ``status.teardown`` what the teardown waits for (and, ``warn``, tell it once)."""
        if status.teardown == why:
            return

        def record(_: Resource, current: ClusterMachineStatus) -> None:
            current.teardown = why

        await ctx.mutate_status(ObjectKey.of(member), ClusterMachineStatus, record)
        if warn:
            await ctx.event(member, "Warning", "TeardownBlocked", why)

    async def _release(
        self, ctx: Context, member: Resource, machine: Resource | None, *, forced: bool
    ) -> Result | None:
        if forced and machine is not None:
            await ctx.event(
                member, "Warning", "ForceReleased", f"machine {member.name} released without a reset"
            )

            def unmark(m: Resource) -> None:
                m.metadata.annotations.pop(FORCE_RELEASE_ANNOTATION, None)

            await ctx.mutate(ObjectKey.of(machine), unmark)
        else:
            await ctx.event(
                member, "Normal", "Released", f"machine {member.name} is back in maintenance mode"
            )
        await ctx.remove_finalizer(member, TEARDOWN_FINALIZER)
        return None
