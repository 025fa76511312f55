"""krm in-process (httpx's ASGI transport): mounted under a path prefix, as the emulator mounts one
API per cluster; a watch from a compacted revision; every error class mapped to its Status code.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from herder.krm.app import build_app
from herder.krm.policy import Denied, Unauthenticated
from herder.krm.status import ApiError, api_error
from herder.resources import FieldError, InvalidObject, Resource
from herder.resources.catalog import herder_registry
from herder.state.errors import AlreadyExists, Conflict, Forbidden, Gone, Invalid, NotFound, Unavailable
from herder.state.memory import MemoryBackend
from herder.state.store import Store

PREFIX = "/clusters/c1"


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    registry = herder_registry()
    async with Store(MemoryBackend(history=5), registry, watch_ring=5) as store:
        await store.create(
            Resource.model_validate(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
            )
        )
        yield store


@pytest.fixture
async def http(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[Mount(PREFIX, build_app(store.registry, store))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://krm") as client:
        yield client


async def test_mounted_under_a_prefix(http: httpx.AsyncClient) -> None:
    assert (await http.get(f"{PREFIX}/version")).json()["gitVersion"] == "v1.32.0+herder"
    groups = (await http.get(f"{PREFIX}/apis")).json()["groups"]
    assert [g["name"] for g in groups] == ["herder.dev"]
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mounted"}}
    assert (await http.post(f"{PREFIX}/api/v1/namespaces", json=body)).status_code == 201
    assert (await http.get(f"{PREFIX}/api/v1/namespaces/mounted")).json()["metadata"]["name"] == "mounted"
    index = (await http.get(f"{PREFIX}/openapi/v3")).json()["paths"]
    url = index["apis/herder.dev/v1alpha1"]["serverRelativeURL"]
    assert url.startswith(f"{PREFIX}/openapi/v3/apis/herder.dev/v1alpha1?hash=")
    document = (await http.get(url)).json()
    schema = document["components"]["schemas"]["dev.herder.v1alpha1.ConfigPatch"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "herder.dev", "version": "v1alpha1", "kind": "ConfigPatch"}
    ]
    assert (await http.get("/version")).status_code == 404


async def test_watch_from_a_compacted_revision_ends_with_a_410_error_event(
    http: httpx.AsyncClient, store: Store
) -> None:
    for i in range(20):
        await store.create(
            Resource.model_validate({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"n{i}"}})
        )
    response = await http.get(f"{PREFIX}/api/v1/namespaces?watch=1&resourceVersion=1&timeoutSeconds=5")
    assert response.status_code == 200
    events = [json.loads(line) for line in response.text.splitlines()]
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (NotFound("configpatches", "x"), 404, "NotFound"),
        (AlreadyExists("configpatches", "x"), 409, "AlreadyExists"),
        (Conflict("stale"), 409, "Conflict"),
        (Gone(1, 5), 410, "Expired"),
        (Forbidden("owned"), 403, "Forbidden"),
        (Denied("no"), 403, "Forbidden"),
        (Unauthenticated("who?"), 401, "Unauthorized"),
        (Invalid("bad selector"), 400, "BadRequest"),
        (InvalidObject("ConfigPatch", "x", [FieldError("spec.data", "required")]), 422, "Invalid"),
        (Unavailable("backend down"), 503, "ServiceUnavailable"),
        (ApiError(429, "slow down"), 429, "TooManyRequests"),
        (RuntimeError("secret internals"), 500, "InternalError"),
    ],
)
def test_errors_map_to_status_codes(error: Exception, code: int, reason: str) -> None:
    info = herder_registry().get("ConfigPatch")
    status = api_error(error, info, "x").status()
    assert (status["code"], status["reason"]) == (code, reason)
    assert "secret internals" not in status["message"]


async def test_lists_and_tables_follow_each_change_of_an_object(http: httpx.AsyncClient) -> None:
    # Lists answer from what was encoded for each object revision: a change must show at once, in
    # JSON, in Table rows and in the single-object read alike.
    path = f"{PREFIX}/apis/herder.dev/v1alpha1/namespaces/default/configpatches"
    table = {"accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    body = {"apiVersion": "herder.dev/v1alpha1", "kind": "ConfigPatch", "metadata": {"name": "p"}}
    body["spec"] = {"data": "machine: {}", "description": "first"}
    assert (await http.post(path, json=body)).status_code == 201
    for description in ("first", "second", "third"):
        if description != "first":
            change = json.dumps({"spec": {"description": description}})
            headers = {"content-type": "application/merge-patch+json"}
            assert (await http.patch(f"{path}/p", content=change, headers=headers)).status_code == 200
        listed = (await http.get(path)).json()
        assert [i["spec"]["description"] for i in listed["items"]] == [description]
        rv = listed["items"][0]["metadata"]["resourceVersion"]
        assert int(listed["metadata"]["resourceVersion"]) >= int(rv)
        assert (await http.get(f"{path}/p")).json()["metadata"]["resourceVersion"] == rv
        rows = (await http.get(path, headers=table)).json()["rows"]
        assert [r["cells"][2] for r in rows] == [description]
        assert rows[0]["object"]["metadata"]["resourceVersion"] == rv
    assert (await http.delete(f"{path}/p")).status_code == 200
    assert (await http.get(path)).json()["items"] == []
    assert (await http.get(path, headers=table)).json()["rows"] == []
