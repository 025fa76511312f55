"""The secrets of clusters as controllers use them: each cluster's bundle, herder's own Talos API
credentials (``os:admin``, issued from the cluster's Talos CA, as Omni holds one) and herder's Kubernetes
admin credentials, made once per revision of the cluster's ClusterSecrets and shared by every controller.
During a CA rotation herder's credentials trust every CA of the rotation and are signed by the issuing one.
"""

from __future__ import annotations

import asyncio
import base64
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta

from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.kubeconfig import issue_admin_certificate
from herder.talos.machine import Credentials
from herder.talos.pki import ca_bundle
from herder.talos.secrets import SecretsBundle, load_secrets
from herder.talos.talosconfig import issue_client_certificate

# herder renews its own credentials well before they expire.
_CREDENTIAL_LIFETIME = timedelta(days=30)


@dataclass(frozen=True)
class KubernetesCredentials:
    """What herder presents to a cluster's Kubernetes API: the CA to trust and a system:masters pair."""

    ca: bytes
    crt: bytes
    key: bytes


@dataclass(frozen=True)
class ClusterSecretsView:
    revision: str
    contract: str
    bundle: SecretsBundle
    talos: Credentials
    kubernetes: KubernetesCredentials
    accepted_talos: tuple[bytes, ...] = ()
    """PEM CAs the machines' configs accept besides the bundle's (``machine.acceptedCAs``)."""
    accepted_kubernetes: tuple[bytes, ...] = ()
    trusted_kubernetes: tuple[bytes, ...] = ()
    """PEM CAs herder trusts a Kubernetes API server of besides the issuing one (during a rotation)."""
    restored_from: str = ""
    """The backup whose Kubernetes encryption secrets the bundle carries (a restored cluster's)."""
    made: float = field(default_factory=time.monotonic)


class ClusterKeys:
    """Loads a cluster's secrets once per ClusterSecrets revision (the bundle is YAML, the certificates
    cost a key generation each)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._views: dict[tuple[str, str], ClusterSecretsView] = {}
        self._loading: dict[tuple[str, str], asyncio.Lock] = {}

    @classmethod
    def shared(cls, store: Store) -> ClusterKeys:
        """The keys every controller of ``store`` in this process uses: one client certificate per
        cluster, so that every client of a machine is one identity and shares one connection to it
        (``herder.talos.machine.connections``); the leader's controllers, each replica's log followers
        and the API's actions alike."""
        keys = _SHARED.get(store)
        if keys is None:
            keys = _SHARED[store] = cls(store)
        return keys

    async def of(self, cluster: Resource) -> ClusterSecretsView | None:
        """The secrets of ``cluster``; None until its ClusterSecrets exist."""
        namespace = cluster.namespace or "default"
        try:
            # Read, not decoded (nor opened: the bundle is sealed) unless its revision is new to us.
            stored = await self.store.read(CLUSTER_SECRETS, cluster.name, namespace)
        except NotFound:
            return None
        key = (namespace, cluster.name)
        # Many controllers ask at once when a cluster appears: one loads, the others wait for it.
        async with self._loading.setdefault(key, asyncio.Lock()):
            known = self._views.get(key)
            if (
                known is not None
                and known.revision == str(stored.rev)
                and time.monotonic() - known.made < _CREDENTIAL_LIFETIME.total_seconds() / 2
            ):
                return known
            # Loading the bundle parses RSA keys and issuing certificates signs: off the event loop.
            view = await asyncio.to_thread(_view, stored.decode())
            self._views[key] = view
            return view


_SHARED: weakref.WeakKeyDictionary[Store, ClusterKeys] = weakref.WeakKeyDictionary()


def _view(stored: Resource) -> ClusterSecretsView:
    spec = CLUSTER_SECRETS.spec_of(stored, ClusterSecretsSpec)
    bundle = load_secrets(spec.bundle, check_keys=False)  # herder made it and kept it sealed
    talos = issue_client_certificate(bundle.os, ("os:admin",), lifetime=_CREDENTIAL_LIFETIME)
    kubernetes = issue_admin_certificate(bundle.k8s, common_name="herder", lifetime=_CREDENTIAL_LIFETIME)
    # herder trusts a machine serving from any CA of a rotation under way; it signs with the issuing one.
    talos_ca = ca_bundle(bundle.os.crt, *spec.trusted("TalosCA"))
    trusted_kubernetes = tuple(spec.trusted("KubernetesCA"))
    kubernetes_ca = ca_bundle(bundle.k8s.crt, *trusted_kubernetes)
    return ClusterSecretsView(
        revision=stored.metadata.resource_version or "",
        contract=spec.talos_contract,
        bundle=bundle,
        talos=Credentials(talos_ca, talos.crt, talos.key),
        kubernetes=KubernetesCredentials(kubernetes_ca, kubernetes.crt, kubernetes.key),
        accepted_talos=tuple(base64.b64decode(c) for c in spec.accepted_cas.talos),
        accepted_kubernetes=tuple(base64.b64decode(c) for c in spec.accepted_cas.kubernetes),
        trusted_kubernetes=trusted_kubernetes,
        restored_from=spec.restored_from,
    )
