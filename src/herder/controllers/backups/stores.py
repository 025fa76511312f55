"""The backup store of each BackupStore name (what a store is, and how one fails: ``blob``).

The name ``default`` is herder's own folder (``DATA_DIR/backups``, which ``herder serve`` gives in)
unless an Admin made a BackupStore of that name, so a platform can send every default backup to S3. A
store is made once per revision of its BackupStore.
"""

from __future__ import annotations

from pathlib import Path

from herder.controllers.backups.blob import BlobStore, NoSuchStore
from herder.controllers.backups.filesystem_store import FilesystemBlobStore
from herder.resources.backups import BACKUP_STORE, DEFAULT_STORE, BackupStoreSpec
from herder.state.errors import NotFound
from herder.state.store import Store


class BackupStores:
    def __init__(self, store: Store, default_dir: Path | None) -> None:
        self._store = store
        self._default_dir = default_dir
        self._made: dict[str, tuple[str, BlobStore]] = {}

    async def get(self, name: str) -> BlobStore:
        """The store named ``name``; ``StoreFailed`` saying why there is none."""
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
            # Imported when an S3 store is first used: boto3 takes about half a second to load, which a server
            # without one (and every CLI command that imports the catalogue) need not pay.
            from herder.controllers.backups.s3_store import S3BlobStore

            assert spec.s3 is not None
            made = S3BlobStore(name, spec.s3)
        self._made[name] = (revision, made)
        return made
