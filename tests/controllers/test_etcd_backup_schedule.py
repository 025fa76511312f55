"""EtcdBackup's decisions: a backup taken when one is due (the first once etcd is bootstrapped and healthy,
then every interval), none when none is due, one asked for by hand served, and a failure kept on the cluster and
retried with a backoff, never touching the backups already taken."""

from __future__ import annotations

from pathlib import Path

from herder.controllers.backups.schedule import EtcdBackupController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey, Result
from herder.talos.machine import MachineAPIError
from herder.talos.machine.pool import ClientPool
from tests.controllers.backed_up import ENDPOINT, keys, running_cluster, stores
from tests.controllers.provisioned import condition
from tests.controllers.site import Site

HOURLY = {"backups": {"interval": "1h", "retention": 2}}
SNAPSHOT = b"etcd snapshot bytes"


def _controller(site: Site, folder: Path) -> EtcdBackupController:
    return EtcdBackupController(keys(site), stores(site, folder), clients=ClientPool(dialer=site.machines))


async def _backups(site: Site) -> list[Resource]:
    return list((await site.store.list("EtcdBackup", "default")).items)


async def test_a_bootstrapped_cluster_is_backed_up_at_once_then_every_interval(
    site: Site, tmp_path: Path
) -> None:
    controller = _controller(site, tmp_path)
    site.machines.answer("etcd_snapshot", SNAPSHOT)
    cluster = await running_cluster(site, **HOURLY)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=3600.0)
    (taken,) = await _backups(site)
    assert (taken.spec or {})["machine"] == "cp1"
    assert (taken.spec or {})["takenAt"] == site.clock.rfc3339()
    assert taken.metadata.finalizers == ["herder.dev/backup-blob"]
    assert [c.endpoint for c in site.machines.made("etcd_snapshot")] == [ENDPOINT]
    assert all(c.secure for c in site.machines.made("etcd_snapshot"))  # with herder's Talos credentials
    sealed = tmp_path / (cluster.metadata.uid or "") / (taken.spec or {})["snapshot"]
    assert sealed.stat().st_size == (taken.spec or {})["size"] and SNAPSHOT not in sealed.read_bytes()
    status = await site.status("Cluster", "alpha")
    assert status["backups"]["lastBackup"] == taken.name
    assert status["backups"]["failures"] == 0
    healthy = condition(status, "BackupsHealthy")
    assert (healthy["status"], healthy["reason"]) == ("True", "BackupTaken")
    # A routine backup is no Event: the backup and the condition tell it.
    assert await site.told(cluster) == []
    # Not due yet: nothing is taken, and the cluster is looked at again when it is.
    site.clock.advance(600)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=3000.0)
    assert len(site.machines.made("etcd_snapshot")) == 1
    site.clock.advance(3000)
    await site.reconcile(controller, ObjectKey.of(cluster))
    assert len(await _backups(site)) == 2


async def test_the_first_backup_waits_for_etcd_to_be_healthy(site: Site, tmp_path: Path) -> None:
    controller = _controller(site, tmp_path)
    site.machines.answer("etcd_snapshot", SNAPSHOT)
    cluster = await running_cluster(site, etcd_healthy=False, **HOURLY)
    # Bootstrapped, but etcd does not run yet: no attempt (it would fail), and no failure told.
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None
    assert site.machines.made("etcd_snapshot") == [] and await site.told(cluster) == []
    current = await site.get("Cluster", "alpha")
    assert current is not None
    healthy = [{**c, "status": "True"} for c in (current.status or {})["conditions"]]
    await site.set_status(current, conditions=healthy)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=3600.0)
    assert len(await _backups(site)) == 1


async def test_no_schedule_no_backup_but_one_asked_for_is_served(site: Site, tmp_path: Path) -> None:
    controller = _controller(site, tmp_path)
    site.machines.answer("etcd_snapshot", SNAPSHOT)
    cluster = await running_cluster(site)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None
    assert await _backups(site) == []
    current = await site.get("Cluster", "alpha")
    assert current is not None
    await site.set_status(current, backups={"requested": 1})
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None  # no schedule: nothing to wait for
    (taken,) = await _backups(site)
    backups = (await site.status("Cluster", "alpha"))["backups"]
    assert (backups["requested"], backups["served"], backups["lastBackup"]) == (1, 1, taken.name)
    # Served: a reconcile again takes nothing.
    await site.reconcile(controller, ObjectKey.of(cluster))
    assert len(await _backups(site)) == 1


async def test_a_failure_stays_on_the_cluster_and_is_retried_with_a_backoff(
    site: Site, tmp_path: Path
) -> None:
    controller = _controller(site, tmp_path)
    site.machines.fail("etcd_snapshot", MachineAPIError("etcd is not running"))
    cluster = await running_cluster(site, **HOURLY)
    key = ObjectKey.of(cluster)
    assert await site.reconcile(controller, key) == Result(requeue_after=5.0)
    backups = (await site.status("Cluster", "alpha"))["backups"]
    assert backups["failures"] == 1 and "cp1: etcd is not running" in backups["lastError"]
    unhealthy = condition(await site.status("Cluster", "alpha"), "BackupsHealthy")
    assert (unhealthy["status"], unhealthy["reason"]) == ("False", "BackupFailed")
    assert unhealthy["message"].endswith("(1 attempt(s) failed; last success: never)")
    assert ("Warning", "BackupFailed", backups["lastError"]) in await site.told(cluster)
    # Not retried before its backoff; then retried, and the backoff doubles.
    site.clock.advance(2)
    assert await site.reconcile(controller, key) == Result(requeue_after=3.0)
    assert len(site.machines.made("etcd_snapshot")) == 1
    site.clock.advance(3)
    assert await site.reconcile(controller, key) == Result(requeue_after=10.0)
    assert (await site.status("Cluster", "alpha"))["backups"]["failures"] == 2
    assert await _backups(site) == []
    # The next attempt succeeds: the error goes with it.
    site.machines.failures.clear()
    site.machines.answer("etcd_snapshot", SNAPSHOT)
    site.clock.advance(10)
    await site.reconcile(controller, key)
    backups = (await site.status("Cluster", "alpha"))["backups"]
    assert (backups["failures"], backups["lastError"]) == (0, "")
    assert condition(await site.status("Cluster", "alpha"), "BackupsHealthy")["status"] == "True"
    # Told after the Warnings of the attempts that failed.
    assert [e[:2] for e in await site.told(cluster)][-2:] == [
        ("Warning", "BackupFailed"),
        ("Normal", "BackupTaken"),
    ]


async def test_a_cluster_not_bootstrapped_yet_waits_and_one_asked_for_fails_saying_why(
    site: Site, tmp_path: Path
) -> None:
    controller = _controller(site, tmp_path)
    await running_cluster(site, **HOURLY)
    current = await site.get("Cluster", "alpha")
    assert current is not None
    # Not bootstrapped (yet): the schedule waits for it.
    fresh = await site.store.update_status(current.model_copy(update={"status": {}}))
    assert await site.reconcile(controller, ObjectKey.of(fresh)) is None
    asked = await site.set_status(fresh, backups={"requested": 1})
    await site.reconcile(controller, ObjectKey.of(asked))
    backups = (await site.status("Cluster", "alpha"))["backups"]
    assert (backups["served"], backups["lastError"]) == (1, "etcd is not bootstrapped yet")
    assert site.machines.made("etcd_snapshot") == []
