"""Where the proxy sends a cluster's requests: the cluster's Kubernetes API endpoint, verified against the
cluster's Kubernetes CA, with a client certificate herder issues itself from that CA (``system:masters``,
allowed to impersonate), renewed at half its life and made again when the cluster's secrets change.

Requests go through one aiohttp session per cluster, which keeps connections open between requests.
aiohttp rather than httpx, which herder uses elsewhere: its C parser and plain asyncio transport cost a
third of what httpx's anyio streams and pool bookkeeping did per relayed request, and the proxy's rate is
that cost (the proxy relays bytes, it does not need httpx's conveniences).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import timedelta

import aiohttp

from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.resources.clusters import CLUSTER, ClusterSpec
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.kubeconfig import issue_admin_certificate
from herder.talos.pki import ca_bundle, load_cert_chain
from herder.talos.secrets import load_secrets

_LIFETIME = timedelta(days=7)
# The certificate's name in the clusters' audit logs: herder's proxy, whoever it impersonates.
PROXY_IDENTITY = "herder:kubernetes-proxy"
CONNECTIONS = 256
"""Connections per cluster at most (each request under way holds one, watches included)."""
RETIRE_AFTER = 30.0
"""Seconds a replaced client stays open for the requests still under way on it."""
KEEP = 256
"""Clusters whose clients are kept open; the least recently used beyond are closed."""


class NoUpstream(Exception):
    """The cluster cannot be reached yet (no secrets, no endpoint)."""


@dataclass
class Upstream:
    endpoint: str
    session: aiohttp.ClientSession
    context: ssl.SSLContext
    revision: str
    made: float = field(default_factory=time.monotonic)

    async def aclose(self) -> None:
        await self.session.close()


class Upstreams:
    def __init__(self, store: Store, keep: int = KEEP) -> None:
        self._store = store
        self._keep = keep
        self._known: OrderedDict[tuple[str, str], Upstream] = OrderedDict()
        self._loading: dict[tuple[str, str], asyncio.Lock] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    async def of(self, cluster: Resource) -> Upstream:
        endpoint = CLUSTER.spec_of(cluster, ClusterSpec).endpoint or str(
            (cluster.status or {}).get("endpoint") or ""
        )
        try:
            stored = await self._store.read(CLUSTER_SECRETS, cluster.name, cluster.namespace)
        except NotFound:
            raise NoUpstream(f"cluster {cluster.name} has no Kubernetes credentials yet") from None
        if not endpoint:
            raise NoUpstream(f"cluster {cluster.name} has no Kubernetes API endpoint yet")
        key = (cluster.namespace or "", cluster.name)
        revision = str(stored.rev)
        known = self._known.get(key)
        if not self._current(known, revision, endpoint):
            async with self._loading.setdefault(key, asyncio.Lock()):
                known = self._known.get(key)
                if not self._current(known, revision, endpoint):
                    context = await asyncio.to_thread(_context, stored.decode())
                    made = _upstream(context, endpoint, revision)
                    if known is not None:
                        # Requests may still be under way on it (the secrets changed, as in a rotation):
                        # it is closed once they had time to finish.
                        self._retire(known)
                    known = self._known[key] = made
                    while len(self._known) > self._keep:
                        await self._known.popitem(last=False)[1].aclose()
        assert known is not None
        self._known.move_to_end(key)
        return known

    def _retire(self, upstream: Upstream) -> None:
        task = asyncio.get_running_loop().create_task(_close_later(upstream))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    @staticmethod
    def _current(known: Upstream | None, revision: str, endpoint: str) -> bool:
        return (
            known is not None
            and known.revision == revision
            and known.endpoint == endpoint
            and time.monotonic() - known.made < _LIFETIME.total_seconds() / 2
        )

    async def close(self) -> None:
        known, self._known = list(self._known.values()), OrderedDict()
        for upstream in known:
            await upstream.aclose()
        for task in list(self._retiring):
            task.cancel()


async def _close_later(upstream: Upstream) -> None:
    try:
        await asyncio.sleep(RETIRE_AFTER)
    finally:
        await upstream.aclose()


def _context(secrets: Resource) -> ssl.SSLContext:
    """TLS to the cluster's API servers, with a client certificate of the proxy's own."""
    spec = CLUSTER_SECRETS.spec_of(secrets, ClusterSecretsSpec)
    bundle = load_secrets(spec.bundle, check_keys=False)
    issued = issue_admin_certificate(bundle.k8s, common_name=PROXY_IDENTITY, lifetime=_LIFETIME)
    # During a CA rotation the API servers may serve from either CA.
    trusted = ca_bundle(bundle.k8s.crt, *spec.trusted("KubernetesCA"))
    context = ssl.create_default_context(cadata=trusted.decode("ascii"))
    context.set_alpn_protocols(["http/1.1"])
    load_cert_chain(context, issued.crt, issued.key)
    return context


def _upstream(context: ssl.SSLContext, endpoint: str, revision: str) -> Upstream:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context, limit=CONNECTIONS, limit_per_host=CONNECTIONS),
        # Watches and followed logs go on as long as their callers keep them.
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=None),
        # The caller's request is relayed as it came: no header it did not send, no body decoded.
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    return Upstream(endpoint, session, context, revision)
