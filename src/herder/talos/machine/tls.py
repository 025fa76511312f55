"""TLS contexts for the Talos machine API, built from PEM material as talosconfigs and machine configs carry it.

grpc's bundled BoringSSL refuses Ed25519 signatures in the TLS handshake, and Talos's API certificates
(the CA, apid's server certificate, every talosctl client certificate) are Ed25519, so herder speaks TLS
with Python's ``ssl`` (OpenSSL) and runs gRPC over the resulting stream (see ``tunnel``). Material grpc's
TLS can use (ECDSA or RSA, as herder's Talos API gateway serves and issues) goes to grpc itself
(``native``): its TLS runs in C, and no byte passes through Python.
"""

from __future__ import annotations

import functools
import ssl

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from herder.talos.pki import load_cert_chain, load_private_key

ALPN = ["h2"]
"""gRPC runs on HTTP/2; gRPC servers refuse a TLS connection that did not negotiate it."""


def _base(purpose: int) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    # Talos's apid speaks TLS 1.3 only.
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(ALPN)
    return context


@functools.lru_cache(maxsize=1024)
def client_context(ca: bytes, crt: bytes, key: bytes) -> ssl.SSLContext:
    """Mutual TLS as talosctl does it: verify the machine against the Talos CA, present the client cert.

    Made once per credentials and shared by their connections: loading a certificate chain costs more
    than the handshake it serves (herder connects to the same machines with the same credentials often).
    """
    context = _base(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=ca.decode("ascii"))
    load_cert_chain(context, crt, key)
    return context


@functools.cache
def insecure_client_context() -> ssl.SSLContext:
    """``talosctl --insecure``: encrypted, but the machine's certificate is not verified and none is presented.

    One context serves every insecure client (it holds no identity, and making one costs OpenSSL work)."""
    context = _base(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def server_context(crt: bytes, key: bytes, client_ca: bytes | None) -> ssl.SSLContext:
    """A machine's apid: its certificate, and with ``client_ca`` a client certificate chaining to it is required."""
    context = _base(ssl.PROTOCOL_TLS_SERVER)
    load_cert_chain(context, crt, key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=client_ca.decode("ascii"))
    return context


def peer_organizations(ssl_object: ssl.SSLObject | None) -> frozenset[str]:
    """The subject organizations of the verified peer certificate: the Talos roles of a client."""
    if ssl_object is None:
        return frozenset()
    cert = ssl_object.getpeercert()
    if not cert:
        return frozenset()
    return frozenset(
        attribute[1]
        for rdn in cert.get("subject", ())
        for attribute in rdn
        if attribute[0] == "organizationName"
    )


@functools.lru_cache(maxsize=1024)
def native(ca: bytes, crt: bytes, key: bytes) -> bool:
    """Whether grpc's own TLS can speak with this material: no Ed25519 key in the CA (which signs the
    server's certificate too), the client certificate or its key."""
    try:
        keys = [x509.load_pem_x509_certificate(pem).public_key() for pem in (ca, crt)]
        own = load_private_key(key)
    except ValueError:
        return False
    return not any(isinstance(k, ed25519.Ed25519PublicKey) for k in keys) and not isinstance(
        own, ed25519.Ed25519PrivateKey
    )
