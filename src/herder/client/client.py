"""The async client of herder's API: the Kubernetes verbs over HTTP, typed by kind.

Objects go in and come out as ``herder.resources.Resource``; kinds are named as kubectl names them
(``configpatches``, ``cp``, ``ConfigPatch``) or given as ``KindInfo``. A refused request raises the
``herder.client.errors`` exception of its Status code, with the server's message.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx

from herder.client.errors import TransportError, describe, from_status
from herder.client.kubeconfig import Credentials, load
from herder.client.rest import api_path
from herder.resources import KindInfo, KindRegistry, Resource
from herder.resources.catalog import herder_registry

PatchType = Literal["merge", "json", "strategic"]
# How long a watch may stay silent before its connection counts as gone: several of herder's bookmarks.
WATCH_SILENCE = 120.0
_PATCH_MEDIA = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
# A patch document: an object (merge patches) or a list of operations (JSON patch).
PatchDocument = dict[str, Any] | list[dict[str, Any]]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: Resource


@dataclass(frozen=True)
class ObjectList:
    items: list[Resource]
    resource_version: str


@dataclass(frozen=True)
class IssuedToken:
    """A bearer token as the server hands it out, once: keep ``token``, it cannot be shown again."""

    name: str
    token: str
    expires_at: str | None


class Client:
    """One connection to a herder API server; use it as an async context manager, or ``close`` it."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        registry: KindRegistry | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``transport``: how requests reach the server instead of the network (the web UI calls the
        API it is served beside in-process)."""
        self.server = credentials.server
        self.registry = registry or herder_registry()
        verify: ssl.SSLContext | bool = True
        if credentials.insecure:
            verify = False
        elif credentials.ca_pem is not None:
            verify = ssl.create_default_context(cadata=credentials.ca_pem.decode())
        headers = {"Accept": "application/json", "User-Agent": "herder-client"}
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        # Keep as many connections alive as a busy caller (a provider working on dozens of requests at
        # once) keeps in flight: one closed and opened again costs both sides a TLS handshake.
        # An idle one is let go well before the server would close it (herder's: after 75 s).
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=30)
        self._http = httpx.AsyncClient(
            base_url=credentials.server,
            headers=headers,
            verify=verify,
            timeout=timeout,
            limits=limits,
            transport=transport,
        )

    @classmethod
    def from_kubeconfig(
        cls, path: str | Path, *, context: str | None = None, registry: KindRegistry | None = None
    ) -> Client:
        return cls(load(path, context), registry=registry)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # paths

    def kind(self, kind: str | KindInfo) -> KindInfo:
        return kind if isinstance(kind, KindInfo) else self.registry.get(kind)

    def path(
        self, info: KindInfo, namespace: str | None = None, name: str | None = None, sub: str = ""
    ) -> str:
        return api_path(info.group, info.version, info.plural, info.namespaced, namespace, name, sub)

    @staticmethod
    def _namespace(info: KindInfo, namespace: str | None) -> str | None:
        return (namespace or "default") if info.namespaced else None

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        content = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type} if content is not None else None
        try:
            response = await self._http.request(method, path, params=params, content=content, headers=headers)
        except httpx.HTTPError as err:
            raise TransportError(f"cannot reach {self.server}: {describe(err)}") from None
        return _decode(response)

    # verbs

    async def access(self, user: str | None = None, cluster: str | None = None) -> dict[str, Any]:
        """What herder's access policy gives the caller (or, asked by an Admin, ``user``) on each cluster
        it sees (or on ``cluster``)."""
        params = {k: v for k, v in (("user", user), ("cluster", cluster)) if v is not None}
        answer: dict[str, Any] = await self._request("GET", "/apis/herder.dev/v1alpha1/access", params=params)
        return answer

    async def get(self, kind: str | KindInfo, name: str, namespace: str | None = None) -> Resource:
        info = self.kind(kind)
        return Resource.from_dict(
            await self._request("GET", self.path(info, self._namespace(info, namespace), name))
        )

    async def list(
        self,
        kind: str | KindInfo,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
    ) -> ObjectList:
        """Every matching object (all namespaces when ``namespace`` is None), fetched page by page."""
        info = self.kind(kind)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        items: list[Resource] = []
        while True:
            data = await self._request("GET", self.path(info, namespace), params=params)
            items.extend(Resource.from_dict(_with_kind(info, i)) for i in data.get("items") or [])
            meta = data.get("metadata") or {}
            token = meta.get("continue")
            if not token or limit:
                return ObjectList(items, str(meta.get("resourceVersion", "")))
            params["continue"] = token

    async def create(self, obj: Resource, *, dry_run: bool = False) -> Resource:
        info = self.registry.for_object(obj)
        path = self.path(info, self._namespace(info, obj.namespace))
        params = {"dryRun": "All"} if dry_run else None
        return Resource.from_dict(await self._request("POST", path, params=params, body=obj.to_dict()))

    async def update(self, obj: Resource, *, dry_run: bool = False) -> Resource:
        return await self._put(obj, "", dry_run)

    async def update_status(self, obj: Resource, *, dry_run: bool = False) -> Resource:
        return await self._put(obj, "status", dry_run)

    async def _put(self, obj: Resource, sub: str, dry_run: bool) -> Resource:
        info = self.registry.for_object(obj)
        path = self.path(info, self._namespace(info, obj.namespace), obj.name, sub)
        params = {"dryRun": "All"} if dry_run else None
        return Resource.from_dict(await self._request("PUT", path, params=params, body=obj.to_dict()))

    async def patch(
        self,
        kind: str | KindInfo,
        name: str,
        patch: PatchDocument,
        namespace: str | None = None,
        *,
        type: PatchType = "merge",
        subresource: str = "",
    ) -> Resource:
        info = self.kind(kind)
        path = self.path(info, self._namespace(info, namespace), name, subresource)
        data = await self._request("PATCH", path, body=patch, content_type=_PATCH_MEDIA[type])
        return Resource.from_dict(data)

    async def delete(self, kind: str | KindInfo, name: str, namespace: str | None = None) -> Resource | None:
        """Delete an object; returns it while finalizers hold it (marked for deletion), else None."""
        info = self.kind(kind)
        data = await self._request("DELETE", self.path(info, self._namespace(info, namespace), name))
        if data.get("kind") == info.kind and (data.get("metadata") or {}).get("deletionTimestamp"):
            return Resource.from_dict(data)
        return None

    async def watch(
        self,
        kind: str | KindInfo,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version`` (or from now) until the server ends the stream."""
        info = self.kind(kind)
        params = {"watch": "1", "allowWatchBookmarks": "true"}
        for key, value in (
            ("resourceVersion", resource_version),
            ("labelSelector", label_selector),
            ("fieldSelector", field_selector),
            ("timeoutSeconds", str(timeout_seconds) if timeout_seconds else None),
        ):
            if value:
                params[key] = value
        # A watch is silent between events: herder sends a bookmark every 30 s, so only a longer silence
        # means the connection is gone (the client's timeout would end a quiet watch every time).
        timeout = self._http.timeout
        quiet = httpx.Timeout(timeout.connect, read=WATCH_SILENCE, write=timeout.write, pool=timeout.pool)
        request = self._http.build_request("GET", self.path(info, namespace), params=params, timeout=quiet)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as err:
            raise TransportError(f"cannot reach {self.server}: {describe(err)}") from None
        try:
            if response.status_code >= 400:
                await response.aread()
                _decode(response)
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise from_status(int(status.get("code") or 500), status)
                yield WatchEvent(event["type"], Resource.from_dict(event["object"]))
        except httpx.HTTPError as err:
            raise TransportError(f"the watch on {self.server} broke: {describe(err)}") from None
        finally:
            await response.aclose()

    async def issue_token(
        self, kind: str | KindInfo, name: str, *, expires_in_seconds: int | None = None, description: str = ""
    ) -> IssuedToken:
        """Issue a new bearer token for a ServiceAccount or User; the server keeps only its digest."""
        info = self.kind(kind)
        spec: dict[str, Any] = {"description": description}
        if expires_in_seconds is not None:
            spec["expirationSeconds"] = expires_in_seconds
        body = {"apiVersion": info.api_version, "kind": "TokenRequest", "spec": spec}
        data = await self._request("POST", self.path(info, None, name, "token"), body=body)
        status = data.get("status") or {}
        return IssuedToken(
            str((data.get("metadata") or {}).get("name", "")),
            str(status["token"]),
            status.get("expirationTimestamp"),
        )

    async def machine_log(
        self,
        name: str,
        namespace: str | None = None,
        *,
        service: str | None = None,
        kernel: bool = False,
        follow: bool = False,
        tail: int | None = None,
        since_seconds: int | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        """The lines of a machine's logs herder keeps (``kernel``: its kernel log; else ``service``'s, or
        every service's, each line led by ``SERVICE: ``), as they stream; with ``follow`` new ones too
        until the caller stops."""
        info = self.kind("Machine")
        path = self.path(info, self._namespace(info, namespace), name, "dmesg" if kernel else "log")
        params = {
            key: value
            for key, value in (
                ("service", service),
                ("follow", "true" if follow else None),
                ("tailLines", str(tail) if tail is not None else None),
                ("sinceSeconds", str(since_seconds) if since_seconds is not None else None),
                ("timestamps", "true" if timestamps else None),
            )
            if value is not None
        }
        request = self._http.build_request(
            "GET",
            path,
            params=params,
            headers={"Accept": "text/plain"},
            timeout=None if follow else httpx.USE_CLIENT_DEFAULT,
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as err:
            raise TransportError(f"cannot reach {self.server}: {err or type(err).__name__}") from None
        try:
            if response.status_code >= 400:
                await response.aread()
                _decode(response)
            async for line in response.aiter_lines():
                yield line
        except httpx.HTTPError as err:
            raise TransportError(
                f"the log stream of {self.server} broke: {err or type(err).__name__}"
            ) from None
        finally:
            await response.aclose()

    async def run_action(
        self,
        kind: str | KindInfo,
        name: str,
        action: str,
        options: Mapping[str, Any] | None = None,
        namespace: str | None = None,
        *,
        timeout: float | None = None,
    ) -> bytes:
        """Run an object action (a cluster's ``kubeconfig``…) and return what it answers, as bytes;
        ``timeout``: seconds to wait for it, if not the client's."""
        info = self.kind(kind)
        path = self.path(info, self._namespace(info, namespace), name, action)
        try:
            response = await self._http.post(
                path,
                content=json.dumps(dict(options or {})).encode(),
                headers={"Content-Type": "application/json"},
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as err:
            raise TransportError(f"cannot reach {self.server}: {describe(err)}") from None
        if response.status_code >= 400:
            _decode(response)
        return response.content


def _with_kind(info: KindInfo, item: dict[str, Any]) -> dict[str, Any]:
    # List items may omit apiVersion and kind, as in Kubernetes.
    item.setdefault("apiVersion", info.api_version)
    item.setdefault("kind", info.kind)
    return item


def _decode(response: httpx.Response) -> Any:
    try:
        body = response.json() if response.content else {}
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise from_status(response.status_code, body)
    if not isinstance(body, dict):
        raise TransportError(f"the server answered {response.status_code} with a body that is not JSON")
    return body
