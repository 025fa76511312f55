"""The server's TLS material: a private CA made on first start, and a serving certificate it signs.

The CA stays in the data directory so that a serving certificate can be issued again (when the
listen address changes, or when it nears its end) without clients having to trust a new CA. Another
server of herder's (the Talos API gateway) keeps a CA and serving certificate of its own beside them,
under a prefix.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from herder.api.datadir import write_private

CA_CERT, CA_KEY = "ca.crt", "ca.key"
SERVING_CERT, SERVING_KEY = "tls.crt", "tls.key"
_RENEW_BEFORE = timedelta(days=30)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    # The CA clients should trust; None when the operator's certificate chains to a public root.
    ca: Path | None


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ensure_ca(data_dir: Path, prefix: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = data_dir / (prefix + CA_CERT), data_dir / (prefix + CA_KEY)
    if cert_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: expected an EC private key")
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"herder {prefix.replace('-', ' ')}CA")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _covers(cert: x509.Certificate, names: list[x509.GeneralName]) -> bool:
    try:
        have = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    fresh = cert.not_valid_after_utc - _RENEW_BEFORE > datetime.now(UTC)
    return fresh and all(name in have for name in names)


def ensure_tls(data_dir: Path, hosts: list[str], prefix: str = "") -> TlsFiles:
    """The CA and a serving certificate valid for ``hosts``, made or renewed as needed; ``prefix``
    names another server's files (``PREFIXca.crt``…)."""
    ca_cert, ca_key = _ensure_ca(data_dir, prefix)
    cert_path, key_path = data_dir / (prefix + SERVING_CERT), data_dir / (prefix + SERVING_KEY)
    # A wildcard listen address is reached by the machine's name or through loopback, never as itself.
    named = [socket.gethostname() if h in ("0.0.0.0", "::") else h for h in hosts]
    wanted = [_san(h) for h in dict.fromkeys([*named, "localhost", "127.0.0.1", "::1"]) if h]
    if (
        cert_path.exists()
        and key_path.exists()
        and _covers(x509.load_pem_x509_certificate(cert_path.read_bytes()), wanted)
    ):
        return TlsFiles(cert_path, key_path, data_dir / (prefix + CA_CERT))
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "herder")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(wanted), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return TlsFiles(cert_path, key_path, data_dir / (prefix + CA_CERT))
