"""The admin kubeconfig of a Talos cluster, as a control plane node serves it (``talosctl kubeconfig``).

The client certificate is ``CN=admin, O=system:masters`` with an ECDSA P-256 key, signed by the cluster's
Kubernetes CA, valid from ten seconds ago (to absorb clock skew) for the requested lifetime.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from herder.talos import pki
from herder.talos.documents import dump_documents
from herder.talos.pki import CertificateAndKey, ExtUsage, KeyType, Usage

ADMIN_CERT_LIFETIME = timedelta(days=365)
"""Talos's ``KubernetesAdminCertDefaultLifetime``."""

_CLOCK_SKEW = timedelta(seconds=10)


def issue_admin_certificate(
    kubernetes_ca: CertificateAndKey,
    *,
    common_name: str = "admin",
    lifetime: timedelta = ADMIN_CERT_LIFETIME,
    now: datetime | None = None,
) -> CertificateAndKey:
    """A ``system:masters`` client certificate from the Kubernetes CA (which must be ECDSA, as Talos's is)."""
    if pki.key_type_of(kubernetes_ca.private_key()) is not KeyType.ECDSA_P256:
        raise pki.PKIError("the Kubernetes CA must have an ECDSA key")
    now = now or datetime.now(UTC)
    return pki.issue_certificate(
        kubernetes_ca,
        common_name=common_name,
        organizations=["system:masters"],
        not_before=now - _CLOCK_SKEW,
        not_after=now + lifetime,
        usage=Usage.DIGITAL_SIGNATURE | Usage.KEY_ENCIPHERMENT,
        ext_usage=ExtUsage.CLIENT_AUTH,
    )


def generate_admin_kubeconfig(
    kubernetes_ca: CertificateAndKey,
    *,
    cluster_name: str,
    endpoint: str,
    lifetime: timedelta = ADMIN_CERT_LIFETIME,
    accepted_cas: Sequence[bytes] = (),
    common_name: str = "admin",
    now: datetime | None = None,
) -> str:
    """The admin kubeconfig YAML: context ``admin@<cluster>`` in namespace ``default``, server = ``endpoint``.

    ``accepted_cas`` (PEM) are trusted besides the issuing CA, as during a CA rotation.
    """
    client = issue_admin_certificate(kubernetes_ca, common_name=common_name, lifetime=lifetime, now=now)
    user = f"admin@{cluster_name}"
    authorities = pki.ca_bundle(kubernetes_ca.crt, *accepted_cas)
    return dump_documents(
        [
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": cluster_name,
                        "cluster": {
                            "server": endpoint,
                            "certificate-authority-data": pki.b64encode(authorities),
                        },
                    }
                ],
                "users": [
                    {
                        "name": user,
                        "user": {
                            "client-certificate-data": pki.b64encode(client.crt),
                            "client-key-data": pki.b64encode(client.key),
                        },
                    }
                ],
                "contexts": [
                    {"name": user, "context": {"cluster": cluster_name, "namespace": "default", "user": user}}
                ],
                "current-context": user,
                "preferences": {},
            }
        ]
    )
