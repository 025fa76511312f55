"""Teardown of a whole cluster: ``kubectl delete cluster NAME`` resets every machine back to maintenance
and removes every object of the cluster.

The Cluster carries a finalizer from its creation. Once it is deleted, its machine sets, hand-made
machine set nodes and config patches are deleted; each machine leaves through its ClusterMachine's
teardown (reset, then released); when no member is left the finalizer goes, and what the cluster owns
(its secrets, generated configs) is garbage-collected. While machines hold it up, the Cluster's ``Ready``
condition names them and says why. A locked cluster (``herder.dev/locked``) is not taken down: its
delete waits, with the finalizer kept and ``status.teardown`` saying so, until it is unlocked. An
aborted import (``herder.dev/import-aborted``, ``herder cluster import --abort``) is taken down locked or
not, and its machines are left as they run (``cluster_machine_teardown``).
"""

from __future__ import annotations

from herder.controllers.members import (
    cluster_changes,
    cluster_machines,
    labelled,
    locked_message,
    machine_sets,
)
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterMachineStatus,
    ClusterStatus,
    is_import_aborted,
    is_locked,
)
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes

CLUSTER_FINALIZER = "herder.dev/cluster"


class ClusterTeardownController(Controller):
    name = "ClusterTeardown"
    primary = CLUSTER.kind
    outputs = (
        Writes(CLUSTER.kind, "status.teardown", f"metadata.finalizers[{CLUSTER_FINALIZER}]"),
        Writes(MACHINE_SET.kind, deletes=True),
        Writes(MACHINE_SET_NODE.kind, deletes=True),
        Writes(CONFIG_PATCH.kind, deletes=True),
    )
    concurrency = 4
    watches = (
        Watch(CLUSTER.kind, cluster_changes()),
        Watch(
            CLUSTER_MACHINE.kind, on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "status.teardown")
        ),
    )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            return None
        if not cluster.metadata.deletion_timestamp:
            await ctx.ensure_finalizer(cluster, CLUSTER_FINALIZER)
            return None
        if CLUSTER_FINALIZER not in cluster.metadata.finalizers:
            return None
        first = not status_of(cluster, ClusterStatus).teardown
        aborted = is_import_aborted(cluster)
        if is_locked(cluster) and not aborted:
            await self._record(ctx, key, "the delete waits: " + locked_message(key.name))
            return None
        for kind_objects in (
            await machine_sets(ctx, cluster),
            await labelled(ctx, MACHINE_SET_NODE.kind, key.namespace, CLUSTER_LABEL, key.name),
            await labelled(ctx, CONFIG_PATCH.kind, key.namespace, CLUSTER_LABEL, key.name),
        ):
            for obj in kind_objects:
                # Another controller's outputs (a managed control plane's set and patches) are its to take down.
                if not obj.metadata.deletion_timestamp and not ctx.theirs(obj):
                    await ctx.delete(ObjectKey.of(obj))
        members = await cluster_machines(ctx, cluster)
        if first:
            await ctx.event(cluster, "Normal", "Destroying", f"tearing down {len(members)} machine(s)")
        if members:
            waits = [status_of(m, ClusterMachineStatus).teardown for m in members]
            blocked = [why for why in waits if "unreachable" in why]
            message = (
                f"waiting for {len(members)} machine(s) to be {'let go' if aborted else 'reset'}: "
                + ", ".join(sorted(m.name for m in members)[:10])
            )
            if blocked:
                message = "; ".join(blocked[:3])
            await self._record(ctx, key, message)
            return None
        await ctx.remove_finalizer(cluster, CLUSTER_FINALIZER)
        left = "left as they run (import aborted)" if aborted else "back in maintenance mode"
        await ctx.event(cluster, "Normal", "Destroyed", f"every machine is {left}")
        return None

    async def _record(self, ctx: Context, key: ObjectKey, message: str) -> None:
        def record(_: Resource, status: ClusterStatus) -> None:
            status.teardown = message

        await ctx.mutate_status(key, ClusterStatus, record)
