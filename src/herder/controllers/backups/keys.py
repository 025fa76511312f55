"""Each cluster's backup key: an EtcdBackupKey named by the cluster's UUID in its namespace, made with the
cluster's first backup and sealed at rest. It is owned by nobody, so it outlives the cluster with its
backups (a restore needs it); it goes with the last of them (``key_cleanup``). A key is looked up in
the restoring cluster's own namespace only, so a backup never restores into another account."""

from __future__ import annotations

import base64
import binascii

from herder.controllers.backups.backup_cipher import new_key
from herder.resources import Resource
from herder.resources.backups import ETCD_BACKUP_KEY, EtcdBackupKeySpec
from herder.resources.machines import CLUSTER_LABEL
from herder.runtime.controller import Context, ObjectKey
from herder.state.errors import AlreadyExists


def _decoded(stored: Resource) -> bytes:
    try:
        key = base64.b64decode(ETCD_BACKUP_KEY.spec_of(stored, EtcdBackupKeySpec).key, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ValueError(f"the backup key of cluster {stored.name} is damaged")
    return key


async def backup_key(ctx: Context, namespace: str | None, cluster_uuid: str) -> bytes | None:
    """The key of the backups of the cluster ``cluster_uuid`` in ``namespace``, if there is one."""
    stored = await ctx.get(ObjectKey(ETCD_BACKUP_KEY.kind, namespace, cluster_uuid))
    return _decoded(stored) if stored is not None else None


async def ensure_backup_key(ctx: Context, cluster: Resource) -> bytes:
    """The key of ``cluster``'s backups, made now if it has none yet."""
    uuid = cluster.metadata.uid or ""
    known = await backup_key(ctx, cluster.namespace, uuid)
    if known is not None:
        return known
    made = Resource.model_validate(
        {
            "apiVersion": ETCD_BACKUP_KEY.api_version,
            "kind": ETCD_BACKUP_KEY.kind,
            "metadata": {
                "name": uuid,
                "namespace": cluster.namespace,
                "labels": {CLUSTER_LABEL: cluster.name},
            },
            "spec": {"key": base64.b64encode(new_key()).decode()},
        }
    )
    try:
        return _decoded(await ctx.create(made))
    except AlreadyExists:
        found = await backup_key(ctx, cluster.namespace, uuid)
        assert found is not None
        return found
