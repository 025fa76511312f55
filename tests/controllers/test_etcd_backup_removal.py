"""EtcdBackupRemoval's decisions: a deleted backup's file goes from its store before the backup does; a
store that fails keeps it, said in a Warning and retried with a backoff; a store that is gone lets it go,
saying the file was left."""

from __future__ import annotations

from pathlib import Path

from herder.controllers.backups.removal import EtcdBackupRemovalController
from herder.controllers.backups.schedule import BLOB_FINALIZER
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from tests.controllers.backed_up import backup, stores
from tests.controllers.site import Site, obj


async def _deleted(site: Site, store: str = "default") -> Resource:
    made = backup("alpha-1", "uuid-1", "2026-01-01T01:00:00Z")
    made.spec = {**(made.spec or {}), "store": store}
    made.metadata.finalizers = [BLOB_FINALIZER]
    (created,) = await site.create(made)
    await site.store.delete("EtcdBackup", created.name, "default")
    return created


async def test_a_deleted_backup_takes_its_file_with_it(site: Site, tmp_path: Path) -> None:
    (tmp_path / "uuid-1").mkdir()
    (tmp_path / "uuid-1" / "alpha-1.snapshot").write_bytes(b"sealed")
    gone = await _deleted(site)
    await site.reconcile(EtcdBackupRemovalController(stores(site, tmp_path)), ObjectKey.of(gone))
    assert not (tmp_path / "uuid-1").exists()  # the cluster's folder too, once empty
    assert await site.get("EtcdBackup", "alpha-1") is None


async def test_a_store_that_fails_keeps_the_backup_and_is_retried(site: Site, tmp_path: Path) -> None:
    # What is under the backup's key cannot be removed as a file.
    (tmp_path / "uuid-1" / "alpha-1.snapshot").mkdir(parents=True)
    gone = await _deleted(site)
    controller = EtcdBackupRemovalController(stores(site, tmp_path))
    first = await site.reconcile(controller, ObjectKey.of(gone))
    second = await site.reconcile(controller, ObjectKey.of(gone))
    assert first is not None and first.requeue_after is not None and 4 <= first.requeue_after <= 6
    assert second is not None and second.requeue_after is not None and 8 <= second.requeue_after <= 12
    kept = await site.get("EtcdBackup", "alpha-1")
    assert kept is not None and kept.metadata.finalizers == [BLOB_FINALIZER]
    warned = [e for e in await site.told(gone) if e[1] == "BackupDeleteFailed"]
    assert len(warned) == 1 and "backup store default" in warned[0][2]  # the same Event, counted again


async def test_a_backup_of_a_store_that_is_gone_lets_go_leaving_its_file(site: Site, tmp_path: Path) -> None:
    await site.create(
        obj("BackupStore", "old", namespaced=False, spec={"filesystem": {"path": str(tmp_path)}})
    )
    gone = await _deleted(site, store="vanished")
    await site.reconcile(EtcdBackupRemovalController(stores(site, tmp_path)), ObjectKey.of(gone))
    assert await site.get("EtcdBackup", "alpha-1") is None
    assert (
        "Warning",
        "BackupFileLeft",
        "backup store vanished does not exist: its file, if any, was left there",
    ) in await site.told(gone)
