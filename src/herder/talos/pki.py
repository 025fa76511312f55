"""Certificates and keys as Talos makes them: its CAs, the leaf certificates issued from them, and the
PEM and base64 encodings Talos stores them in.

Talos's CAs carry only an organization as subject, a random 128-bit serial and a random subject key id,
are valid for ten years, and allow certificate signing plus digital signature, for server and client
authentication. A leaf certificate's key follows the type of its CA's key (an Ed25519 CA issues Ed25519
leaves, an ECDSA CA issues ECDSA P-256 leaves), as in Talos's crypto library.
"""

from __future__ import annotations

import base64
import binascii
import enum
import ipaddress
import os
import re
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = timedelta(hours=87600)
"""Talos's ``CAValidityTime``: ten years."""

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# Talos labels PKCS#8 Ed25519 keys with a label of its own; OpenSSL and `cryptography` expect the
# standard one, so keys are relabelled on the way in and out.
_ED25519_LABEL = b"ED25519 PRIVATE KEY"
_PKCS8_LABEL = b"PRIVATE KEY"

_PRINTABLE = re.compile(r"[A-Za-z0-9 '()+,\-./:=?]*")


class PKIError(ValueError):
    """A certificate or key that cannot be decoded or does not fit its purpose."""


class KeyType(enum.Enum):
    ED25519 = "ed25519"
    ECDSA_P256 = "ecdsa-p256"
    RSA_4096 = "rsa-4096"


class Usage(enum.Flag):
    """Key usages Talos sets on the certificates it issues."""

    DIGITAL_SIGNATURE = enum.auto()
    KEY_ENCIPHERMENT = enum.auto()
    CERT_SIGN = enum.auto()


class ExtUsage(enum.Flag):
    SERVER_AUTH = enum.auto()
    CLIENT_AUTH = enum.auto()


@dataclass(frozen=True)
class CertificateAndKey:
    """A PEM certificate and its PEM private key, as Talos keeps a CA."""

    crt: bytes
    key: bytes

    def certificate(self) -> x509.Certificate:
        return load_certificate(self.crt)

    def private_key(self) -> PrivateKey:
        return load_private_key(self.key)


def generate_private_key(key_type: KeyType) -> PrivateKey:
    if key_type is KeyType.ED25519:
        return ed25519.Ed25519PrivateKey.generate()
    if key_type is KeyType.ECDSA_P256:
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=4096)


def key_type_of(key: PrivateKey) -> KeyType:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return KeyType.ED25519
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return KeyType.ECDSA_P256
    return KeyType.RSA_4096


def encode_private_key(key: PrivateKey) -> bytes:
    """PEM as Talos writes it: SEC1 for ECDSA, PKCS#1 for RSA, PKCS#8 under Talos's label for Ed25519."""
    none = serialization.NoEncryption()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, none)
        return pem.replace(_PKCS8_LABEL, _ED25519_LABEL)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, none)


def standard_label(pem: bytes) -> bytes:
    """A PEM private key under the label OpenSSL and Go's ``tls.X509KeyPair`` (talosctl) load: an Ed25519
    key as Talos writes it (its own label) becomes plain PKCS#8; other keys are returned as they are."""
    return pem.replace(b"BEGIN " + _ED25519_LABEL, b"BEGIN " + _PKCS8_LABEL).replace(
        b"END " + _ED25519_LABEL, b"END " + _PKCS8_LABEL
    )


