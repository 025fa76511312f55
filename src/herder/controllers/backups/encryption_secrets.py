"""The cluster's Kubernetes encryption secrets (``secretboxEncryptionSecret``, ``aescbcEncryptionSecret``),
carried with each of its etcd backups, sealed with the backup's key, as Omni keeps them: the Secrets in a
snapshot are encrypted at rest with them, so a cluster restored from it must run with the same ones.

They are sealed with AES-256-GCM under the cluster's backup key, bound to the backup (its cluster's UUID
and snapshot name) as associated data, and kept on the EtcdBackup (``spec.encryptionSecrets``): moved to
another backup, or opened with another key, they are refused.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_NONCE = 12


@dataclass(frozen=True)
class EncryptionSecrets:
    secretbox: str = ""
    aescbc: str = ""


class SecretsUnreadable(Exception):
    """Encryption secrets that are not this backup's, or were damaged."""


def _context(cluster_uuid: str, snapshot: str) -> bytes:
    return f"herder-etcd-backup-encryption-secrets/{cluster_uuid}/{snapshot}".encode()


def seal(key: bytes, cluster_uuid: str, snapshot: str, secrets: EncryptionSecrets) -> str:
    nonce = os.urandom(_NONCE)
    plain = json.dumps({"secretbox": secrets.secretbox, "aescbc": secrets.aescbc}).encode()
    return base64.b64encode(
        nonce + AESGCM(key).encrypt(nonce, plain, _context(cluster_uuid, snapshot))
    ).decode()


def open_sealed(key: bytes, cluster_uuid: str, snapshot: str, sealed: str) -> EncryptionSecrets:
    try:
        raw = base64.b64decode(sealed, validate=True)
        plain = AESGCM(key).decrypt(raw[:_NONCE], raw[_NONCE:], _context(cluster_uuid, snapshot))
        data = json.loads(plain)
        return EncryptionSecrets(secretbox=str(data["secretbox"]), aescbc=str(data["aescbc"]))
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise SecretsUnreadable(f"the backup's encryption secrets are damaged: {exc}") from None
    except Exception:
        raise SecretsUnreadable("the backup's encryption secrets are not sealed with its key") from None
