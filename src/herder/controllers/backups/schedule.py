"""Taking etcd backups: every cluster whose schedule is due, or that was asked for one by hand (``herder
cluster backup``), gets an EtcdSnapshot from one of its running etcd members, encrypted with the
cluster's key, written to its store, and recorded as an EtcdBackup, which carries the cluster's Kubernetes
encryption secrets sealed with the same key (``encryption_secrets``: a restore needs them).

A cluster's first backup is taken as soon as etcd is bootstrapped, the next ``interval`` after the last
success. A failed attempt is retried with a backoff (from 5 s, doubling, at most the interval and five
minutes) and never touches the backups already taken. ``Cluster.status.backups`` keeps the last
success, the last attempt and its error (until a later success), and the condition ``BackupsHealthy``
says how the last attempt went; each backup taken or failed is also an Event and a metric.
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import UTC, datetime

from herder.controllers.backups.backup_cipher import encrypt
from herder.controllers.backups.blob import StoreFailed, blob_key
from herder.controllers.backups.encryption_secrets import EncryptionSecrets, seal
from herder.controllers.backups.keys import ensure_backup_key
from herder.controllers.backups.metrics import BACKUP_FAILURES, BACKUPS_TAKEN, NEWEST_BACKUP_AGE
from herder.controllers.backups.policy import BackupPolicy
from herder.controllers.backups.stores import BackupStores
from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.members import cluster_changes, cluster_machines, machine_of
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL
from herder.resources.backups import (
    DEFAULT_STORE,
    ETCD_BACKUP,
    ETCD_BACKUP_KEY,
    BackupsStatus,
    ClusterBackups,
    EtcdBackupSpec,
)
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    ClusterMachineSpec,
    ClusterMachineStatus,
    ClusterStatus,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.state.errors import StateError
from herder.talos.machine import Credentials, MachineAPIError
from herder.talos.machine.pool import ClientPool
from herder.workqueue import retry_delay as backoff_delay

CONDITION = "BackupsHealthy"
# On an EtcdBackup: its file in the store goes before it does (``removal``).
BLOB_FINALIZER = "herder.dev/backup-blob"
FIRST_RETRY = 5.0
# What this controller writes of Cluster.status.backups: all of it but the requests (BackupRequests').
BACKUP_FIELDS = ("lastBackup", "lastSuccessTime", "lastAttemptTime", "lastError", "failures", "served")
MAX_RETRY = 300.0
SNAPSHOT_TIMEOUT = 120.0
_TIME = "%Y-%m-%dT%H:%M:%SZ"


class BackupFailed(Exception):
    """Why this attempt took no backup, in words for the cluster's status."""


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, _TIME).replace(tzinfo=UTC).timestamp()


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime(_TIME)


def retry_delay(failures: int, schedule: ClusterBackups | None) -> float:
    cap = min(MAX_RETRY, schedule.interval_seconds) if schedule is not None else MAX_RETRY
    return backoff_delay(failures, FIRST_RETRY, cap)


