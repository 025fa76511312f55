"""The HTTP surface over raw httpx: bad input is a 4xx Status (never a 5xx), watch semantics, Table
output, dry runs, preconditions and hidden objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.krm.conftest import Server
from tests.krm.policies import HIDDEN

PATCHES = "/apis/herder.dev/v1alpha1/namespaces/default/configpatches"
MERGE = {"content-type": "application/merge-patch+json"}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def patch_object(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {"name": name, "labels": labels},
        "spec": {"data": "machine: {}"},
    }


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        for name in ("existing", "target"):
            client.post(PATCHES, json=patch_object(name))
        yield client


def assert_status(response: httpx.Response, code: int, reason: str | None = None) -> dict[str, Any]:
    assert response.status_code == code, response.text
    status: dict[str, Any] = response.json()
    assert status["kind"] == "Status" and status["status"] == "Failure" and status["code"] == code
    if reason is not None:
        assert status["reason"] == reason
    return status


JSON = {"content-type": "application/json"}
APPLY = {"content-type": "application/apply-patch+yaml"}
BAD_REQUESTS: list[tuple[str, str, str, dict[str, str], bytes, int]] = [
    # (id, method, path, headers, body, code)
    ("truncated json", "POST", PATCHES, JSON, b'{"apiVersion":', 400),
    ("json array body", "POST", PATCHES, JSON, b"[1,2]", 400),
    ("json NaN", "POST", PATCHES, JSON, b'{"spec": NaN}', 400),
    ("deep nesting", "POST", PATCHES, JSON, b"[" * 100_000 + b"]" * 100_000, 400),
    ("invalid utf-8", "POST", PATCHES, JSON, b'{"a": "\xff\xfe"}', 400),
    ("malformed yaml", "POST", PATCHES, {"content-type": "application/yaml"}, b"a: [b\n c: }", 400),
    ("yaml alias bomb", "POST", PATCHES, {"content-type": "application/yaml"}, b"a: &x [1]\nb: [*x, *x]", 400),
    ("wrong apiVersion", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "apiVersion": "v1"}).encode(), 400),
    ("wrong kind", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "kind": "Namespace"}).encode(), 400),
    ("metadata not an object", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "metadata": "x"}).encode(), 400),
    ("labels not a map", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "metadata": {"name": "x", "labels": [1]}}).encode(), 422),
    ("spec not an object", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "spec": "x"}).encode(), 422),
    ("bad name", "POST", PATCHES, JSON, json.dumps(patch_object("Not_A_Name")).encode(), 422),
    ("unknown top-level field", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "extra": 1}).encode(), 422),
    ("unknown metadata field", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "metadata": {"name": "x", "nope": 1}}).encode(), 422),
    ("namespace mismatch", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "metadata": {"name": "x", "namespace": "other"}}).encode(), 400),
    ("name mismatch", "PUT", f"{PATCHES}/target", JSON, json.dumps(patch_object("other")).encode(), 400),
    ("text/plain body", "POST", PATCHES, {"content-type": "text/plain"}, b"hello", 415),
    ("patch as application/json", "PATCH", f"{PATCHES}/target", JSON, b"{}", 415),
    ("strategic merge on a custom kind", "PATCH", f"{PATCHES}/target", {"content-type": "application/strategic-merge-patch+json"}, b"{}", 415),
    ("apply without a field manager", "PATCH", f"{PATCHES}/target", APPLY, b"{}", 422),
    ("apply without apiVersion and kind", "PATCH", f"{PATCHES}/target?fieldManager=t", APPLY, b"metadata: {name: target}", 400),
    ("apply of malformed yaml", "PATCH", f"{PATCHES}/target?fieldManager=t", APPLY, b"a: [b\n c: }", 400),
    ("apply of a list", "PATCH", f"{PATCHES}/target?fieldManager=t", APPLY, b"[1]", 400),
    ("apply setting managedFields", "PATCH", f"{PATCHES}/target?fieldManager=t", APPLY, json.dumps({**patch_object("target"), "metadata": {"name": "target", "managedFields": [{}]}}).encode(), 400),
    ("apply of a keyed item without its key", "PATCH", f"{PATCHES}/target?fieldManager=t", APPLY, json.dumps({**patch_object("target"), "metadata": {"name": "target", "ownerReferences": [{"name": "x"}]}}).encode(), 422),
    ("apply renames", "PATCH", f"{PATCHES}/target?fieldManager=t", APPLY, json.dumps(patch_object("other")).encode(), 400),
    ("apply with a bad force", "PATCH", f"{PATCHES}/target?fieldManager=t&force=maybe", APPLY, json.dumps(patch_object("target")).encode(), 400),
    ("force on a merge patch", "PATCH", f"{PATCHES}/target?force=true", MERGE, b"{}", 422),
    ("field manager too long", "POST", f"{PATCHES}?fieldManager={'m' * 129}", JSON, json.dumps(patch_object("x")).encode(), 422),
    ("field manager unprintable", "POST", f"{PATCHES}?fieldManager=a%07b", JSON, json.dumps(patch_object("x")).encode(), 422),
    ("managedFields of an unknown operation", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "metadata": {"name": "x", "managedFields": [{"manager": "m", "operation": "Take"}]}}).encode(), 422),
    ("managedFields in another notation", "POST", PATCHES, JSON, json.dumps({**patch_object("x"), "metadata": {"name": "x", "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"spec": {}}}]}}).encode(), 422),
    ("deletecollection across namespaces", "DELETE", "/apis/herder.dev/v1alpha1/configpatches", {}, b"", 405),
    ("deletecollection bad selector", "DELETE", f"{PATCHES}?labelSelector=a%20in%20(", {}, b"", 400),
    ("deletecollection odd dryRun", "DELETE", PATCHES, JSON, b'{"dryRun": ["Some"]}', 400),
    ("merge patch not an object", "PATCH", f"{PATCHES}/target", MERGE, b"[1]", 400),
    ("merge patch malformed", "PATCH", f"{PATCHES}/target", MERGE, b"{", 400),
    ("json patch not a list", "PATCH", f"{PATCHES}/target", {"content-type": "application/json-patch+json"}, b"{}", 400),
    ("json patch bad op", "PATCH", f"{PATCHES}/target", {"content-type": "application/json-patch+json"}, b'[{"op":"jump"}]', 400),
    ("json patch bad path", "PATCH", f"{PATCHES}/target", {"content-type": "application/json-patch+json"}, b'[{"op":"add","path":"/a/b/c","value":1}]', 422),
    ("patch renames", "PATCH", f"{PATCHES}/target", MERGE, b'{"metadata":{"name":"other"}}', 400),
    ("patch changes kind", "PATCH", f"{PATCHES}/target", MERGE, b'{"kind":"Other"}', 400),
    ("delete options malformed", "DELETE", f"{PATCHES}/target", JSON, b"{", 400),
    ("delete options wrong types", "DELETE", f"{PATCHES}/target", JSON, b'{"preconditions": 1}', 400),
    ("delete options odd dryRun", "DELETE", f"{PATCHES}/target", JSON, b'{"dryRun": [{}]}', 400),
    ("deep merge patch", "PATCH", f"{PATCHES}/target", MERGE, b'{"spec":' + b'{"a":' * 500 + b"1" + b"}" * 501, 400),
    ("deep json patch value", "PATCH", f"{PATCHES}/target", {"content-type": "application/json-patch+json"}, b'[{"op":"add","path":"/spec/x","value":' + b"[" * 500 + b"]" * 500 + b"}]", 400),
    ("bad label selector", "GET", f"{PATCHES}?labelSelector=a%20in%20(", {}, b"", 400),
    ("bad label key", "GET", f"{PATCHES}?labelSelector=-a-%3Db", {}, b"", 400),
    ("unsupported field selector", "GET", f"{PATCHES}?fieldSelector=spec.data%3Dx", {}, b"", 400),
    ("bad continue token", "GET", f"{PATCHES}?limit=1&continue=garbage", {}, b"", 400),
    ("bad limit", "GET", f"{PATCHES}?limit=-1", {}, b"", 400),
    ("bad watch flag", "GET", f"{PATCHES}?watch=maybe", {}, b"", 400),
    ("bad watch resourceVersion", "GET", f"{PATCHES}?watch=1&resourceVersion=abc", {}, b"", 400),
    ("bad timeoutSeconds", "GET", f"{PATCHES}?watch=1&timeoutSeconds=x", {}, b"", 400),
    ("bad dryRun", "POST", f"{PATCHES}?dryRun=Some", JSON, json.dumps(patch_object("x")).encode(), 400),
    ("bad fieldValidation", "POST", f"{PATCHES}?fieldValidation=Loose", JSON, json.dumps(patch_object("x")).encode(), 400),
    ("bad includeObject", "GET", PATCHES + "?includeObject=All", {"accept": TABLE}, b"", 400),
    ("protobuf only", "GET", PATCHES, {"accept": "application/vnd.kubernetes.protobuf"}, b"", 406),
    ("unknown kind", "GET", "/apis/herder.dev/v1alpha1/widgets", {}, b"", 404),
    ("unknown group", "GET", "/apis/nope.dev/v1/things", {}, b"", 404),
    ("unknown subresource", "GET", f"{PATCHES}/target/scale", {}, b"", 404),
    ("namespaced kind by bare name", "GET", "/apis/herder.dev/v1alpha1/configpatches/target", {}, b"", 404),
    ("cluster kind in a namespace", "GET", "/api/v1/namespaces/default/namespaces/x", {}, b"", 404),
    ("empty path segment", "GET", f"{PATCHES}//target", {}, b"", 404),
    ("unknown path", "GET", "/nowhere", {}, b"", 404),
    ("put on a collection", "PUT", PATCHES, JSON, b"{}", 405),
    ("post on an object", "POST", f"{PATCHES}/target", JSON, b"{}", 405),
    ("create without a namespace", "POST", "/apis/herder.dev/v1alpha1/configpatches", JSON, b"{}", 405),
    ("delete a status", "DELETE", "/api/v1/namespaces/default/status", {}, b"", 405),
    ("missing namespace", "POST", "/apis/herder.dev/v1alpha1/namespaces/missing/configpatches", JSON, json.dumps(patch_object("x")).encode(), 404),
    ("already exists", "POST", PATCHES, JSON, json.dumps(patch_object("existing")).encode(), 409),
    ("stale resourceVersion", "PUT", f"{PATCHES}/target", JSON, json.dumps({**patch_object("target"), "metadata": {"name": "target", "resourceVersion": "1"}}).encode(), 409),
    ("uid precondition", "DELETE", f"{PATCHES}/target", JSON, b'{"preconditions": {"uid": "not-it"}}', 409),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "code"),
    [r[1:] for r in BAD_REQUESTS],
    ids=[r[0] for r in BAD_REQUESTS],
)
def test_bad_input_is_a_4xx_status(
    http: httpx.Client, method: str, path: str, headers: dict[str, str], body: bytes, code: int
) -> None:
    assert_status(http.request(method, path, headers=headers, content=body), code)


def test_oversized_body_is_413(http: httpx.Client) -> None:
    big = json.dumps({**patch_object("big"), "spec": {"data": "x" * (4 << 20)}}).encode()
    assert_status(http.post(PATCHES, content=big, headers=JSON), 413, "RequestEntityTooLarge")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
        for _ in range(64):
            yield b"x" * 65536

    assert_status(http.post(PATCHES, content=chunks(), headers=JSON), 413)


def test_invalid_names_every_field(http: httpx.Client) -> None:
    bad = {**patch_object("invalid"), "spec": {"data": "", "extra": 1}}
    status = assert_status(http.post(PATCHES, json=bad), 422, "Invalid")
    assert status["details"]["kind"] == "ConfigPatch" and status["details"]["name"] == "invalid"
    fields = {c["field"]: c["reason"] for c in status["details"]["causes"]}
    assert fields == {"spec.data": "FieldValueInvalid", "spec.extra": "FieldValueNotSupported"}


def test_field_validation_warn_and_ignore(http: httpx.Client) -> None:
    extra = {**patch_object("lenient"), "spec": {"data": "x", "extra": 1}, "top": 2}
    response = http.post(f"{PATCHES}?fieldValidation=Warn", json=extra)
    assert response.status_code == 201
    assert response.json()["spec"] == {"data": "x", "description": ""} and "top" not in response.json()
    assert sorted(response.headers.get_list("warning")) == [
        '299 - "unknown field \\"spec.extra\\""',
        '299 - "unknown field \\"top\\""',
    ]
    response = http.put(f"{PATCHES}/lenient?fieldValidation=Ignore", json=extra)
    assert response.status_code == 200 and "warning" not in response.headers


def test_dry_run_changes_nothing(http: httpx.Client) -> None:
    response = http.post(f"{PATCHES}?dryRun=All", json=patch_object("dry"))
    assert response.status_code == 201 and response.json()["metadata"]["name"] == "dry"
    assert_status(http.get(f"{PATCHES}/dry"), 404, "NotFound")
    before = http.get(f"{PATCHES}/target").json()
    response = http.patch(
        f"{PATCHES}/target?dryRun=All", content=b'{"spec":{"description":"dry"}}', headers=MERGE
    )
    assert response.json()["spec"]["description"] == "dry"
    assert http.get(f"{PATCHES}/target").json() == before
    assert http.request("DELETE", f"{PATCHES}/target?dryRun=All").status_code == 200
    assert http.get(f"{PATCHES}/target").status_code == 200


def test_generate_name_and_status_subresource(http: httpx.Client) -> None:
    body = patch_object("")
    body["metadata"] = {"generateName": "gen-"}
    created = http.post(PATCHES, json=body).json()
    assert created["metadata"]["name"].startswith("gen-")
    ns = http.get("/api/v1/namespaces/default/status").json()
    ns["status"] = {"phase": "Terminating"}
    ns["metadata"]["labels"] = {"ignored": "by-status"}
    updated = http.put("/api/v1/namespaces/default/status", json=ns).json()
    assert updated["status"]["phase"] == "Terminating" and "ignored" not in updated["metadata"].get(
        "labels", {}
    )
    back = http.patch(
        "/api/v1/namespaces/default/status", content=b'{"status":{"phase":"Active"}}', headers=MERGE
    )
    assert back.json()["status"]["phase"] == "Active"
    assert_status(http.get(f"{PATCHES}/{created['metadata']['name']}/status"), 404)


def test_server_side_apply_of_the_status_subresource(http: httpx.Client) -> None:
    ns = "/api/v1/namespaces/status-applied"
    config = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "status-applied"}}
    main = {
        **config,
        "metadata": {"name": "status-applied", "labels": {"a": "1"}},
        "status": {"phase": "Gone"},
    }
    created = http.patch(f"{ns}?fieldManager=owner", content=json.dumps(main), headers=APPLY)
    assert created.status_code == 201, created.text
    assert created.json()["status"] == {"phase": "Active"}  # the main resource does not write status
    status = {
        **config,
        "metadata": {"name": "status-applied", "labels": {"b": "2"}},
        "status": {"phase": "Terminating"},
    }
    reported = http.patch(f"{ns}/status?fieldManager=reporter", content=json.dumps(status), headers=APPLY)
    assert reported.status_code == 200, reported.text
    body = reported.json()
    assert body["status"] == {"phase": "Terminating"} and body["metadata"]["labels"] == {"a": "1"}
    entries = {e["manager"]: e for e in body["metadata"]["managedFields"]}
    assert entries["reporter"]["subresource"] == "status"
    assert entries["reporter"]["fieldsV1"] == {"f:status": {"f:phase": {}}}
    assert entries["owner"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:a": {}}}}
    assert "subresource" not in entries["owner"]
    other = {**status, "status": {"phase": "Active"}}
    refused = assert_status(
        http.patch(f"{ns}/status?fieldManager=other", content=json.dumps(other), headers=APPLY), 409
    )
    assert refused["message"] == (
        'Apply failed with 1 conflict: conflict with "reporter" with subresource "status": .status.phase'
    )
    assert_status(
        http.patch(
            "/api/v1/namespaces/missing-ns/status?fieldManager=m", content=json.dumps(config), headers=APPLY
        ),
        404,
    )
    assert http.delete(ns).status_code == 200  # the session's server is shared: leave its namespaces be


def test_list_pages_with_continue(http: httpx.Client) -> None:
    for i in range(5):
        http.post(PATCHES, json=patch_object(f"page-{i}", paged="yes"))
    names: list[str] = []
    token = ""
    while True:
        page = http.get(PATCHES, params={"labelSelector": "paged=yes", "limit": 2, "continue": token}).json()
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert names == [f"page-{i}" for i in range(5)]
    one = http.get(
        "/apis/herder.dev/v1alpha1/configpatches", params={"fieldSelector": "metadata.name=page-3"}
    )
    assert [i["metadata"]["name"] for i in one.json()["items"]] == ["page-3"]


def test_table_output(http: httpx.Client) -> None:
    table = http.get(PATCHES, headers={"accept": TABLE}, params={"labelSelector": "paged=yes"}).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Cluster", "Description", "Age"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    full = http.get(f"{PATCHES}/page-0", headers={"accept": TABLE}, params={"includeObject": "Object"}).json()
    assert full["rows"][0]["cells"][0] == "page-0" and full["rows"][0]["object"]["spec"]["data"]


def watch_events(http: httpx.Client, query: str, stop_after: int, **headers: str) -> list[dict[str, Any]]:
    events = []
    with http.stream("GET", f"{PATCHES}?watch=1&{query}", headers=headers) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            events.append(json.loads(line))
            if len(events) == stop_after:
                break
    return events


def test_watch_semantics(http: httpx.Client) -> None:
    http.post(PATCHES, json=patch_object("w-1", watched="yes"))
    rv = http.get(PATCHES).json()["metadata"]["resourceVersion"]
    # No resourceVersion: the current objects first, as ADDED; then the stream ends at its timeout.
    events = watch_events(http, "labelSelector=watched%3Dyes&timeoutSeconds=1", stop_after=100)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w-1")]
    # From a resourceVersion: only what changed after it.
    http.post(PATCHES, json=patch_object("w-2", watched="yes"))
    events = watch_events(http, f"labelSelector=watched%3Dyes&resourceVersion={rv}", stop_after=1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w-2")]
    # Initial events end with a bookmark when asked, as the Kubernetes watch-list protocol does.
    query = "labelSelector=watched%3Dyes&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    events = watch_events(http, query, stop_after=3)
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    # As Table rows: the first event carries the column definitions.
    events = watch_events(http, "labelSelector=watched%3Dyes", stop_after=2, accept=TABLE)
    assert events[0]["object"]["kind"] == "Table" and events[0]["object"]["columnDefinitions"]
    assert (
        events[1]["object"]["rows"][0]["cells"][0] == "w-2" and not events[1]["object"]["columnDefinitions"]
    )


def test_hidden_objects_do_not_exist(guarded_server: Server) -> None:
    with guarded_server.client() as http:
        assert http.post(PATCHES, json=patch_object("secret", **{HIDDEN: "yes"})).status_code == 201
        http.post(PATCHES, json=patch_object("public"))
        status = assert_status(http.get(f"{PATCHES}/secret"), 404)
        assert status["message"] == 'configpatches.herder.dev "secret" not found'
        assert_status(http.patch(f"{PATCHES}/secret", content=b"{}", headers=MERGE), 404)
        assert_status(http.delete(f"{PATCHES}/secret"), 404)
        names = [i["metadata"]["name"] for i in http.get(PATCHES).json()["items"]]
        assert "secret" not in names and "public" in names
        events = watch_events(http, "timeoutSeconds=1", stop_after=100)
        assert [e["object"]["metadata"]["name"] for e in events] == ["public"]


def test_an_object_hidden_mid_watch_goes_as_last_seen(guarded_server: Server) -> None:
    with guarded_server.client() as http, guarded_server.client() as writer:
        http.post(PATCHES, json=patch_object("flicker", flicker="yes"))
        hide = json.dumps({"metadata": {"labels": {HIDDEN: "yes"}}})
        with http.stream(
            "GET", f"{PATCHES}?watch=1&labelSelector=flicker%3Dyes&timeoutSeconds=2"
        ) as response:
            lines = response.iter_lines()
            assert json.loads(next(lines))["type"] == "ADDED"
            assert writer.patch(f"{PATCHES}/flicker", content=hide, headers=MERGE).status_code == 200
            gone = json.loads(next(lines))
            assert gone["type"] == "DELETED" and gone["object"]["metadata"]["name"] == "flicker"
            assert HIDDEN not in gone["object"]["metadata"]["labels"]
            assert list(lines) == []  # nothing more about it until the watch ends
        assert writer.get(f"{PATCHES}/flicker").status_code == 404


def test_unauthenticated_is_401_except_version(guarded_server: Server) -> None:
    with guarded_server.client() as http:
        bad = {"authorization": "Bearer bad"}
        for path in (PATCHES, f"{PATCHES}/x", "/apis", "/api/v1", "/openapi/v3"):
            assert_status(http.get(path, headers=bad), 401, "Unauthorized")
        assert http.get("/version", headers=bad).status_code == 200


def test_openapi_v2_is_json_only(http: httpx.Client) -> None:
    protobuf = {"accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
    assert_status(http.get("/openapi/v2", headers=protobuf), 406, "NotAcceptable")
    document = http.get("/openapi/v2", headers={"accept": "application/json"}).json()
    assert document["swagger"] == "2.0"
    patch_op = document["paths"]["/apis/herder.dev/v1alpha1/namespaces/{namespace}/configpatches/{name}"][
        "patch"
    ]
    assert patch_op["x-kubernetes-group-version-kind"] == {
        "group": "herder.dev",
        "version": "v1alpha1",
        "kind": "ConfigPatch",
    }
    assert "fieldValidation" in {p["name"] for p in patch_op["parameters"]}
    spec = document["definitions"]["dev.herder.v1alpha1.ConfigPatch"]["properties"]["spec"]
    assert spec["required"] == ["data"] and "nullable" not in json.dumps(document)
