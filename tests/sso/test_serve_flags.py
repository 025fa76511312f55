"""``herder serve``'s sign-in flags other than the issuer and clients, each through a real server and the
real provider: ``--oidc-scopes`` is what the web UI asks for and what ``herder login`` is told to ask for;
``--oidc-groups-claim`` is the claim a person's group labels come from (and no other); ``--oidc-default-role``
is the role of a first sign-in; ``--oidc-allow-unverified-email`` names a person by an email the provider
does not vouch for; ``--oidc-cli-client-id`` is the client ``herder login`` signs in as, the web UI's
staying ``--oidc-client-id``. A plain http issuer (the test provider's, on loopback) is taken with a warning."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from herder.resources import Resource
from herder.resources.access import group_label
from tests.api.server import Server, free_port
from tests.sso.provider import CLI_CLIENT, UI_CLIENT, Provider, User, running_provider
from tests.sso.site import callback, herder, herder_login

SCOPES = "openid email profile roles"
# erin's groups are in the provider's roles claim (scope roles), beside groups herder must not read; the
# provider does not vouch for her email.
ERIN = User("erin", "erin@example.com", ["team-a"], email_verified=False, roles=["Auditors", "on call"])


@dataclass
class Site:
    provider: Provider
    server: Server
    workdir: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("sso-flags")
    port = free_port()
    flags = [
        *("--oidc-scopes", SCOPES),
        *("--oidc-groups-claim", "roles"),
        *("--oidc-default-role", "Reader"),
        "--oidc-allow-unverified-email",
    ]
    with (
        running_provider(workdir, [ERIN], [callback(port)]) as provider,
        herder(workdir, provider, port, *flags) as made,
    ):
        assert made.server is not None
        yield Site(provider, made.server, workdir)


def test_the_web_ui_asks_for_the_scopes_as_its_own_client(site: Site) -> None:
    trust = ssl.create_default_context(cadata=site.server.ca.decode())
    with httpx.Client(verify=trust, timeout=10) as browser:
        answer = browser.get(f"{site.server.url}/ui/auth/oidc/login")
    assert answer.status_code == 303, answer.text
    query = parse_qs(urlsplit(answer.headers["location"]).query)
    assert query["scope"] == [SCOPES] and query["client_id"] == [UI_CLIENT]


def test_herder_login_signs_in_by_the_flags(site: Site) -> None:
    url, said = herder_login(site.server, site.workdir / "erin", "erin")
    query = parse_qs(urlsplit(url).query)
    # The CLI adds offline_access (the provider lists it) for its refresh token.
    assert query["scope"] == [f"{SCOPES} offline_access"] and query["client_id"] == [CLI_CLIENT]
    # Named by her email all the same, with the default role.
    assert "as erin@example.com" in said and "Reader" in said, said

    async def fetch() -> Resource:
        async with site.server.client() as admin:
            return await admin.get("User", "erin@example.com")

    erin = asyncio.run(fetch())
    assert (erin.spec or {})["role"] == "Reader"
    # Her labels are her roles claim's groups, not her groups claim's.
    assert erin.metadata.labels == {group_label("Auditors"): "true", group_label("on call"): "true"}
    assert group_label("on call").startswith("groups.herder.dev/on-call-")


def test_a_plain_http_issuer_on_loopback_is_accepted_with_a_warning(site: Site) -> None:
    said = site.server.log.read_text()
    warning = (
        f"WARNING herder.oidc: --oidc-issuer {site.provider.issuer} is plain http: accepted on a loopback"
    )
    assert warning in said, said
