"""People sign in to herder's API with ID tokens of a real OpenID Provider (panva's oidc-provider): the
person's User made at their first sign-in, named by their verified email (else their sub) and labelled
with their groups; RoleRules applied at every sign-in; the six bad tokens refused with 401 and a clear
audit entry; herder's own short-lived tokens replaced, revoked, and ended by disabling the User; and a
server whose issuer is wrong says so when it starts."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from herder.resources import Resource
from herder.resources.access import group_label
from tests.api.server import HERDER, Server, free_port
from tests.sso.provider import CLI_CLIENT, OTHER_CLIENT, SECRET_CLI_CLIENT, Provider, running_provider
from tests.sso.site import (
    PEOPLE,
    PROVIDER_NAME,
    callback,
    cli_env,
    herder,
    herder_login,
    oidc_args,
    sign_in_at,
)

NONCE = "n-" + "0" * 8


@dataclass
class Site:
    provider: Provider
    server: Server


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("sso-api")
    port = free_port()
    with (
        running_provider(workdir, PEOPLE, [callback(port)]) as provider,
        herder(workdir, provider, port) as made,
    ):
        assert made.server is not None
        yield Site(provider, made.server)


def exchange(site: Site, id_token: str, **more: Any) -> tuple[int, dict[str, Any]]:
    async def post() -> tuple[int, dict[str, Any]]:
        async with site.server.http(None) as http:
            answer = await http.post("/auth/oidc/token", json={"idToken": id_token, **more})
            return answer.status_code, answer.json()

    return asyncio.run(post())


def sign_in(site: Site, login: str) -> dict[str, Any]:
    """herder's answer to a fresh ID token of ``login``."""
    code, body = exchange(site, sign_in_at(site.provider, login)["id_token"], nonce=NONCE)
    assert code == 201, body
    return body


def get(site: Site | Server, token: str, path: str) -> tuple[int, dict[str, Any]]:
    server = site.server if isinstance(site, Site) else site

    async def fetch() -> tuple[int, dict[str, Any]]:
        async with server.http(token) as http:
            answer = await http.get(path)
            return answer.status_code, answer.json()

    return asyncio.run(fetch())


def user(site: Site, name: str) -> Resource:
    async def fetch() -> Resource:
        async with site.server.client() as admin:
            return await admin.get("User", name)

    return asyncio.run(fetch())


def apply(site: Site, *documents: dict[str, Any]) -> None:
    path = site.server.data_dir.parent / f"apply-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    done = site.server.run("kubectl", "apply", "-f", str(path))
    assert done.returncode == 0, done.stderr


def audit_lines(site: Site) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (site.server.data_dir / "audit.log").read_text().splitlines()]


def test_how_to_sign_in_is_public(site: Site) -> None:
    code, body = get(site, "", "/auth/oidc/config")
    assert code == 200
    assert body == {
        "issuer": site.provider.issuer,
        "clientId": CLI_CLIENT,
        "scopes": ["openid", "email", "profile", "groups"],
        "providerName": PROVIDER_NAME,
    }


def test_a_first_sign_in_makes_the_person_named_by_their_verified_email(site: Site) -> None:
    answer = sign_in(site, "bob")
    # Emails are lowercased; the default role is None.
    assert answer["user"] == "bob@example.com" and answer["role"] == "None"
    code, whoami = get(site, answer["token"], "/apis/herder.dev/v1alpha1/access")
    assert code == 200, whoami
    bob = user(site, "bob@example.com")
    assert bob.metadata.labels == {
        "groups.herder.dev/team-a": "true",
        group_label("/Platform Team"): "true",
    }
    assert group_label("/Platform Team") == "groups.herder.dev/platform-team-e650fd31"
    status = bob.status or {}
    assert status["subject"] == "bob" and status["issuer"] == site.provider.issuer
    assert {"name": "/Platform Team", "label": group_label("/Platform Team")} in status["groups"]
    assert (bob.spec or {})["displayName"] == "Bob"
    # An email the provider does not vouch for does not name anyone: carol is her sub; dave has no email.
    assert sign_in(site, "carol")["user"] == "carol"
    assert sign_in(site, "dave")["user"] == "dave"
    # The sign-in is in the audit trail, under the person's name.
    assert any(
        e["user"] == "bob@example.com" and e["kind"] == "Token" and e["code"] == 201
        for e in audit_lines(site)
    )


