"""Backups asked for by hand (``herder cluster backup NAME``): the Cluster's object action ``backup``.

The action adds one to the Cluster's ``status.backups.requested`` and answers at once with that number
(``{"requested": N}``). The EtcdBackup controller of the replica that leads sees the request and takes
the backup as it takes every other one (a single writer of backups, the same checks and status); the
attempt that answers it sets ``status.backups.served`` to at least N, with the backup's name in
``lastBackup`` or the reason in ``lastError``, which is what the CLI waits for. A request, not a backup
taken inside the HTTP call: the call stays short, and a backup asked for while no replica leads is taken
when one does.
"""

from __future__ import annotations

import json
from typing import Any

from herder.resources import Resource
from herder.resources.backups import BackupsStatus
from herder.resources.clusters import CLUSTER, ClusterStatus
from herder.runtime.controller import Context, ObjectKey
from herder.runtime.outputs import Writes
from herder.state.store import Store


class BackupRefused(Exception):
    """The cluster cannot be backed up (it is being deleted)."""


class BackupRequests:
    def __init__(self, store: Store) -> None:
        self._ctx = Context(store, "BackupRequests", (Writes(CLUSTER.kind, "status.backups.requested"),))

    async def request(self, cluster: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        if cluster.metadata.deletion_timestamp:
            raise BackupRefused(f"cluster {cluster.name} is being deleted")
        number = 0

        def ask(_: Resource, status: ClusterStatus) -> None:
            nonlocal number
            backups = status.backups or BackupsStatus()
            number = backups.requested + 1
            status.backups = backups.model_copy(update={"requested": number})

        await self._ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, ask)
        return json.dumps({"requested": number}).encode()
