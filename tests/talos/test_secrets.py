"""The secrets bundle: talosctl's YAML format round-trips, broken bundles are refused by field, and generated
bundles carry Talos's key types, subjects, usages and lifetimes for their version contract."""

from __future__ import annotations

import base64
import re
import stat
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from herder.talos.contracts import VersionContract
from herder.talos.pki import load_private_key
from herder.talos.secrets import (
    InvalidSecrets,
    SecretsBundle,
    dump_secrets,
    encode_cluster_id,
    generate_secrets,
    load_secrets,
    load_secrets_file,
    save_secrets,
)
from tests.data import TALOS

TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture(scope="module")
def bundle() -> SecretsBundle:
    return generate_secrets(VersionContract(1, 14), now=NOW)


@pytest.mark.parametrize("path", ["golden/secrets.yaml", "fixtures/secrets.yaml"])
def test_talosctl_bundles_round_trip(path: str) -> None:
    text = (TALOS / path).read_text()
    dumped = dump_secrets(load_secrets(text))
    assert yaml.safe_load(dumped) == yaml.safe_load(text)
    # Same bytes as talosctl wrote, bar the comment line of the golden file.
    assert dumped == "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def test_loaded_bundle_holds_the_decoded_pems() -> None:
    loaded = load_secrets_file(TALOS / "golden" / "secrets.yaml")
    assert loaded.trustd_token == "d8cwfa.eyvpi0xwxyarbfid"
    assert loaded.bootstrap_token == "inn7ol.u4ehnti8qyls9ymo"
    assert loaded.os.key.startswith(b"-----BEGIN ED25519 PRIVATE KEY-----")
    assert isinstance(loaded.os.private_key(), ed25519.Ed25519PrivateKey)
    assert loaded.k8s.certificate().subject.rfc4514_string() == "O=kubernetes"
    assert loaded.aescbc_encryption_secret == ""


def test_invalid_fixture_is_refused_naming_each_field() -> None:
    with pytest.raises(InvalidSecrets) as err:
        load_secrets_file(TALOS / "fixtures" / "invalid-secrets.yaml")
    message = str(err.value)
    assert "\n" not in message
    for field in (
        "cluster.secret is required",
        "secrets.secretboxencryptionsecret",
        "trustdinfo is required",
        "certs.etcd.key is required",
        "certs.k8saggregator is required",
        "certs.os.crt is required",
        "certs.os.key is invalid",
    ):
        assert field in message
    # Fields that are present and valid are not blamed.
    assert "certs.k8s." not in message
    assert "cluster.id" not in message


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["certs"]["k8s"].update(crt="not base64!"), "certs.k8s.crt: not valid base64"),
        (
            lambda d: d["certs"]["etcd"].update(crt=base64.b64encode(b"garbage").decode()),
            "certs.etcd.crt is invalid",
        ),
        (lambda d: d["secrets"].update(aescbcencryptionsecret="x"), "(both given)"),
        (lambda d: d["cluster"].pop("id"), "cluster.id is required"),
        (lambda d: d["certs"].pop("k8sserviceaccount"), "certs.k8sserviceaccount is required"),
    ],
)
def test_broken_bundles_name_the_field(mutate: Callable[[dict[str, Any]], object], expected: str) -> None:
    data = yaml.safe_load((TALOS / "golden" / "secrets.yaml").read_text())
    mutate(data)
    with pytest.raises(InvalidSecrets, match=re.escape(expected)):
        load_secrets(yaml.safe_dump(data))


def test_not_a_bundle_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidSecrets, match="not YAML"):
        load_secrets("cluster: [unclosed")
    with pytest.raises(InvalidSecrets, match="expected one YAML mapping"):
        load_secrets("- a list\n")
    with pytest.raises(InvalidSecrets, match="cannot read secrets bundle"):
        load_secrets_file(tmp_path / "missing.yaml")


def test_generated_bundle_round_trips_and_is_private(bundle: SecretsBundle, tmp_path: Path) -> None:
    assert load_secrets(dump_secrets(bundle)) == bundle
    target = tmp_path / "secrets.yaml"
    save_secrets(bundle, target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert load_secrets_file(target) == bundle


def test_generated_tokens_and_secrets(bundle: SecretsBundle) -> None:
    assert TOKEN.match(bundle.bootstrap_token)
    assert TOKEN.match(bundle.trustd_token)
    assert bundle.bootstrap_token != bundle.trustd_token
    assert len(base64.b64decode(bundle.cluster_id, validate=True)) == 32
    assert len(base64.b64decode(bundle.cluster_secret, validate=True)) == 32
    assert len(base64.b64decode(bundle.secretbox_encryption_secret, validate=True)) == 32
    assert bundle.aescbc_encryption_secret == ""


def _organizations(cert: x509.Certificate) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


@pytest.mark.parametrize(
    ("attr", "organizations", "key_class"),
    [
        ("os", ["talos"], ed25519.Ed25519PrivateKey),
        ("k8s", ["kubernetes"], ec.EllipticCurvePrivateKey),
        ("k8s_aggregator", [], ec.EllipticCurvePrivateKey),
        ("etcd", ["etcd"], ec.EllipticCurvePrivateKey),
    ],
)
def test_generated_cas_match_talos(
    bundle: SecretsBundle, tmp_path: Path, attr: str, organizations: list[str], key_class: type
) -> None:
    pair = getattr(bundle, attr)
    cert = pair.certificate()
    key = pair.private_key()
    assert isinstance(key, key_class)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        assert key.curve.name == "secp256r1"
        assert pair.key.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    assert _organizations(cert) == organizations
    assert cert.subject == cert.issuer
    # Encoded as Go encodes it (PrintableString), byte for byte like the CAs talosctl made.
    talos_made = getattr(load_secrets_file(TALOS / "golden" / "secrets.yaml"), attr).certificate()
    assert cert.subject.public_bytes() == talos_made.subject.public_bytes()
    assert len(cert.subject) == len(
        organizations
    )  # no CN, even for the aggregator ("front-proxy" is dropped)
    assert cert.not_valid_before_utc == NOW
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(hours=87600)
    assert 0 < cert.serial_number < 2**128
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.digital_signature
    assert not usage.value.key_encipherment
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    assert len(cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest) == 20
    # OpenSSL accepts the CA as its own trust anchor.
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(pair.crt)
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca_file), str(ca_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_service_account_key_follows_the_contract(bundle: SecretsBundle) -> None:
    key = load_private_key(bundle.k8s_service_account_key)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 4096
    assert bundle.k8s_service_account_key.startswith(b"-----BEGIN RSA PRIVATE KEY-----")

    old = generate_secrets(VersionContract(1, 6))
    assert isinstance(load_private_key(old.k8s_service_account_key), ec.EllipticCurvePrivateKey)


def test_old_contracts_get_aescbc() -> None:
    old = generate_secrets(VersionContract(1, 2))
    assert old.aescbc_encryption_secret and not old.secretbox_encryption_secret
    assert "aescbcencryptionsecret" in dump_secrets(old)
    assert load_secrets(dump_secrets(old)) == old


def test_cluster_id_encoding_follows_the_contract() -> None:
    raw = b"\xfb\xff" * 16
    assert encode_cluster_id(raw, VersionContract(1, 14)).startswith("+/")
    assert encode_cluster_id(raw, VersionContract(1, 13)).startswith("-_")
    assert len(base64.urlsafe_b64decode(generate_secrets(VersionContract(1, 2)).cluster_id)) == 32
