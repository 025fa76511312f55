"""The proxy's requests, as an ASGI application mounted at ``/k8s/clusters``.

A request to ``/k8s/clusters/NAMESPACE/NAME/PATH`` is authenticated as every herder request is; the
caller must see the cluster (else 404, as if it did not exist) and hold Kubernetes groups there (else
403, "no Kubernetes access to cluster NAME"). It is then relayed to the cluster's API as it came, but for
its credentials: herder's certificate, with ``Impersonate-User`` (the identity's name) and one
``Impersonate-Group`` per group. Answers are relayed as they come, byte for byte (watches and followed
logs included); upgraded connections (exec, attach, port-forward over WebSocket or SPDY) are handed to a
byte relay once the cluster agreed to the upgrade, when the serving protocol lets the application take
connections over (``TAKEOVER``).

While a response streams, the caller is checked again every ``CHECK_EVERY`` seconds: a deleted token or
account, a rule removed or a role lowered (any change of the groups it acts in) ends the stream. Every
write, and every upgraded connection, is audited with the identity, the cluster, the verb, the resource
and the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import aiohttp
from starlette.requests import Request
from yarl import URL

from herder.api.audit import AuditLog
from herder.api.policy import HerderPolicy
from herder.krm import media
from herder.krm.policy import Access, Identity
from herder.krm.status import ApiError, api_error
from herder.krm.takeover import TAKEOVER
from herder.kube_proxy.tunnel import open_tunnel
from herder.kube_proxy.upstreams import NoUpstream, Upstream, Upstreams
from herder.resources import KindInfo, Resource
from herder.resources.clusters import CLUSTER
from herder.state.errors import NotFound
from herder.state.store import Store

log = logging.getLogger("herder.kube_proxy")

PREFIX = "/k8s/clusters"
CHECK_EVERY = 2.0
"""How often an open stream's caller is checked again (revocations end streams within 5 s)."""
MAX_BODY = 16 << 20

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Not forwarded either way: the connection's own (RFC 9110 §7.6.1), and the caller's credentials.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
_HOP_BYTES = frozenset(name.encode("latin-1") for name in _HOP)
_CREDENTIALS = ("authorization", "impersonate-")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Target:
    namespace: str
    name: str
    path: str
    query: str

    @classmethod
    def parse(cls, path: str, query: str) -> Target | None:
        parts = path.removeprefix(PREFIX).lstrip("/").split("/", 2)
        if len(parts) < 2 or not parts[0] or not parts[1]:
            return None
        return cls(parts[0], parts[1], "/" + (parts[2] if len(parts) > 2 else ""), query)

    @property
    def url(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")


@dataclass(frozen=True)
class _Resource:
    """The Kubernetes resource a request is about, as audit events name it."""

    verb: str
    info: KindInfo
    namespace: str | None
    name: str | None
    subresource: str | None


def _resource(method: str, target: Target, upgrade: bool) -> _Resource:
    parts = [p for p in target.path.split("/") if p]
    group, version = "", "v1"
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, parts = parts[1], parts[2], parts[3:]
    namespace = None
    if len(parts) >= 2 and parts[0] == "namespaces" and len(parts) > 2:
        namespace, parts = parts[1], parts[2:]
    plural = parts[0] if parts else ""
    name = parts[1] if len(parts) > 1 else None
    sub = parts[2] if len(parts) > 2 else None
    query = parse_qs(target.query)
    verb = _VERBS.get(method, "get")
    if upgrade:
        verb = "create"
    elif method == "GET":
        verb = "watch" if query.get("watch", [""])[0] in ("true", "1") else ("get" if name else "list")
    elif method == "DELETE" and name is None:
        verb = "deletecollection"
    return _Resource(
        verb, KindInfo(group=group, version=version, kind=plural, plural=plural), namespace, name, sub
    )


class KubeProxy:
    prefix = PREFIX

    def __init__(self, store: Store, policy: HerderPolicy, audit: AuditLog) -> None:
        self._store = store
        self._policy = policy
        self._audit = audit
        self.upstreams = Upstreams(store)

    async def close(self) -> None:
        await self.upstreams.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        target = Target.parse(scope["path"], scope.get("query_string", b"").decode("latin-1"))
        upgrade = "upgrade" in request.headers.get("connection", "").lower()
        who: Identity | None = None
        try:
            if target is None:
                raise ApiError(404, f"not a cluster's Kubernetes API: use {PREFIX}/NAMESPACE/NAME/...")
            who = await self._policy.authenticate(request)
            cluster = await self._cluster(who, target)
            groups = self._groups(who, cluster)
            upstream = await self._upstream(cluster)
        except Exception as exc:
            error = api_error(exc, CLUSTER, target.name if target else "")
            await self._record(who, request, target, upgrade, error.code)
            await _respond(send, error.code, media.dumps(error.status()), error.headers)
            return
        assert target is not None
        headers = _forwarded(request, who.name, groups)
        if upgrade:
            await self._upgrade(scope, send, request, target, upstream, headers, who, groups)
            return
        await self._relay(request, receive, send, target, upstream, headers, who, groups)

    async def _cluster(self, who: Identity, target: Target) -> Resource:
        """The target cluster; 404 when the caller may not see it (as if it did not exist)."""
        try:
            cluster = await self._store.get(CLUSTER, target.name, target.namespace)
        except NotFound:
            cluster = None
        if cluster is None or not self._policy.visible(who, CLUSTER, cluster.name, cluster.metadata.labels):
            raise NotFound(CLUSTER.plural, target.name)
        return cluster

    def _groups(self, who: Identity, cluster: Resource) -> tuple[str, ...]:
        """The caller's Kubernetes groups on the cluster; 403 when it holds none there."""
        groups = self._policy.kubernetes_groups(who, cluster.name)
        if not groups:
            raise ApiError(
                403, f"no Kubernetes access to cluster {cluster.name}: {who.name} holds no group there"
            )
        return groups

    async def _upstream(self, cluster: Resource) -> Upstream:
        try:
            return await self.upstreams.of(cluster)
        except NoUpstream as exc:
            raise ApiError(503, str(exc)) from None

    async def _still(self, request: Request, target: Target, groups: tuple[str, ...]) -> None:
        """Return once the caller may no longer act as it did when its stream began."""
        while True:
            await asyncio.sleep(CHECK_EVERY)
            try:
                who = await self._policy.authenticate(request)
                if self._groups(who, await self._cluster(who, target)) != groups:
                    return
            except asyncio.CancelledError:
                raise
            except Exception:
                return

    async def _relay(
        self,
        request: Request,
        receive: Receive,
        send: Send,
        target: Target,
        upstream: Upstream,
        headers: list[tuple[str, str]],
        who: Identity,
        groups: tuple[str, ...],
    ) -> None:
        body = await media.read_body(request, MAX_BODY)
        url = URL(upstream.endpoint + target.url, encoded=True)  # the path and query as the caller sent them
        try:
            answer = await upstream.session.request(
                request.method, url, headers=headers, data=body or None, allow_redirects=False
            )
        except (aiohttp.ClientError, OSError) as exc:
            error = ApiError(
                503, f"cluster {target.name}'s Kubernetes API is unreachable: {exc or type(exc).__name__}"
            )
            await self._record(who, request, target, False, error.code)
            await _respond(send, error.code, media.dumps(error.status()))
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status,
                    "headers": [(k, v) for k, v in answer.raw_headers if k.lower() not in _HOP_BYTES],
                }
            )
            await self._stream(answer, receive, send, self._still(request, target, groups))
        finally:
            answer.release()  # back to the pool when read to its end, else its connection is closed
        await self._record(who, request, target, False, answer.status)

    @staticmethod
    async def _stream(
        answer: aiohttp.ClientResponse, receive: Receive, send: Send, revoked: Awaitable[None]
    ) -> None:
        """Relay the answer's body until it ends, the caller disconnects, or its access ends."""

        async def body() -> None:
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(body()), asyncio.ensure_future(gone()), asyncio.ensure_future(revoked)]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if tasks[0] in done and tasks[0].exception() is not None:
            log.info("proxied answer broke off: %s", tasks[0].exception())
        with contextlib.suppress(Exception):  # the client may be gone
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _upgrade(
        self,
        scope: Scope,
        send: Send,
        request: Request,
        target: Target,
        upstream: Upstream,
        headers: list[tuple[str, str]],
        who: Identity,
        groups: tuple[str, ...],
    ) -> None:
        take_over = (scope.get("extensions") or {}).get(TAKEOVER)
        if take_over is None:
            error = ApiError(400, "upgraded connections are not served on this listener")
            await _respond(send, error.code, media.dumps(error.status()))
            return
        revoked = self._still(request, target, groups)
        code = await open_tunnel(request, target.url, upstream, headers, send, take_over, revoked)
        await self._record(who, request, target, True, code)

    async def _record(
        self, who: Identity | None, request: Request, target: Target | None, upgrade: bool, code: int
    ) -> None:
        if target is None:
            return
        what = _resource(request.method, target, upgrade)
        if what.verb in ("get", "list", "watch") and code < 400 and not (who and who.impersonator):
            return  # reads are not audited (as herder's own API does not audit them)
        access = Access(what.verb, what.info, what.namespace, what.name, what.subresource)
        await self._audit.record(
            who,
            access,
            method=request.method,
            source=request.client.host if request.client else "",
            user_agent=request.headers.get("user-agent", ""),
            code=code,
            message=f"Kubernetes API of cluster {target.namespace}/{target.name}",
            always=upgrade or what.verb not in ("get", "list", "watch"),
        )


def _forwarded(request: Request, user: str, groups: tuple[str, ...]) -> list[tuple[str, str]]:
    headers = [
        (k, v)
        for k, v in request.headers.items()
        if k not in _HOP and k != "content-length" and not k.startswith(_CREDENTIALS)
    ]
    headers.append(("impersonate-user", user))
    headers.extend(("impersonate-group", group) for group in groups)
    return headers


async def _respond(send: Send, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [
                (b"content-type", media.JSON.encode()),
                (b"content-length", str(len(body)).encode()),
                *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
