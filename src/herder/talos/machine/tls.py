"""TLS contexts for the Talos machine API, built from PEM material as talosconfigs and machine configs carry it.

grpc's bundled BoringSSL refuses Ed25519 signatures in the TLS handshake, and Talos's API certificates
(the CA, apid's server certificate, every talosctl client certificate) are Ed25519, so herder speaks TLS
with Python's ``ssl`` (OpenSSL) and runs gRPC over the resulting stream (see ``tunnel``).
"""

from __future__ import annotations

import functools
import os
import ssl
import tempfile

# Talos labels PKCS#8 Ed25519 keys with a label of its own; OpenSSL only reads the standard one.
_ED25519_LABEL = b"ED25519 PRIVATE KEY"
_PKCS8_LABEL = b"PRIVATE KEY"

ALPN = ["h2"]
"""gRPC runs on HTTP/2; gRPC servers refuse a TLS connection that did not negotiate it."""


def _load_chain(context: ssl.SSLContext, crt: bytes, key: bytes) -> None:
    pem = crt.rstrip(b"\n") + b"\n" + key.replace(_ED25519_LABEL, _PKCS8_LABEL)
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


def _base(purpose: int) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    # Talos's apid speaks TLS 1.3 only.
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(ALPN)
    return context


def client_context(ca: bytes, crt: bytes, key: bytes) -> ssl.SSLContext:
    """Mutual TLS as talosctl does it: verify the machine against the Talos CA, present the client cert."""
    context = _base(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=ca.decode("ascii"))
    _load_chain(context, crt, key)
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
    _load_chain(context, crt, key)
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
