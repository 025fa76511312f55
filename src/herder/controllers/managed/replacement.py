"""Replacing a managed control plane that stays unreachable: a control plane machine of a managed cluster
whose ``Connected`` condition has been False, or whose etcd member ControlPlaneStatus has found unhealthy
(a machine cut off may keep its connection open while nothing gets through), for ``unreachable_after``
seconds is taken as failed, and its Machine is deleted in the system's name, as an Admin deletes faulty hardware. Its request then goes
(``machine_requests``), it leaves its cluster without a reset and with its etcd member removed
(``cluster_machine_teardown``), and the request set makes a replacement.

One at a time, and only while etcd keeps a quorum: nothing is replaced while another control plane is
not ready, leaving, or still missing from the request set, so a replacement joins before the next
failure is looked at. (A machine that vanished in the cloud needs none of this: its provider reports
it gone, and the same path follows.) The cluster says so in a Warning Event. Nothing is replaced in a
locked cluster (``herder.dev/locked``) until it is unlocked.
"""

from __future__ import annotations

from herder.controllers.members import labelled, lock_changes
from herder.controllers.provisioning.requests import request_status
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    ClusterMachineStatus,
    ClusterSpec,
    control_plane_set_name,
    is_locked,
)
from herder.resources.control_planes import CONTROL_PLANE_STATUS, ControlPlaneStatusStatus
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL, MachineStatus
from herder.resources.managed import control_plane_request_set_name
from herder.resources.provisioning import MACHINE_REQUEST, MACHINE_REQUEST_SET_LABEL
from herder.resources.status import status_of
from herder.runtime.clock import Clock
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    labelled_owner,
    on_change,
    own_key,
    same_name,
)
from herder.runtime.outputs import Writes


def _unreachable_for(machine: Resource, clock: Clock) -> float:
    """How long the machine has been unreachable (0 while it is connected)."""
    connected = status_of(machine, MachineStatus).condition("Connected")
    if connected is None or connected.status != "False":
        return 0.0
    return clock.age(connected.last_transition_time) or 0.0


def _etcd(health: Resource | None) -> ControlPlaneStatusStatus:
    return status_of(health, ControlPlaneStatusStatus) if health is not None else ControlPlaneStatusStatus()


class ManagedReplacementController(Controller):
    name = "ManagedControlPlaneReplacement"
    primary = CLUSTER.kind
    outputs = (Writes(MACHINE.kind, deletes=True),)
    concurrency = 2

    def __init__(self, unreachable_after: float) -> None:
        self._after = unreachable_after
        # Since when (monotonic) each machine's etcd member has been unhealthy, as this process saw it:
        # after a restart the clock starts again, which only delays a replacement.
        self._unhealthy_since: dict[tuple[str | None, str], float] = {}
        self.watches = (
            Watch(CLUSTER.kind, lock_changes(own_key)),
            Watch(CONTROL_PLANE_STATUS.kind, on_change(same_name(CLUSTER.kind), "status.etcd")),
            Watch(
                MACHINE.kind,
                on_change(
                    labelled_owner(CLUSTER.kind, CLUSTER_LABEL),
                    "status.connected",
                    "metadata.deletionTimestamp",
                ),
            ),
            Watch(
                CLUSTER_MACHINE.kind, on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "status.ready")
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        if CLUSTER.spec_of(cluster, ClusterSpec).managed is None or is_locked(cluster):
            return None
        request_set = control_plane_request_set_name(cluster.name)
        machines = await labelled(ctx, MACHINE.kind, key.namespace, MACHINE_REQUEST_SET_LABEL, request_set)
        unhealthy = await self._unhealthy_members(ctx, cluster, {m.name for m in machines})

        def failing_for(machine: Resource) -> float:
            return max(_unreachable_for(machine, ctx.clock), unhealthy.get(machine.name, 0.0))

        lost = sorted(
            (
                m
                for m in machines
                if not m.metadata.deletion_timestamp
                and (m.name in unhealthy or _unreachable_for(m, ctx.clock) > 0)
            ),
            key=failing_for,
            reverse=True,
        )
        if not lost:
            return None
        waited = failing_for(lost[0])
        if waited < self._after:
            return Result(requeue_after=self._after - waited + 1)
        if not await self._may_replace(ctx, cluster, lost[0], request_set):
            return Result(requeue_after=5.0)
        gone = lost[0]
        await ctx.delete(ObjectKey.of(gone))
        await ctx.event(
            cluster,
            "Warning",
            "ReplacingControlPlane",
            f"control plane machine {gone.name} unreachable for {int(waited)} s: it is replaced",
        )
        return None

    async def _unhealthy_members(
        self, ctx: Context, cluster: Resource, machines: set[str]
    ) -> dict[str, float]:
        """How long the etcd member of each of ``machines`` has been unhealthy (those that are)."""
        health = await ctx.get(ObjectKey(CONTROL_PLANE_STATUS.kind, cluster.namespace, cluster.name))
        now = ctx.clock.monotonic()
        out: dict[str, float] = {}
        for member in _etcd(health).etcd.members:
            key = (cluster.namespace, member.machine)
            if member.machine not in machines or member.healthy:
                self._unhealthy_since.pop(key, None)
                continue
            out[member.machine] = now - self._unhealthy_since.setdefault(key, now)
        return out

    async def _may_replace(self, ctx: Context, cluster: Resource, gone: Resource, request_set: str) -> bool:
        """Whether nothing else is being replaced and etcd keeps a quorum without the machine."""
        ns = cluster.namespace
        if any(
            m.metadata.deletion_timestamp
            for m in await labelled(ctx, MACHINE.kind, ns, MACHINE_REQUEST_SET_LABEL, request_set)
        ):
            return False
        requests = await labelled(ctx, MACHINE_REQUEST.kind, ns, MACHINE_REQUEST_SET_LABEL, request_set)
        if any(r.metadata.deletion_timestamp or not request_status(r).provisioned for r in requests):
            return False
        members = await labelled(
            ctx, CLUSTER_MACHINE.kind, ns, MACHINE_SET_LABEL, control_plane_set_name(cluster.name)
        )
        others = [m for m in members if m.name != gone.name]
        if any(m.metadata.deletion_timestamp or not status_of(m, ClusterMachineStatus).ready for m in others):
            return False
        return _etcd(await ctx.get(ObjectKey(CONTROL_PLANE_STATUS.kind, ns, cluster.name))).etcd.quorum
