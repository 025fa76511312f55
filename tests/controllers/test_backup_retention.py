"""BackupRetention's decisions: a cluster keeps its newest ``retention`` backups and the older ones go;
only its own UUID's count, and a cluster without a schedule keeps every backup."""

from __future__ import annotations

from herder.controllers.backups.retention import BackupRetentionController
from herder.runtime.controller import ObjectKey
from tests.controllers.backed_up import backup, cluster
from tests.controllers.site import Site, names


async def test_the_oldest_backups_of_the_cluster_itself_go(site: Site) -> None:
    (made,) = await site.create(cluster(backups={"interval": "1h", "retention": 2}))
    uuid = made.metadata.uid or ""
    await site.create(
        backup("alpha-3", uuid, "2026-01-01T03:00:00Z"),
        backup("alpha-1", uuid, "2026-01-01T01:00:00Z"),
        backup("alpha-2", uuid, "2026-01-01T02:00:00Z"),
        # A cluster of the same name before this one: not this one's to prune.
        backup("alpha-0", "an-older-alpha", "2026-01-01T00:00:00Z"),
    )
    await site.reconcile(BackupRetentionController(), ObjectKey.of(made))
    assert names((await site.store.list("EtcdBackup", "default")).items) == ["alpha-0", "alpha-2", "alpha-3"]
    assert ("Normal", "BackupsPruned", "deleted alpha-1: the cluster keeps 2") in await site.told(made)


async def test_a_cluster_without_a_schedule_keeps_every_backup(site: Site) -> None:
    (made,) = await site.create(cluster())
    uuid = made.metadata.uid or ""
    await site.create(*(backup(f"alpha-{i}", uuid, f"2026-01-01T0{i}:00:00Z") for i in range(3)))
    await site.reconcile(BackupRetentionController(), ObjectKey.of(made))
    assert len((await site.store.list("EtcdBackup", "default")).items) == 3
