"""How an etcd backup is encrypted in its store: AES-256-GCM in chunks, with the cluster's key.

A backup is a header (format, chunk size, a random nonce prefix, and the cluster UUID and snapshot name
it belongs to) followed by chunks of up to 1 MiB, each sealed with a nonce made of the prefix, the chunk's
index and a flag on the last one, and the whole header as associated data (the STREAM construction). So a
backup decrypts in bounded memory, and one that was changed, cut short (even at a chunk boundary),
reordered, or moved under another cluster's or snapshot's name is refused, never half-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"HERDER-ETCD-BACKUP\x01"
CHUNK = 1 << 20
_TAG = 16
_PREFIX = 7
_FIXED = struct.Struct(">I7sH")  # chunk size, nonce prefix, length of the context


class BackupUnreadable(Exception):
    """A backup that is not one of this cluster's, or was damaged or cut short."""


@dataclass(frozen=True)
class Sealed:
    size: int
    checksum: str
    """``sha256:HEX`` of the bytes written."""


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def _nonce(prefix: bytes, index: int, last: bool) -> bytes:
    return prefix + struct.pack(">I?", index, last)


def _context(cluster_uuid: str, snapshot: str) -> bytes:
    return json.dumps({"clusterUUID": cluster_uuid, "snapshot": snapshot}, sort_keys=True).encode()


def encrypt(key: bytes, cluster_uuid: str, snapshot: str, plaintext: bytes, out: IO[bytes]) -> Sealed:
    """Write ``plaintext`` encrypted to ``out``."""
    aead = AESGCM(key)
    prefix = os.urandom(_PREFIX)
    context = _context(cluster_uuid, snapshot)
    header = MAGIC + _FIXED.pack(CHUNK, prefix, len(context)) + context
    digest = hashlib.sha256(header)
    out.write(header)
    size = len(header)
    count = max(1, -(-len(plaintext) // CHUNK))
    for index in range(count):
        chunk = aead.encrypt(
            _nonce(prefix, index, index == count - 1),
            plaintext[index * CHUNK : (index + 1) * CHUNK],
            header,
        )
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return Sealed(size, "sha256:" + digest.hexdigest())


def checksum(source: IO[bytes]) -> Sealed:
    """The size and checksum of what ``source`` holds from its start."""
    source.seek(0)
    digest = hashlib.sha256()
    size = 0
    while block := source.read(CHUNK):
        digest.update(block)
        size += len(block)
    source.seek(0)
    return Sealed(size, "sha256:" + digest.hexdigest())


def _header(source: IO[bytes]) -> tuple[bytes, int, bytes, dict[str, str]]:
    fixed = source.read(len(MAGIC) + _FIXED.size)
    if len(fixed) < len(MAGIC) + _FIXED.size or not fixed.startswith(MAGIC):
        raise BackupUnreadable("not an etcd backup of herder's (no header)")
    chunk, prefix, length = _FIXED.unpack(fixed[len(MAGIC) :])
    raw = source.read(length)
    try:
        context = json.loads(raw)
    except ValueError:
        raise BackupUnreadable("the backup's header is damaged") from None
    if not isinstance(context, dict) or not 0 < chunk <= 16 * CHUNK:
        raise BackupUnreadable("the backup's header is damaged")
    return fixed + raw, chunk, prefix, {str(k): str(v) for k, v in context.items()}


def decrypt(key: bytes, cluster_uuid: str, snapshot: str, source: IO[bytes]) -> Iterator[bytes]:
    """The plaintext of the backup ``source`` holds, a chunk at a time, each checked before it is given."""
    source.seek(0)
    header, chunk, prefix, context = _header(source)
    owner = context.get("clusterUUID", "")
    if owner != cluster_uuid or context.get("snapshot") != snapshot:
        raise BackupUnreadable(
            f"the backup is snapshot {context.get('snapshot')!r} of cluster {owner}, "
            f"not {snapshot!r} of cluster {cluster_uuid}"
        )
    aead = AESGCM(key)
    index = 0
    block = source.read(chunk + _TAG)
    while True:
        following = source.read(chunk + _TAG)
        try:
            yield aead.decrypt(_nonce(prefix, index, not following), block, header)
        except InvalidTag:
            raise BackupUnreadable(
                f"chunk {index} of the backup does not decrypt: it was changed or cut short, "
                "or it was not encrypted with this cluster's key"
            ) from None
        if not following:
            return
        block, index = following, index + 1
