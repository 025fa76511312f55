"""Hidden objects do not exist below Support (get, list, watch, errors); herder.dev/ keys, read-only
objects and controller-owned objects refuse user changes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.api.server import Server

CP = "/apis/herder.dev/v1alpha1/namespaces/default/configpatches"
MERGE = {"Content-Type": "application/merge-patch+json"}
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
BELOW_SUPPORT = ["Reader", "Operator", "Admin", "InfraProvider"]


def patch_body(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": {"data": "machine: {}"},
    }


HIDDEN = {"herder.dev/hidden": "true", "herder.dev/infra-provider-id": "p1"}


@pytest.fixture(scope="module")
def hidden(server: Server, tokens: dict[str, str]) -> str:
    async def make() -> None:
        async with server.http(tokens["Support"]) as support:
            for body in (
                patch_body("secret-plan", labels=HIDDEN),
                patch_body("open-plan", labels={"herder.dev/infra-provider-id": "p1"}),
            ):
                answer = await support.post(CP, json=body)
                assert answer.status_code == 201, answer.text

    asyncio.run(make())
    return "secret-plan"


@pytest.mark.parametrize("role", BELOW_SUPPORT)
async def test_hidden_object_does_not_exist_below_support(
    role: str, server: Server, tokens: dict[str, str], hidden: str
) -> None:
    async with server.http(tokens[role]) as http:
        got = await http.get(f"{CP}/{hidden}")
        never = await http.get(f"{CP}/never-was")
        assert got.status_code == never.status_code == 404
        assert got.json()["message"].replace(hidden, "X") == never.json()["message"].replace("never-was", "X")
        for listing in (
            await http.get(CP),
            await http.get(CP, headers=TABLE),
            await http.get("/apis/herder.dev/v1alpha1/configpatches"),
        ):
            assert listing.status_code == 200
            assert hidden not in listing.text and "open-plan" in listing.text
        by_name = await http.get(CP, params={"fieldSelector": f"metadata.name={hidden}"})
        assert by_name.json()["items"] == []
        for attempt in (
            http.put(f"{CP}/{hidden}", json=patch_body(hidden)),
            http.patch(f"{CP}/{hidden}", json={"spec": {"description": "x"}}, headers=MERGE),
            http.delete(f"{CP}/{hidden}"),
        ):
            answer = await attempt
            # Not 403: that would tell the object exists.
            assert answer.status_code == 404, answer.text


async def test_support_sees_hidden_objects(server: Server, tokens: dict[str, str], hidden: str) -> None:
    async with server.http(tokens["Support"]) as http:
        assert (await http.get(f"{CP}/{hidden}")).status_code == 200
        assert hidden in (await http.get(CP)).text


async def _watch_lines(http: httpx.AsyncClient, seen: list[dict[str, Any]], ready: asyncio.Event) -> None:
    async with http.stream("GET", CP, params={"watch": "1", "timeoutSeconds": "5"}) as answer:
        ready.set()
        async for line in answer.aiter_lines():
            if line.strip():
                seen.append(json.loads(line))
                if seen[-1]["object"]["metadata"]["name"] == "watch-visible":
                    return


async def test_watch_never_shows_hidden_objects(server: Server, tokens: dict[str, str], hidden: str) -> None:
    seen: list[dict[str, Any]] = []
    ready = asyncio.Event()
    async with server.http(tokens["Admin"]) as admin, server.http(tokens["Support"]) as support:
        watching = asyncio.create_task(_watch_lines(admin, seen, ready))
        await ready.wait()
        await asyncio.sleep(0.3)
        assert (await support.post(CP, json=patch_body("watch-hidden", labels=HIDDEN))).status_code == 201
        touch = {"spec": {"description": "changed while watched"}}
        assert (await support.patch(f"{CP}/{hidden}", json=touch, headers=MERGE)).status_code == 200
        assert (await support.post(CP, json=patch_body("watch-visible"))).status_code == 201
        await asyncio.wait_for(watching, 10)
    names = [e["object"]["metadata"]["name"] for e in seen]
    assert "watch-visible" in names and "open-plan" in names  # initial events, then the new one
    assert hidden not in names and "watch-hidden" not in names
    assert hidden not in json.dumps(seen)


async def test_users_may_not_set_herder_labels_but_may_set_the_listed_ones(
    server: Server, tokens: dict[str, str]
) -> None:
    async with server.http(tokens["Admin"]) as admin:
        refused = await admin.post(CP, json=patch_body("sneaky", labels={"herder.dev/hidden": "true"}))
        assert refused.status_code == 403
        assert "label herder.dev/hidden is set by herder" in refused.json()["message"]
        assert (
            await admin.post(CP, json=patch_body("targeted", labels={"herder.dev/cluster": "c1"}))
        ).status_code == 201
        relabel = {"metadata": {"labels": {"herder.dev/machine-set": "workers", "team": "a"}}}
        assert (await admin.patch(f"{CP}/targeted", json=relabel, headers=MERGE)).status_code == 200
        owner = {"metadata": {"annotations": {"herder.dev/controller": "me"}}}
        assert (await admin.patch(f"{CP}/targeted", json=owner, headers=MERGE)).status_code == 403


async def test_existing_herder_labels_survive_user_updates(server: Server, tokens: dict[str, str]) -> None:
    async with server.http(tokens["Support"]) as support:
        marked = patch_body("system-marked", labels={"herder.dev/managed-by": "system"})
        assert (await support.post(CP, json=marked)).status_code == 201
    async with server.http(tokens["Operator"]) as operator:
        keep = {"spec": {"description": "operators may edit what herder marked, keeping its marks"}}
        assert (await operator.patch(f"{CP}/system-marked", json=keep, headers=MERGE)).status_code == 200
        drop = {"metadata": {"labels": {"herder.dev/managed-by": None}}}
        assert (await operator.patch(f"{CP}/system-marked", json=drop, headers=MERGE)).status_code == 403


async def test_read_only_objects_refuse_changes_below_support(server: Server, tokens: dict[str, str]) -> None:
    async with server.http(tokens["Support"]) as support:
        body = patch_body("frozen", annotations={"herder.dev/read-only": "true"})
        assert (await support.post(CP, json=body)).status_code == 201
    async with server.http(tokens["Admin"]) as admin:
        change = await admin.patch(f"{CP}/frozen", json={"spec": {"description": "x"}}, headers=MERGE)
        assert change.status_code == 403 and "read-only" in change.json()["message"]
        assert (await admin.delete(f"{CP}/frozen")).status_code == 403
        assert (await admin.get(f"{CP}/frozen")).status_code == 200
    async with server.http(tokens["Support"]) as support:
        assert (
            await support.patch(f"{CP}/frozen", json={"spec": {"description": "x"}}, headers=MERGE)
        ).status_code == 200


async def test_controller_owned_objects_refuse_user_writes_naming_the_owner(
    server: Server, tokens: dict[str, str]
) -> None:
    async with server.http(tokens["Support"]) as support:
        body = patch_body("owned", annotations={"herder.dev/controller": "controller:managed-control-plane"})
        assert (await support.post(CP, json=body)).status_code == 201
    async with server.http(tokens["Admin"]) as admin:
        answer = await admin.patch(f"{CP}/owned", json={"spec": {"description": "mine now"}}, headers=MERGE)
    assert answer.status_code == 403
    assert "managed by controller controller:managed-control-plane" in answer.json()["message"]


async def test_an_object_hidden_while_watched_goes_away_and_comes_back(
    server: Server, tokens: dict[str, str]
) -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []
    ready = asyncio.Event()

    async def watch(http: httpx.AsyncClient) -> None:
        params = {"watch": "1", "timeoutSeconds": "5", "resourceVersion": rv}
        async with http.stream("GET", CP, params=params) as answer:
            ready.set()
            async for line in answer.aiter_lines():
                if line.strip():
                    event = json.loads(line)
                    meta = event["object"]["metadata"]
                    seen.append((event["type"], meta["name"], meta.get("labels", {})))
                    if len(seen) == 3:
                        return

    async with server.http(tokens["Operator"]) as operator, server.http(tokens["Support"]) as support:
        assert (await support.post(CP, json=patch_body("flicker"))).status_code == 201
        rv = (await operator.get(CP)).json()["metadata"]["resourceVersion"]
        watching = asyncio.create_task(watch(operator))
        await ready.wait()
        await asyncio.sleep(0.3)
        for labels in ({"herder.dev/hidden": "true"}, {"herder.dev/hidden": None}):
            answer = await support.patch(
                f"{CP}/flicker", json={"metadata": {"labels": labels}}, headers=MERGE
            )
            assert answer.status_code == 200, answer.text
        assert (
            await support.patch(f"{CP}/flicker", json={"spec": {"description": "d"}}, headers=MERGE)
        ).status_code == 200
        await asyncio.wait_for(watching, 10)
    assert seen == [("DELETED", "flicker", {}), ("ADDED", "flicker", {}), ("MODIFIED", "flicker", {})]
