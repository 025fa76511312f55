"""The encrypted format of etcd backups: what comes back is what went in, and a backup that was changed,
cut short (at a chunk boundary too), moved under another cluster's or snapshot's name, or read with
another key is refused before any of its plaintext is given out."""

from __future__ import annotations

import io
import os

import pytest

from herder.controllers.backups.backup_cipher import (
    CHUNK,
    BackupUnreadable,
    checksum,
    decrypt,
    encrypt,
    new_key,
)

UUID = "6f1c0c3e-0000-4000-8000-000000000001"


def _sealed(plaintext: bytes, key: bytes) -> bytes:
    out = io.BytesIO()
    sealed = encrypt(key, UUID, "1.snapshot", plaintext, out)
    assert sealed == checksum(out)
    return out.getvalue()


def _read(blob: bytes, key: bytes, uuid: str = UUID, snapshot: str = "1.snapshot") -> bytes:
    return b"".join(decrypt(key, uuid, snapshot, io.BytesIO(blob)))


@pytest.mark.parametrize("size", [0, 10, CHUNK, 2 * CHUNK + 17])
def test_round_trip_and_no_plaintext_in_the_blob(size: int) -> None:
    key = new_key()
    plaintext = os.urandom(size // 2) + b"kind: ConfigMap" * (size // 30)
    plaintext = plaintext[:size]
    blob = _sealed(plaintext, key)
    assert _read(blob, key) == plaintext
    if size > 100:
        assert b"kind: ConfigMap" not in blob


def test_damage_is_refused() -> None:
    key = new_key()
    plaintext = os.urandom(2 * CHUNK + 5)
    blob = _sealed(plaintext, key)
    header = len(blob) - len(plaintext) - 3 * 16
    flipped = bytearray(blob)
    flipped[header + CHUNK + 100] ^= 1
    cuts = {
        "a bit flipped": bytes(flipped),
        "cut inside a chunk": blob[:-10],
        "cut at a chunk boundary": blob[: header + 2 * (CHUNK + 16)],
        "only the header": blob[:header],
        "empty": b"",
        "a chunk twice": blob[: header + CHUNK + 16]
        + blob[header : header + CHUNK + 16]
        + blob[header + CHUNK + 16 :],
    }
    for what, damaged in cuts.items():
        try:
            _read(damaged, key)
        except BackupUnreadable:
            continue
        pytest.fail(f"{what}: read without an error")


def test_another_key_or_name_is_refused() -> None:
    key = new_key()
    blob = _sealed(b"snapshot", key)
    with pytest.raises(BackupUnreadable, match="does not decrypt"):
        _read(blob, new_key())
    with pytest.raises(BackupUnreadable, match="not '2.snapshot'"):
        _read(blob, key, snapshot="2.snapshot")
    with pytest.raises(BackupUnreadable, match="of cluster"):
        _read(blob, key, uuid="another")
    # A header edited to claim another name no longer authenticates its chunks.
    forged = blob.replace(b'"1.snapshot"', b'"2.snapshot"')
    with pytest.raises(BackupUnreadable, match="does not decrypt"):
        _read(forged, key, snapshot="2.snapshot")
