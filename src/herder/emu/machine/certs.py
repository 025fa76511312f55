"""The certificates an emulated machine's apid presents: self-signed in maintenance mode, issued from the
cluster's Talos CA once configured (directly on control planes, through trustd for workers)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from herder.talos import pki
from herder.talos.pki import CertificateAndKey, KeyType

MAINTENANCE_NAME = "maintenance-service.talos.dev"
"""The common name of Talos's maintenance service certificate."""

LIFETIME = timedelta(days=365)


def _alt_names(address: str, names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(address))]
    for name in dict.fromkeys(names):
        if not name:
            continue
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _sign(builder: x509.CertificateBuilder, key: pki.PrivateKey) -> x509.Certificate:
    algorithm = None if pki.key_type_of(key) is KeyType.ED25519 else hashes.SHA256()
    return builder.sign(key, algorithm)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: object, now: datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(int.from_bytes(os.urandom(16), "big") >> 1)
        .not_valid_before(now - timedelta(seconds=10))
        .not_valid_after(now + LIFETIME)
    )


def maintenance_certificate(address: str, hostname: str) -> CertificateAndKey:
    """A self-signed Ed25519 certificate for the maintenance service, new at every boot as in Talos."""
    key = pki.generate_private_key(KeyType.ED25519)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, MAINTENANCE_NAME)])
    builder = (
        _builder(name, name, key.public_key(), datetime.now(UTC))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_alt_names(address, [hostname, MAINTENANCE_NAME]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    return CertificateAndKey(crt=pki.encode_certificate(_sign(builder, key)), key=pki.encode_private_key(key))


def api_certificate(
    ca: CertificateAndKey, address: str, hostname: str, sans: Sequence[str]
) -> CertificateAndKey:
    """apid's certificate from the cluster's Talos CA, for the machine's address, hostname and certSANs."""
    ca_cert, ca_key = ca.certificate(), ca.private_key()
    key = pki.generate_private_key(pki.key_type_of(ca_key))
    builder = (
        _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]),
            ca_cert.subject,
            key.public_key(),
            datetime.now(UTC),
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_alt_names(address, [hostname, *sans]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    try:
        # Named by its CA's key id, as Go's x509 does: a client trusting two CAs of one subject (a CA
        # rotation) picks the right one.
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    except x509.ExtensionNotFound:
        pass
    return CertificateAndKey(
        crt=pki.encode_certificate(_sign(builder, ca_key)), key=pki.encode_private_key(key)
    )
