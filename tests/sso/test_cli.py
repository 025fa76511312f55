"""``herder login`` against a real OpenID Provider, end to end on the emulator with the real kubectl:
``--device`` completed by approving the code in Chromium on the provider's own pages, and the browser
sign-in with its loopback redirect; the kubeconfigs it writes (herder's API, and through ``herder cluster
kubeconfig`` the cluster's Kubernetes API behind herder's proxy) hold no token, only the exec plugin
``herder auth exec-credential``; an expired herder token is refreshed through the provider; disabling the
User ends an open ``kubectl --watch`` through the proxy within 5 s and every later request; ``herder
logout`` revokes.

The tests of this module run in order on one site, each starting where the previous one left off.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import yaml
from playwright.sync_api import Page

from tests.api.server import HERDER, KUBECTL, free_port
from tests.clusters.site import Site, cluster, machine_set, running_site
from tests.sso.provider import Provider, running_provider
from tests.sso.site import PEOPLE, PROVIDER_NAME, callback, cli_env, oidc_args, sign_in_in_browser
from tests.web.browser import chromium

POLICY = {
    "apiVersion": "herder.dev/v1alpha1",
    "kind": "AccessPolicy",
    "metadata": {"name": "access-policy"},
    "spec": {
        "usergroups": {"team-a": {"users": [{"labelselectors": ["groups.herder.dev/team-a=true"]}]}},
        "rules": [
            {
                "users": ["group/team-a"],
                "clusters": ["alpha"],
                "role": "Operator",
                "kubernetes": {"impersonate": {"groups": ["system:masters"]}},
            }
        ],
    },
}


@dataclass
class SsoSite:
    provider: Provider
    site: Site
    workdir: Path

    @property
    def url(self) -> str:
        return self.site.server.url

    @property
    def ca_file(self) -> Path:
        path = self.workdir / "herder-ca.crt"
        path.write_bytes(self.site.server.ca)
        return path

    def home(self, person: str) -> dict[str, str]:
        """The environment of ``person``'s shell: a config home of their own, no herder kubeconfig set."""
        return cli_env(self.workdir / person / ".config")

    def config(self, person: str) -> Path:
        return self.workdir / person / ".config" / "herder"


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SsoSite]:
    workdir = tmp_path_factory.mktemp("sso-cli")
    port = free_port()
    with (
        running_provider(workdir, PEOPLE, [callback(port)]) as provider,
        running_site(workdir, 1, *oidc_args(provider, workdir), port=port) as site,
    ):
        site.apply(
            [
                cluster("alpha"),
                machine_set(
                    "alpha", "alpha-control-planes", "controlplane", machines=[site.machines[0]["uuid"]]
                ),
                cluster("beta"),
                POLICY,
            ]
        )
        site.wait("cluster", "alpha", timeout=180)
        yield SsoSite(provider, site, workdir)


@pytest.fixture
def page() -> Iterator[Page]:
    """A browser of its own for each test: the provider remembers who signed in."""
    with chromium() as context:
        made = context.new_page()
        yield made


