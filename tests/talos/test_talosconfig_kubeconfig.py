"""talosconfig and admin kubeconfig: their client certificates chain to the right CA for OpenSSL, carry
Talos's subjects, usages and lifetimes, and the files read back (kubeconfig by the real kubectl)."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from herder.talos import pki
from herder.talos.kubeconfig import generate_admin_kubeconfig
from herder.talos.secrets import load_secrets_file
from herder.talos.talosconfig import (
    Talosconfig,
    TalosconfigError,
    TalosContext,
    dump_talosconfig,
    generate_talosconfig,
    load_talosconfig,
    load_talosconfig_file,
)
from tests.data import TALOS

SECRETS = load_secrets_file(TALOS / "golden" / "secrets.yaml")
NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
KUBECTL = "/usr/bin/kubectl"


def openssl_verify(tmp_path: Path, ca: bytes, leaf: bytes) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ca.pem").write_bytes(ca)
    (tmp_path / "leaf.pem").write_bytes(leaf)
    return subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "leaf.pem")],
        capture_output=True,
        text=True,
        check=False,
    )


def attributes(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]


# --- talosconfig -----------------------------------------------------------------------------------


def test_talosconfig_client_certificate(tmp_path: Path) -> None:
    config = generate_talosconfig(SECRETS, "base", endpoints=["10.5.0.2"], now=NOW)
    ctx = config.current()
    assert ctx.ca == SECRETS.os.crt
    assert ctx.endpoints == ("10.5.0.2",)
    cert = pki.load_certificate(ctx.crt)
    assert isinstance(pki.load_private_key(ctx.key), ed25519.Ed25519PrivateKey)
    # The standard PKCS#8 label, which OpenSSL and talosctl load (Talos's own is "ED25519 PRIVATE KEY").
    assert ctx.key.startswith(b"-----BEGIN PRIVATE KEY-----") and b"ED25519" not in ctx.key
    assert attributes(cert, NameOID.ORGANIZATION_NAME) == ["os:admin"]
    assert attributes(cert, NameOID.COMMON_NAME) == []
    assert cert.issuer == SECRETS.os.certificate().subject
    assert cert.not_valid_before_utc == NOW
    assert cert.not_valid_after_utc == NOW + timedelta(days=365)
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    result = openssl_verify(tmp_path, SECRETS.os.crt, ctx.crt)
    assert result.returncode == 0, result.stderr
    # The Kubernetes CA did not sign it.
    assert openssl_verify(tmp_path, SECRETS.k8s.crt, ctx.crt).returncode != 0


def test_talosconfig_roles_become_sorted_organizations() -> None:
    config = generate_talosconfig(SECRETS, "c", roles=["os:reader", "os:operator"])
    cert = pki.load_certificate(config.current().crt)
    assert attributes(cert, NameOID.ORGANIZATION_NAME) == ["os:operator", "os:reader"]
    with pytest.raises(TalosconfigError, match="unknown Talos role"):
        generate_talosconfig(SECRETS, "c", roles=["admin"])
    with pytest.raises(TalosconfigError, match="at least one role"):
        generate_talosconfig(SECRETS, "c", roles=[])


def test_talosconfig_file_round_trips(tmp_path: Path) -> None:
    config = generate_talosconfig(SECRETS, "base", endpoints=["10.5.0.2", "10.5.0.3"], nodes=["10.5.0.4"])
    text = dump_talosconfig(config)
    raw = yaml.safe_load(text)
    assert raw["context"] == "base"
    assert base64.b64decode(raw["contexts"]["base"]["ca"]) == SECRETS.os.crt
    assert raw["contexts"]["base"]["nodes"] == ["10.5.0.4"]
    target = tmp_path / "talosconfig"
    target.write_text(text)
    assert load_talosconfig_file(target) == config


def test_talosconfig_without_endpoints_writes_an_empty_list() -> None:
    raw = yaml.safe_load(dump_talosconfig(generate_talosconfig(SECRETS, "base")))
    assert raw["contexts"]["base"]["endpoints"] == []
    assert "nodes" not in raw["contexts"]["base"]


def test_talosconfig_loader_accepts_talosctl_forms() -> None:
    text = "context: old\ncontexts:\n  old:\n    target: 10.0.0.1\n  other:\n    endpoints: [a, b]\n"
    config = load_talosconfig(text)
    assert config.current() == TalosContext(endpoints=("10.0.0.1",))
    assert config.contexts["other"].endpoints == ("a", "b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("context: x\ncontexts: [1]\n", "contexts must be a mapping"),
        ("context: x\ncontexts:\n  x:\n    ca: '!!'\n", "contexts.x.ca: not valid base64"),
        ("context: x\ncontexts:\n  x:\n    endpoints: 5\n", "contexts.x.endpoints must be a list"),
        ("context: [\n", "not YAML"),
    ],
)
def test_talosconfig_loader_refuses_broken_files(text: str, message: str) -> None:
    with pytest.raises(TalosconfigError, match=message):
        load_talosconfig(text)


def test_missing_current_context_is_an_error() -> None:
    with pytest.raises(TalosconfigError, match="context 'gone' is not defined"):
        Talosconfig(context="gone").current()


# --- admin kubeconfig -------------------------------------------------------------------------------


def kubectl_view(path: Path, *extra: str) -> dict[str, Any]:
    result = subprocess.run(
        [KUBECTL, "config", "view", "--kubeconfig", str(path), "-o", "json", *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    return view


def test_kubectl_reads_the_admin_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(generate_admin_kubeconfig(SECRETS.k8s, cluster_name="base", endpoint="https://base:6443"))
    view = kubectl_view(path, "--raw")
    assert view["current-context"] == "admin@base"
    (cluster,) = view["clusters"]
    assert cluster["name"] == "base"
    assert cluster["cluster"]["server"] == "https://base:6443"
    (context,) = view["contexts"]
    assert context["context"] == {"cluster": "base", "namespace": "default", "user": "admin@base"}
    (user,) = view["users"]
    assert user["name"] == "admin@base"
    ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"])
    crt = base64.b64decode(user["user"]["client-certificate-data"])
    assert ca == SECRETS.k8s.crt
    result = openssl_verify(tmp_path, ca, crt)
    assert result.returncode == 0, result.stderr
    assert openssl_verify(tmp_path, SECRETS.os.crt, crt).returncode != 0
    key = pki.load_private_key(base64.b64decode(user["user"]["client-key-data"]))
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"


def test_admin_certificate_subject_usages_and_lifetime() -> None:
    text = generate_admin_kubeconfig(
        SECRETS.k8s, cluster_name="c1", endpoint="https://c1:6443", lifetime=timedelta(hours=2), now=NOW
    )
    raw = yaml.safe_load(text)
    cert = pki.load_certificate(base64.b64decode(raw["users"][0]["user"]["client-certificate-data"]))
    assert cert.subject.rfc4514_string() == "CN=admin,O=system:masters"
    assert cert.not_valid_before_utc == NOW - timedelta(seconds=10)
    assert cert.not_valid_after_utc == NOW + timedelta(hours=2)
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def shape(value: Any) -> Any:
    """The structure of a YAML value with its leaves erased."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def test_kubeconfig_has_the_shape_omni_and_talos_write() -> None:
    fixture = yaml.safe_load((TALOS / "fixtures" / "admin-kubeconfig.yaml").read_text())
    ours = yaml.safe_load(
        generate_admin_kubeconfig(SECRETS.k8s, cluster_name="cluster1", endpoint="https://yaddayadda:6443")
    )
    assert shape(ours) == shape(fixture)
    for key in ("current-context", "contexts", "kind", "apiVersion"):
        assert ours[key] == fixture[key]
    assert ours["clusters"][0]["cluster"]["server"] == fixture["clusters"][0]["cluster"]["server"]


