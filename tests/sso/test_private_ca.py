"""A provider on https with a private CA: ``herder serve`` reaches it only with ``--oidc-ca-file`` (and
without it says so at start-up), publishes that CA in its sign-in config, and ``herder login`` trusts
exactly it for the provider's endpoints."""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import HERDER, free_port, running
from tests.sso.provider import Provider, running_provider
from tests.sso.site import PEOPLE, callback, herder, oidc_args, through_the_provider


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Provider, Path, int]]:
    workdir = tmp_path_factory.mktemp("sso-private-ca")
    port = free_port()
    with running_provider(workdir, PEOPLE, [callback(port)], issuers=1, tls=True) as made:
        assert made.issuer.startswith("https://") and made.ca
        yield made, workdir, port


def test_without_the_ca_file_serve_fails_at_start_up(provider: tuple[Provider, Path, int]) -> None:
    made, workdir, _ = provider
    refused = r"--oidc-issuer https://127\.0\.0\.1:\d+.*(?i:certificate)"
    with pytest.raises(RuntimeError, match=refused), running(workdir / "no-ca", *oidc_args(made, workdir)):
        pass


def test_herder_login_reaches_the_provider_through_the_published_ca(
    provider: tuple[Provider, Path, int],
) -> None:
    made, workdir, port = provider
    assert made.ca is not None
    ca_file = workdir / "provider-ca.crt"
    ca_file.write_text(made.ca)
    with herder(workdir, made, port, "--oidc-ca-file", str(ca_file)) as site:
        assert site.server is not None
        herder_ca = workdir / "herder-ca.crt"
        herder_ca.write_bytes(site.server.ca)
        config = httpx.get(
            f"{site.server.url}/auth/oidc/config",
            verify=ssl.create_default_context(cafile=herder_ca),
            timeout=10,
        ).json()
        assert config["providerCa"] == made.ca
        env = {
            **{k: v for k, v in os.environ.items() if k != "HERDER_KUBECONFIG"},
            "XDG_CONFIG_HOME": str(workdir / "alice" / ".config"),
        }
        process = subprocess.Popen(
            [HERDER, "login", "--server", site.server.url, "--ca-file", str(herder_ca), "--no-browser"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        url = ""
        for line in process.stdout:
            found = re.match(r"^\s+(https://\S+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "herder login printed no sign-in URL"
        with httpx.Client(
            follow_redirects=False, timeout=10, verify=ssl.create_default_context(cafile=ca_file)
        ) as http:
            back = through_the_provider(http, url, "alice")
        assert httpx.get(back, timeout=10).status_code == 200
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 0 and "as alice@example.com" in rest, rest
        kept = json.loads((workdir / "alice" / ".config" / "herder" / "credentials").read_text())
        assert kept["servers"][site.server.url]["providerCa"] == made.ca
        # Signing out reaches the provider too (its revocation endpoint), with the CA kept.
        out = subprocess.run(
            [HERDER, "logout", "--server", site.server.url],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 0, out.stderr
