"""Deleting an EtcdBackup (by retention, or by an Admin) deletes its file from the store first.

A store that fails keeps the backup (and its finalizer) with a Warning Event, retried with a backoff; the
way out of a store that is gone for good is to delete its BackupStore, after which the finalizer goes
with an Event saying the file was left where it was.
"""

from __future__ import annotations

from herder.controllers.backups.blob import NoSuchStore, StoreFailed, blob_key
from herder.controllers.backups.schedule import BLOB_FINALIZER
from herder.controllers.backups.stores import BackupStores
from herder.resources.backups import ETCD_BACKUP, EtcdBackupSpec
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.workqueue import Backoff


class EtcdBackupRemovalController(Controller):
    name = "EtcdBackupRemoval"
    primary = ETCD_BACKUP.kind
    outputs = (Writes(ETCD_BACKUP.kind, f"metadata.finalizers[{BLOB_FINALIZER}]"),)
    concurrency = 4
    watches = (Watch(ETCD_BACKUP.kind),)

    def __init__(self, stores: BackupStores) -> None:
        self._stores = stores
        self._backoff = Backoff(base=5.0, cap=300.0)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        backup = await ctx.get(key)
        if backup is None or not backup.metadata.deletion_timestamp:
            return None
        if BLOB_FINALIZER not in backup.metadata.finalizers:
            return None
        spec = ETCD_BACKUP.spec_of(backup, EtcdBackupSpec)
        try:
            store = await self._stores.get(spec.store)
            await store.delete(blob_key(spec.cluster_uuid, spec.snapshot))
        except NoSuchStore as exc:
            await ctx.event(backup, "Warning", "BackupFileLeft", f"{exc}: its file, if any, was left there")
        except StoreFailed as exc:
            await ctx.event(backup, "Warning", "BackupDeleteFailed", str(exc))
            return Result(requeue_after=self._backoff.next_delay(key))
        self._backoff.forget(key)
        await ctx.remove_finalizer(backup, BLOB_FINALIZER)
        return None
