"""The HTTPS clients of workload clusters' Kubernetes APIs that controllers keep between reconciles, one per
endpoint and credentials (the probes, the manifests, the health checks and the upgrade pre-checks use them)."""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict

import httpx

from herder.controllers.cluster_keys import KubernetesCredentials
from herder.talos.pki import load_cert_chain

TIMEOUT = 5.0
KEEP = 1024
"""Clients kept (beyond them, the least recently used are closed)."""
IDLE = 75.0
"""Seconds an idle connection is kept: beyond the longest wait between a healthy cluster's probes (a
minute), so none needs a new TLS handshake, and under kube-apiserver's own idle timeout (90 s), so none is
reused just as the server closes it. httpx's default (5 s) made every probe a new connection."""


class KubernetesClients:
    """The HTTPS clients the Kubernetes probe keeps between rounds, one per endpoint and credentials: a
    probe every few seconds per cluster must not cost a TLS handshake (herder's and the API server's)
    each time."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._clients: OrderedDict[tuple[str, bytes], httpx.AsyncClient] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def client(self, endpoint: str, credentials: KubernetesCredentials) -> httpx.AsyncClient:
        key = (endpoint, credentials.crt)
        client = self._clients.get(key)
        if client is None:
            context = ssl.create_default_context(cadata=credentials.ca.decode("ascii"))
            load_cert_chain(context, credentials.crt, credentials.key)
            client = self._clients[key] = httpx.AsyncClient(
                verify=context,
                timeout=TIMEOUT,
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=IDLE),
            )
            while len(self._clients) > self._keep:
                _, oldest = self._clients.popitem(last=False)
                task = asyncio.create_task(oldest.aclose())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        self._clients.move_to_end(key)
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            await client.aclose()
        await asyncio.gather(*self._closing, return_exceptions=True)
