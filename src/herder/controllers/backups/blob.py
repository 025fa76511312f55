"""What a backup store is to the backup controllers: a place to put, fetch and delete encrypted backups by
key (``<cluster UUID>/<snapshot>``), and the ways it fails. Every store kind implements ``BlobStore``;
``stores`` finds one by the name of a BackupStore."""

from __future__ import annotations

from typing import IO, Protocol


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