def load_private_key(pem: bytes) -> PrivateKey:
    """Decode a PEM private key of a type Talos uses (Ed25519 under either label, ECDSA, RSA)."""
    if not pem.strip():
        raise PKIError("private key is empty")
    try:
        key = serialization.load_pem_private_key(standard_label(pem), password=None)
    except (ValueError, TypeError) as e:
        raise PKIError(f"not a PEM private key: {first_line(e)}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise PKIError(f"unsupported private key type {type(key).__name__}")
    return key


def load_certificate(pem: bytes) -> x509.Certificate:
    if not pem.strip():
        raise PKIError("certificate is empty")
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise PKIError(f"not a PEM certificate: {first_line(e)}") from None


def encode_certificate(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def ca_bundle(*certificates: bytes) -> bytes:
    """PEM certificates as one trust bundle, each once (a client trusting several CAs, as during a rotation)."""
    return b"".join(c.strip() + b"\n" for c in dict.fromkeys(c.strip() for c in certificates) if c)


def b64encode(data: bytes) -> str:
    """Standard base64, as Talos stores PEM blobs in YAML."""
    return base64.b64encode(data).decode("ascii")


def b64_pair(pair: CertificateAndKey, *, with_key: bool = True) -> dict[str, str]:
    """``{crt, key}`` as Talos's YAML carries a CA: base64 PEM, the key blank where it must not travel."""
    return {"crt": b64encode(pair.crt), "key": b64encode(pair.key) if with_key else ""}


def b64decode(text: str, *, field: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise PKIError(f"{field}: not valid base64") from None


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _attribute(oid: x509.ObjectIdentifier, value: str) -> x509.NameAttribute[str]:
    # Go encodes a name as PrintableString when it can, so Talos's certificates compare byte for byte.
    printable = _PRINTABLE.fullmatch(value) is not None
    return x509.NameAttribute(oid, value, _ASN1Type.PrintableString if printable else _ASN1Type.UTF8String)


def _name(common_name: str | None, organizations: Sequence[str]) -> x509.Name:
    attributes = [_attribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    if common_name:
        attributes.append(_attribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _serial() -> int:
    # Talos draws serials uniformly below 2**128; a zero serial is invalid in X.509, so skip it.
    return int.from_bytes(os.urandom(16), "big") or 1


def _key_usage(usage: Usage) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=Usage.DIGITAL_SIGNATURE in usage,
        content_commitment=False,
        key_encipherment=Usage.KEY_ENCIPHERMENT in usage,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=Usage.CERT_SIGN in usage,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def _ext_key_usage(ext_usage: ExtUsage) -> x509.ExtendedKeyUsage:
    oids = []
    if ExtUsage.SERVER_AUTH in ext_usage:
        oids.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if ExtUsage.CLIENT_AUTH in ext_usage:
        oids.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    return x509.ExtendedKeyUsage(oids)


def _sign(builder: x509.CertificateBuilder, key: PrivateKey) -> x509.Certificate:
    # Ed25519 signs the message itself; ECDSA and RSA certificates use SHA-256, as Go's x509 does.
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm)


def new_ca(
    key_type: KeyType,
    *,
    organization: str | None,
    now: datetime | None = None,
    lifetime: timedelta = CA_LIFETIME,
) -> CertificateAndKey:
    """A self-signed CA as Talos makes one (subject = the organization only, or empty)."""
    not_before = now or datetime.now(UTC)
    key = generate_private_key(key_type)
    name = _name(None, [organization] if organization else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(_serial())
        .not_valid_before(not_before)
        .not_valid_after(not_before + lifetime)
        .add_extension(_key_usage(Usage.CERT_SIGN | Usage.DIGITAL_SIGNATURE), critical=True)
        .add_extension(_ext_key_usage(ExtUsage.SERVER_AUTH | ExtUsage.CLIENT_AUTH), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier(os.urandom(20)), critical=False)
    )
    cert = _sign(builder, key)
    return CertificateAndKey(crt=encode_certificate(cert), key=encode_private_key(key))


def issue_certificate(
    ca: CertificateAndKey,
    *,
    common_name: str | None = None,
    organizations: Sequence[str] = (),
    not_before: datetime,
    not_after: datetime,
    usage: Usage = Usage.DIGITAL_SIGNATURE,
    ext_usage: ExtUsage = ExtUsage.CLIENT_AUTH,
    sans: Sequence[str] = (),
) -> CertificateAndKey:
    """A leaf certificate signed by ``ca``, with a fresh key of the CA's key type.

    ``sans`` are subject alternative names: IP addresses or DNS names for server certificates, URIs
    (``urn:…``, anything else with a colon) for what a client certificate is bound to.
    """
    ca_cert = ca.certificate()
    ca_key = ca.private_key()
    key = generate_private_key(key_type_of(ca_key))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(_serial())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(_key_usage(usage), critical=True)
        .add_extension(_ext_key_usage(ext_usage), critical=False)
    )
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    except x509.ExtensionNotFound:
        pass
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(n) for n in sans]), critical=False
        )
    cert = _sign(builder, ca_key)
    return CertificateAndKey(crt=encode_certificate(cert), key=encode_private_key(key))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        # A DNS name never holds a colon; an IPv6 address, which does, was taken above.
        return x509.UniformResourceIdentifier(name) if ":" in name else x509.DNSName(name)


def load_cert_chain(context: ssl.SSLContext, crt: bytes, key: bytes) -> None:
    """Give an SSL context a certificate and key held in memory (PEM; Talos's Ed25519 label is read too)."""
    pem = crt.rstrip(b"\n") + b"\n" + standard_label(key)
    # ssl loads certificates and keys from files only: an anonymous memory file where Linux has them,
    # else a private temporary file.
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("herder-tls")
        try:
            os.write(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="herder-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)
