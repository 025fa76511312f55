"""Hidden objects do not exist below Support (get, list, watch, errors); herder.dev/ keys, read-only
objects and controller-owned objects refuse user changes.
"""

from __future__ import annotations

import asyncio
import base64
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
                patch_body("herder-secret-plan", labels=HIDDEN),
                patch_body("open-plan", labels={"herder.dev/infra-provider-id": "p1"}),
            ):
                answer = await support.post(CP, json=body)
                assert answer.status_code == 201, answer.text

    asyncio.run(make())
    return "herder-secret-plan"


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
        assert (
            await support.post(CP, json=patch_body("herder-watch-hidden", labels=HIDDEN))
        ).status_code == 201
        touch = {"spec": {"description": "changed while watched"}}
        assert (await support.patch(f"{CP}/{hidden}", json=touch, headers=MERGE)).status_code == 200
        assert (await support.post(CP, json=patch_body("watch-visible"))).status_code == 201
        await asyncio.wait_for(watching, 10)
    names = [e["object"]["metadata"]["name"] for e in seen]
    assert "watch-visible" in names and "open-plan" in names  # initial events, then the new one
    assert hidden not in names and "herder-watch-hidden" not in names
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
        assert (await support.post(CP, json=patch_body("herder-flicker"))).status_code == 201
        rv = (await operator.get(CP)).json()["metadata"]["resourceVersion"]
        watching = asyncio.create_task(watch(operator))
        await ready.wait()
        await asyncio.sleep(0.3)
        for labels in ({"herder.dev/hidden": "true"}, {"herder.dev/hidden": None}):
            answer = await support.patch(
                f"{CP}/herder-flicker", json={"metadata": {"labels": labels}}, headers=MERGE
            )
            assert answer.status_code == 200, answer.text
        assert (
            await support.patch(f"{CP}/herder-flicker", json={"spec": {"description": "d"}}, headers=MERGE)
        ).status_code == 200
        await asyncio.wait_for(watching, 10)
    assert seen == [
        ("DELETED", "herder-flicker", {}),
        ("ADDED", "herder-flicker", {}),
        ("MODIFIED", "herder-flicker", {}),
    ]


FREE = "herder-never-was"
SERVICE_ACCOUNTS = "/apis/herder.dev/v1alpha1/serviceaccounts"


@pytest.fixture(scope="module")
def hidden_homes(server: Server, tokens: dict[str, str]) -> str:
    """A hidden namespace named as the hidden patch, with a hidden patch in it."""

    async def make() -> None:
        async with server.http(tokens["Support"]) as support:
            namespace = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "herder-secret-plan", "labels": HIDDEN},
            }
            answer = await support.post("/api/v1/namespaces", json=namespace)
            assert answer.status_code == 201, answer.text
            inside = patch_body("herder-inside", labels=HIDDEN)
            inside["metadata"]["namespace"] = "herder-secret-plan"
            path = "/apis/herder.dev/v1alpha1/namespaces/herder-secret-plan/configpatches"
            assert (await support.post(path, json=inside)).status_code == 201
            assert (await support.get(path)).status_code == 200

    asyncio.run(make())
    return "herder-secret-plan"


async def _probes(http: httpx.AsyncClient, name: str) -> list[tuple[str, int, str]]:
    """Every way a caller might ask about ``name``: each answer, with the name blanked out."""
    owned = {"herder.dev/infra-provider-id": "p1"}
    generated = patch_body("", labels=owned)
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = f"{name}-"
    in_namespace = patch_body("inside", labels=owned)
    in_namespace["metadata"]["namespace"] = name
    attempts = {
        "create": http.post(CP, json=patch_body(name, labels=owned)),
        "create dry-run": http.post(CP, params={"dryRun": "All"}, json=patch_body(name, labels=owned)),
        "create generateName": http.post(CP, json=generated),
        "create in namespace": http.post(
            f"/apis/herder.dev/v1alpha1/namespaces/{name}/configpatches", json=in_namespace
        ),
        "get": http.get(f"{CP}/{name}"),
        "update": http.put(f"{CP}/{name}", json=patch_body(name, labels=owned)),
        "patch": http.patch(f"{CP}/{name}", json={"spec": {"description": "x"}}, headers=MERGE),
        "delete dry-run": http.request("DELETE", f"{CP}/{name}", json={"dryRun": ["All"]}),
        "delete": http.delete(f"{CP}/{name}"),
        "get namespace": http.get(f"/api/v1/namespaces/{name}"),
        "list by name": http.get(CP, params={"fieldSelector": f"metadata.name={name}"}),
    }
    answers = []
    for what, attempt in attempts.items():
        answer = await attempt
        body = answer.json()
        body.get("metadata", {}).pop("resourceVersion", None)  # lists: the store's revision moves on
        answers.append((what, answer.status_code, json.dumps(body).replace(name, "NAME")))
    return answers


