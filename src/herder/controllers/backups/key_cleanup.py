"""A cluster's backup key goes once nothing needs it: its cluster is gone and so is its last backup."""

from __future__ import annotations

from collections.abc import Iterable

from herder.resources.backups import ETCD_BACKUP, ETCD_BACKUP_KEY, EtcdBackupSpec
from herder.resources.clusters import CLUSTER
from herder.resources.machines import CLUSTER_LABEL
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.state.store import WatchEvent


def _key_of_backup(event: WatchEvent) -> Iterable[ObjectKey]:
    if event.type == "DELETED":
        uuid = ETCD_BACKUP.spec_of(event.object, EtcdBackupSpec).cluster_uuid
        yield ObjectKey(ETCD_BACKUP_KEY.kind, event.object.namespace, uuid)


def _key_of_cluster(event: WatchEvent) -> Iterable[ObjectKey]:
    if event.type == "DELETED" and event.object.metadata.uid:
        yield ObjectKey(ETCD_BACKUP_KEY.kind, event.object.namespace, event.object.metadata.uid)


class BackupKeyCleanupController(Controller):
    name = "BackupKeyCleanup"
    primary = ETCD_BACKUP_KEY.kind
    outputs = (Writes(ETCD_BACKUP_KEY.kind, deletes=True),)
    watches = (
        Watch(ETCD_BACKUP_KEY.kind),
        Watch(ETCD_BACKUP.kind, _key_of_backup),
        Watch(CLUSTER.kind, _key_of_cluster),
    )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        stored = await ctx.get(key)
        if stored is None or stored.metadata.deletion_timestamp:
            return None
        name = stored.metadata.labels.get(CLUSTER_LABEL)
        cluster = await ctx.get(ObjectKey(CLUSTER.kind, key.namespace, name)) if name else None
        if cluster is not None and cluster.metadata.uid == key.name:
            return None
        if await ctx.list(ETCD_BACKUP.kind, key.namespace, field_selector=f"spec.clusterUUID={key.name}"):
            return None
        await ctx.delete(key)
        return None
