"""A light, synchronous client of herder's API, for the commands that must answer at once (``herder get``,
``describe``, ``apply``, ``delete``, ``cluster kubeconfig``): the standard library's HTTP over TLS, one
kept-alive connection, JSON documents as they come (no typed models), kinds found through the server's
discovery as kubectl finds them, and refusals as the errors of ``herder.client.errors``.

It loads in a fraction of the time the async ``Client`` takes (httpx and the kinds' models), which is
what a command line that does one request pays for. Everything long-running uses ``Client``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from herder.client.errors import TransportError, describe, from_status
from herder.client.kubeconfig import Credentials

JSON = "application/json"
# What kubectl asks for to print objects: the server's Table of them, as ``kubectl get`` shows.
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
MERGE_PATCH = "application/merge-patch+json"
# How long what discovery said of a server is kept, as kubectl keeps it.
DISCOVERY_TTL = 600.0


class UnknownKind(ValueError):
    """A kind the server does not serve."""

    def __init__(self, name: str, server: str) -> None:
        super().__init__(
            f"unknown kind {name!r}: {server} does not serve it (kubectl api-resources lists what it serves)"
        )


@dataclass(frozen=True)
class Kind:
    """A kind as discovery tells of it."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def names(self) -> set[str]:
        return {self.plural, self.singular, self.kind.lower(), *self.short_names}

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        return api_path(self.group, self.version, self.plural, self.namespaced, namespace, name, sub)


def api_path(
    group: str,
    version: str,
    plural: str,
    namespaced: bool,
    namespace: str | None = None,
    name: str | None = None,
    sub: str = "",
) -> str:
    """The path of a kind's objects, one object (``name``) or one's subresource or action (``sub``)."""
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespaced and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name is not None:
        base += f"/{quote(name, safe='')}"
    return f"{base}/{sub}" if sub else base


