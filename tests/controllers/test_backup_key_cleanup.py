"""BackupKeyCleanup's decisions: a cluster's backup key stays while its cluster or any of its backups
does, and goes with the last of them."""

from __future__ import annotations

import base64

from herder.controllers.backups.key_cleanup import BackupKeyCleanupController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from tests.controllers.backed_up import CLUSTER, backup, cluster
from tests.controllers.site import Site, obj


def _key(uuid: str) -> Resource:
    return obj(
        "EtcdBackupKey",
        uuid,
        spec={"key": base64.b64encode(bytes(32)).decode()},
        metadata={"labels": CLUSTER},
    )


async def test_a_key_stays_while_its_cluster_or_a_backup_does(site: Site) -> None:
    controller = BackupKeyCleanupController()
    (alive,) = await site.create(cluster())
    uuid = alive.metadata.uid or ""
    (key,) = await site.create(_key(uuid))
    (kept,) = await site.create(backup("alpha-1", uuid, "2026-01-01T01:00:00Z"))
    await site.store.delete("Cluster", "alpha", "default")
    # The cluster's deletion wakes its key; a backup of it keeps it.
    assert await site.show(controller, alive, deleted=True) == [ObjectKey.of(key)]
    await site.reconcile(controller, ObjectKey.of(key))
    assert await site.get("EtcdBackupKey", uuid) is not None
    await site.store.delete("EtcdBackup", kept.name, "default")
    assert await site.show(controller, kept, deleted=True) == [ObjectKey.of(key)]
    await site.reconcile(controller, ObjectKey.of(key))
    assert await site.get("EtcdBackupKey", uuid) is None


async def test_a_key_of_a_live_cluster_stays_without_backups(site: Site) -> None:
    (alive,) = await site.create(cluster())
    (key,) = await site.create(_key(alive.metadata.uid or ""))
    await site.reconcile(BackupKeyCleanupController(), ObjectKey.of(key))
    assert await site.get("EtcdBackupKey", key.name) is not None
