"""The web UI in Chromium against a real ``herder serve``, the emulator and its infra provider: every role
signs in; a machine class made with the form the provider's schema generates, and a cluster made from it
that becomes Ready on a page never reloaded; a Talos upgrade started from the cluster page and its rollout;
a provisioning error with its attempt count; a Reader without action buttons, whose direct POST is
refused; a read-only machine saying why nothing can be done; a hidden object absent from the page source.

The tests of this module run in order on one site, each starting where the previous one left off.
"""

from __future__ import annotations

import asyncio
import json
import re
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.api.conftest import make_account
from tests.clusters.site import Site
from tests.provisioning.provider_site import emu, provisioning_site, request_set
from tests.web.browser import chromium, screenshot, sign_in, sign_out

PROVIDER = "emu"
ROLES = ("Reader", "Operator", "Admin", "Support", "InfraProvider")
READY_TIMEOUT = 120_000


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with provisioning_site(tmp_path_factory.mktemp("web"), provider_id=PROVIDER) as (s, _):
        yield s


@pytest.fixture(scope="module")
def tokens(site: Site) -> dict[str, str]:
    async def make() -> dict[str, str]:
        return {
            role: await make_account(
                site.server, f"web-{role.lower()}", role, PROVIDER if role == "InfraProvider" else None
            )
            for role in ROLES
        }

    return asyncio.run(make())


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.new_page()
    yield page
    page.close()


def test_every_role_signs_in_and_sees_its_navigation(site: Site, tokens: dict[str, str], page: Page) -> None:
    for role in ROLES:
        sign_in(page, site.server.url, tokens[role])
        header = page.locator("header.top")
        expect(header).to_contain_text(f"web-{role.lower()}")
        expect(header.locator(".role")).to_have_text(role)
        nav = page.get_by_role("navigation", name="Main")
        expect(nav.get_by_role("link", name="Audit log")).to_have_count(
            1 if role in ("Admin", "Support") else 0
        )
        expect(nav.get_by_role("link", name="Control planes")).to_have_count(1 if role == "Support" else 0)
        sign_out(page)
    # A bad token: refused on the sign-in page, which says so.
    page.goto(f"{site.server.url}/ui/login")
    page.get_by_label("Token").fill("hdr_nobody")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")


def test_a_cluster_from_a_machine_class_becomes_ready_without_a_reload(
    site: Site, tokens: dict[str, str], page: Page
) -> None:
    base = site.server.url
    sign_in(page, base, tokens["Operator"])
    page.goto(f"{base}/ui/machineclasses/new")
    page.get_by_label("Machines from").select_option(PROVIDER)
    page.get_by_role("button", name="Choose").click()
    # The fields come from the provider's schema of its request data.
    cpus = page.get_by_label("Cpus")
    expect(cpus).to_have_attribute("type", "number")
    cpus.fill("2")
    page.get_by_label("Name", exact=True).fill("emulated")
    screenshot(page, "machine-class-new")
    page.get_by_role("button", name="Create machine class").click()
    expect(page.locator(".flash")).to_contain_text("machine class emulated created")

    page.goto(f"{base}/ui/clusters/new")
    page.get_by_label("Name", exact=True).fill("web")
    page.locator("#controlPlaneClass").select_option("emulated")
    page.get_by_role("button", name="Create cluster").click()
    page.wait_for_url(re.compile(r".*/ui/clusters/web$"))
    page.evaluate("window.__notReloaded = true")
    expect(page.locator(".heading .badge")).to_have_text("Ready", timeout=READY_TIMEOUT)
    assert page.evaluate("window.__notReloaded") is True
    expect(page.locator("article.set tbody th")).to_have_count(1)
    screenshot(page, "cluster")
    page.goto(f"{base}/ui/clusters")
    expect(page.locator("tr[data-name=web]")).to_contain_text("Ready")
    screenshot(page, "clusters")


def test_a_talos_upgrade_from_the_cluster_page_shows_its_rollout(
    site: Site, tokens: dict[str, str], page: Page
) -> None:
    sign_in(page, site.server.url, tokens["Operator"])
    page.goto(f"{site.server.url}/ui/clusters/web")
    choice = page.locator("#upgrade-talos")
    offered = [o.strip() for o in choice.locator("option").all_inner_texts()]
    # Only what the version policy allows: newer patches and minors, never a downgrade.
    assert offered and "v1.13.10" in offered and "v1.13.8" not in offered, offered
    choice.select_option("v1.13.10")
    page.evaluate("window.__notReloaded = true")
    page.get_by_role("button", name="Upgrade Talos").click()
    expect(page.locator(".flash")).to_contain_text("Talos upgrade of web to v1.13.10 started")
    page.evaluate("window.__notReloaded = true")
    rollout = page.locator(".rollout", has_text="Talos → v1.13.10")
    expect(rollout.locator("progress")).to_have_count(1, timeout=30_000)
    expect(rollout).to_contain_text("Done", timeout=READY_TIMEOUT)
    expect(rollout.locator(".count")).to_have_text("1/1")
    expect(page.locator("article.set tbody tr").first).to_contain_text("v1.13.10")
    assert page.evaluate("window.__notReloaded") is True


def test_a_provisioning_error_shows_with_its_attempts(site: Site, tokens: dict[str, str], page: Page) -> None:
    sign_in(page, site.server.url, tokens["Admin"])
    page.goto(f"{site.server.url}/ui/providers")
    expect(page.locator("tbody tr", has_text=PROVIDER).first).to_contain_text("Ready")
    emu(site, "cloud-fault", "create", "--times", "3")
    site.apply([request_set("flaky", PROVIDER, 1)])
    row = page.locator("#requests tbody tr", has_text="flaky")
    expect(row).to_contain_text("injected fault", timeout=30_000)
    expect(row.locator(".attempts")).to_have_text(re.compile(r"^[2-9]$"), timeout=30_000)
    screenshot(page, "providers")
    expect(row).to_contain_text("Provisioned", timeout=60_000)
    expect(row.locator(".attempts")).to_have_text("0")


