"""The audit trail: mutations and every Support request, readable by Admin, in audit.log as JSON lines."""

from __future__ import annotations

import json
from typing import Any

from tests.api.server import Server

CP = "/apis/herder.dev/v1alpha1/namespaces/default/configpatches"
EVENTS = "/apis/herder.dev/v1alpha1/auditevents"


def _body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {"name": name},
        "spec": {"data": "a: 1"},
    }


def _log(server: Server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (server.data_dir / "audit.log").read_text().splitlines()]


async def _events(server: Server, tokens: dict[str, str], **labels: str) -> list[dict[str, Any]]:
    selector = ",".join(f"herder.dev/audit-{k}={v}" for k, v in labels.items())
    async with server.http(tokens["Admin"]) as admin:
        answer = await admin.get(EVENTS, params={"labelSelector": selector})
    assert answer.status_code == 200, answer.text
    return [e["spec"] for e in answer.json()["items"]]


async def test_mutations_are_recorded_with_who_what_and_outcome(
    server: Server, tokens: dict[str, str]
) -> None:
    async with server.http(tokens["Operator"]) as operator:
        assert (await operator.post(CP, json=_body("audited"))).status_code == 201
        assert (await operator.delete(f"{CP}/audited")).status_code == 200
    async with server.http(tokens["Reader"]) as reader:
        assert (await reader.post(CP, json=_body("refused"))).status_code == 403
    events = await _events(server, tokens, kind="ConfigPatch")
    created = next(e for e in events if e["verb"] == "create" and e["name"] == "audited")
    assert created["user"] == "serviceaccount:as-operator" and created["role"] == "Operator"
    assert created["namespace"] == "default" and created["code"] == 201 and created["result"] == "Success"
    assert created["sourceAddress"] == "127.0.0.1" and created["time"].endswith("Z")
    assert any(e["verb"] == "delete" and e["name"] == "audited" and e["code"] == 200 for e in events)
    refused = next(e for e in events if e["name"] == "refused")
    assert refused["code"] == 403 and refused["result"] == "Failure" and "forbidden" in refused["message"]
    lines = _log(server)
    assert any(
        line["verb"] == "create" and line["name"] == "audited" and line["code"] == 201 for line in lines
    )


async def test_server_side_apply_and_deletecollection_are_recorded(
    server: Server, tokens: dict[str, str]
) -> None:
    applied = {**_body("audited-apply"), "metadata": {"name": "audited-apply", "labels": {"audit": "bulk"}}}
    async with server.http(tokens["Operator"]) as operator:
        answer = await operator.patch(
            f"{CP}/audited-apply",
            params={"fieldManager": "audit-test"},
            content=json.dumps(applied),
            headers={"content-type": "application/apply-patch+yaml"},
        )
        assert answer.status_code == 201, answer.text
        gone = await operator.delete(CP, params={"labelSelector": "audit=bulk"})
        assert gone.status_code == 200, gone.text
        assert [i["metadata"]["name"] for i in gone.json()["items"]] == ["audited-apply"]
    events = await _events(server, tokens, kind="ConfigPatch")
    assert any(e["verb"] == "patch" and e["name"] == "audited-apply" and e["code"] == 201 for e in events)
    bulk = next(e for e in events if e["verb"] == "deletecollection")
    assert (
        bulk["code"] == 200
        and bulk["namespace"] == "default"
        and bulk["user"] == "serviceaccount:as-operator"
    )


async def test_a_write_that_changes_nothing_is_not_stored_but_stays_in_the_file(
    server: Server, tokens: dict[str, str]
) -> None:
    merge = {"content-type": "application/merge-patch+json"}
    async with server.http(tokens["Operator"]) as operator:
        assert (await operator.post(CP, json=_body("noop"))).status_code == 201
        labelled = json.dumps({"metadata": {"labels": {"noop": "yes"}}})
        first = await operator.patch(f"{CP}/noop", content=labelled, headers=merge)
        again = await operator.patch(f"{CP}/noop", content=labelled, headers=merge)
        assert first.status_code == again.status_code == 200
        assert again.json()["metadata"]["resourceVersion"] == first.json()["metadata"]["resourceVersion"]
    async with server.http(tokens["Support"]) as support:
        by_support = await support.patch(f"{CP}/noop", content=labelled, headers=merge)
        assert by_support.status_code == 200, by_support.text
    patches = [
        e for e in await _events(server, tokens, kind="ConfigPatch", verb="patch") if e["name"] == "noop"
    ]
    # The first patch changed the object; the operator's second changed nothing and is not stored; every
    # request of Support is.
    assert sorted(e["role"] for e in patches) == ["Operator", "Support"]
    lines = [line for line in _log(server) if line["verb"] == "patch" and line["name"] == "noop"]
    assert len(lines) == 3 and lines[1]["message"].startswith("unchanged")


