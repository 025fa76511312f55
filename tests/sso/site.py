"""What the single sign-on tests share: the people of the test provider, ``herder serve`` signing people in
through it (on a port chosen first, since the provider must know the UI's redirect URI), a sign-in at the
provider driven over HTTP as its own pages would be (for ID tokens the API tests hand in), and the same
in Chromium."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from tests.api.server import HERDER, Server, free_port, running
from tests.sso.provider import CLI_CLIENT, UI_CLIENT, Provider, User

PROVIDER_NAME = "Test IdP"
PEOPLE = [
    User("alice", "alice@example.com", ["team-a"], name="Alice"),
    User("bob", "Bob@Example.com", ["/Platform Team", "team-a"], name="Bob"),
    # The provider does not vouch for carol's email: she is named by her sub.
    User("carol", "carol@example.com", ["team-b"], email_verified=False),
    User("dave", None, []),
]


def callback(port: int) -> str:
    return f"https://127.0.0.1:{port}/ui/auth/oidc/callback"


def oidc_args(provider: Provider, workdir: Path) -> list[str]:
    """``herder serve``'s flags for the test provider (its first issuer)."""
    secret = workdir / "ui-client.secret"
    secret.write_text(provider.ui_secret + "\n")
    secret.chmod(0o600)
    return [
        "--oidc-issuer",
        provider.issuer,
        "--oidc-client-id",
        UI_CLIENT,
        "--oidc-client-secret-file",
        str(secret),
        "--oidc-cli-client-id",
        CLI_CLIENT,
        "--oidc-provider-name",
        PROVIDER_NAME,
    ]


@dataclass
class Herder:
    """A ``herder serve`` that can be restarted on the same port (a browser keeps its cookies)."""

    data_dir: Path
    args: list[str]
    port: int = field(default_factory=free_port)
    server: Server | None = None
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self) -> Server:
        self.server = self._stack.enter_context(running(self.data_dir, *self.args, port=self.port))
        return self.server

    def stop(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()

    def restart(self) -> Server:
        self.stop()
        return self.start()


@contextlib.contextmanager
def herder(workdir: Path, provider: Provider, port: int, *extra: str) -> Iterator[Herder]:
    made = Herder(workdir / "server", [*oidc_args(provider, workdir), *extra], port)
    made.start()
    try:
        yield made
    finally:
        made.stop()


def sign_in_at(
    provider: Provider,
    login: str,
    *,
    client_id: str = CLI_CLIENT,
    issuer: str | None = None,
    nonce: str | None = "n-" + "0" * 8,
    scope: str = "openid email profile groups offline_access",
) -> dict[str, Any]:
    """The token response of a sign-in of ``login`` at the provider, as its own pages would do it: the
    authorization request with PKCE, the login and consent forms posted, the code redeemed."""
    issuer = issuer or provider.issuer
    doc = provider.discovery(issuer)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    redirect = "http://127.0.0.1:9/callback"
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "scope": scope,
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **({"nonce": nonce} if nonce else {}),
    }
    with httpx.Client(follow_redirects=False, timeout=10) as http:
        where = through_the_provider(http, f"{doc['authorization_endpoint']}?{urlencode(query)}", login)
        assert where.startswith(redirect), where
        code = parse_qs(urlsplit(where).query)["code"][0]
        tokens = http.post(
            doc["token_endpoint"],
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect,
                "client_id": client_id,
                "code_verifier": verifier,
            },
        )
    assert tokens.status_code == 200, tokens.text
    return dict(tokens.json())


def cli_env(home: Path) -> dict[str, str]:
    """The environment of a person's shell with their own config home and no herder kubeconfig set."""
    env = {k: v for k, v in os.environ.items() if k != "HERDER_KUBECONFIG"}
    return {**env, "XDG_CONFIG_HOME": str(home)}


def herder_login(server: Server, home: Path, login: str) -> tuple[str, str]:
    """``herder login --no-browser`` to ``server`` as ``login``, whose browser's part (the provider's pages,
    then the CLI's loopback redirect) is driven over HTTP: the authorization URL it printed, and all it
    said."""
    ca = home / "herder-ca.crt"
    home.mkdir(parents=True, exist_ok=True)
    ca.write_bytes(server.ca)
    command = [HERDER, "login", "--server", server.url, "--ca-file", str(ca), "--no-browser"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(home)
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # "Sign in to herder in your browser at:"
        url = process.stdout.readline().strip()
        with httpx.Client(follow_redirects=False, timeout=10) as http:
            assert http.get(through_the_provider(http, url, login)).status_code == 200
        said, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, said
    return url, said


def through_the_provider(http: httpx.Client, url: str, login: str) -> str:
    """Where the provider sends the browser back to (with the code) after ``login`` signed in and
    consented at the authorization request ``url``, on the provider's own pages driven over HTTP."""
    answer = http.get(url)
    for _ in range(10):
        where = str(answer.headers.get("location", ""))
        # The client's redirect URI (the CLI's loopback one, or the web UI's): none of the provider's own.
        if urlsplit(where).hostname == "127.0.0.1" and urlsplit(where).path.endswith("/callback"):
            return where
        if answer.status_code in (302, 303):
            answer = http.get(answer.url.join(where))
            continue
        assert answer.status_code == 200, answer.text
        action = re.search(r'action="([^"]+)"', answer.text)
        assert action is not None, answer.text
        form = dict(re.findall(r'name="(\w+)" value="([^"]*)"', answer.text))
        if 'name="login"' in answer.text:
            form |= {"login": login, "password": "any"}
        answer = http.post(answer.url.join(action.group(1)), data=form)
    raise AssertionError(f"the provider's sign-in did not end: {answer.status_code} {answer.text[:300]}")


def sign_in_in_browser(page: Any, login: str) -> None:
    """Through the provider's own pages in Chromium: the login form, then the consent."""
    page.get_by_placeholder("Enter any login").fill(login)
    page.get_by_placeholder("and password").fill("any")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()