def _line(out: IO[str], pattern: str, timeout: float = 60) -> re.Match[str]:
    """The first line of ``out`` matching ``pattern``."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = out.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


def login(sso: SsoSite, person: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [HERDER, "login", "--server", sso.url, "--ca-file", str(sso.ca_file), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=sso.home(person),
    )


def finished(process: subprocess.Popen[str], timeout: float = 60) -> str:
    rest, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, rest
    return rest


def kubectl(sso: SsoSite, person: str, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=sso.home(person),
    )


def test_herder_login_device_then_kubectl_through_the_proxy_with_the_exec_plugin(
    sso: SsoSite, page: Page
) -> None:
    process = login(sso, "alice", "--device")
    assert process.stdout is not None
    code = _line(process.stdout, r"enter the code (\S+)").group(1)
    complete = _line(process.stdout, r"or open (\S+)").group(1)
    assert code in complete
    # Approved in the browser, on the provider's own pages.
    page.goto(complete)
    page.get_by_role("button", name="Continue").click()
    sign_in_in_browser(page, "alice")
    page.wait_for_selector("text=Sign-in Success")
    said = finished(process)
    assert f"Signed in to {sso.url} as alice@example.com (role None)." in said

    config = sso.config("alice")
    kubeconfig = config / "kubeconfig"
    written = yaml.safe_load(kubeconfig.read_text())
    user = written["users"][0]["user"]
    assert "token" not in user
    assert user["exec"]["apiVersion"] == "client.authentication.k8s.io/v1"
    assert user["exec"]["args"] == ["auth", "exec-credential", "--server", sso.url]
    credentials = config / "credentials"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600

    # kubectl on herder's API signs in through the plugin: alice sees only the cluster her group is given.
    clusters = kubectl(sso, "alice", kubeconfig, "get", "clusters", "-o", "name")
    assert clusters.returncode == 0, clusters.stderr
    assert clusters.stdout.split() == ["cluster.herder.dev/alpha"]
    whoami = kubectl(sso, "alice", kubeconfig, "auth", "whoami", "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == "alice@example.com"

    # herder's own CLI uses the kubeconfig herder login wrote, by default; the proxy's carries the plugin.
    proxied = sso.workdir / "alice-alpha.kubeconfig"
    made = subprocess.run(
        [HERDER, "cluster", "kubeconfig", "alpha", "-o", str(proxied)],
        capture_output=True,
        text=True,
        timeout=60,
        env=sso.home("alice"),
    )
    assert made.returncode == 0, made.stderr
    assert "token" not in yaml.safe_load(proxied.read_text())["users"][0]["user"]
    nodes = kubectl(sso, "alice", proxied, "get", "nodes", "-o", "name")
    assert nodes.returncode == 0, nodes.stderr
    assert len(nodes.stdout.split()) == 1
    pods = kubectl(sso, "alice", proxied, "get", "pods", "-n", "kube-system", "-o", "name")
    assert pods.returncode == 0 and "kube-apiserver" in pods.stdout, pods.stderr


def test_the_web_uis_kubeconfig_reaches_the_cluster_through_the_proxy_as_its_downloader(
    sso: SsoSite, page: Page
) -> None:
    """The kubeconfig alice downloads from the cluster's page holds no token: its exec plugin signs her in
    through her herder login (the previous test's), and the proxy gives her what the policy does."""
    page.goto(f"{sso.url}/ui/login")
    page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
    sign_in_in_browser(page, "alice")
    page.wait_for_url(re.compile(r".*/ui/clusters$"))
    page.goto(f"{sso.url}/ui/clusters/alpha")
    # Not an Admin: no break-glass.
    assert page.get_by_role("button", name="Download admin kubeconfig (break-glass)").count() == 0
    with page.expect_download() as download:
        page.get_by_role("button", name="Download kubeconfig").click()
    assert download.value.suggested_filename == "alpha.kubeconfig"
    downloaded = sso.workdir / "alice-alpha-ui.kubeconfig"
    download.value.save_as(downloaded)
    written = yaml.safe_load(downloaded.read_text())
    assert written["clusters"][0]["cluster"]["server"] == f"{sso.url}/k8s/clusters/default/alpha"
    user = written["users"][0]["user"]
    assert "token" not in user and user["exec"]["args"] == ["auth", "exec-credential", "--server", sso.url]
    # kubectl runs the plugin as kubeconfigs name it: herder on alice's PATH.
    home = {**sso.home("alice"), "PATH": f"{Path(HERDER).parent}:{os.environ.get('PATH', '')}"}
    pods = subprocess.run(
        [KUBECTL, "--kubeconfig", str(downloaded), "get", "pods", "-n", "kube-system", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        env=home,
    )
    assert pods.returncode == 0 and "kube-apiserver" in pods.stdout, pods.stderr
    # Beta is not hers: through the proxy it does not exist.
    beta = sso.workdir / "alice-beta.kubeconfig"
    beta.write_text(
        downloaded.read_text().replace("/k8s/clusters/default/alpha", "/k8s/clusters/default/beta")
    )
    refused = subprocess.run(
        [KUBECTL, "--kubeconfig", str(beta), "get", "pods"],
        capture_output=True,
        text=True,
        timeout=60,
        env=home,
    )
    assert refused.returncode != 0 and "NotFound" in refused.stderr, refused.stderr


def test_herder_login_in_the_browser_with_a_loopback_redirect(sso: SsoSite, page: Page) -> None:
    kubeconfig = sso.workdir / "bob.kubeconfig"
    process = login(sso, "bob", "--no-browser", "--kubeconfig", str(kubeconfig))
    assert process.stdout is not None
    _line(process.stdout, "in your browser at")
    url = _line(process.stdout, r"^\s+(http\S+)").group(1)
    assert "code_challenge_method=S256" in url and "redirect_uri=http%3A%2F%2F127.0.0.1%3A" in url
    page.goto(url)
    sign_in_in_browser(page, "bob")
    page.wait_for_selector("text=Signed in to herder")
    assert "as bob@example.com (role None)" in finished(process)
    listed = kubectl(sso, "bob", kubeconfig, "get", "clusters", "-o", "name")
    assert listed.returncode == 0 and listed.stdout.split() == ["cluster.herder.dev/alpha"], listed.stderr


def _credentials(sso: SsoSite, person: str) -> dict[str, object]:
    doc = json.loads((sso.config(person) / "credentials").read_text())
    entry: dict[str, object] = doc["servers"][sso.url]
    return entry


def test_an_expired_herder_token_is_refreshed_through_the_provider(sso: SsoSite) -> None:
    path = sso.config("alice") / "credentials"
    doc = json.loads(path.read_text())
    old = doc["servers"][sso.url]["token"]
    doc["servers"][sso.url]["expiresAt"] = "2020-01-01T00:00:00Z"
    path.write_text(json.dumps(doc))
    listed = kubectl(sso, "alice", sso.config("alice") / "kubeconfig", "get", "clusters", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    refreshed = _credentials(sso, "alice")
    assert refreshed["token"] != old and refreshed["expiresAt"] != "2020-01-01T00:00:00Z"
    # The token it replaced is revoked.
    assert sso.site.server.run("kubectl", "get", "tokens", "-o", "name").stdout.count(old.split("_")[1]) == 0


def test_disabling_the_user_ends_kubectl_access_within_5_seconds(sso: SsoSite) -> None:
    proxied = sso.workdir / "alice-alpha.kubeconfig"
    watch = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(proxied), "get", "pods", "-n", "kube-system", "--watch", "-o", "name"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sso.home("alice"),
    )
    try:
        assert watch.stdout is not None
        _line(watch.stdout, "kube-apiserver")
        start = time.monotonic()
        sso.site.run(
            "kubectl",
            "patch",
            "user",
            "alice@example.com",
            "--type=merge",
            "-p",
            '{"spec":{"disabled":true}}',
        )
        watch.wait(timeout=10)
        assert time.monotonic() - start < 5, "the watch outlived the User's disabling by 5 s"
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    refused = kubectl(sso, "alice", sso.config("alice") / "kubeconfig", "get", "clusters")
    assert refused.returncode != 0
    refused = kubectl(sso, "alice", proxied, "get", "nodes")
    assert refused.returncode != 0


def test_herder_logout_revokes_the_sign_in(sso: SsoSite) -> None:
    kubeconfig = sso.workdir / "bob.kubeconfig"
    token = str(_credentials(sso, "bob")["token"])
    out = subprocess.run(
        [HERDER, "logout", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        env=sso.home("bob"),
    )
    assert out.returncode == 0 and f"Signed out of {sso.url}." in out.stdout, out.stderr
    assert sso.url not in json.loads((sso.config("bob") / "credentials").read_text())["servers"]
    refused = kubectl(sso, "bob", kubeconfig, "get", "clusters")
    assert refused.returncode != 0 and f"run herder login --server {sso.url}" in refused.stderr
    assert (
        sso.site.server.run("kubectl", "get", "tokens", "-o", "name").stdout.count(token.split("_")[1]) == 0
    )
