"""The hidden objects of a managed control plane do not exist below Support — a matrix over the roles
(Reader, Operator, Admin, and another provider), the hidden kinds (InfraProvider, MachineRequestSet,
MachineRequest, ConfigPatch) and the verbs (get, list, watch, a create whose name collides, update,
delete): every answer is the answer for a name that never was, lists and tables neither show nor count
them, and a watch never tells of them. Against a server without the emulator: it is about the API only.
Also: a server not started with ``--managed-control-planes`` refuses a managed cluster, saying so.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.api.server import Server

API = "/apis/herder.dev/v1alpha1"
MERGE = {"Content-Type": "application/merge-patch+json"}
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
ROLES = ["Reader", "Operator", "Admin", "InfraProvider"]
PROVIDER = "herder-mx"
HIDDEN = {"herder.dev/hidden": "true"}
FREE = "herder-never-was"
OFFER = {"sizes": {"xs": {"machines": 1}}, "talosVersions": ["v1.13.9"]}


def _body(kind: str, name: str) -> dict[str, Any]:
    """An object of ``kind`` named ``name``, as the hidden ones are (and as a caller would try to make)."""
    request = {"providerID": PROVIDER, "talosVersion": "v1.13.9"}
    spec: dict[str, Any] = {
        "InfraProvider": {"hidden": True, "managedControlPlanes": OFFER},
        "MachineRequestSet": {**request, "machineCount": 0},
        "MachineRequest": request,
        "ConfigPatch": {"data": "machine: {}"},
    }[kind]
    metadata: dict[str, Any] = {"name": name, "labels": dict(HIDDEN)}
    if kind != "InfraProvider":
        metadata["namespace"] = "default"
    return {"apiVersion": "herder.dev/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}


KINDS = {
    "InfraProvider": (f"{API}/infraproviders", PROVIDER),
    "MachineRequestSet": (f"{API}/namespaces/default/machinerequestsets", "herder-mx-control-planes"),
    "MachineRequest": (f"{API}/namespaces/default/machinerequests", "herder-mx-control-planes-abcde"),
    "ConfigPatch": (f"{API}/namespaces/default/configpatches", "herder-mx-kubespan"),
}


@pytest.fixture(scope="module")
def hidden(server: Server, tokens: dict[str, str]) -> None:
    async def make() -> None:
        async with server.http(tokens["Support"]) as support:
            for kind, (path, name) in KINDS.items():
                answer = await support.post(path, json=_body(kind, name))
                assert answer.status_code == 201, answer.text

    asyncio.run(make())


async def _probes(http: httpx.AsyncClient, kind: str, name: str) -> list[tuple[str, int, str]]:
    """Every way to ask about ``name``, each answer with the name blanked out."""
    path, _ = KINDS[kind]
    body = _body(kind, name)
    del body["metadata"]["labels"]  # a caller cannot hide; the collision is of names
    attempts = {
        "get": http.get(f"{path}/{name}"),
        "create": http.post(path, json=body),
        "update": http.put(f"{path}/{name}", json=body),
        "patch": http.patch(f"{path}/{name}", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE),
        "delete": http.delete(f"{path}/{name}"),
        "list by name": http.get(path, params={"fieldSelector": f"metadata.name={name}"}),
    }
    answers = []
    for what, attempt in attempts.items():
        answer = await attempt
        data = answer.json()
        data.get("metadata", {}).pop("resourceVersion", None)
        answers.append((what, answer.status_code, json.dumps(data).replace(name, "NAME")))
    return answers


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("role", ROLES)
async def test_a_hidden_object_is_answered_as_one_that_never_was(
    role: str, kind: str, server: Server, tokens: dict[str, str], hidden: None
) -> None:
    path, name = KINDS[kind]
    async with server.http(tokens[role]) as http:
        assert await _probes(http, kind, name) == await _probes(http, kind, FREE)
        listed = await http.get(path)
        table = await http.get(path, headers=TABLE)
    if listed.status_code == 200:
        assert name not in listed.text and PROVIDER not in listed.text
        rows = table.json()["rows"]
        assert len(rows) == len(listed.json()["items"]) and name not in table.text


async def test_watches_never_tell_of_hidden_objects(
    server: Server, tokens: dict[str, str], hidden: None
) -> None:
    seen: dict[tuple[str, str], str] = {}

    async def watch(role: str, kind: str, started: asyncio.Event) -> None:
        path, _ = KINDS[kind]
        async with (
            server.http(tokens[role]) as http,
            http.stream("GET", path, params={"watch": "1", "timeoutSeconds": "2"}) as answer,
        ):
            started.set()
            seen[(role, kind)] = "".join([line async for line in answer.aiter_lines()])

    started = [asyncio.Event() for _ in ROLES for _ in KINDS]
    watches = [
        asyncio.create_task(watch(role, kind, started[i * len(KINDS) + j]))
        for i, role in enumerate(ROLES)
        for j, kind in enumerate(KINDS)
    ]
    await asyncio.gather(*(e.wait() for e in started))
    async with server.http(tokens["Support"]) as support:
        for path, name in KINDS.values():
            touched = await support.patch(
                f"{path}/{name}", json={"metadata": {"labels": {"t": "1"}}}, headers=MERGE
            )
            assert touched.status_code == 200, touched.text
    await asyncio.gather(*watches)
    for (role, kind), text in seen.items():
        assert KINDS[kind][1] not in text and PROVIDER not in text, (role, kind, text[:500])


async def test_support_sees_them_all(server: Server, tokens: dict[str, str], hidden: None) -> None:
    async with server.http(tokens["Support"]) as support:
        for path, name in KINDS.values():
            assert (await support.get(f"{path}/{name}")).status_code == 200
        offering = (await support.get(f"{API}/managedcontrolplaneofferings/mx")).json()
    assert PROVIDER not in json.dumps(offering)


async def test_only_support_writes_a_providers_managed_offer(server: Server, tokens: dict[str, str]) -> None:
    provider = _body("InfraProvider", "open-mx")
    provider["metadata"]["labels"] = {}
    del provider["spec"]["hidden"]
    async with server.http(tokens["Admin"]) as admin, server.http(tokens["Support"]) as support:
        refused = await admin.post(f"{API}/infraproviders", json=provider)
        assert refused.status_code == 403 and "only Support may set" in refused.json()["message"]
        even = json.loads(json.dumps(provider))
        even["metadata"]["name"] = "even-mx"
        even["spec"]["managedControlPlanes"] = {
            **OFFER,
            "sizes": {"xs": {"machines": 2}},
            "talosVersions": ["v0.1.0"],
        }
        invalid = await support.post(f"{API}/infraproviders", json=even)
        assert invalid.status_code == 422, invalid.text
        fields = {c["field"]: c["message"] for c in invalid.json()["details"]["causes"]}
        assert "etcd quorum" in fields["spec.managedControlPlanes.sizes.xs.machines"], fields
        assert (await support.post(f"{API}/infraproviders", json=provider)).status_code == 201
        change = {"spec": {"managedControlPlanes": {**OFFER, "registerNodes": False}}}
        patched = await admin.patch(f"{API}/infraproviders/open-mx", json=change, headers=MERGE)
        assert patched.status_code == 403
        removed = await admin.delete(f"{API}/infraproviders/open-mx")
        assert removed.status_code == 403
        # What users read of a visible provider leaves the offer out: the offering says what they may know.
        reader = (await admin.get(f"{API}/infraproviders/open-mx")).json()
        assert reader["spec"]["managedControlPlanes"]["talosVersions"] == ["v1.13.9"]  # an Admin reads it
    async with server.http(tokens["Operator"]) as operator:
        shown = (await operator.get(f"{API}/infraproviders/open-mx")).json()
    assert "managedControlPlanes" not in shown["spec"]


async def test_a_server_without_managed_control_planes_refuses_a_managed_cluster(
    server: Server, tokens: dict[str, str]
) -> None:
    cluster = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "hosted", "namespace": "default"},
        "spec": {
            "talosVersion": "v1.13.9",
            "kubernetesVersion": "1.33.0",
            "controlPlane": {"managed": {"enabled": True, "provider": "mx", "size": "xs"}},
        },
    }
    async with server.http(tokens["Operator"]) as operator:
        refused = await operator.post(f"{API}/namespaces/default/clusters", json=cluster)
    assert refused.status_code == 422, refused.text
    causes = refused.json()["details"]["causes"]
    assert causes == [
        {
            "reason": causes[0]["reason"],
            "field": "spec.controlPlane.managed.enabled",
            "message": "managed control planes are not enabled on this server",
        }
    ]
