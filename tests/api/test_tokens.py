"""Bearer tokens: shown once, stored as a sealed digest only, never listed; expiry and revocation give 401."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from herder.client import Client, Forbidden, Invalid, Unauthorized
from herder.client.kubeconfig import Credentials
from herder.resources import Resource
from herder.resources.access import SERVICE_ACCOUNT, USER
from tests.api.conftest import account, make_account
from tests.api.server import Server


def _secret(token: str) -> str:
    return token.rpartition("_")[2]


def _raw_store(server: Server) -> bytes:
    return b"".join(p.read_bytes() for p in server.data_dir.glob("herder.db*"))


async def test_token_is_stored_as_a_sealed_digest_and_never_served(server: Server) -> None:
    token = await make_account(server, "stored", "Reader")
    secret = _secret(token)
    raw = _raw_store(server)
    assert secret.encode() not in raw
    assert hashlib.sha256(secret.encode()).hexdigest().encode() not in raw  # the digest is sealed too
    audit_log = (server.data_dir / "audit.log").read_bytes()
    assert secret.encode() not in audit_log

    async with server.http(token) as http:
        assert (await http.get("/api/v1/namespaces")).status_code == 200
    async with server.client() as admin:
        listed = await admin.list("tokens")
        assert secret not in str([t.to_dict() for t in listed.items])
        with pytest.raises(Forbidden):
            await admin.list("tokendigests")
        with pytest.raises(Forbidden):
            await admin.get("tokendigests", listed.items[0].name)


async def test_each_issue_gives_a_new_token_and_none_is_shown_again(server: Server) -> None:
    async with server.client() as admin:
        await admin.create(account("twice", "Reader"))
        first = await admin.issue_token(SERVICE_ACCOUNT, "twice")
        second = await admin.issue_token(SERVICE_ACCOUNT, "twice")
        assert first.token != second.token and first.name != second.name
        record = (await admin.get("tokens", first.name)).to_dict()
        assert _secret(first.token) not in str(record)


async def test_expired_token_gets_401(server: Server) -> None:
    async with server.client() as admin:
        await admin.create(account("short-lived", "Reader"))
        issued = await admin.issue_token(SERVICE_ACCOUNT, "short-lived", expires_in_seconds=2)
    async with server.http(issued.token) as http:
        assert (await http.get("/api/v1/namespaces")).status_code == 200
        await asyncio.sleep(3.1)  # expiry is in whole seconds, rounded up
        expired = await http.get("/api/v1/namespaces")
    assert expired.status_code == 401
    assert expired.json()["message"] == "bearer token expired"


async def test_revoked_token_gets_401(server: Server) -> None:
    token = await make_account(server, "revoked", "Reader")
    async with server.client() as admin:
        name = token.split("_")[1]
        await admin.delete("tokens", name)
    async with server.http(token) as http:
        answer = await http.get("/api/v1/namespaces")
    assert answer.status_code == 401
    assert token not in answer.text and _secret(token) not in answer.text


async def test_deleted_account_tokens_stay_dead_when_the_name_comes_back(server: Server) -> None:
    token = await make_account(server, "recycled", "Admin")
    async with server.client() as admin:
        await admin.delete(SERVICE_ACCOUNT, "recycled")
        await admin.create(account("recycled", "Admin"))
    async with server.http(token) as http:
        assert (await http.get("/api/v1/namespaces")).status_code == 401


@pytest.mark.parametrize(
    "header",
    [
        "",
        "Basic YWRtaW46YWRtaW4=",
        "Bearer",
        "Bearer not-a-token",
        "Bearer hdr_x_y",
        "Bearer hdr__" + "0" * 64,
    ],
)
async def test_malformed_credentials_get_401(server: Server, header: str) -> None:
    async with server.http(None) as http:
        answer = await http.get("/apis/herder.dev/v1alpha1/configpatches", headers={"Authorization": header})
    assert answer.status_code == 401
    assert answer.json()["kind"] == "Status"


async def test_client_raises_unauthorized(server: Server) -> None:
    creds = Credentials(server.url, "hdr_admin-00000000_" + "1" * 64, server.ca)
    async with Client(creds) as stranger:
        with pytest.raises(Unauthorized, match="unknown or revoked"):
            await stranger.list("namespaces")


async def test_users_authenticate_with_tokens_too(server: Server, tokens: dict[str, str]) -> None:
    """A person (named by their email, as Omni names people) authenticates with a token an Admin issued,
    is named by their email in the audit trail, writes as ``user:NAME``, and is refused once disabled."""
    user = Resource.model_validate(
        {
            "apiVersion": USER.api_version,
            "kind": USER.kind,
            "metadata": {"name": "alice@example.com"},
            "spec": {"role": "Operator", "email": "alice@example.com", "displayName": "Alice"},
        }
    )
    async with server.client() as admin:
        await admin.create(user)
        issued = await admin.issue_token(USER, "alice@example.com")
    async with server.http(issued.token) as alice:
        body = {"apiVersion": "herder.dev/v1alpha1", "kind": "ConfigPatch", "metadata": {"name": "by-alice"}}
        answer = await alice.post(
            "/apis/herder.dev/v1alpha1/namespaces/default/configpatches",
            json={**body, "spec": {"data": "a: 1"}},
        )
        assert answer.status_code == 201, answer.text
        assert (await alice.get("/apis/herder.dev/v1alpha1/users")).status_code == 403
    lines = (server.data_dir / "audit.log").read_text().splitlines()
    assert any('"user":"alice@example.com"' in line and '"name":"by-alice"' in line for line in lines)
    async with server.client() as admin:
        stored = await admin.get(USER, "alice@example.com")
        assert stored.spec is not None
        stored.spec["disabled"] = True
        await admin.update(stored)
    async with server.http(issued.token) as alice:
        answer = await alice.get("/apis/herder.dev/v1alpha1/namespaces/default/configpatches")
        assert answer.status_code == 401
        # Refused as disabled, or as revoked once the DisabledUser controller has deleted the token.
        message = answer.json()["message"]
        assert "disabled" in message or "revoked" in message, message


async def test_only_admins_issue_tokens_and_infra_providers_need_an_id(
    server: Server, tokens: dict[str, str]
) -> None:
    async with server.http(tokens["Operator"]) as operator:
        answer = await operator.post("/apis/herder.dev/v1alpha1/serviceaccounts/admin/token", json={})
        assert answer.status_code == 403
        assert 'cannot create resource "serviceaccounts/token"' in answer.json()["message"]
    async with server.http(tokens["Admin"]) as admin:
        answer = await admin.post("/apis/herder.dev/v1alpha1/serviceaccounts/nobody-here/token", json={})
        assert answer.status_code == 404
        answer = await admin.post(
            "/apis/herder.dev/v1alpha1/serviceaccounts/admin/token", json={"spec": {"expirationSeconds": 0}}
        )
        assert answer.status_code == 422 and "spec.expirationSeconds" in answer.text
    async with server.client() as admin_client:
        with pytest.raises(Invalid, match="providerId is required for role InfraProvider"):
            await admin_client.create(account("provider-without-id", "InfraProvider"))
