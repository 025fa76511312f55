"""Bootstrap: etcd is bootstrapped exactly once per cluster, on one control plane.

The chosen machine is recorded on the Cluster's ``status.bootstrap`` before the Bootstrap call is sent,
and from then on only that machine is ever asked (asking it again is safe: a bootstrapped etcd refuses a
second bootstrap), so neither a restart of herder, a kill -9 between the record and the call, nor the
replacement of a control plane can bootstrap a second etcd. Once the call succeeded, it is never sent
again; a choice recorded before (by a replica or process that died before recording the call's success)
first asks the machine whether its etcd runs, so a call that got through is not sent a second time. The
other control planes then join etcd by themselves, as Talos's do.

A cluster whose control plane set has ``spec.bootstrapSpec`` is restored from that etcd backup instead:
the same machine, once, gets EtcdRecover with the snapshot and a recovering Bootstrap
(``herder.controllers.backups.restore``, which refuses a backup that is not sound before anything is sent).
Nothing is bootstrapped on a locked cluster (``herder.dev/locked``) until it is unlocked.
"""

from __future__ import annotations

from herder.controllers.backups.restore import CONDITION as RESTORED
from herder.controllers.backups.restore import EtcdRecovery, RestoreRefused
from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.members import (
    cluster_changes,
    cluster_machines,
    is_control_plane,
    machine_of,
)
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    BootstrapStatus,
    ClusterMachineStatus,
    ClusterStatus,
    is_locked,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes
from herder.talos.machine import AlreadyExists, Credentials, MachineAPIError
from herder.talos.machine.pool import ClientPool

_RETRY = 5.0
_RESTORE_RETRY = 30.0


class BootstrapController(Controller):
    name = "Bootstrap"
    primary = CLUSTER.kind
    outputs = (Writes(CLUSTER.kind, "status.bootstrap", f"status.conditions[{RESTORED}]"),)
    concurrency = 4

    def __init__(
        self, keys: ClusterKeys, recovery: EtcdRecovery | None = None, clients: ClientPool | None = None
    ) -> None:
        self._keys = keys
        self._clients = clients if clients is not None else ClientPool(keep=8, timeout=30)
        self._recovery = recovery
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes("bootstrap")),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "status.configHash", "status.stage"),
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        recorded = status_of(cluster, ClusterStatus).bootstrap
        if (recorded is not None and recorded.completed_at) or is_locked(cluster):
            return None
        view = await self._keys.of(cluster)
        if view is None:
            return None
        ready = await _bootstrappable(ctx, cluster)
        resumed = recorded is not None
        if recorded is None:
            if not ready:
                return None
            chosen = BootstrapStatus(machine=ready[0].name, requestedAt=ctx.clock.rfc3339())

            def record(_: Resource, status: ClusterStatus) -> None:
                if status.bootstrap is None:  # another writer may have chosen first
                    status.bootstrap = chosen

            updated = await ctx.mutate_status(key, ClusterStatus, record)
            recorded = status_of(updated, ClusterStatus).bootstrap if updated is not None else None
            if recorded is None:
                return None
        target = recorded.machine
        machine = next((m for m in ready if m.name == target), None)
        if machine is None:
            return None  # the recorded machine is not up yet: its events bring us back
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        if not (resumed and await self._etcd_runs(endpoint, view.talos)):
            try:
                restore = await self._recovery.prepare(ctx, cluster) if self._recovery is not None else None
            except RestoreRefused:
                return Result(requeue_after=_RESTORE_RETRY)  # the cluster's EtcdRestored condition says why
            try:
                async with self._clients.client(endpoint, view.talos) as client:
                    await client.bootstrap() if restore is None else await restore.bootstrap(client)
            except AlreadyExists:
                pass  # a call before a crash got through: this machine is bootstrapped
            except MachineAPIError as exc:
                await ctx.event(cluster, "Warning", "BootstrapFailed", f"on machine {target}: {exc}")
                return Result(requeue_after=_RETRY)

        when = ctx.clock.rfc3339()

        def completed(_: Resource, status: ClusterStatus) -> None:
            if status.bootstrap is not None:
                status.bootstrap.completed_at = when

        await ctx.mutate_status(key, ClusterStatus, completed)
        await ctx.event(cluster, "Normal", "Bootstrapped", f"etcd bootstrapped on machine {target}")
        return None

    async def _etcd_runs(self, endpoint: str, credentials: Credentials) -> bool:
        """Whether the machine's etcd runs (a member of a bootstrapped etcd), as far as it can say now."""
        try:
            async with self._clients.client(endpoint, credentials) as client:
                return (await client.etcd_status()).member_id != 0
        except MachineAPIError:
            return False  # not bootstrapped, or not reachable: the call itself says which


async def _bootstrappable(ctx: Context, cluster: Resource) -> list[Resource]:
    """The cluster's control plane Machines that run its config, by name."""
    out = []
    for member in await cluster_machines(ctx, cluster):
        if not is_control_plane(member) or member.metadata.deletion_timestamp:
            continue
        if not status_of(member, ClusterMachineStatus).config_hash:
            continue
        machine = await machine_of(ctx, member)
        if machine is not None and status_of(machine, MachineStatus).running:
            out.append(machine)
    return sorted(out, key=lambda m: m.name)