def _forged(site: Site, **claims: Any) -> str:
    now = int(time.time())
    base = {"iss": site.provider.issuer, "aud": CLI_CLIENT, "sub": "alice", "iat": now, "exp": now + 300}
    return site.provider.sign({**base, **claims, "email": "alice@example.com", "email_verified": True})


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_the_six_bad_tokens_are_refused_with_401_and_an_audit_entry(site: Site) -> None:
    good = sign_in_at(site.provider, "alice")["id_token"]
    header, payload, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    now = int(time.time())
    bad = {
        # A real token of another issuer (signed with the very same key: only its issuer is wrong).
        "other issuer": (
            sign_in_at(site.provider, "alice", issuer=site.provider.issuers[1])["id_token"],
            "issued by",
        ),
        # A real token of this issuer for another client.
        "other audience": (
            sign_in_at(site.provider, "alice", client_id=OTHER_CLIENT)["id_token"],
            "issued to",
        ),
        "expired": (_forged(site, iat=now - 7200, exp=now - 3600), "expired"),
        # A real token, presented with another sign-in's nonce.
        "wrong nonce": (good, "nonce"),
        "tampered signature": (
            f"{header}.{_b64({**claims, 'email': 'mallory@example.com'})}.{signature}",
            "signature does not verify",
        ),
        "alg none": (f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{payload}.", "'none' is not accepted"),
    }
    for case, (token, reason) in bad.items():
        code, body = exchange(site, token, nonce="another-sign-ins-nonce" if case == "wrong nonce" else NONCE)
        assert code == 401, (case, body)
        assert body["message"].startswith("ID token refused: ") and reason in body["message"], (case, body)
        assert any(
            e["code"] == 401 and e["kind"] == "Token" and reason in e["message"] for e in audit_lines(site)
        ), case
    # The same token, with its own nonce, signs alice in.
    assert exchange(site, good, nonce=NONCE)[0] == 201
    # A token that names the signing key wrongly is refused for that (herder read the JWKS again first).
    unknown = site.provider.sign({**claims, "exp": now + 300}, headers={"kid": "rotated-away"})
    code, body = exchange(site, unknown, nonce=NONCE)
    assert code == 401 and "not among the provider's keys" in body["message"]


def test_a_malformed_exchange_is_refused_naming_the_field_never_with_500(site: Site) -> None:
    async def post(content: bytes) -> tuple[int, str]:
        async with site.server.http(None) as http:
            answer = await http.post(
                "/auth/oidc/token", content=content, headers={"Content-Type": "application/json"}
            )
            return answer.status_code, str(answer.json()["message"])

    for content, code, reason in (
        (b"", 400, "idToken: Field required"),
        (b"{not json", 400, ""),
        (b"[]", 400, "must be an object"),
        (b'{"idToken": 7}', 400, "idToken: Input should be a valid string"),
        (b'{"idToken": "a.b.c", "nonce": ["n"]}', 400, "nonce: Input should be a valid string"),
        (b'{"idToken": "a.b.c", "user": "admin"}', 400, "user: Extra inputs are not permitted"),
        (b'{"idToken": "not-a-jwt"}', 401, "ID token refused: not a signed JWT"),
    ):
        answer = asyncio.run(post(content))
        assert answer[0] == code and reason in answer[1], (content, answer)


def test_a_role_rule_applies_at_the_next_sign_in(site: Site) -> None:
    rule = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "RoleRule",
        "metadata": {"name": "team-a-operates"},
        "spec": {"selector": {"matchLabels": {"groups.herder.dev/team-a": "true"}}, "role": "Operator"},
    }
    apply(site, rule)
    assert sign_in(site, "alice")["role"] == "Operator"
    assert (user(site, "alice@example.com").status or {})["roleRules"] == ["team-a-operates"]
    assert sign_in(site, "carol")["role"] == "None"  # team-b: not selected
    rule["spec"]["role"] = "Reader"
    apply(site, rule)
    reader = sign_in(site, "alice")
    assert reader["role"] == "Reader"
    # herder's token carries the role of the User as it is now.
    assert get(site, reader["token"], "/apis/herder.dev/v1alpha1/namespaces/default/configpatches")[0] == 200
    assert site.server.run("kubectl", "delete", "rolerule", "team-a-operates").returncode == 0
    # No rule gives alice a role any more: back to the default, not the rule's.
    assert sign_in(site, "alice")["role"] == "None"
    # A role an Admin gave by hand, with no rule, stays.
    site.server.run("kubectl", "patch", "user", "dave", "--type=merge", "-p", '{"spec":{"role":"Reader"}}')
    assert sign_in(site, "dave")["role"] == "Reader"


