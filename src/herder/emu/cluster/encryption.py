"""Encryption at rest of a cluster's Secrets, as kube-apiserver does it with the encryption config Talos
renders from the cluster's ``secretboxEncryptionSecret`` (and ``aescbcEncryptionSecret``): a Secret is
written sealed with the first key, and read with whichever configured key has its name; so an etcd
snapshot holds Secrets only a cluster with the same keys can read. A Secret that no configured key opens
is an error, answered as kube-apiserver answers it (500, ``unable to transform key``).

The stored form follows kube-apiserver's (``k8s:enc:secretbox:v1:NAME:`` and the sealed bytes, base64 here
so that the keyspace stays text), sealed with AES-256-GCM where kube-apiserver uses XSalsa20-Poly1305: what
matters to a user, which keys read which Secrets, is the same.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from herder.krm.status import ApiError
from herder.state.encryption import Cipher

PREFIX = b"k8s:enc:secretbox:v1:"
_NONCE = 12


def _aead(secret: str) -> AESGCM:
    try:
        raw = base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError):
        raw = secret.encode()
    return AESGCM(raw if len(raw) == 32 else hashlib.sha256(raw).digest())


def registry_key(storage_key: str) -> str:
    """The key as kube-apiserver names it in etcd (``/registry/secrets/NS/NAME``)."""
    return "/registry/" + storage_key.removeprefix("/core/")


class SecretEncryption(Cipher):
    """The encryption config of one cluster's kube-apiserver: named keys, the first one writing."""

    def __init__(self) -> None:  # no key until a control plane's config names one
        self._keys: list[tuple[str, AESGCM]] = []
        self._secrets: tuple[tuple[str, str], ...] = ()

    def use(self, keys: Sequence[tuple[str, str]]) -> None:
        """Take the keys (name, base64 secret) of the config the API server runs with, the writer first;
        none: Secrets are written as they are (kube-apiserver's identity provider)."""
        if tuple(keys) != self._secrets:
            self._secrets = tuple(keys)
            self._keys = [(name, _aead(secret)) for name, secret in keys]

    def seal(self, storage_key: str, plaintext: bytes) -> bytes:
        if not self._keys:
            return plaintext
        name, aead = self._keys[0]
        nonce = os.urandom(_NONCE)
        sealed = nonce + aead.encrypt(nonce, plaintext, storage_key.encode())
        return PREFIX + name.encode() + b":" + base64.b64encode(sealed)

    def open(self, storage_key: str, value: bytes) -> bytes:
        if not value.startswith(b"k8s:enc:"):
            return value
        name, _, body = value.removeprefix(PREFIX).partition(b":")
        for known, aead in self._keys:
            if known.encode() != name:
                continue
            try:
                sealed = base64.b64decode(body, validate=True)
                return aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], storage_key.encode())
            except Exception:
                continue
        raise ApiError(
            500,
            f'Internal error occurred: unable to transform key "{registry_key(storage_key)}": no key of the '
            "encryption config decrypts it (the cluster's encryption secret is not the one it was written with)",
            reason="InternalError",
        )