async def test_reads_are_not_recorded_but_every_support_request_is(
    server: Server, tokens: dict[str, str]
) -> None:
    async with server.http(tokens["Admin"]) as admin:
        assert (await admin.get(f"{CP}/never-read-by-support")).status_code == 404
    async with server.http(tokens["Support"]) as support:
        assert (await support.get(f"{CP}/read-by-support")).status_code == 404
        assert (await support.get(CP)).status_code == 200
    events = await _events(server, tokens, kind="ConfigPatch")
    assert not any(e["name"] == "never-read-by-support" for e in events)
    support_reads = [e for e in events if e["role"] == "Support" and e["verb"] in ("get", "list")]
    assert any(e["name"] == "read-by-support" and e["code"] == 404 for e in support_reads)
    assert any(e["verb"] == "list" for e in support_reads)


async def test_audit_events_are_admin_only_and_append_only(server: Server, tokens: dict[str, str]) -> None:
    for role in ("Reader", "Operator", "InfraProvider"):
        async with server.http(tokens[role]) as http:
            answer = await http.get(EVENTS)
            assert answer.status_code == 403, role
            assert "auditevents" in answer.json()["message"]
    async with server.http(tokens["Admin"]) as admin:
        name = (await admin.get(EVENTS)).json()["items"][0]["metadata"]["name"]
        assert (await admin.delete(f"{EVENTS}/{name}")).status_code == 403
    async with server.http(tokens["Support"]) as support:
        assert (await support.delete(f"{EVENTS}/{name}")).status_code == 403


async def test_audit_log_holds_no_secrets(server: Server, tokens: dict[str, str]) -> None:
    text = (server.data_dir / "audit.log").read_text()
    for token in tokens.values():
        assert token.rpartition("_")[2] not in text
    issued = [line for line in _log(server) if line["subresource"] == "token"]
    assert issued and all(line["message"].startswith("issued token ") for line in issued)
    assert all(
        set(line) >= {"time", "user", "role", "verb", "kind", "namespace", "name", "code", "sourceAddress"}
        for line in _log(server)
    )


async def test_admins_see_support_acting_on_hidden_objects_without_their_names(
    server: Server, tokens: dict[str, str]
) -> None:
    hidden = {
        **_body("herder-quiet-patch"),
        "metadata": {"name": "herder-quiet-patch", "labels": {"herder.dev/hidden": "true"}},
    }
    async with server.http(tokens["Support"]) as support:
        assert (await support.post(CP, json=hidden)).status_code == 201
        assert (await support.get(f"{CP}/herder-quiet-patch")).status_code == 200
    async with server.http(tokens["Admin"]) as admin:
        answer = await admin.get(EVENTS)
    assert "herder-quiet-patch" not in answer.text
    support_events = [e["spec"] for e in answer.json()["items"] if e["spec"]["role"] == "Support"]
    assert {("create", "(hidden)"), ("get", "(hidden)")} <= {(e["verb"], e["name"]) for e in support_events}
    assert any(line["name"] == "herder-quiet-patch" for line in _log(server))


async def test_unauthenticated_writes_go_to_the_file_only(server: Server, tokens: dict[str, str]) -> None:
    async with server.http("hdr_forged-00000000_" + "2" * 64) as stranger:
        assert (await stranger.post(CP, json=_body("by-stranger"))).status_code == 401
    line = _log(server)[-1]
    assert line["user"] == "" and line["code"] == 401 and line["verb"] == "post"
    assert "2" * 64 not in (server.data_dir / "audit.log").read_text()
    assert not [e for e in await _events(server, tokens) if e["code"] == 401]