def test_accepted_cas_are_trusted_too(tmp_path: Path) -> None:
    other = pki.new_ca(pki.KeyType.ECDSA_P256, organization="kubernetes")
    path = tmp_path / "kubeconfig"
    path.write_text(
        generate_admin_kubeconfig(
            other, cluster_name="c", endpoint="https://c:6443", accepted_cas=[SECRETS.k8s.crt]
        )
    )
    view = kubectl_view(path, "--raw")
    bundle = base64.b64decode(view["clusters"][0]["cluster"]["certificate-authority-data"])
    assert bundle == other.crt + SECRETS.k8s.crt
    crt = base64.b64decode(view["users"][0]["user"]["client-certificate-data"])
    assert openssl_verify(tmp_path, bundle, crt).returncode == 0


def test_kubeconfig_needs_an_ecdsa_ca() -> None:
    with pytest.raises(pki.PKIError, match="ECDSA"):
        generate_admin_kubeconfig(SECRETS.os, cluster_name="c", endpoint="https://c:6443")


def _pem_files(tmp_path: Path, name: str, pair: pki.CertificateAndKey) -> tuple[str, str]:
    # OpenSSL reads Ed25519 keys only under the standard PKCS#8 label.
    crt, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    crt.write_bytes(pair.crt)
    key.write_bytes(
        pair.private_key().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(crt), str(key)


def _handshake(tmp_path: Path, client: pki.CertificateAndKey) -> tuple[list[str], BaseException | None]:
    """An mTLS handshake against a server whose certificate (for 127.0.0.1) comes from the Talos CA."""
    server_pair = pki.issue_certificate(
        SECRETS.os,
        not_before=NOW,
        not_after=datetime.now(UTC) + timedelta(days=1),
        ext_usage=pki.ExtUsage.SERVER_AUTH,
        sans=["127.0.0.1", "localhost"],
    )
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(SECRETS.os.crt)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*_pem_files(tmp_path, "server", server_pair))
    server_ctx.load_verify_locations(str(ca_file))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_cert_chain(*_pem_files(tmp_path, "client", client))
    client_ctx.load_verify_locations(str(ca_file))

    left, right = socket.socketpair()
    seen: list[str] = []
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(right, server_side=True) as tls:
                peer = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"")
                seen.extend(attributes(peer, NameOID.ORGANIZATION_NAME))
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as e:
            failure.append(e)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(left, server_hostname="127.0.0.1") as tls:
            tls.recv(2)
    except (ssl.SSLError, OSError) as e:
        failure.append(e)
    thread.join(timeout=30)
    right.close()
    return seen, (failure[0] if failure else None)


def test_talosconfig_credentials_pass_mutual_tls_with_a_talos_ca_server(tmp_path: Path) -> None:
    ctx = generate_talosconfig(SECRETS, "base", roles=["os:reader", "os:etcd:backup"]).current()
    seen, failure = _handshake(tmp_path, pki.CertificateAndKey(crt=ctx.crt, key=ctx.key))
    assert failure is None
    assert seen == ["os:etcd:backup", "os:reader"]


def test_a_client_from_another_ca_is_refused(tmp_path: Path) -> None:
    stranger = pki.new_ca(pki.KeyType.ED25519, organization="talos")
    client = pki.issue_certificate(
        stranger, organizations=["os:admin"], not_before=NOW, not_after=datetime.now(UTC) + timedelta(days=1)
    )
    _, failure = _handshake(tmp_path, client)
    assert isinstance(failure, (ssl.SSLError, OSError))