def _post_status(page: Page, path: str, fields: dict[str, str]) -> int:
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    answer = page.request.post(path, form={**fields, "csrf": csrf}, max_redirects=0)
    return answer.status


def test_a_reader_sees_no_action_buttons_and_a_direct_post_is_refused(
    site: Site, tokens: dict[str, str], page: Page
) -> None:
    base = site.server.url
    sign_in(page, base, tokens["Reader"])
    expect(page.get_by_role("link", name="Create cluster")).to_have_count(0)
    page.goto(f"{base}/ui/clusters/web")
    expect(page.locator(".heading .badge")).to_have_text("Ready")
    # What is left is what a Reader may do: read its talosconfig (Talos's reader role), its support bundle
    # and the template.
    buttons = sorted(page.locator("main button").all_inner_texts())
    assert buttons == ["Download support bundle", "Download talosconfig", "Export template"], buttons
    # The bundle asks the cluster's machines and Kubernetes API: on a busy machine it takes a while.
    with page.expect_download(timeout=90_000) as downloading:
        page.get_by_role("button", name="Download support bundle").click()
    download = downloading.value
    assert download.suggested_filename == "web-support.zip"
    with zipfile.ZipFile(download.path()) as bundle:
        readme = bundle.read("README.txt").decode()
    assert readme.startswith("Support bundle of cluster default/web") and "role Reader" in readme
    expect(page.get_by_role("link", name="Delete cluster…")).to_have_count(0)
    page.goto(f"{base}/ui/machines")
    expect(page.locator("main button")).to_have_count(0)
    page.goto(f"{base}/ui/clusters/web")
    assert _post_status(page, f"{base}/ui/clusters/web/delete", {"confirm": "web"}) == 403
    assert (
        _post_status(page, f"{base}/ui/clusters/web/scale", {"machineSet": "web-control-planes", "size": "3"})
        == 403
    )
    assert site.get("cluster", "web")["metadata"].get("deletionTimestamp") is None
    # On a phone the page fits the screen's width: wide tables scroll inside their own box.
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/ui/clusters", "/ui/machines", "/ui/clusters/web"):
        page.goto(f"{base}{path}")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
    screenshot(page, "cluster-phone")


def test_a_machines_page_shows_its_logs_and_follows_them_live(
    site: Site, tokens: dict[str, str], page: Page
) -> None:
    base = site.server.url
    sign_in(page, base, tokens["Reader"])
    page.goto(f"{base}/ui/clusters/web")
    link = page.locator("article.set tbody th a").first
    uuid = link.inner_text()
    link.click()
    page.wait_for_url(re.compile(rf".*/ui/machines/{uuid}$"))
    log = page.locator("#machine-log")
    expect(log).to_contain_text("kubelet: ")  # what herder kept of every service
    page.evaluate("window.__notReloaded = true")
    emu(site, "log", uuid, "kubelet", "a line printed while the page is open")
    expect(log).to_contain_text("a line printed while the page is open", timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "machine")
    page.locator("#source").select_option("dmesg")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#machine-log")).to_contain_text("Linux version")
    expect(page.locator("#machine-log")).not_to_contain_text("kubelet: ")
    # A page a stream cannot be asked for with a made-up log name.
    answer = page.request.get(f"{base}/ui/machines/{uuid}/log?source=../etc")
    assert answer.status == 400 and "source" in answer.text()


def test_a_read_only_machine_says_why_nothing_can_be_done(
    site: Site, tokens: dict[str, str], page: Page
) -> None:
    machine = site.get("machines")["items"][0]["metadata"]["name"]
    support = site.server.kubeconfig_for(tokens["Support"], "web-support")
    marked = site.server.run(
        "kubectl", "annotate", "machine", machine, "herder.dev/read-only=true", kubeconfig=support
    )
    assert marked.returncode == 0, marked.stderr
    sign_in(page, site.server.url, tokens["Admin"])
    page.goto(f"{site.server.url}/ui/machines")
    row = page.locator(f"tr[data-name='{machine}']")
    expect(row).to_contain_text("Read-only: managed by the platform, nothing can be done to it")
    expect(row.locator("button")).to_have_count(0)
    screenshot(page, "machines")


def test_a_hidden_object_never_appears_in_the_page_source(
    site: Site, tokens: dict[str, str], page: Page
) -> None:
    hidden: dict[str, Any] = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": "herder-platform-pool", "labels": {"herder.dev/hidden": "true"}},
        "spec": {"selector": {}},
    }
    support = site.server.kubeconfig_for(tokens["Support"], "web-support")
    made = site.server.run("kubectl", "apply", "-f", "-", kubeconfig=support, stdin=json.dumps(hidden))
    assert made.returncode == 0, made.stderr
    sign_in(page, site.server.url, tokens["Admin"])
    for path in ("/ui/machineclasses", "/ui/clusters/new", "/ui/audit"):
        page.goto(f"{site.server.url}{path}")
        assert "herder-platform-pool" not in page.content(), path
    screenshot(page, "audit")
    sign_out(page)
    sign_in(page, site.server.url, tokens["Support"])
    page.goto(f"{site.server.url}/ui/machineclasses")
    expect(page.locator("main")).to_contain_text("herder-platform-pool")
    page.goto(f"{site.server.url}/ui/controlplanes")
    expect(page.locator("main tbody tr", has_text="web")).to_contain_text("Ready")
    screenshot(page, "control-planes")
