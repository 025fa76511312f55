"""Restores that decrypt: an etcd backup carries the cluster's Kubernetes encryption secrets sealed with the
backup's key; a cluster restored from it takes them into its secrets bundle before any config of it is made
(so that the Secrets in the snapshot read back), and says so; a backup without them is told of."""

from __future__ import annotations

import base64

import pytest

from herder.controllers.backups.backup_cipher import new_key
from herder.controllers.backups.encryption_secrets import (
    EncryptionSecrets,
    SecretsUnreadable,
    open_sealed,
    seal,
)
from herder.controllers.backups.restore import encryption_pending
from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.cluster_secrets import ClusterSecretsController
from herder.controllers.clusters.key_pool import KeyPool
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from herder.talos.secrets import load_secrets
from tests.controllers.backed_up import CLUSTER, cluster
from tests.controllers.site import Site, obj, secrets_bundle

OLD = "0a0b0c0d-old-cluster"
SNAPSHOT = "1767225600.snapshot"
CARRIED = EncryptionSecrets(secretbox=base64.b64encode(b"s" * 32).decode(), aescbc="")


def test_the_sealed_secrets_open_with_their_key_for_their_backup_only() -> None:
    key = new_key()
    sealed = seal(key, OLD, SNAPSHOT, CARRIED)
    assert CARRIED.secretbox not in sealed
    assert open_sealed(key, OLD, SNAPSHOT, sealed) == CARRIED
    with pytest.raises(SecretsUnreadable, match="not sealed with its key"):
        open_sealed(key, OLD, "2.snapshot", sealed)  # moved to another backup
    with pytest.raises(SecretsUnreadable, match="not sealed with its key"):
        open_sealed(new_key(), OLD, SNAPSHOT, sealed)
    with pytest.raises(SecretsUnreadable, match="damaged"):
        open_sealed(key, OLD, SNAPSHOT, "not base64!")


async def restoring(site: Site, *, carried: bool = True) -> Resource:
    """A backup of an old cluster (with its encryption secrets sealed, if ``carried``), and a new cluster
    whose control plane set restores it, with secrets of its own already made."""
    key = new_key()
    await site.create(obj("EtcdBackupKey", OLD, spec={"key": base64.b64encode(key).decode()}))
    spec = {
        "clusterUUID": OLD,
        "snapshot": SNAPSHOT,
        "size": 1,
        "store": "default",
        "checksum": "sha256:00",
        "takenAt": "2026-01-01T00:00:00Z",
        **({"encryptionSecrets": seal(key, OLD, SNAPSHOT, CARRIED)} if carried else {}),
    }
    await site.create(obj("EtcdBackup", "old-1767225600", spec=spec))
    (made,) = await site.create(cluster())
    await site.cluster_secrets(made)
    await site.create(
        obj(
            "MachineSet",
            "alpha-control-planes",
            spec={"role": "controlplane", "bootstrapSpec": {"clusterUUID": OLD, "snapshot": SNAPSHOT}},
            metadata={"labels": CLUSTER},
        )
    )
    return made


async def bundle_of(site: Site) -> tuple[str, str]:
    """The new cluster's secretbox secret, and the backup its ClusterSecrets say they carry those of."""
    view = await ClusterKeys(site.store).of(await _cluster(site))
    assert view is not None
    return view.bundle.secretbox_encryption_secret, view.restored_from


async def _cluster(site: Site) -> Resource:
    found = await site.get("Cluster", "alpha")
    assert found is not None
    return found


async def test_a_restored_cluster_takes_the_backups_encryption_secrets_before_its_configs(site: Site) -> None:
    made = await restoring(site)
    own, _ = await bundle_of(site)
    assert own != CARRIED.secretbox
    ctx = site.context(ClusterSecretsController(KeyPool(0)))
    assert await encryption_pending(ctx, made, "")  # no config of it may be made yet
    await site.reconcile(ClusterSecretsController(KeyPool(0)), ObjectKey.of(made))
    secretbox, restored_from = await bundle_of(site)
    assert (secretbox, restored_from) == (CARRIED.secretbox, f"{OLD}/{SNAPSHOT}")
    assert not await encryption_pending(ctx, made, restored_from)
    stored = await site.get("ClusterSecrets", "alpha")
    assert stored is not None
    # Everything else of the bundle stays the cluster's own.
    before = load_secrets(secrets_bundle("1.13"), check_keys=False)
    after = load_secrets((stored.spec or {})["bundle"], check_keys=False)
    assert after.os == before.os and after.cluster_secret == before.cluster_secret
    told = await site.told(await _cluster(site))
    assert (
        "Normal",
        "EncryptionSecretsRestored",
        f"the encryption secrets of backup {OLD}/{SNAPSHOT} are the cluster's",
    ) in told
    # Once taken, it is not done again.
    revision = stored.metadata.resource_version
    await site.reconcile(ClusterSecretsController(KeyPool(0)), ObjectKey.of(made))
    again = await site.get("ClusterSecrets", "alpha")
    assert again is not None and again.metadata.resource_version == revision


async def test_a_backup_without_encryption_secrets_is_told_of(site: Site) -> None:
    made = await restoring(site, carried=False)
    own, _ = await bundle_of(site)
    await site.reconcile(ClusterSecretsController(KeyPool(0)), ObjectKey.of(made))
    assert await bundle_of(site) == (own, f"{OLD}/{SNAPSHOT}")  # configs may be made: nothing to wait for
    told = [(kind, reason) for kind, reason, _ in await site.told(await _cluster(site))]
    assert ("Warning", "NoEncryptionSecrets") in told


async def test_a_bootstrapped_cluster_keeps_its_secrets(site: Site) -> None:
    made = await restoring(site)
    stamp = site.clock.rfc3339()
    made = await site.set_status(
        made, bootstrap={"machine": "cp1", "requestedAt": stamp, "completedAt": stamp}
    )
    own, _ = await bundle_of(site)
    await site.reconcile(ClusterSecretsController(KeyPool(0)), ObjectKey.of(made))
    assert await bundle_of(site) == (own, "")
    assert not await encryption_pending(site.context(ClusterSecretsController(KeyPool(0))), made, "")
