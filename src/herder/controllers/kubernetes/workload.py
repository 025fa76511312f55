"""A workload cluster's Kubernetes API as herder uses it: discovery (which resource serves a kind, whether it
is namespaced), server-side apply as field manager ``herder`` (forced, with a server-side dry run), get,
list, create and delete. Errors are ``WorkloadError`` carrying Kubernetes' own message (its ``Status``),
never an exception of the transport.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

from herder.resources.manifests import FIELD_MANAGER, ObjectRef

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


class WorkloadError(Exception):
    """Kubernetes refused a request (``code`` its HTTP status; 0: the API could not be reached)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class ApiResource:
    """Where the API serves a kind."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str = "", name: str = "") -> str:
        group_version = (
            f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        )
        out = group_version
        if self.namespaced and namespace:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        return out + (f"/{name}" if name else "")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or f"HTTP {response.status_code}"
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return f"HTTP {response.status_code}"


class WorkloadAPI:
    """One workload cluster's API at ``endpoint`` through ``client`` (which carries the credentials)."""

    def __init__(self, client: httpx.AsyncClient, endpoint: str) -> None:
        self._client = client
        self._endpoint = endpoint.rstrip("/")
        self._resources: dict[str, dict[str, ApiResource]] = {}
        """What each group version serves (kind → resource), as discovery last said."""

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self._client.request(method, self._endpoint + path, **kwargs)
        except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
            raise WorkloadError(0, f"{self._endpoint}: {type(exc).__name__}: {exc}".rstrip(": ")) from None

    async def resource(self, api_version: str, kind: str) -> ApiResource | None:
        """Where ``kind`` of ``api_version`` is served; None when the API does not serve it (asked again
        each time it is missing: a definition may have become established since)."""
        known = self._resources.get(api_version)
        if known is None or kind not in known:
            known = await self._discover(api_version)
        return known.get(kind)

    async def _discover(self, api_version: str) -> dict[str, ApiResource]:
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        response = await self._request("GET", path)
        if response.status_code == 404:
            found: dict[str, ApiResource] = {}
        elif response.status_code != 200:
            raise WorkloadError(response.status_code, _message(response))
        else:
            found = {
                r["kind"]: ApiResource(api_version, r["kind"], r["name"], bool(r.get("namespaced")))
                for r in response.json().get("resources") or ()
                if "/" not in r.get("name", "")
            }
        self._resources[api_version] = found
        return found

    async def _resource_of(self, api_version: str, kind: str) -> ApiResource:
        found = await self.resource(api_version, kind)
        if found is None:
            raise WorkloadError(404, f'no matches for kind "{kind}" in version "{api_version}"')
        return found

    async def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply ``obj`` as ``herder``, forced (herder's fields are herder's); the object as the
        API server has (or, with ``dry_run``, would have) it."""
        found = await self._resource_of(str(obj.get("apiVersion")), str(obj.get("kind")))
        metadata = obj.get("metadata") or {}
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        response = await self._request(
            "PATCH",
            found.path(str(metadata.get("namespace") or ""), str(metadata.get("name"))),
            params=params,
            content=json.dumps(obj).encode(),
            headers={"Content-Type": APPLY_CONTENT_TYPE},
        )
        if response.status_code not in (200, 201):
            raise WorkloadError(response.status_code, _message(response))
        out: dict[str, Any] = response.json()
        return out

    async def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        api_version, kind, namespace, name = ref
        found = await self.resource(api_version, kind)
        if found is None:
            return None
        response = await self._request("GET", found.path(namespace, name))
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise WorkloadError(response.status_code, _message(response))
        out: dict[str, Any] = response.json()
        return out

    async def list(
        self, api_version: str, kind: str, namespace: str = "", selector: str = ""
    ) -> list[dict[str, Any]]:
        found = await self.resource(api_version, kind)
        if found is None:
            return []
        params = {"labelSelector": selector} if selector else {}
        response = await self._request("GET", found.path(namespace), params=params)
        if response.status_code != 200:
            raise WorkloadError(response.status_code, _message(response))
        items: list[dict[str, Any]] = response.json().get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        found = await self._resource_of(str(obj.get("apiVersion")), str(obj.get("kind")))
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        response = await self._request("POST", found.path(namespace), json=obj)
        if response.status_code not in (200, 201):
            raise WorkloadError(response.status_code, _message(response))
        out: dict[str, Any] = response.json()
        return out

    async def delete(self, ref: ObjectRef, *, dry_run: bool = False) -> bool:
        """Delete an object (its dependents in the background); False when it was gone already."""
        api_version, kind, namespace, name = ref
        found = await self.resource(api_version, kind)
        if found is None:
            return False
        params = {"propagationPolicy": "Background", **({"dryRun": "All"} if dry_run else {})}
        response = await self._request("DELETE", found.path(namespace, name), params=params)
        if response.status_code == 404:
            return False
        if response.status_code not in (200, 202):
            raise WorkloadError(response.status_code, _message(response))
        return True