class Rest:
    """One connection to a herder API server; use it as a context manager, or ``close`` it."""

    def __init__(
        self, credentials: Credentials, *, timeout: float = 30.0, discovery_cache: Path | None = None
    ) -> None:
        """``discovery_cache``: a folder to keep what discovery told of each server in, for
        ``DISCOVERY_TTL`` seconds, as kubectl does (a kind it does not name is looked up again)."""
        self.server = credentials.server
        self._cache = discovery_cache / f"{_file_name(credentials.server)}.json" if discovery_cache else None
        parts = urlsplit(credentials.server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"{credentials.server}: expected an https:// URL of the server")
        self._base = parts.path.rstrip("/")
        if parts.scheme == "https":
            context = ssl.create_default_context(
                cadata=credentials.ca_pem.decode() if credentials.ca_pem else None
            )
            if credentials.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname, parts.port or 443, context=context, timeout=timeout
            )
        else:
            self._connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        self._headers = {"User-Agent": "herder-cli"}
        if credentials.token:
            self._headers["Authorization"] = f"Bearer {credentials.token}"
        self._kinds: list[Kind] | None = None

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Rest:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # requests

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        accept: str,
    ) -> http.client.HTTPResponse:
        target = self._base + path + (f"?{urlencode(params)}" if params else "")
        content = json.dumps(body).encode() if body is not None else None
        headers = {**self._headers, "Accept": accept}
        if content is not None:
            headers["Content-Type"] = content_type
        # A kept-alive connection the server has closed meanwhile is opened again, once.
        for attempt in (1, 2):
            try:
                self._connection.request(method, target, body=content, headers=headers)
                return self._connection.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._connection.close()
                if attempt == 2:
                    raise TransportError(f"cannot reach {self.server}: {describe(exc)}") from None
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()
                raise TransportError(f"cannot reach {self.server}: {describe(exc)}") from None
        raise AssertionError("unreachable")

    def raw(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
    ) -> bytes:
        """The answer's body; a refusal raises the error of its code."""
        response = self._send(method, path, params, body, content_type, accept)
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self._connection.close()
            raise TransportError(f"the answer of {self.server} broke off: {describe(exc)}") from None
        if response.status >= 400:
            raise from_status(response.status, _json(data))
        return data

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
    ) -> dict[str, Any]:
        """The answer as a JSON object."""
        data = _json(
            self.raw(method, path, params=params, body=body, content_type=content_type, accept=accept)
        )
        if not isinstance(data, dict):
            raise TransportError(f"{self.server} answered with a body that is not a JSON object")
        return data

    def stream(self, path: str, params: Mapping[str, str], *, accept: str = JSON) -> Iterator[dict[str, Any]]:
        """The events of a watch, one JSON object per line, until the server ends it."""
        response = self._send("GET", path, {**params, "watch": "1"}, None, JSON, accept)
        if response.status >= 400:
            raise from_status(response.status, _json(response.read()))
        try:
            while line := response.readline():
                if line.strip():
                    yield json.loads(line)
        except (OSError, http.client.HTTPException) as exc:
            raise TransportError(f"the watch on {self.server} broke: {describe(exc)}") from None
        finally:
            self._connection.close()  # a watch's connection is not reused

    # kinds

    def kinds(self, *, fresh: bool = False) -> list[Kind]:
        """Every kind the server serves, from its discovery documents (or the cache of them, unless
        ``fresh``)."""
        if self._kinds is None and not fresh:
            self._kinds = self._cached()
        if self._kinds is None or fresh:
            versions = [("", "v1")]
            for group in self.request("GET", "/apis").get("groups") or []:
                preferred = group.get("preferredVersion") or {}
                versions.append((str(group.get("name", "")), str(preferred.get("version", ""))))
            kinds = []
            for group, version in versions:
                path = f"/apis/{group}/{version}" if group else f"/api/{version}"
                for resource in self.request("GET", path).get("resources") or []:
                    if "/" in resource.get("name", ""):
                        continue  # a subresource
                    kinds.append(
                        Kind(
                            group=group,
                            version=version,
                            kind=str(resource.get("kind", "")),
                            plural=str(resource["name"]),
                            singular=str(resource.get("singularName") or resource.get("kind", "").lower()),
                            namespaced=bool(resource.get("namespaced")),
                            short_names=tuple(resource.get("shortNames") or ()),
                        )
                    )
            self._kinds = kinds
            self._keep(kinds)
        return self._kinds

    def _cached(self) -> list[Kind] | None:
        if self._cache is None:
            return None
        try:
            kept = json.loads(self._cache.read_text())
            if time.time() - float(kept["time"]) > DISCOVERY_TTL:
                return None
            return [Kind(**{**k, "short_names": tuple(k["short_names"])}) for k in kept["kinds"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _keep(self, kinds: list[Kind]) -> None:
        if self._cache is None:
            return
        data = json.dumps({"time": time.time(), "kinds": [asdict(k) for k in kinds]})
        # Replaced whole, so that another command reading it meanwhile never sees half of it.
        with contextlib.suppress(OSError):
            self._cache.parent.mkdir(parents=True, exist_ok=True)
            partial = self._cache.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(data)
            partial.replace(self._cache)

    def _find(self, match: Callable[[Kind], bool], what: str) -> Kind:
        for fresh in (False, True):
            found = next((k for k in self.kinds(fresh=fresh) if match(k)), None)
            if found is not None:
                return found
            if self._cache is None:
                break  # nothing was cached: what the server said is what it serves
        raise UnknownKind(what, self.server)

    def kind(self, name: str) -> Kind:
        """A kind by its plural, singular, kind or short name (any case), as kubectl takes them."""
        wanted = name.lower()
        return self._find(lambda k: wanted in k.names(), name)

    def kind_of(self, api_version: str, kind: str) -> Kind:
        """The kind of a document (its ``apiVersion`` and ``kind``)."""
        return self._find(lambda k: k.api_version == api_version and k.kind == kind, f"{api_version} {kind}")


def _file_name(server: str) -> str:
    """A file name for a server's URL: its host and port."""
    parts = urlsplit(server)
    return "".join(c if c.isalnum() or c in "-." else "_" for c in f"{parts.hostname}_{parts.port or 443}")


def _json(data: bytes) -> Any:
    try:
        return json.loads(data) if data else {}
    except ValueError:
        return None
