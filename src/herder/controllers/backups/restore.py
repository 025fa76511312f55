"""Restoring a new cluster from an etcd backup: what the Bootstrap controller does instead of a plain
Bootstrap when the cluster's control plane set has ``spec.bootstrapSpec``.

Before anything is sent, the backup is found among the EtcdBackups of the cluster's own namespace (a
backup of another account is not there), fetched from its store, and checked against the size and
checksum herder recorded when it took it: a tampered or truncated backup is refused with the reason on
the Cluster's ``EtcdRestored`` condition and in a Warning Event, and checked again a little later (the
store may have been what failed). It is decrypted through once, so that no chunk of it is sent unless every
chunk is sound. The snapshot is then decrypted a chunk at a time into ``EtcdRecover`` on the
machine chosen for the bootstrap, and a recovering ``Bootstrap`` follows; the chosen machine and the
once-only bootstrap stay the Bootstrap controller's.

The restored cluster runs with the backup's Kubernetes encryption secrets (``encryption_secrets``), so that
the Secrets the snapshot holds encrypted read back: its ClusterSecrets take them before any config of it is
made (``cluster_secrets``, and ``cluster_machine_config`` waits for them: ``encryption_pending``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from typing import IO

from herder.controllers.backups.backup_cipher import BackupUnreadable, checksum, decrypt
from herder.controllers.backups.blob import StoreFailed, blob_key
from herder.controllers.backups.encryption_secrets import EncryptionSecrets, open_sealed
from herder.controllers.backups.keys import backup_key
from herder.controllers.backups.stores import BackupStores
from herder.controllers.members import machine_sets
from herder.resources import Resource
from herder.resources.backups import ETCD_BACKUP, BootstrapSpec, EtcdBackupSpec
from herder.resources.clusters import MACHINE_SET, ClusterStatus, MachineSetSpec, control_plane_set_name
from herder.resources.status import status_of
from herder.runtime.controller import Context, ObjectKey
from herder.talos.machine import AlreadyExists, MachineClient

CONDITION = "EtcdRestored"
RECHECK_AFTER = 30.0


class RestoreRefused(Exception):
    """The backup named by the control plane set cannot be restored (now); the Cluster says why."""


async def bootstrap_spec(ctx: Context, cluster: Resource) -> BootstrapSpec | None:
    """The backup the cluster's control plane set asks to be restored from, if any."""
    wanted = control_plane_set_name(cluster.name)
    for machine_set in await machine_sets(ctx, cluster):
        if machine_set.name == wanted:
            return MACHINE_SET.spec_of(machine_set, MachineSetSpec).bootstrap_spec
    return None


async def find_backup(ctx: Context, namespace: str | None, spec: BootstrapSpec) -> Resource | None:
    """The EtcdBackup ``spec`` names, among those of ``namespace``."""
    listed = await ctx.list(
        ETCD_BACKUP.kind,
        namespace,
        field_selector=f"spec.clusterUUID={spec.cluster_uuid},spec.snapshot={spec.snapshot}",
    )
    return next((b for b in listed if not b.metadata.deletion_timestamp), None)


def restored_from(spec: BootstrapSpec) -> str:
    """How a restored cluster's ClusterSecrets name the backup whose encryption secrets they carry."""
    return f"{spec.cluster_uuid}/{spec.snapshot}"


async def encryption_pending(ctx: Context, cluster: Resource, carried: str) -> bool:
    """Whether ``cluster`` is to be restored from a backup whose encryption secrets its ClusterSecrets
    (carrying those of ``carried``) do not carry yet: no config of it may be made before they do."""
    if status_of(cluster, ClusterStatus).bootstrapped:
        return False
    spec = await bootstrap_spec(ctx, cluster)
    return spec is not None and carried != restored_from(spec)


async def backup_encryption_secrets(
    ctx: Context, namespace: str | None, spec: BootstrapSpec
) -> EncryptionSecrets | None:
    """The encryption secrets the backup ``spec`` names carries, opened with its key; None when there is no
    such backup or key, or it carries none (taken by an older herder). ``SecretsUnreadable`` when damaged."""
    backup = await find_backup(ctx, namespace, spec)
    if backup is None:
        return None
    sealed = ETCD_BACKUP.spec_of(backup, EtcdBackupSpec).encryption_secrets
    key = await backup_key(ctx, namespace, spec.cluster_uuid)
    if not sealed or key is None:
        return None
    return open_sealed(key, spec.cluster_uuid, spec.snapshot, sealed)


