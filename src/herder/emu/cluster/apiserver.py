"""One cluster's kube-apiserver: ``krm`` with the core and RBAC kinds over the cluster's emulated etcd keyspace,
authenticated and authorized as Kubernetes does (``access``), with the pods' streams (``pod_streams``), the
self reviews (``reviews``), kube-apiserver's health checks and the ClusterRole aggregation controller, served
on each control plane that runs it (its own address, port 6443, its own serving certificate from the cluster's
Kubernetes CA)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

from herder.emu.cluster import rbac, reviews
from herder.emu.cluster.access import RbacPolicy
from herder.emu.cluster.aggregation import Aggregation
from herder.emu.cluster.authorizer import Authorizer
from herder.emu.cluster.containers import Logs
from herder.emu.cluster.encryption import SecretEncryption
from herder.emu.cluster.kube_api import (
    PORT,
    SERVICE_NAMES,
    ApiEndpoint,
    serving_certificate,
    with_health_checks,
)
from herder.emu.cluster.kubelet import Kubelet
from herder.emu.cluster.pod_streams import PodStreams
from herder.emu.cluster.state import Cluster
from herder.krm import discovery
from herder.krm.app import build_app
from herder.krm.reviews import PATHS
from herder.resources import KindRegistry
from herder.resources.kubernetes import KINDS
from herder.state.store import Store
from herder.talos.pki import CertificateAndKey, ca_bundle

log = logging.getLogger(__name__)

RETRY_DELAY = 0.5
"""Seconds before an API server that could not listen tries again."""
_POD_STREAM = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log|exec|attach|portforward)")


def apiserver_names(kubelet: Kubelet) -> list[str]:
    """What a control plane's kube-apiserver certificate names: the node's address, localhost, the
    ``kubernetes`` Service's names and address, and the config's SANs (the endpoint's host among them)."""
    facts = kubelet.facts
    return [
        kubelet.address,
        "localhost",
        "127.0.0.1",
        *SERVICE_NAMES,
        f"{SERVICE_NAMES[-1]}.{facts.dns_domain}",
        facts.service_ip(1),
        *facts.apiserver_sans,
    ]


class ApiServer:
    """The cluster's API (its kinds, store and app) and the control planes serving it now."""

    def __init__(self, cluster: Cluster, resync: Callable[[], None]) -> None:
        """``resync`` asks for another sync: an API server could not listen yet."""
        self._resync = resync
        # Secrets are encrypted at rest with the cluster's keys (``encryption``), as kube-apiserver's are.
        kinds = (dataclasses.replace(k, sensitive=True) if k.kind == "Secret" else k for k in KINDS)
        self.registry = KindRegistry((*kinds, *rbac.KINDS))
        self.encryption = SecretEncryption()
        self.store = Store(cluster.keyspace, self.registry, cipher=self.encryption)
        self.authorizer = Authorizer(self.store)
        self._aggregation = Aggregation(self.store, self.authorizer)
        self._aggregating: asyncio.Task[None] | None = None
        self.kubelets: dict[str, Kubelet] = {}
        """The cluster's kubelets by node name, as the last sync saw them (streams go through them)."""
        self.logs = Logs()
        policy = RbacPolicy(self.authorizer)
        # build_app keeps this dict: updating it in place changes what /version answers (an upgrade).
        self.version = discovery.version_info()
        resources = build_app(self.registry, self.store, policy, version_info=self.version)
        streams = PodStreams(self.store, policy, self.logs, self._node_up)
        answers = reviews.RbacReviews(policy)

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            path = scope.get("path", "")
            if scope["type"] == "http":
                if (match := _POD_STREAM.fullmatch(path)) is not None:
                    await streams(scope, receive, send, *match.groups())
                    return
                if path in PATHS:
                    await answers(scope, receive, send)
                    return
            await resources(scope, receive, send)

        self._app = with_health_checks(app, cluster.has_quorum)
        self.endpoints: dict[str, ApiEndpoint] = {}
        """The API servers serving now, by the uuid of the control plane that runs each."""

    def _node_up(self, node: str) -> bool:
        kubelet = self.kubelets.get(node)
        return kubelet is not None and kubelet.up

    async def start(self) -> None:
        """Open the store (the RBAC objects are read when a request first needs them: see ``RbacPolicy``)."""
        await self.store.start()
        self._aggregating = asyncio.get_running_loop().create_task(self._aggregation.run())

    def follow_version(self, git_version: str) -> None:
        """Answer ``/version`` as kube-apiserver of that version does."""
        self.version.update(discovery.version_info(git_version))

    async def serve(self, ca: CertificateAndKey, apiservers: list[Kubelet]) -> None:
        """Run kube-apiserver on exactly these control planes: each listens on its own address and port 6443
        with its own serving certificate, and every other one stops (refusing connections, cutting the open
        ones)."""
        wanted = {k.uuid: k for k in apiservers}
        for uuid, endpoint in list(self.endpoints.items()):
            if uuid not in wanted or wanted[uuid].address != endpoint.host:
                del self.endpoints[uuid]
                await endpoint.close()
        for kubelet in apiservers:
            # Each kube-apiserver serves from the CA its own config issues from, and verifies clients
            # against that and the CAs it accepts (both CAs of a rotation, until it is done).
            own = kubelet.kubernetes_ca or ca
            client_ca = ca_bundle(own.crt, *kubelet.kubernetes_accepted)
            known = self.endpoints.get(kubelet.uuid)
            if known is not None:
                if known.credentials != (own.crt, client_ca):
                    known.reload(serving_certificate(own, apiserver_names(kubelet)), own.crt, client_ca)
                continue
            endpoint = ApiEndpoint(self._app, kubelet.address, PORT)
            try:
                await endpoint.start(
                    serving_certificate(own, apiserver_names(kubelet)), client_ca, issuing=own.crt
                )
            except OSError as e:
                # The address is still held (by the API server of the machine's previous cluster, say).
                log.warning("kube-apiserver on %s: %s; trying again", endpoint.url, e)
                asyncio.get_running_loop().call_later(RETRY_DELAY, self._resync)
                continue
            self.endpoints[kubelet.uuid] = endpoint

    async def close(self) -> None:
        """Stop serving everywhere, and the work behind the API."""
        for endpoint in self.endpoints.values():
            await endpoint.close()
        self.endpoints.clear()
        if self._aggregating is not None:
            self._aggregating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._aggregating
        await self.authorizer.close()
        await self.store.close()