def test_a_refresh_replaces_the_token_and_sign_out_revokes_it(site: Site) -> None:
    first = sign_in(site, "alice")
    code, second = exchange(site, sign_in_at(site.provider, "alice")["id_token"], replaces=first["token"])
    assert code == 201
    assert get(site, first["token"], "/apis/herder.dev/v1alpha1/access")[0] == 401
    assert get(site, second["token"], "/apis/herder.dev/v1alpha1/access")[0] == 200

    async def revoke(token: str) -> int:
        async with site.server.http(token) as http:
            return (await http.post("/auth/revoke")).status_code

    assert asyncio.run(revoke(second["token"])) == 200
    assert get(site, second["token"], "/apis/herder.dev/v1alpha1/access")[0] == 401
    assert asyncio.run(revoke(second["token"])) == 401


def test_disabling_the_user_ends_their_tokens_at_once_and_refuses_their_sign_in(site: Site) -> None:
    token = sign_in(site, "carol")["token"]
    assert get(site, token, "/apis/herder.dev/v1alpha1/access")[0] == 200
    patched = site.server.run(
        "kubectl", "patch", "user", "carol", "--type=merge", "-p", '{"spec":{"disabled":true}}'
    )
    assert patched.returncode == 0, patched.stderr
    # Refused at once: as disabled, or as revoked once the DisabledUser controller deleted the token.
    code, body = get(site, token, "/apis/herder.dev/v1alpha1/access")
    assert code == 401 and ("disabled" in body["message"] or "revoked" in body["message"]), body
    code, body = exchange(site, sign_in_at(site.provider, "carol")["id_token"], nonce=NONCE)
    assert code == 403 and "carol is disabled" in body["message"]
    # Its tokens go, so that enabling carol again brings none of them back.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        listed = site.server.run("kubectl", "get", "tokens", "-o", "json").stdout
        if not [t for t in json.loads(listed)["items"] if t["spec"]["subject"] == "carol"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("carol's tokens were not deleted within 5 s")
    site.server.run("kubectl", "patch", "user", "carol", "--type=merge", "-p", '{"spec":{"disabled":false}}')
    assert get(site, token, "/apis/herder.dev/v1alpha1/access")[0] == 401


def test_deleting_the_user_ends_their_tokens_at_once_and_a_new_sign_in_starts_afresh(site: Site) -> None:
    old = sign_in(site, "bob")
    uid = user(site, "bob@example.com").metadata.uid
    deleted = site.server.run("kubectl", "delete", "user", "bob@example.com")
    assert deleted.returncode == 0, deleted.stderr
    assert get(site, old["token"], "/apis/herder.dev/v1alpha1/access")[0] == 401
    # Signing in again makes the User again, whose new uid the old token was not issued to.
    new = sign_in(site, "bob")
    assert user(site, "bob@example.com").metadata.uid != uid
    assert get(site, new["token"], "/apis/herder.dev/v1alpha1/access")[0] == 200
    assert get(site, old["token"], "/apis/herder.dev/v1alpha1/access")[0] == 401


def _serve(tmp_path: Path, provider: Provider, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            HERDER,
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            f"127.0.0.1:{free_port()}",
            # Its own: the default (the next port up) may be another test's.
            "--talos-listen",
            f"127.0.0.1:{free_port()}",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_wrong_issuer_is_an_error_at_start_up(site: Site, tmp_path: Path) -> None:
    args = oidc_args(site.provider, tmp_path)
    at = args.index("--oidc-issuer") + 1
    for issuer, message in (
        (site.provider.issuer + "/", "names issuer"),
        ("http://idp.example.com", "must be an https:// URL"),
    ):
        started = _serve(tmp_path, site.provider, *args[:at], issuer, *args[at + 1 :])
        assert started.returncode == 1, started.stderr
        assert f"--oidc-issuer {issuer}" in started.stderr and message in started.stderr, started.stderr
        assert "Traceback" not in started.stderr
    alone = _serve(tmp_path, site.provider, "--oidc-client-id", "x")
    assert alone.returncode == 1 and "only meaningful with --oidc-issuer" in alone.stderr
    # A secret handed to every herder login is never the web UI's client's.
    published = _serve(
        tmp_path, site.provider, *args, "--oidc-cli-client-id", "herder-ui", "--oidc-cli-client-secret", "s"
    )
    assert published.returncode == 1 and "never the web UI's" in published.stderr, published.stderr


def test_herder_login_sends_the_secret_a_provider_wants_of_the_native_client(
    site: Site, tmp_path: Path
) -> None:
    """As Google's desktop clients want: herder hands the CLI's client secret out with its id, and herder
    login, the exec plugin's refresh and herder logout send it."""
    extra = ["--oidc-cli-client-id", SECRET_CLI_CLIENT, "--oidc-cli-client-secret", site.provider.cli_secret]
    with herder(tmp_path, site.provider, free_port(), *extra) as made:
        assert made.server is not None
        server = made.server
        url, said = herder_login(server, tmp_path / "home", "alice")
        assert re.search(f"client_id={SECRET_CLI_CLIENT}&", url), url
        assert "as alice@example.com" in said, said
        env = cli_env(tmp_path / "home")

        credentials = tmp_path / "home" / "herder" / "credentials"
        doc = json.loads(credentials.read_text())
        doc["servers"][server.url]["expiresAt"] = "2020-01-01T00:00:00Z"
        credentials.write_text(json.dumps(doc))
        refreshed = subprocess.run(
            [HERDER, "auth", "exec-credential", "--server", server.url],
            capture_output=True,
            text=True,
            env=env,
        )
        assert refreshed.returncode == 0, refreshed.stderr
        credential = json.loads(refreshed.stdout)
        assert (credential["apiVersion"], credential["kind"]) == (
            "client.authentication.k8s.io/v1",
            "ExecCredential",
        )
        token, expires = credential["status"]["token"], credential["status"]["expirationTimestamp"]
        assert token != doc["servers"][server.url]["token"]
        # kubectl caches the token until then: the new token's expiry, kept for the next call too.
        assert datetime.fromisoformat(expires.replace("Z", "+00:00")) > datetime.now(UTC)
        assert json.loads(credentials.read_text())["servers"][server.url]["expiresAt"] == expires
        assert get(server, token, "/apis/herder.dev/v1alpha1/access")[0] == 200

        refresh_token = json.loads(credentials.read_text())["servers"][server.url]["refreshToken"]
        out = subprocess.run(
            [HERDER, "logout", "--server", server.url], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0 and "Signed out" in out.stdout, out.stderr
        assert get(server, token, "/apis/herder.dev/v1alpha1/access")[0] == 401
        # The provider revoked its refresh token too (the revocation authenticated with the secret).
        spent = httpx.post(
            site.provider.discovery()["token_endpoint"],
            data={
                "grant_type": "refresh_token",
                "refresh_token": refresh_token,
                "client_id": SECRET_CLI_CLIENT,
                "client_secret": site.provider.cli_secret,
            },
        )
        assert spent.status_code == 400 and spent.json()["error"] == "invalid_grant", spent.text