class EtcdBackupController(Controller):
    name = "EtcdBackup"
    primary = CLUSTER.kind
    outputs = (
        Writes(
            CLUSTER.kind,
            *(f"status.backups.{field}" for field in BACKUP_FIELDS),
            f"status.conditions[{CONDITION}]",
        ),
        Writes(ETCD_BACKUP.kind, creates=True),
        Writes(ETCD_BACKUP_KEY.kind, creates=True),
    )
    concurrency = 4

    def __init__(
        self,
        keys: ClusterKeys,
        stores: BackupStores,
        policy: BackupPolicy | None = None,
        clients: ClientPool | None = None,
    ) -> None:
        self._keys = keys
        # An empty pool is falsy (it has a length): only a missing one is replaced.
        self._clients = clients if clients is not None else ClientPool(keep=8, timeout=SNAPSHOT_TIMEOUT)
        self._stores = stores
        self._policy = policy or BackupPolicy()
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes("backups", "bootstrap", "conditions[EtcdHealthy]")),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            NEWEST_BACKUP_AGE.forget(key.namespace or "", key.name)
            return None
        cluster_status = status_of(cluster, ClusterStatus)
        status = cluster_status.backups or BackupsStatus()
        if status.last_success_time:
            NEWEST_BACKUP_AGE.taken(key.namespace or "", key.name, _seconds(status.last_success_time))
        schedule = self._policy.schedule(cluster)
        asked = status.requested > status.served
        bootstrapped = cluster_status.bootstrapped
        if not asked and (schedule is None or not bootstrapped):
            return None
        if not asked and not status.last_attempt_time and not cluster_status.condition_true("EtcdHealthy"):
            return None  # the first scheduled backup waits for etcd to run (it would fail, then be retried)
        now = ctx.clock.now().timestamp()
        if not asked:
            assert schedule is not None
            if status.failures and status.last_attempt_time:
                due = _seconds(status.last_attempt_time) + retry_delay(status.failures, schedule)
            elif status.last_success_time:
                due = _seconds(status.last_success_time) + schedule.interval_seconds
            else:
                due = now
            if due > now:
                return Result(requeue_after=due - now)
        store = schedule.store if schedule is not None else DEFAULT_STORE
        try:
            if not bootstrapped:
                raise BackupFailed("etcd is not bootstrapped yet")
            backup = await self._take(ctx, cluster, store)
        except BackupFailed as exc:
            failures = await self._record(ctx, cluster, status.requested, now, error=str(exc))
            BACKUP_FAILURES.labels(key.namespace or "", key.name).inc()
            await ctx.event(cluster, "Warning", "BackupFailed", str(exc))
            return Result(requeue_after=retry_delay(failures, schedule)) if schedule is not None else None
        await self._record(ctx, cluster, status.requested, now, backup=backup)
        BACKUPS_TAKEN.labels(key.namespace or "", key.name).inc()
        spec = ETCD_BACKUP.spec_of(backup, EtcdBackupSpec)
        NEWEST_BACKUP_AGE.taken(key.namespace or "", key.name, _seconds(spec.taken_at))
        if status.failures:
            # Told after the Warnings of the attempts that failed. A routine backup is no Event: the backup
            # itself and the BackupsHealthy condition tell it, and an Event each would be a write more.
            await ctx.event(
                cluster,
                "Normal",
                "BackupTaken",
                f"{backup.name}: {spec.size} bytes in store {spec.store}, from machine {spec.machine}",
            )
        return Result(requeue_after=schedule.interval_seconds) if schedule is not None else None

    async def _record(
        self,
        ctx: Context,
        cluster: Resource,
        served: int,
        attempted: float,
        *,
        backup: Resource | None = None,
        error: str = "",
    ) -> int:
        """Write the attempt's outcome on the cluster; the number of failures since the last success."""
        failures = 0
        now = ctx.clock.rfc3339()
        taken = ETCD_BACKUP.spec_of(backup, EtcdBackupSpec) if backup is not None else None

        def record(_: Resource, current: ClusterStatus) -> None:
            nonlocal failures
            before = current.backups or BackupsStatus()
            after = before.model_copy(
                update={"last_attempt_time": _stamp(attempted), "served": max(before.served, served)}
            )
            if backup is not None and taken is not None:
                after = after.model_copy(
                    update={
                        "last_backup": backup.name,
                        "last_success_time": taken.taken_at,
                        "last_error": "",
                        "failures": 0,
                    }
                )
                current.set_condition(
                    CONDITION,
                    True,
                    "BackupTaken",
                    f"backup {backup.name} taken at {taken.taken_at} into store {taken.store}",
                    now=now,
                )
            else:
                after = after.model_copy(update={"last_error": error, "failures": before.failures + 1})
                last = before.last_success_time or "never"
                current.set_condition(
                    CONDITION,
                    False,
                    "BackupFailed",
                    f"{error} ({after.failures} attempt(s) failed; last success: {last})",
                    now=now,
                )
            failures = after.failures
            current.backups = after

        await ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, record)
        return failures

    async def _take(self, ctx: Context, cluster: Resource, store_name: str) -> Resource:
        view = await self._keys.of(cluster)
        if view is None:
            raise BackupFailed("the cluster has no secrets yet")
        try:
            store = await self._stores.get(store_name)
        except StoreFailed as exc:
            raise BackupFailed(str(exc)) from None
        snapshot, machine = await _snapshot(self._clients, await _etcd_members(ctx, cluster), view.talos)
        uuid = cluster.metadata.uid or ""
        key = await ensure_backup_key(ctx, cluster)
        taken = int(ctx.clock.now().timestamp())
        while await ctx.get(ObjectKey(ETCD_BACKUP.kind, cluster.namespace, f"{cluster.name}-{taken}")):
            taken += 1  # asked for by hand within the second of the last one
        name = f"{cluster.name}-{taken}"
        snapshot_name = f"{taken}.snapshot"
        with tempfile.TemporaryFile() as spool:
            sealed = await asyncio.to_thread(encrypt, key, uuid, snapshot_name, snapshot, spool)
            del snapshot
            try:
                await store.put(blob_key(uuid, snapshot_name), spool)
            except StoreFailed as exc:
                raise BackupFailed(str(exc)) from None
        labels = {CLUSTER_LABEL: cluster.name}
        if HIDDEN_LABEL in cluster.metadata.labels:
            labels[HIDDEN_LABEL] = cluster.metadata.labels[HIDDEN_LABEL]
        record = Resource.model_validate(
            {
                "apiVersion": ETCD_BACKUP.api_version,
                "kind": ETCD_BACKUP.kind,
                "metadata": {
                    "name": name,
                    "namespace": cluster.namespace,
                    "labels": labels,
                    "finalizers": [BLOB_FINALIZER],
                },
                "spec": {
                    "clusterUUID": uuid,
                    "snapshot": snapshot_name,
                    "size": sealed.size,
                    "store": store.name,
                    "checksum": sealed.checksum,
                    "takenAt": _stamp(taken),
                    "machine": machine,
                    # A restore needs them to read the Secrets the snapshot holds encrypted.
                    "encryptionSecrets": seal(
                        key,
                        uuid,
                        snapshot_name,
                        EncryptionSecrets(
                            view.bundle.secretbox_encryption_secret, view.bundle.aescbc_encryption_secret
                        ),
                    ),
                },
            }
        )
        try:
            return await ctx.create(record)
        except StateError as exc:
            await store.delete(blob_key(uuid, snapshot_name))
            raise BackupFailed(f"cannot record backup {name}: {exc}") from None


async def _etcd_members(ctx: Context, cluster: Resource) -> list[tuple[str, str]]:
    """(machine, Talos endpoint) of the cluster's control planes that run as etcd members, by name."""
    found = []
    for member in await cluster_machines(ctx, cluster):
        if CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec).role != "controlplane":
            continue
        if member.metadata.deletion_timestamp or not status_of(member, ClusterMachineStatus).etcd_member:
            continue
        machine = await machine_of(ctx, member)
        if machine is not None and status_of(machine, MachineStatus).running:
            found.append((member.name, MACHINE.spec_of(machine, MachineSpec).endpoint))
    return sorted(found)


async def _snapshot(
    clients: ClientPool, members: list[tuple[str, str]], credentials: Credentials
) -> tuple[bytes, str]:
    """An etcd snapshot from the first member that gives one, and that member's machine."""
    if not members:
        raise BackupFailed("no control plane runs etcd")
    problems = []
    for machine, endpoint in members:
        try:
            async with clients.client(endpoint, credentials) as client:
                return await client.etcd_snapshot(), machine
        except MachineAPIError as exc:
            problems.append(f"{machine}: {exc}")
    raise BackupFailed("no etcd snapshot: " + "; ".join(problems))
