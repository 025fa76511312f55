"""The lock of a cluster, shown: a Cluster annotated ``herder.dev/locked`` has the condition ``Locked``.

While a cluster is locked herder changes nothing on its machines (the controllers that act on them ask
``members.locked_cluster`` first and hold back); its status keeps being observed. The condition says so,
and, once the cluster is deleted, that the delete waits until it is unlocked. A cluster that was never
locked carries no ``Locked`` condition; one that was unlocked keeps it, False.
"""

from __future__ import annotations

from herder.controllers.members import lock_changes, locked_message
from herder.resources.clusters import CLUSTER, ClusterStatus, is_locked
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, on_change, own_key
from herder.runtime.outputs import Writes

CONDITION = "Locked"


class ClusterLockController(Controller):
    name = "ClusterLock"
    primary = CLUSTER.kind
    outputs = (Writes(CLUSTER.kind, f"status.conditions[{CONDITION}]"),)
    concurrency = 2
    watches = (
        Watch(CLUSTER.kind, on_change(own_key, "metadata.deletionTimestamp")),
        Watch(CLUSTER.kind, lock_changes(own_key)),
    )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            return None
        if is_locked(cluster):
            if cluster.metadata.deletion_timestamp:
                reason, message = "DeleteWaitsForUnlock", "the delete waits: " + locked_message(cluster.name)
            else:
                reason = "Locked"
                message = "herder changes nothing on the cluster's machines: " + locked_message(cluster.name)
            await ctx.condition(cluster, CONDITION, True, reason, message, event="Normal")
        elif status_of(cluster, ClusterStatus).condition(CONDITION) is not None:
            await ctx.condition(
                cluster, CONDITION, False, "Unlocked", "herder manages the cluster's machines", event="Normal"
            )
        return None
