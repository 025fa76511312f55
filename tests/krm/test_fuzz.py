"""Hypothesis-generated requests against every operation the OpenAPI v3 documents describe: whatever
the path, query, headers and body, the server answers below 500, and every error is a Status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.krm.conftest import Tls, serve_krm


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    query: tuple[str, ...]
    body_types: tuple[str, ...]


def operations(http: httpx.Client) -> list[Operation]:
    out = []
    for entry in http.get("/openapi/v3").json()["paths"].values():
        document = http.get(entry["serverRelativeURL"]).json()
        for path, item in document["paths"].items():
            for method, op in item.items():
                query = tuple(p["name"] for p in op.get("parameters", []) if p["in"] == "query")
                body = tuple(op.get("requestBody", {}).get("content", {}))
                out.append(Operation(method.upper(), path, query, body))
    return out


@pytest.fixture(scope="module")
def http(tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server of its own: the fuzzer deletes and changes whatever it hits."""
    for server in serve_krm(tls, tmp_path_factory.mktemp("fuzz")):
        with server.client() as client:
            yield client


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
segment = st.sampled_from(["default", "target", "missing", "kube-system"]) | st.text(min_size=1, max_size=20)
query_value = st.sampled_from(
    ["", "1", "0", "true", "All", "Strict", "Warn", "a=b", "metadata.name=x", "-1"]
) | st.text(max_size=30)
content_type = st.sampled_from(
    [
        "application/json",
        "application/yaml",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "text/plain",
        "",
    ]
)
accept = st.sampled_from(
    [
        "application/json",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
        "application/vnd.kubernetes.protobuf",
        "*/*",
        "",
    ]
)


@st.composite
def object_bodies(draw: st.DrawFn) -> Any:
    """Mostly plausible objects with random parts, so that validation is reached, not only parsing."""
    obj: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["herder.dev/v1alpha1", "v1", "nope/v1"])),
        "kind": draw(st.sampled_from(["ConfigPatch", "Namespace", "ClusterSecrets", "Other"])),
        "metadata": draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": segment,
                    "namespace": segment,
                    "labels": st.dictionaries(st.text(max_size=20), json_values, max_size=3),
                    "finalizers": json_values,
                    "resourceVersion": query_value,
                },
            )
        ),
    }
    if draw(st.booleans()):
        obj["spec"] = draw(
            st.dictionaries(st.sampled_from(["data", "bundle", "description", "finalizers"]), json_values)
        )
    if draw(st.booleans()):
        obj["status"] = draw(json_values)
    return obj


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes


@st.composite
def calls(draw: st.DrawFn, ops: list[Operation]) -> Call:
    op = draw(st.sampled_from(ops))
    path = op.path.replace("{namespace}", quote(draw(segment), safe="")).replace(
        "{name}", quote(draw(segment), safe="")
    )
    params = {name: draw(query_value) for name in op.query if draw(st.booleans())}
    if "watch" in params:
        params["timeoutSeconds"] = "1"
    headers = {"accept": draw(accept)}
    body = b""
    if op.body_types or draw(st.booleans()):
        headers["content-type"] = draw(
            st.sampled_from(op.body_types) | content_type if op.body_types else content_type
        )
        data = draw(object_bodies() | json_values)
        body = draw(
            st.sampled_from([json.dumps(data).encode(), json.dumps(data)[:-1].encode()])
            | st.binary(max_size=64)
        )
    return Call(op.method, path, params, headers, body)


def test_no_request_gets_a_5xx(http: httpx.Client) -> None:
    ops = operations(http)
    assert {op.method for op in ops} == {"GET", "POST", "PUT", "PATCH", "DELETE"}

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(calls(ops))
    def check(call: Call) -> None:
        request = http.build_request(
            call.method, call.path, params=call.params, headers=call.headers, content=call.body
        )
        response = http.send(request, stream=True)
        try:
            assert response.status_code < 500, (call, response.read())
            if response.status_code >= 400:
                status = json.loads(response.read())
                assert status["kind"] == "Status" and status["code"] == response.status_code
        finally:
            response.close()

    check()
