"""The web UI's "Sign in with <provider>" in Chromium, through the real provider's own login and consent
pages: a person sees only the clusters their groups' rules grant; a RoleRule change applies at their next
sign-in; a restart of the server keeps the browser signed in (sessions are in the store); disabling the
User ends their open page within 5 s; signing out ends the session and signs out at the provider too.

The tests of this module run in order on one server, each starting where the previous one left off.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from playwright.sync_api import BrowserContext, Page, expect

from tests.api.server import free_port
from tests.sso.provider import Provider, running_provider
from tests.sso.site import PEOPLE, PROVIDER_NAME, Herder, callback, herder, sign_in_in_browser
from tests.web.browser import chromium, screenshot

POLICY = {
    "apiVersion": "herder.dev/v1alpha1",
    "kind": "AccessPolicy",
    "metadata": {"name": "access-policy"},
    "spec": {
        "usergroups": {"team-a": {"users": [{"labelselectors": ["groups.herder.dev/team-a=true"]}]}},
        "clustergroups": {"alphas": {"clusters": [{"match": "alpha*"}]}},
        "rules": [{"users": ["group/team-a"], "clusters": ["group/alphas"], "role": "Operator"}],
    },
}


def cluster(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"},
    }


def role_rule(role: str) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "RoleRule",
        "metadata": {"name": "team-a"},
        "spec": {"selector": {"matchLabels": {"groups.herder.dev/team-a": "true"}}, "role": role},
    }


@dataclass
class Site:
    provider: Provider
    herder: Herder

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.herder.port}"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        assert self.herder.server is not None
        done = self.herder.server.run("kubectl", *args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def apply(self, *documents: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("sso-ui")
    port = free_port()
    with (
        running_provider(workdir, PEOPLE, [callback(port)]) as provider,
        herder(workdir, provider, port) as made,
    ):
        made_site = Site(provider, made)
        made_site.apply(cluster("alpha"), cluster("alpha-2"), cluster("beta"), POLICY)
        yield made_site


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


@pytest.fixture(scope="module")
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.new_page()
    yield page
    page.close()


def sign_in(page: Page, site: Site, login: str) -> None:
    page.goto(f"{site.url}/ui/login")
    page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
    # The provider's own pages, on its own origin.
    page.wait_for_url(re.compile(re.escape(site.provider.issuer) + "/interaction/"))
    sign_in_in_browser(page, login)
    page.wait_for_url(re.compile(r".*/ui/clusters$"))


def sign_out(page: Page, site: Site) -> None:
    """Out of herder and, as herder sends the browser there, out of the provider too."""
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(re.escape(site.provider.issuer) + "/session/end"))
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(re.compile(r".*/ui/login$"))


def listed(page: Page) -> list[str]:
    return sorted(page.locator("tr[data-name]").evaluate_all("rows => rows.map(r => r.dataset.name)"))


def test_a_person_signs_in_with_the_provider_and_sees_only_the_clusters_their_groups_grant(
    site: Site, page: Page
) -> None:
    page.goto(f"{site.url}/ui/login")
    expect(page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}")).to_be_visible()
    screenshot(page, "sign-in")
    sign_in(page, site, "alice")
    header = page.locator("header.top")
    expect(header).to_contain_text("alice@example.com")
    expect(header.locator(".role")).to_have_text("None")
    assert listed(page) == ["alpha", "alpha-2"]
    page.goto(f"{site.url}/ui/clusters/beta")
    expect(page.locator("main")).to_contain_text("not found")
    # The session's cookie holds no token; the session is in the store.
    cookies = {c["name"]: c for c in page.context.cookies(f"{site.url}/ui/clusters")}
    session = cookies["herder_session"]
    assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Strict"
    assert not session["value"].startswith("hdr_")
    # A person outside team a sees no cluster at all.
    sign_out(page, site)
    sign_in(page, site, "carol")
    assert listed(page) == []
    sign_out(page, site)


def test_a_role_rule_change_applies_at_the_next_sign_in(site: Site, page: Page) -> None:
    site.apply(role_rule("Reader"))
    sign_in(page, site, "alice")
    expect(page.locator("header.top .role")).to_have_text("Reader")
    assert listed(page) == ["alpha", "alpha-2", "beta"]  # a Reader reads every cluster
    site.apply(role_rule("Admin"))
    # Not before the next sign-in...
    page.reload()
    expect(page.locator("header.top .role")).to_have_text("Reader")
    sign_out(page, site)
    sign_in(page, site, "alice")
    expect(page.locator("header.top .role")).to_have_text("Admin")
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log")).to_be_visible()
    site.kubectl("delete", "rolerule", "team-a")


def test_a_restart_of_the_server_keeps_the_browser_signed_in(site: Site, page: Page) -> None:
    page.goto(f"{site.url}/ui/clusters")
    expect(page.locator("header.top")).to_contain_text("alice@example.com")
    site.herder.restart()
    page.goto(f"{site.url}/ui/clusters")
    expect(page).to_have_url(re.compile(r".*/ui/clusters$"))
    expect(page.locator("header.top")).to_contain_text("alice@example.com")


def test_disabling_the_user_ends_their_open_page_within_5_seconds(site: Site, page: Page) -> None:
    page.goto(f"{site.url}/ui/clusters")
    expect(page.locator("header.top")).to_contain_text("alice@example.com")
    page.wait_for_timeout(500)  # the page's live stream is open
    start = time.monotonic()
    site.kubectl("patch", "user", "alice@example.com", "--type=merge", "-p", '{"spec":{"disabled":true}}')
    expect(page).to_have_url(re.compile(r".*/ui/login$"), timeout=5_000)
    assert time.monotonic() - start < 5
    # And the provider's sign-in (alice is still signed in there) is refused, saying why.
    page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
    expect(page.get_by_role("alert")).to_contain_text("alice@example.com is disabled")
    site.kubectl("patch", "user", "alice@example.com", "--type=merge", "-p", '{"spec":{"disabled":false}}')
    page.goto(f"{site.provider.issuer}/session/end")
    page.get_by_role("button", name="Yes, sign me out").click()


def test_signing_out_ends_the_session_and_signs_out_at_the_provider(site: Site, page: Page) -> None:
    sign_in(page, site, "bob")
    before = {c["name"]: c["value"] for c in page.context.cookies(f"{site.url}/ui/clusters")}[
        "herder_session"
    ]
    # The provider asks whether to sign out of it too, and sends the browser back to herder's sign-in.
    sign_out(page, site)
    # The session is gone from the store: its old cookie opens nothing.
    page.context.add_cookies([{"name": "herder_session", "value": before, "url": f"{site.url}/ui"}])
    page.goto(f"{site.url}/ui/clusters")
    expect(page).to_have_url(re.compile(r".*/ui/login$"))
