"""Retention: a cluster keeps the newest ``spec.backups.retention`` of its backups; older ones are deleted
(their files go with them, ``removal``). Only the backups of the cluster's own UUID count, so a new
cluster reusing a name never prunes the backups of the one before; a cluster without a schedule keeps
every backup taken by hand, and backups of a deleted cluster stay until an Admin deletes them.
"""

from __future__ import annotations

from herder.controllers.backups.policy import BackupPolicy
from herder.controllers.members import cluster_changes
from herder.resources.backups import ETCD_BACKUP, EtcdBackupSpec
from herder.resources.clusters import CLUSTER
from herder.resources.machines import CLUSTER_LABEL
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner
from herder.runtime.outputs import Writes


class BackupRetentionController(Controller):
    name = "BackupRetention"
    primary = CLUSTER.kind
    outputs = (Writes(ETCD_BACKUP.kind, deletes=True),)
    concurrency = 2

    def __init__(self, policy: BackupPolicy | None = None) -> None:
        self._policy = policy or BackupPolicy()
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes()),
            Watch(ETCD_BACKUP.kind, labelled_owner(CLUSTER.kind, CLUSTER_LABEL)),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        schedule = self._policy.schedule(cluster)
        if schedule is None:
            return None
        listed = await ctx.list(
            ETCD_BACKUP.kind, key.namespace, field_selector=f"spec.clusterUUID={cluster.metadata.uid}"
        )
        kept = sorted(
            (b for b in listed if not b.metadata.deletion_timestamp),
            key=lambda b: (ETCD_BACKUP.spec_of(b, EtcdBackupSpec).taken_at, b.name),
        )
        excess = kept[: max(0, len(kept) - schedule.retention)]
        for backup in excess:
            await ctx.delete(ObjectKey.of(backup))
        if excess:
            await ctx.event(
                cluster,
                "Normal",
                "BackupsPruned",
                f"deleted {', '.join(b.name for b in excess)}: the cluster keeps {schedule.retention}",
            )
        return None
