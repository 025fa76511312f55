"""A real OpenID Provider for the single sign-on tests: panva's certified ``oidc-provider`` (npm, the
version pinned in ``tests/sso/package-lock.json``), installed once into a cache directory with ``npm
ci`` (``make test`` does it first; a test module does it when it is missing) and run by Node on loopback
ports, one process per test module, ended by its PID.

``python -m tests.sso.provider`` installs it, saying why when it cannot (tests then skip). The provider
gets a web client (herder's UI, with its HTTPS callback), a native client (herder's CLI: the RFC 8252
loopback redirect, the device grant), the same with a secret it must send (as Google's desktop clients),
and a third client whose tokens herder must refuse; users with
groups; and the signing key the tests hold too, to make tokens no provider would (expired, unsigned).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from herder.state.free_ports import free_port

HERE = Path(__file__).parent
NODE = shutil.which("node") or "/usr/bin/node"
NPM = shutil.which("npm") or "/usr/bin/npm"
UI_CLIENT = "herder-ui"
CLI_CLIENT = "herder-cli"
# A native client that must authenticate with a secret all the same, as Google's desktop clients do.
SECRET_CLI_CLIENT = "herder-cli-with-secret"
OTHER_CLIENT = "other-app"
KID = "test-key-1"


def cache_dir() -> Path:
    """Where the pinned provider is installed: one directory per lock file's content."""
    root = os.environ.get("HERDER_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "herder-tests"
    )
    lock = (HERE / "package-lock.json").read_bytes()
    return Path(root) / f"oidc-provider-{hashlib.sha256(lock).hexdigest()[:12]}"


def install() -> tuple[Path | None, str]:
    """The provider's module entry (installed if missing), or None and why it cannot be had."""
    target = cache_dir()
    entry = target / "node_modules" / "oidc-provider" / "lib" / "index.js"
    stamp = target / ".installed"
    if stamp.exists() and entry.exists():
        return entry, ""
    if not Path(NODE).exists() or not Path(NPM).exists():
        return None, "node and npm are needed for the OpenID Provider of the SSO tests (apt-get install npm)"
    target.mkdir(parents=True, exist_ok=True)
    with (target.parent / f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers install once
        if stamp.exists() and entry.exists():
            return entry, ""
        for name in ("package.json", "package-lock.json"):
            shutil.copy(HERE / name, target / name)
        done = subprocess.run(
            [NPM, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0 or not entry.exists():
            return None, f"npm ci of oidc-provider failed: {(done.stderr or done.stdout).strip()[-400:]}"
        stamp.touch()
    return entry, ""


@dataclass
class User:
    login: str
    email: str | None = None
    groups: list[str] = field(default_factory=list)
    email_verified: bool = True
    name: str = ""
    roles: list[str] = field(default_factory=list)
    """A second list of groups, in the claim ``roles`` of the scope ``roles`` (``--oidc-groups-claim``)."""

    def claims(self) -> dict[str, Any]:
        claims: dict[str, Any] = {"groups": self.groups, "roles": self.roles, "name": self.name or self.login}
        if self.email is not None:
            claims |= {"email": self.email, "email_verified": self.email_verified}
        return claims


@dataclass
class Provider:
    """A running provider: its issuers' URLs (the first is the one herder trusts), clients and key."""

    issuers: list[str]
    key: rsa.RSAPrivateKey
    process: subprocess.Popen[bytes]
    log: Path
    ui_secret: str
    ui_redirects: list[str]
    cli_secret: str
    ca: str | None = None
    """The PEM of the private CA of the provider's TLS certificate, when it serves https."""

    @property
    def issuer(self) -> str:
        return self.issuers[0]

    def discovery(self, issuer: str | None = None) -> dict[str, Any]:
        verify = ssl.create_default_context(cadata=self.ca) if self.ca else True
        answer = httpx.get(
            f"{issuer or self.issuer}/.well-known/openid-configuration", timeout=10, verify=verify
        )
        answer.raise_for_status()
        return dict(answer.json())

    def sign(self, claims: dict[str, Any], headers: dict[str, Any] | None = None) -> str:
        """A token signed with the provider's own key: for what no provider would issue (expired…)."""
        import jwt

        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID, **(headers or {})})


def _private_jwk(key: rsa.RSAPrivateKey) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(key))
    jwk.pop("key_ops", None)  # PyJWT marks a private key "sign" only: the provider verifies with it too
    return {**jwk, "kid": KID, "alg": "RS256", "use": "sig"}


