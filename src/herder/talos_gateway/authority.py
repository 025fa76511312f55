"""The gateway's own certificate authority, in the data directory: it signs the gateway's serving
certificate and the client certificates of the talosconfigs herder hands out, which it reads back.

A client certificate names its holder as Talos's do, and a little more: the herder identity as its common
name (``serviceaccount:ci``, ``user:ana``), its Talos role as its organization (``os:reader``…), and as
URIs what it is bound to: the identity's uid and the cluster (namespace, name, uid) it was issued for. So
an account deleted and made again, or a new cluster of an old name, does not inherit old certificates.
The CA is herder's kind (ECDSA P-256, ``herder.api.tls``) rather than Talos's Ed25519, which grpc's TLS,
serving the gateway, cannot use (see ``herder.talos.machine.tls``).

Its files are ``talos-gateway-ca.crt`` and ``talos-gateway-tls.crt`` with their keys (mode 0600):
replicas of herder that should accept each other's talosconfigs need the same CA files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from herder.api.tls import CA_KEY, ensure_tls
from herder.talos import pki
from herder.talos.pki import CertificateAndKey, ExtUsage

PREFIX = "talos-gateway-"
# Certificates are issued a little in the past, so that a caller's clock slightly behind accepts them.
_BACKDATE = timedelta(minutes=5)

_SUBJECT_UID = "urn:herder:subject-uid:"
_CLUSTER = "urn:herder:cluster:"
_CLUSTER_UID = "urn:herder:cluster-uid:"
_NO_UID = "none"


class ForeignCertificate(ValueError):
    """A client certificate the gateway's CA verified but that is no talosconfig's."""


@dataclass(frozen=True)
class ClusterRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class ClientCertificate:
    """What a talosconfig's certificate says about its holder."""

    identity: str
    """As audit events name it: ``serviceaccount:ci``, ``user:ana``, ``support:platform``."""
    identity_uid: str
    """The uid of the ServiceAccount or User; empty for an identity that is no object (Support)."""
    talos_roles: frozenset[str]
    cluster: ClusterRef


@dataclass(frozen=True)
class ServingMaterial:
    ca: bytes
    crt: bytes
    key: bytes


class GatewayAuthority:
    """The CA and the serving certificate in ``data_dir``, made on first use and kept across restarts."""

    def __init__(self, data_dir: Path) -> None:
        self._dir = data_dir

    def serving(self, hosts: list[str]) -> ServingMaterial:
        """The serving certificate for ``hosts`` (and loopback), made again when it would not do."""
        files = ensure_tls(self._dir, hosts, prefix=PREFIX)
        assert files.ca is not None
        return ServingMaterial(files.ca.read_bytes(), files.cert.read_bytes(), files.key.read_bytes())

    @functools.cached_property
    def _ca(self) -> CertificateAndKey:
        files = ensure_tls(self._dir, [], prefix=PREFIX)
        assert files.ca is not None
        return CertificateAndKey(files.ca.read_bytes(), (self._dir / (PREFIX + CA_KEY)).read_bytes())

    @property
    def ca_certificate(self) -> bytes:
        return self._ca.crt

    def issue(
        self, identity: str, identity_uid: str, talos_role: str, cluster: ClusterRef, lifetime: timedelta
    ) -> CertificateAndKey:
        """A client certificate of ``identity`` with ``talos_role`` for ``cluster``, valid ``lifetime``."""
        now = datetime.now(UTC)
        return pki.issue_certificate(
            self._ca,
            common_name=identity,
            organizations=[talos_role],
            not_before=now - _BACKDATE,
            not_after=now + lifetime,
            ext_usage=ExtUsage.CLIENT_AUTH,
            sans=[
                _SUBJECT_UID + (identity_uid or _NO_UID),
                f"{_CLUSTER}{cluster.namespace}/{cluster.name}",
                _CLUSTER_UID + cluster.uid,
            ],
        )


@functools.lru_cache(maxsize=1024)
def read_client_certificate(der: bytes) -> ClientCertificate:
    """What a presented certificate (DER, already verified by TLS) binds; ``ForeignCertificate`` when it is
    not a talosconfig's. Cached: every call of one client presents the same bytes."""
    try:
        cert = x509.load_der_x509_certificate(der)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        raise ForeignCertificate("the client certificate binds no herder identity") from None
    uris = names.get_values_for_type(x509.UniformResourceIdentifier)

    def bound(prefix: str) -> str:
        values = [u.removeprefix(prefix) for u in uris if u.startswith(prefix)]
        if len(values) != 1 or not values[0]:
            raise ForeignCertificate("the client certificate binds no herder identity")
        return values[0]

    common_names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    identity = str(common_names[0].value) if common_names else ""
    if ":" not in identity:
        raise ForeignCertificate("the client certificate names no herder identity")
    namespace, _, name = bound(_CLUSTER).partition("/")
    subject_uid = bound(_SUBJECT_UID)
    return ClientCertificate(
        identity=identity,
        identity_uid="" if subject_uid == _NO_UID else subject_uid,
        talos_roles=frozenset(
            str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        ),
        cluster=ClusterRef(namespace, name, bound(_CLUSTER_UID)),
    )
