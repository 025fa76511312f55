"""A workload cluster's Kubernetes API for controller unit tests: ``krm`` with Kubernetes' kinds over an
in-memory store, the emulator's apiextensions controller (a definition's kind is served once it is
established) and its Job controller and kubelet (a Job's pod runs its command to its end), reached in
process (httpx's ASGI transport) as herder's controllers reach a cluster's API through
``KubernetesClients``. The scheduler's part (placing a pod) a test plays with ``run_jobs``."""

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
from herder.emu.cluster.jobs import Jobs
from herder.emu.cluster.manifests import running_status
from herder.krm.app import build_app
from herder.resources import KindRegistry, Resource
from herder.resources.kubernetes import JOB, KINDS, POD
from herder.state.errors import NotFound
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site

ENDPOINT = "https://127.0.9.1:6443"
NODE = "worker-1"


class Workload(KubernetesClients):
    """The cluster's API, and the clients herder's controllers reach it by (``endpoints``: the endpoints
    they asked for). ``down``: the API cannot be reached."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.endpoints: list[str] = []
        self.down = False
        self._app = httpx.ASGITransport(app=build_app(store.registry, store))
        self._also: dict[str, list[dict[str, Any]]] = {}
        self._http = httpx.AsyncClient(transport=httpx.MockTransport(self._serve))

    def also_serve(self, api_version: str, kind: str) -> None:
        """Discovery of ``api_version`` lists ``kind`` too, as kube-apiserver lists a built-in kind in every
        version it serves (the emulator serves a definition's storage version only)."""
        plural = kind.lower() + "s"
        self._also.setdefault(api_version, []).append({"name": plural, "kind": kind, "namespaced": False})

    async def _serve(self, request: httpx.Request) -> httpx.Response:
        version = request.url.path.removeprefix("/apis/")
        if request.method == "GET" and version in self._also:
            return httpx.Response(200, json={"groupVersion": version, "resources": self._also[version]})
        return await self._app.handle_async_request(request)

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

    async def run_jobs(self, timeout: float = 10.0) -> list[Resource]:
        """Place each Job's pod on the one node as it comes (the scheduler's part), until every Job has
        ended; the Jobs."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for pod in (await self.store.list(POD)).items:
                if not (pod.spec or {}).get("nodeName"):
                    await self._place(pod)
            jobs = list((await self.store.list(JOB)).items)
            if all(_ended(j) for j in jobs) or loop.time() > deadline:
                return jobs
            await asyncio.sleep(0.02)

    async def _place(self, pod: Resource) -> None:
        placed = await self.store.update(
            pod.model_copy(update={"spec": {**(pod.spec or {}), "nodeName": NODE}})
        )
        running = running_status((placed.spec or {}).get("containers") or [], "10.5.0.2", "10.244.0.9")
        await self.store.update_status(placed.model_copy(update={"status": running}))

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


def _ended(job: Resource) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.status or {}).get("conditions") or ()
    )


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


async def cluster_of(site: Site, *, reachable: bool = True, **spec: Any) -> Fleet:
    """Cluster ``alpha``, bootstrapped with its API at ``ENDPOINT`` (``reachable``), else not bootstrapped."""
    fleet = Fleet(site)
    cluster = await fleet.cluster(bootstrapped=reachable, **spec)
    await site.set_status(cluster, endpoint=ENDPOINT if reachable else "")
    return fleet


@asynccontextmanager
async def workload() -> AsyncIterator[Workload]:
    registry = KindRegistry(KINDS)
    async with Store(MemoryBackend(), registry) as store:
        definitions = CustomResources(store, registry)
        definitions.start()
        jobs = Jobs(store)
        jobs.start()
        made = Workload(store)
        try:
            for namespace in ("default", "kube-system"):
                await made.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            yield made
        finally:
            await made._http.aclose()
            await jobs.close()
            await definitions.close()
