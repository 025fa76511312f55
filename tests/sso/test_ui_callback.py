"""The web UI's sign-in callback refuses what is not the answer to its own sign-in under way, each with a
clear page (never 500), no session, and an audit entry saying why: another state, no code, the provider's
own error, no sign-in under way in this browser, and a real answer replayed after it signed the person in.

A browser is driven over HTTP (cookies kept as Chromium keeps them) through herder's UI and the real
provider's own login and consent pages.
"""

from __future__ import annotations

import html
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from herder.web.sessions import SESSION_COOKIE, SIGN_IN_COOKIE
from tests.api.server import Server, free_port
from tests.sso.provider import Provider, running_provider
from tests.sso.site import PEOPLE, callback, herder, through_the_provider


@dataclass
class Site:
    provider: Provider
    server: Server

    def browser(self) -> httpx.Client:
        """A browser of its own: no cookie of another test's."""
        trust = ssl.create_default_context(cadata=self.server.ca.decode())
        return httpx.Client(verify=trust, follow_redirects=False, timeout=10)

    def audit(self) -> list[dict[str, Any]]:
        lines = (self.server.data_dir / "audit.log").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("sso-callback")
    port = free_port()
    with (
        running_provider(workdir, PEOPLE, [callback(port)]) as provider,
        herder(workdir, provider, port) as made,
    ):
        assert made.server is not None
        yield Site(provider, made.server)


def begin(site: Site, browser: httpx.Client) -> str:
    """The provider's authorization URL for a sign-in begun at herder's "Sign in with" button."""
    answer = browser.get(f"{site.server.url}/ui/auth/oidc/login")
    assert answer.status_code == 303, answer.text
    assert SIGN_IN_COOKIE in browser.cookies
    return str(answer.headers["location"])


def state_of(authorization_url: str) -> str:
    return parse_qs(urlsplit(authorization_url).query)["state"][0]


def back(site: Site, browser: httpx.Client, **query: str) -> httpx.Response:
    """The provider sending the browser back to herder's callback with ``query``."""
    return browser.get(f"{site.server.url}/ui/auth/oidc/callback?{urlencode(query)}")


def assert_refused(site: Site, answer: httpx.Response, code: int, reason: str) -> None:
    assert answer.status_code == code, (reason, answer.status_code, answer.text[:300])
    assert reason in html.unescape(answer.text), reason
    assert SESSION_COOKIE not in answer.cookies, reason
    assert any(
        e["code"] == code and e["kind"] == "Token" and reason in e["message"] and e["user"] == ""
        for e in site.audit()
    ), reason


def test_an_answer_that_is_not_this_sign_ins_is_refused_with_no_session(site: Site) -> None:
    with site.browser() as browser:
        begin(site, browser)
        answer = back(site, browser, state="not-the-state", code="a-code")
        assert_refused(site, answer, 400, "the answer's state is not this sign-in's")

        state = state_of(begin(site, browser))
        assert_refused(site, back(site, browser, state=state), 400, "the identity provider sent no code")

        state = state_of(begin(site, browser))
        denied = back(site, browser, state=state, error="access_denied", error_description="no consent")
        assert_refused(site, denied, 401, "the identity provider did not sign you in: no consent")

    # A browser with no sign-in under way (another browser's answer, or one older than ten minutes).
    with site.browser() as stranger:
        answer = back(site, stranger, state="any", code="a-code")
        assert_refused(site, answer, 400, "this sign-in expired or began in another browser")


def test_a_real_answer_signs_in_once_and_is_refused_when_replayed(site: Site) -> None:
    with site.browser() as browser:
        authorization = begin(site, browser)
        sign_in_cookie = browser.cookies[SIGN_IN_COOKIE]
        where = through_the_provider(browser, authorization, "alice")
        assert urlsplit(where).path == "/ui/auth/oidc/callback"
        signed_in = browser.get(where)
        assert signed_in.status_code == 200 and "Welcome, alice@example.com" in signed_in.text
        assert SESSION_COOKIE in signed_in.cookies
        # The same answer again, with the cookie of the sign-in it answered (as one who captured both
        # would send them): that sign-in was taken.
        with site.browser() as replaying:
            replayed = replaying.get(where, headers={"Cookie": f"{SIGN_IN_COOKIE}={sign_in_cookie}"})
        assert_refused(site, replayed, 400, "this sign-in expired or began in another browser")
        # ... and within a sign-in of its own, it is another sign-in's answer.
        begin(site, browser)
        assert_refused(site, browser.get(where), 400, "the answer's state is not this sign-in's")