@contextlib.contextmanager
def running_provider(
    workdir: Path, users: list[User], ui_redirects: list[str], *, issuers: int = 2, tls: bool = False
) -> Iterator[Provider]:
    """The provider with ``issuers`` issuers on free loopback ports, until the block ends; with ``tls``,
    on https with a certificate of a private CA made here (``Provider.ca``)."""
    entry, why = install()
    if entry is None:
        import pytest

        pytest.skip(f"no OpenID Provider: {why}")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ports = [free_port() for _ in range(issuers)]
    ui_secret = secrets.token_urlsafe(24)
    scheme, served, ca = "http", {}, None
    if tls:
        from herder.emu.bmc.service import new_ca, serving_certificate

        authority = new_ca()
        pair = serving_certificate(authority, "127.0.0.1")
        scheme, ca = "https", authority.crt.decode()
        served = {"tls": {"key": pair.key.decode(), "cert": pair.crt.decode()}}
    cli_secret = secrets.token_urlsafe(24)
    config: dict[str, Any] = {
        "module": str(entry),
        "cookieKey": secrets.token_urlsafe(24),
        "keys": [_private_jwk(key)],
        "issuers": [{"url": f"{scheme}://127.0.0.1:{port}", "port": port, **served} for port in ports],
        "users": {u.login: u.claims() for u in users},
        "clients": [
            {
                "client_id": UI_CLIENT,
                "client_secret": ui_secret,
                "redirect_uris": ui_redirects,
                "post_logout_redirect_uris": [
                    r.replace("/auth/oidc/callback", "/login") for r in ui_redirects
                ],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
            },
            {
                "client_id": CLI_CLIENT,
                "application_type": "native",
                "token_endpoint_auth_method": "none",
                "redirect_uris": ["http://127.0.0.1/callback"],
                "grant_types": [
                    "authorization_code",
                    "refresh_token",
                    "urn:ietf:params:oauth:grant-type:device_code",
                ],
                "response_types": ["code"],
            },
            {
                "client_id": SECRET_CLI_CLIENT,
                "client_secret": cli_secret,
                "application_type": "native",
                "token_endpoint_auth_method": "client_secret_post",
                "redirect_uris": ["http://127.0.0.1/callback"],
                "grant_types": [
                    "authorization_code",
                    "refresh_token",
                    "urn:ietf:params:oauth:grant-type:device_code",
                ],
                "response_types": ["code"],
            },
            {
                "client_id": OTHER_CLIENT,
                "application_type": "native",
                "token_endpoint_auth_method": "none",
                "redirect_uris": ["http://127.0.0.1/callback"],
                "grant_types": ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"],
                "response_types": ["code"],
            },
        ],
    }
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = Path(tempfile.mkstemp(prefix="op-", suffix=".json", dir=workdir)[1])
    config_file.write_text(json.dumps(config))
    log = workdir / "openid-provider.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [NODE, str(HERE / "provider.mjs"), str(config_file)], stdout=out, stderr=subprocess.STDOUT
        )
    provider = Provider(
        [i["url"] for i in config["issuers"]], key, process, log, ui_secret, ui_redirects, cli_secret, ca
    )
    try:
        deadline = time.monotonic() + 30
        for issuer in provider.issuers:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the OpenID Provider exited:\n{log.read_text()}")
                with contextlib.suppress(httpx.HTTPError):
                    if provider.discovery(issuer).get("issuer") == issuer:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the OpenID Provider did not come up:\n{log.read_text()}")
                time.sleep(0.1)
        yield provider
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    found, reason = install()
    if found is None:
        print(f"warning: {reason}; the single sign-on tests will be skipped", file=sys.stderr)
    else:
        print(f"oidc-provider installed in {cache_dir()}")
