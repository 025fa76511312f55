"""Encryption at rest of sensitive kinds: AES-256-GCM with the object's key as associated data.

The key comes from a file in the data directory, created with mode 0600 on first use, from a key
file the operator gives (replicas share one), or is given explicitly. A key file holds exactly the 32
raw bytes of the key, readable by its owner only. Binding the ciphertext to its storage key stops a
sealed value from being replayed under another object's name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from herder.state.errors import StateError

_MAGIC = b"\x00hgcm1"
_NONCE = 12


class DecryptionFailed(StateError):
    """A sealed value that this key cannot open: the wrong key file, or a damaged value."""


class Cipher:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the encryption key must be 32 bytes (AES-256)")
        self._aead = AESGCM(key)
        self._key = key

    def derive(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose`` alone (HKDF-SHA256 of the encryption key): what it protects
        learns nothing of the encryption key, nor of another purpose's key."""
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose.encode()).derive(self._key)

    @classmethod
    def from_file(cls, path: str | Path) -> Cipher:
        """Load the key file, creating it (mode 0600) with a new random key if it does not exist."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return cls(read_key_file(path))
        key = AESGCM.generate_key(bit_length=256)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        return cls(key)

    def seal(self, storage_key: str, plaintext: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        return _MAGIC + nonce + self._aead.encrypt(nonce, plaintext, storage_key.encode())

    def open(self, storage_key: str, value: bytes) -> bytes:
        if not is_sealed(value):
            return value
        body = value[len(_MAGIC) :]
        try:
            return self._aead.decrypt(body[:_NONCE], body[_NONCE:], storage_key.encode())
        except Exception as err:  # cryptography raises InvalidTag without a message
            raise DecryptionFailed(
                f"cannot decrypt {storage_key}: wrong encryption key or damaged value"
            ) from err


def read_key_file(path: str | Path) -> bytes:
    """The key in an existing key file; ``ValueError`` (one line, naming the file) if it is missing,
    not a regular file, readable by others, or not exactly 32 bytes.
    """
    try:
        # Non-blocking: a FIFO in its place is refused below instead of waiting for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ValueError(f"encryption key file {path}: no such file") from None
    except OSError as err:
        raise ValueError(f"encryption key file {path}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"encryption key file {path}: not a regular file")
        if info.st_mode & 0o077:
            raise ValueError(
                f"encryption key file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users "
                f"read the key; run chmod 600 {path}"
            )
        key = os.read(fd, 33)
    finally:
        os.close(fd)
    if len(key) != 32:
        raise ValueError(
            f"encryption key file {path}: holds {'more than 32' if len(key) > 32 else len(key)} bytes, "
            "but a key file holds exactly 32 raw bytes (as herder writes DATA_DIR/encryption.key)"
        )
    return key


def is_sealed(value: bytes) -> bool:
    return value.startswith(_MAGIC)
