"""A backup store in a folder: one file per backup, written whole before it takes its name (a crash
leaves the old file or the new one, never half of one), the folder readable by herder's user only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path
from typing import IO

from herder.controllers.backups.blob import BlobMissing, StoreFailed


class FilesystemBlobStore:
    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self._root = root

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise StoreFailed(f"backup store {self.name}: invalid key {key!r}")
        return self._root.joinpath(*parts)

    async def put(self, key: str, source: IO[bytes]) -> None:
        await asyncio.to_thread(self._put, self._path(key), source)

    def _put(self, path: Path, source: IO[bytes]) -> None:
        partial = path.with_name(f".{path.name}.partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            source.seek(0)
            with partial.open("wb") as out:
                shutil.copyfileobj(source, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise StoreFailed(f"backup store {self.name}: {exc.filename}: {exc.strerror}") from None

    async def fetch(self, key: str, into: IO[bytes]) -> None:
        await asyncio.to_thread(self._fetch, self._path(key), key, into)

    def _fetch(self, path: Path, key: str, into: IO[bytes]) -> None:
        try:
            with path.open("rb") as source:
                shutil.copyfileobj(source, into)
        except FileNotFoundError:
            raise BlobMissing(f"backup store {self.name} has no {key}") from None
        except OSError as exc:
            raise StoreFailed(f"backup store {self.name}: {exc.filename}: {exc.strerror}") from None

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._delete, self._path(key))

    def _delete(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StoreFailed(f"backup store {self.name}: {exc.filename}: {exc.strerror}") from None
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # the cluster's folder, once its last backup is gone