@pytest.mark.parametrize("role", BELOW_SUPPORT)
async def test_no_answer_tells_a_hidden_name_from_a_free_one(
    role: str, server: Server, tokens: dict[str, str], hidden: str, hidden_homes: str
) -> None:
    async with server.http(tokens[role]) as http:
        hidden_answers = await _probes(http, hidden)
        free_answers = await _probes(http, FREE)
    assert hidden_answers == free_answers
    codes = {what: code for what, code, _ in hidden_answers}
    # Creates in reserved names are refused (by role first, for a Reader) whatever exists.
    assert {codes[w] for w in codes if w.startswith("create")} == {403}
    if role != "Reader":
        assert "reserved to herder" in next(body for what, _, body in hidden_answers if what == "create")
    # A role that may write patches is told "not found"; one that may not is refused before the read.
    writes = 403 if role == "Reader" else 404
    assert codes["get"] == 404 and codes["update"] == codes["patch"] == codes["delete"] == writes
    # The audit trail, which admins read, tells the two no better than the answers did.
    async with server.http(tokens["Support"]) as support:
        events = (await support.get("/apis/herder.dev/v1alpha1/auditevents")).json()["items"]
    user = f"serviceaccount:as-{role.lower()}"
    trail = {
        name: sorted(
            (e["spec"]["verb"], e["spec"]["code"], e["spec"]["message"].replace(name, "NAME"))
            for e in events
            if e["spec"]["user"] == user and name in (e["spec"]["name"], e["spec"]["namespace"])
        )
        for name in (hidden, FREE)
    }
    assert trail[hidden] == trail[FREE] != []


async def test_support_gets_the_true_answers(
    server: Server, tokens: dict[str, str], hidden: str, hidden_homes: str
) -> None:
    async with server.http(tokens["Support"]) as support:
        taken = await support.post(CP, json=patch_body(hidden))
        assert taken.status_code == 409 and taken.json()["reason"] == "AlreadyExists"
        assert (await support.post(CP, json=patch_body("herder-made-by-support"))).status_code == 201


async def test_supports_audit_events_name_no_reserved_name_for_admins(
    server: Server, tokens: dict[str, str], hidden: str, hidden_homes: str
) -> None:
    async with server.http(tokens["Support"]) as support:
        # Even a create that fails on the hidden name must not tell admins the name is taken.
        assert (await support.post(CP, json=patch_body(hidden))).status_code == 409
    async with server.http(tokens["Admin"]) as admin:
        events = (await admin.get("/apis/herder.dev/v1alpha1/auditevents")).json()["items"]
    by_support = [e for e in events if e["spec"]["role"] == "Support"]
    assert {("create", "(hidden)", "(hidden)"), ("list", "", "(hidden)")} <= {
        (e["spec"]["verb"], e["spec"]["name"], e["spec"]["namespace"]) for e in by_support
    }
    assert hidden_homes not in json.dumps(by_support) and "herder-inside" not in json.dumps(by_support)


async def test_only_objects_of_reserved_names_may_be_hidden(
    server: Server, tokens: dict[str, str], hidden: str
) -> None:
    hide = {"metadata": {"labels": {"herder.dev/hidden": "true"}}}
    account = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ServiceAccount",
        "metadata": {"name": "herder-quiet-account", "labels": {"herder.dev/hidden": "true"}},
        "spec": {"role": "Reader"},
    }
    async with server.http(tokens["Support"]) as support:
        # Identities are named in the audit events of their own requests: they are never hidden.
        refused = await support.post(SERVICE_ACCOUNTS, json=account)
        assert refused.status_code == 422 and "audit events name it" in refused.text
        refused = await support.post(CP, json=patch_body("plain-name", labels={"herder.dev/hidden": "true"}))
        assert refused.status_code == 422, refused.text
        assert refused.json()["details"]["causes"][0]["field"] == "metadata.labels"
        assert "herder-" in refused.json()["message"]
        assert (await support.patch(f"{CP}/open-plan", json=hide, headers=MERGE)).status_code == 422
        assert (await support.post(CP, json=patch_body("herder-to-hide"))).status_code == 201
        assert (await support.patch(f"{CP}/herder-to-hide", json=hide, headers=MERGE)).status_code == 200


async def test_pages_and_continue_tokens_say_nothing_of_hidden_objects(
    server: Server, tokens: dict[str, str]
) -> None:
    pages = "/apis/herder.dev/v1alpha1/namespaces/paging/configpatches"
    async with server.http(tokens["Support"]) as support:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "paging"}}
        assert (await support.post("/api/v1/namespaces", json=namespace)).status_code == 201
        # In key order: visible, hidden, visible, hidden (the last object of the list).
        for name, labels in (
            ("a-visible", {}),
            ("herder-b-hidden", {"herder.dev/hidden": "true"}),
            ("herder-c-visible", {}),
            ("herder-d-hidden", {"herder.dev/hidden": "true"}),
        ):
            body = {**patch_body(name, labels=labels)}
            body["metadata"]["namespace"] = "paging"
            assert (await support.post(pages, json=body)).status_code == 201, name
    async with server.http(tokens["Admin"]) as admin:
        for accept in ({}, TABLE):
            seen, tokens_seen, params = [], [], {"limit": "1"}
            while True:
                page = (await admin.get(pages, params=params, headers=accept)).json()
                rows = page.get("items") or page.get("rows") or []
                assert len(rows) == 1, page  # a page is never short for hidden objects' sake
                seen.append(json.dumps(rows))
                token = page["metadata"].get("continue")
                if not token:
                    break
                tokens_seen.append(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
                params = {"limit": "1", "continue": token}
            assert len(seen) == 2 and "a-visible" in seen[0] and "herder-c-visible" in seen[1]
            assert "hidden" not in " ".join(seen + tokens_seen)


async def test_a_role_that_may_not_read_a_kind_cannot_tell_which_names_exist(
    server: Server, tokens: dict[str, str]
) -> None:
    async with server.http(tokens["Operator"]) as operator:
        answers = [
            (answer.status_code, answer.text.replace(name, "NAME"))
            for name in ("admin", "no-such-account")
            for answer in [
                await operator.get(f"{SERVICE_ACCOUNTS}/{name}"),
                await operator.delete(f"{SERVICE_ACCOUNTS}/{name}"),
            ]
        ]
    assert answers[:2] == answers[2:] and {code for code, _ in answers} == {403}
