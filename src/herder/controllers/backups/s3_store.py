"""A backup store in an S3 bucket (AWS, or any S3-compatible server at ``endpoint``), through boto3.

boto3 blocks, so each call runs in a thread; timeouts are short and retries few, so that an unreachable
server is an error on the cluster's status within seconds rather than a backup that hangs.
"""

from __future__ import annotations

import asyncio
from typing import IO, TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from herder.controllers.backups.blob import BlobMissing, StoreFailed
from herder.resources.backups import S3Store

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

_CONFIG = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 2, "mode": "standard"})
_MISSING = ("404", "NoSuchKey", "NotFound")


class S3BlobStore:
    def __init__(self, name: str, spec: S3Store) -> None:
        self.name = name
        self._bucket = spec.bucket
        config = _CONFIG
        if spec.endpoint:
            # S3-compatible servers (MinIO, Ceph, moto…) address buckets by path, not by host name.
            config = config.merge(Config(s3={"addressing_style": "path"}))
        self._client: S3Client = boto3.session.Session().client(
            "s3",
            region_name=spec.region,
            endpoint_url=spec.endpoint or None,
            aws_access_key_id=spec.access_key_id,
            aws_secret_access_key=spec.secret_access_key,
            config=config,
        )

    def _failed(self, key: str, exc: Exception) -> StoreFailed:
        where = f"backup store {self.name} (s3://{self._bucket}/{key})"
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code in _MISSING:
                return BlobMissing(f"{where}: no such object")
            return StoreFailed(f"{where}: {code}: {error.get('Message') or exc}")
        return StoreFailed(f"{where}: {exc}")

    async def put(self, key: str, source: IO[bytes]) -> None:
        source.seek(0)
        try:
            await asyncio.to_thread(self._client.upload_fileobj, source, self._bucket, key)
        except (BotoCoreError, ClientError) as exc:
            raise self._failed(key, exc) from None

    async def fetch(self, key: str, into: IO[bytes]) -> None:
        try:
            await asyncio.to_thread(self._client.download_fileobj, self._bucket, key, into)
        except (BotoCoreError, ClientError) as exc:
            raise self._failed(key, exc) from None

    async def delete(self, key: str) -> None:
        try:
            await asyncio.to_thread(self._client.delete_object, Bucket=self._bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            failed = self._failed(key, exc)
            if not isinstance(failed, BlobMissing):
                raise failed from None
