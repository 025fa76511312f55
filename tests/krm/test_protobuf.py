"""Protobuf request bodies: what kubectl's typed create commands send is read (the real kubectl does it in
tests/emu/test_clusters_kubectl.py); anything else is answered with a Status, never a crash."""

from __future__ import annotations

import pytest

from herder.krm.protobuf import MAGIC, decode
from herder.krm.status import ApiError


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128 and number < 16
    return bytes([number << 3 | 2, len(payload)]) + payload


def _envelope(api_version: bytes, kind: bytes, raw: bytes) -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return MAGIC + _field(1, type_meta) + _field(2, raw)


def test_a_configmap_is_read() -> None:
    metadata = _field(1, b"settings") + _field(3, b"apps") + _field(11, _field(1, b"team") + _field(2, b"a"))
    raw = _field(1, metadata) + _field(2, _field(1, b"color") + _field(2, b"blue"))
    assert decode(_envelope(b"v1", b"ConfigMap", raw)) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "apps", "labels": {"team": "a"}},
        "data": {"color": "blue"},
    }


def test_secret_bytes_become_base64() -> None:
    raw = _field(1, _field(1, b"token")) + _field(2, _field(1, b"value") + _field(2, b"\x00\xff"))
    assert decode(_envelope(b"v1", b"Secret", raw))["data"] == {"value": "AP8="}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{}", 400),
        (_envelope(b"v1", b"Pod", b""), 415),
        (_envelope(b"v1", b"ConfigMap", b"\x0a\x7f"), 400),
        (MAGIC + b"\x0b", 400),
    ],
)
def test_bodies_it_cannot_read_are_refused(body: bytes, code: int) -> None:
    with pytest.raises(ApiError) as caught:
        decode(body)
    assert caught.value.code == code
