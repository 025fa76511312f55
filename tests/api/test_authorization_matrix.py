"""Every role x every kind x every verb, over HTTP, against the policy table.

Writes use ``dryRun=All`` so that the objects every role is tried on stay as they are. A second,
hand-written table pins the table's most important entries, so that the matrix is not only the
policy checked against itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from herder.api import roles
from herder.krm.policy import Access
from herder.resources import KindInfo
from herder.resources.access import INFRA_PROVIDER_LABEL, ROLES, SERVICE_ACCOUNT
from herder.resources.catalog import herder_registry
from tests.api.conftest import PROVIDER
from tests.api.server import Server

REGISTRY = herder_registry()
NAMESPACE = "default"

# A valid body for each kind (labelled for the InfraProvider under test, where that matters).
SAMPLES: dict[str, dict[str, Any]] = {
    "Namespace": {},
    "ConfigPatch": {"spec": {"data": "machine: {}"}},
    "ClusterSecrets": {"spec": {"bundle": "certs: {}"}},
    "ServiceAccount": {"spec": {"role": "Reader"}},
    "User": {"spec": {"role": "Reader", "email": "u@example.com"}},
    "Token": {"spec": {"subjectKind": "ServiceAccount", "subject": "admin"}},
    "TokenDigest": {"spec": {"sha256": "0" * 64}},
    "AuditEvent": {
        "spec": {"time": "2026-01-01T00:00:00Z", "user": "x", "verb": "get", "code": 200, "result": "Success"}
    },
}


def body(info: KindInfo, name: str) -> dict[str, Any]:
    if info.kind not in SAMPLES:
        pytest.fail(f"kind {info.kind} has no sample body in {__name__}.SAMPLES: add one")
    metadata: dict[str, Any] = {"name": name, "labels": {INFRA_PROVIDER_LABEL: PROVIDER}}
    if info.namespaced:
        metadata["namespace"] = NAMESPACE
    return {"apiVersion": info.api_version, "kind": info.kind, "metadata": metadata, **SAMPLES[info.kind]}


def path(info: KindInfo, name: str | None = None, sub: str | None = None) -> str:
    base = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
    if info.namespaced:
        base += f"/namespaces/{NAMESPACE}"
    base += f"/{info.plural}"
    return base + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


@pytest.fixture(scope="module")
def targets(server: Server, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """One existing object of every kind, as it is stored, to be read, updated and deleted by every role."""

    async def make() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        async with server.http(tokens["Support"]) as support, server.client() as admin:
            issued = await admin.issue_token(SERVICE_ACCOUNT, "admin", description="matrix target")
            audit_name = (await admin.list("auditevents")).items[0].name
            existing = {"Token": issued.name, "TokenDigest": issued.name, "AuditEvent": audit_name}
            for info in REGISTRY:
                name = existing.get(info.kind, f"target-{info.kind.lower()}")
                if info.kind not in existing:
                    created = await support.post(path(info), json=body(info, name))
                    assert created.status_code == 201, created.text
                if info.kind == "TokenDigest":  # nobody may read one: a stand-in body serves for the writes
                    out[info.kind] = body(info, name)
                    continue
                answer = await support.get(path(info, name))
                assert answer.status_code == 200, answer.text
                out[info.kind] = answer.json()
        return out

    return asyncio.run(make())


async def _try(
    http: httpx.AsyncClient, info: KindInfo, verb: str, sub: str | None, target: dict[str, Any]
) -> int:
    name = target["metadata"]["name"]
    dry = {"dryRun": "All"}
    if verb == "get":
        return (await http.get(path(info, name))).status_code
    if verb == "list":
        return (await http.get(path(info))).status_code
    if verb == "watch":
        async with http.stream("GET", path(info), params={"watch": "1", "timeoutSeconds": "1"}) as answer:
            return answer.status_code
    if verb == "create" and sub == roles.TOKEN_SUBRESOURCE:
        return (await http.post(path(info, name, sub), json={})).status_code
    if verb == "create":
        return (
            await http.post(path(info), params=dry, json=body(info, f"new-{info.kind.lower()}"))
        ).status_code
    if verb == "update":
        return (await http.put(path(info, name, sub), params=dry, json=target)).status_code
    if verb == "patch":
        patch = {"metadata": {"labels": {"touched": "yes"}}} if sub is None else {"status": {}}
        headers = {"Content-Type": "application/merge-patch+json"}
        return (await http.patch(path(info, name, sub), params=dry, json=patch, headers=headers)).status_code
    assert verb == "delete"
    return (await http.delete(path(info, name), params=dry)).status_code


def _accesses(info: KindInfo) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [
        (verb, None) for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
    ]
    if info.has_status:
        out += [("update", "status"), ("patch", "status")]
    if info.kind in ("ServiceAccount", "User"):
        out.append(("create", roles.TOKEN_SUBRESOURCE))
    return out


@pytest.mark.parametrize("role", ROLES)
async def test_every_kind_and_verb_is_decided_by_the_table(
    role: str, server: Server, tokens: dict[str, str], targets: dict[str, dict[str, Any]]
) -> None:
    wrong = []
    async with server.http(tokens[role]) as http:
        for info in REGISTRY:
            for verb, sub in _accesses(info):
                allowed = roles.allows(
                    role, Access(verb, info, NAMESPACE if info.namespaced else None, "x", sub)
                )
                code = await _try(http, info, verb, sub, targets[info.kind])
                if (200 <= code < 300) != allowed or (not allowed and code != 403):
                    wrong.append(
                        f"{role} {verb}{'/' + sub if sub else ''} {info.kind}: {code}, allowed={allowed}"
                    )
    assert wrong == []


# (role, kind, verb, allowed): the entries a mistake in the table would hurt most.
PINNED = [
    ("Reader", "ConfigPatch", "list", True),
    ("Reader", "ConfigPatch", "create", False),
    ("Reader", "ClusterSecrets", "get", False),
    ("Reader", "AuditEvent", "list", False),
    ("Reader", "ServiceAccount", "list", False),
    ("Operator", "ConfigPatch", "patch", True),
    ("Operator", "Namespace", "create", False),
    ("Operator", "ClusterSecrets", "list", False),
    ("Admin", "AuditEvent", "list", True),
    ("Admin", "AuditEvent", "delete", False),
    ("Admin", "Token", "delete", True),
    ("Admin", "Token", "create", False),
    ("Admin", "TokenDigest", "get", False),
    ("Support", "TokenDigest", "list", False),
    ("Support", "AuditEvent", "update", False),
    ("Support", "ClusterSecrets", "get", True),
    ("InfraProvider", "ConfigPatch", "create", True),
    ("InfraProvider", "Namespace", "list", False),
    ("InfraProvider", "ServiceAccount", "get", False),
]


@pytest.mark.parametrize(("role", "kind", "verb", "allowed"), PINNED)
def test_pinned_entries_of_the_table(role: str, kind: str, verb: str, allowed: bool) -> None:
    assert roles.allows(role, Access(verb, REGISTRY.get(kind))) is allowed


async def test_infra_provider_sees_and_touches_only_its_own_objects(
    server: Server, tokens: dict[str, str]
) -> None:
    info = REGISTRY.get("ConfigPatch")
    foreign = body(info, "of-another-provider")
    foreign["metadata"]["labels"][INFRA_PROVIDER_LABEL] = "p2"
    async with server.http(tokens["Support"]) as support:
        assert (await support.post(path(info), json=foreign)).status_code == 201
    async with server.http(tokens["InfraProvider"]) as provider:
        assert (await provider.get(path(info, "of-another-provider"))).status_code == 404
        names = [o["metadata"]["name"] for o in (await provider.get(path(info))).json()["items"]]
        assert "of-another-provider" not in names and "target-configpatch" in names
        headers = {"Content-Type": "application/merge-patch+json"}
        steal = {"metadata": {"labels": {INFRA_PROVIDER_LABEL: "p2"}}}
        answer = await provider.patch(path(info, "target-configpatch"), json=steal, headers=headers)
        assert answer.status_code == 403
        assert f'labelled "{INFRA_PROVIDER_LABEL}={PROVIDER}"' in answer.json()["message"]
        mine = body(info, "unlabelled")
        del mine["metadata"]["labels"]
        assert (await provider.post(path(info), json=mine)).status_code == 403
