"""A workload cluster's Kubernetes API for controller unit tests: ``krm`` with Kubernetes' kinds over an
in-memory store, and the emulator's apiextensions controller (a definition's kind is served once it is
established), reached in process (httpx's ASGI transport) as herder's controllers reach a cluster's API
through ``KubernetesClients``. What the cluster's own controllers would do (a Job ending) a test writes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from herder.controllers.cluster_keys import KubernetesCredentials
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.emu.cluster.crds import CustomResources
from herder.krm.app import build_app
from herder.resources import KindRegistry, Resource
from herder.resources.kubernetes import KINDS
from herder.state.errors import NotFound
from herder.state.memory import MemoryBackend
from herder.state.store import Store

ENDPOINT = "https://127.0.9.1:6443"


class Workload(KubernetesClients):
    """The cluster's API, and the clients herder's controllers reach it by (``endpoints``: the endpoints
    they asked for). ``down``: the API cannot be reached."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.endpoints: list[str] = []
        self.down = False
        self._http = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(store.registry, store)))

    def client(self, endpoint: str, credentials: KubernetesCredentials) -> httpx.AsyncClient:
        self.endpoints.append(endpoint)
        if self.down:
            return httpx.AsyncClient(transport=httpx.MockTransport(_refused))
        return self._http

    async def put(self, data: dict[str, Any]) -> Resource:
        """Create an object as someone else in the cluster would (a definition established once served)."""
        made = await self.store.create(Resource.model_validate(data))
        if made.kind == "CustomResourceDefinition":
            for _ in range(100):
                current = await self.store.get(made.kind, made.name)
                if any(
                    c.get("type") == "Established" for c in (current.status or {}).get("conditions") or ()
                ):
                    break
                await asyncio.sleep(0.01)
        return made

    async def edit(self, path: str, change: dict[str, Any]) -> None:
        """A merge patch of the object at ``path``, as ``kubectl edit`` makes it."""
        response = await self._http.patch(
            ENDPOINT + path,
            params={"fieldManager": "kubectl-edit"},
            content=json.dumps(change).encode(),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text

    async def find(self, kind: str, name: str, namespace: str | None = None) -> Resource | None:
        try:
            return await self.store.get(kind, name, namespace)
        except NotFound:
            return None


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@asynccontextmanager
async def workload() -> AsyncIterator[Workload]:
    registry = KindRegistry(KINDS)
    async with Store(MemoryBackend(), registry) as store:
        definitions = CustomResources(store, registry)
        definitions.start()
        made = Workload(store)
        try:
            for namespace in ("default", "kube-system"):
                await made.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            yield made
        finally:
            await made._http.aclose()
            await definitions.close()