class EtcdRecovery:
    def __init__(self, stores: BackupStores, *, recheck_after: float = RECHECK_AFTER) -> None:
        self._stores = stores
        self._recheck_after = recheck_after
        self._refused: dict[ObjectKey, tuple[float, str]] = {}

    async def prepare(self, ctx: Context, cluster: Resource) -> Recovery | None:
        """What to restore ``cluster`` from, checked; None when it is bootstrapped afresh.
        ``RestoreRefused`` once the Cluster tells why it cannot be."""
        spec = await bootstrap_spec(ctx, cluster)
        if spec is None:
            return None
        refused = self._refused.get(ObjectKey.of(cluster))
        if refused is not None and ctx.clock.monotonic() - refused[0] < self._recheck_after:
            raise RestoreRefused(refused[1])  # the cluster's events come often; the fetch is not redone
        blob: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - the Recovery closes it
        try:
            key = await self._fetch(ctx, cluster, spec, blob)
        except (RestoreRefused, StoreFailed) as exc:
            blob.close()
            reason = "StoreUnavailable" if isinstance(exc, StoreFailed) else "BackupRefused"
            await _tell(ctx, cluster, False, reason, f"cannot restore from {_named(spec)}: {exc}")
            self._refused[ObjectKey.of(cluster)] = (ctx.clock.monotonic(), str(exc))
            raise RestoreRefused(str(exc)) from None
        self._refused.pop(ObjectKey.of(cluster), None)
        return Recovery(ctx, cluster, spec, key, blob)

    async def _fetch(self, ctx: Context, cluster: Resource, spec: BootstrapSpec, into: IO[bytes]) -> bytes:
        backup = await find_backup(ctx, cluster.namespace, spec)
        if backup is None:
            raise RestoreRefused(f"there is no such backup in namespace {cluster.namespace}")
        recorded = ETCD_BACKUP.spec_of(backup, EtcdBackupSpec)
        key = await backup_key(ctx, cluster.namespace, spec.cluster_uuid)
        if key is None:
            raise RestoreRefused(f"the key of cluster {spec.cluster_uuid}'s backups is gone")
        store = await self._stores.get(recorded.store)
        await store.fetch(blob_key(spec.cluster_uuid, spec.snapshot), into)
        found = await asyncio.to_thread(checksum, into)
        if found.size != recorded.size:
            raise RestoreRefused(
                f"backup {backup.name} in store {recorded.store} is {found.size} bytes, not the "
                f"{recorded.size} taken: it was truncated or replaced"
            )
        if found.checksum != recorded.checksum:
            raise RestoreRefused(
                f"backup {backup.name} in store {recorded.store} does not match its checksum: "
                "it was changed or damaged"
            )
        try:
            await asyncio.to_thread(_read_through, key, spec, into)
        except BackupUnreadable as exc:
            raise RestoreRefused(f"backup {backup.name}: {exc}") from None
        return key


def _read_through(key: bytes, spec: BootstrapSpec, blob: IO[bytes]) -> None:
    """Decrypt the whole backup once, keeping nothing: it is sent only if every chunk is sound."""
    for _ in decrypt(key, spec.cluster_uuid, spec.snapshot, blob):
        pass


class Recovery:
    """One checked backup, ready to be sent to the machine that bootstraps etcd."""

    def __init__(
        self, ctx: Context, cluster: Resource, spec: BootstrapSpec, key: bytes, blob: IO[bytes]
    ) -> None:
        self._ctx, self._cluster, self._spec, self._key, self._blob = ctx, cluster, spec, key, blob

    async def _plaintext(self) -> AsyncIterator[bytes]:
        chunks = decrypt(self._key, self._spec.cluster_uuid, self._spec.snapshot, self._blob)
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            yield chunk

    async def bootstrap(self, client: MachineClient) -> None:
        """EtcdRecover with the snapshot, then a recovering Bootstrap; AlreadyExists once etcd was
        bootstrapped by an earlier call (before a crash)."""
        try:
            await client.etcd_recover(self._plaintext())
            await client.bootstrap(recover_etcd=True)
        except AlreadyExists:
            pass
        finally:
            self._blob.close()
        await _tell(self._ctx, self._cluster, True, "Restored", f"etcd restored from {_named(self._spec)}")


def _named(spec: BootstrapSpec) -> str:
    return f"snapshot {spec.snapshot} of cluster {spec.cluster_uuid}"


async def _tell(ctx: Context, cluster: Resource, ok: bool, reason: str, message: str) -> None:
    await ctx.condition(cluster, CONDITION, ok, reason, message, event="Normal" if ok else "Warning")
