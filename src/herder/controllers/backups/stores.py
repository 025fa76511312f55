"""Backup stores as the backup controllers use them: a place to put, fetch and delete encrypted backups
by key (``<cluster UUID>/<snapshot>``), found by the name of a BackupStore.

The name ``default`` is herder's own folder (``DATA_DIR/backups``, which ``herder serve`` gives in)
unless an Admin made a BackupStore of that name, so a platform can send every default backup to S3. A
store is made once per revision of its BackupStore.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Protocol

from herder.resources.backups import BACKUP_STORE, DEFAULT_STORE, BackupStoreSpec
from herder.state.errors import NotFound
from herder.state.store import Store


class StoreFailed(Exception):
    """A store that cannot do what was asked now (unreachable, refused, misconfigured), said in a line."""


class BlobMissing(StoreFailed):
    """The store has nothing under that key."""


class NoSuchStore(StoreFailed):
    """No BackupStore has that name."""


class BlobStore(Protocol):
    name: str

    async def put(self, key: str, source: IO[bytes]) -> None:
        """Store what ``source`` holds from its start under ``key``, replacing what was there."""

    async def fetch(self, key: str, into: IO[bytes]) -> None:
        """Write what is stored under ``key`` into ``into``; ``BlobMissing`` if there is nothing."""

    async def delete(self, key: str) -> None:
        """Remove ``key``; nothing there is fine."""


def blob_key(cluster_uuid: str, snapshot: str) -> str:
    return f"{cluster_uuid}/{snapshot}"


class BackupStores:
    def __init__(self, store: Store, default_dir: Path | None) -> None:
        self._store = store
        self._default_dir = default_dir
        self._made: dict[str, tuple[str, BlobStore]] = {}

    async def get(self, name: str) -> BlobStore:
        """The store named ``name``; ``StoreFailed`` saying why there is none."""
        # Only the store kinds' own modules import their client libraries (boto3 is slow to load).
        from herder.controllers.backups.filesystem_store import FilesystemBlobStore

        try:
            stored = await self._store.get(BACKUP_STORE, name)
        except NotFound:
            if name == DEFAULT_STORE and self._default_dir is not None:
                return FilesystemBlobStore(name, self._default_dir)
            raise NoSuchStore(f"backup store {name} does not exist") from None
        revision = stored.metadata.resource_version or ""
        known = self._made.get(name)
        if known is not None and known[0] == revision:
            return known[1]
        spec = BACKUP_STORE.spec_of(stored, BackupStoreSpec)
        made: BlobStore
        if spec.filesystem is not None:
            made = FilesystemBlobStore(name, Path(spec.filesystem.path))
        else:
            from herder.controllers.backups.s3_store import S3BlobStore

            assert spec.s3 is not None
            made = S3BlobStore(name, spec.s3)
        self._made[name] = (revision, made)
        return made
