"""Restoring a new cluster from an etcd backup (what Bootstrap does for a control plane set with
``bootstrapSpec``): a sound backup is sent, decrypted, into EtcdRecover and a recovering Bootstrap; a
backup changed in its store, or whose key is gone, is refused with the reason on the cluster, and looked
at again only a while later."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from herder.controllers.backups.backup_cipher import encrypt, new_key
from herder.controllers.backups.restore import RECHECK_AFTER, EtcdRecovery, RestoreRefused
from herder.controllers.clusters.bootstrap import BootstrapController
from herder.resources import Resource
from herder.runtime.controller import Context
from tests.controllers.backed_up import CLUSTER, cluster, keys, stores
from tests.controllers.provisioned import condition
from tests.controllers.site import Site, obj

OLD = "0a0b0c0d-old-cluster"
SNAPSHOT = "1767225600.snapshot"
PLAINTEXT = b"etcd snapshot of the old cluster" * 1000


class Recovered:
    """What the machine bootstrapping etcd is sent."""

    def __init__(self) -> None:
        self.snapshot = b""
        self.bootstrapped: list[bool] = []

    async def etcd_recover(self, chunks: AsyncIterator[bytes]) -> None:
        async for chunk in chunks:
            self.snapshot += chunk

    async def bootstrap(self, *, recover_etcd: bool = False) -> None:
        self.bootstrapped.append(recover_etcd)


async def _restoring(site: Site, folder: Path, *, key: bool = True) -> tuple[Resource, Path]:
    """A backup of an old cluster in the store, and a new cluster whose control plane set restores it:
    the new cluster, and the backup's file."""
    secret = new_key()
    blob = folder / OLD / SNAPSHOT
    blob.parent.mkdir(parents=True)
    with blob.open("wb") as out:
        sealed = encrypt(secret, OLD, SNAPSHOT, PLAINTEXT, out)
    if key:
        await site.create(obj("EtcdBackupKey", OLD, spec={"key": base64.b64encode(secret).decode()}))
    await site.create(
        obj(
            "EtcdBackup",
            "old-1767225600",
            spec={
                "clusterUUID": OLD,
                "snapshot": SNAPSHOT,
                "size": sealed.size,
                "store": "default",
                "checksum": sealed.checksum,
                "takenAt": "2026-01-01T00:00:00Z",
            },
        )
    )
    (made,) = await site.create(cluster())
    await site.create(
        obj(
            "MachineSet",
            "alpha-control-planes",
            spec={"role": "controlplane", "bootstrapSpec": {"clusterUUID": OLD, "snapshot": SNAPSHOT}},
            metadata={"labels": CLUSTER},
        )
    )
    return made, blob


def _bootstrapping(site: Site, recovery: EtcdRecovery) -> Context:
    """The context Bootstrap restores in (the EtcdRestored condition is its to write)."""
    return site.context(BootstrapController(keys(site), recovery))


async def test_a_sound_backup_is_restored(site: Site, tmp_path: Path) -> None:
    recovery = EtcdRecovery(stores(site, tmp_path))
    made, _ = await _restoring(site, tmp_path)
    ctx = _bootstrapping(site, recovery)
    prepared = await recovery.prepare(ctx, made)
    assert prepared is not None
    machine = Recovered()
    await prepared.bootstrap(machine)  # type: ignore[arg-type]
    assert machine.snapshot == PLAINTEXT and machine.bootstrapped == [True]
    restored = condition(await site.status("Cluster", "alpha"), "EtcdRestored")
    assert (restored["status"], restored["reason"]) == ("True", "Restored")
    assert restored["message"] == f"etcd restored from snapshot {SNAPSHOT} of cluster {OLD}"


async def test_a_backup_changed_in_its_store_is_refused_and_looked_at_again_later(
    site: Site, tmp_path: Path
) -> None:
    recovery = EtcdRecovery(stores(site, tmp_path))
    made, blob = await _restoring(site, tmp_path)
    tampered = bytearray(blob.read_bytes())
    tampered[-1] ^= 1
    blob.write_bytes(bytes(tampered))
    ctx = _bootstrapping(site, recovery)
    with pytest.raises(RestoreRefused, match="does not match its checksum"):
        await recovery.prepare(ctx, made)
    refused = condition(await site.status("Cluster", "alpha"), "EtcdRestored")
    assert (refused["status"], refused["reason"]) == ("False", "BackupRefused")
    assert ("Warning", "BackupRefused", refused["message"]) in await site.told(made)
    # The file goes from the store: not fetched again at once (the cluster's events come often), but later.
    blob.unlink()
    with pytest.raises(RestoreRefused, match="does not match its checksum"):
        await recovery.prepare(ctx, made)
    site.clock.advance(RECHECK_AFTER + 1)
    with pytest.raises(RestoreRefused, match="has no"):
        await recovery.prepare(ctx, made)  # fetched again: the file is gone now
    refused = condition(await site.status("Cluster", "alpha"), "EtcdRestored")
    assert refused["reason"] == "StoreUnavailable"


async def test_a_backup_whose_key_is_gone_is_refused(site: Site, tmp_path: Path) -> None:
    recovery = EtcdRecovery(stores(site, tmp_path))
    made, _ = await _restoring(site, tmp_path, key=False)
    with pytest.raises(RestoreRefused, match="key of cluster .* is gone"):
        await recovery.prepare(_bootstrapping(site, recovery), made)
    refused = condition(await site.status("Cluster", "alpha"), "EtcdRestored")
    assert (refused["status"], refused["reason"]) == ("False", "BackupRefused")
    assert f"the key of cluster {OLD}'s backups is gone" in refused["message"]
