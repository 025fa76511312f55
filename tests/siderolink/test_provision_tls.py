"""The Provision API over TLS (``herder serve --siderolink-tls-cert/--siderolink-tls-key``), end to end:
JoinConfigs then name it ``https://``; a machine that trusts the certificate's CA joins over TLS (a
Provision call, and an emulated machine that boots with the JoinConfig's kernel arguments and becomes a
connected Machine); a plaintext call is not answered; bad flags are refused naming the flag.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from herder.emu.machine.join import Joiner
from herder.talos.siderolink.wireguard import generate_keys
from tests.api.server import HERDER
from tests.siderolink.join_site import (
    JoinServer,
    join_server,
    joined_emulator,
    needs_netns,
    provision,
    sh,
    token,
)

pytestmark = needs_netns


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JoinServer]:
    with join_server(
        tmp_path_factory.mktemp("provision-tls"), "--siderolink-peer-timeout", "4", tls=True
    ) as made:
        yield made


def _until(check: Any, timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what or check}")


def test_a_machine_trusting_the_certificate_joins_over_tls_and_plaintext_is_not_answered(
    site: JoinServer,
) -> None:
    assert site.api.startswith("https://")
    joined, node = token(site, "tls-rack"), str(uuidlib.uuid4())
    fields = {"node_uuid": node, "node_public_key": generate_keys().public, "join_token": joined}
    answer = provision(site, **fields)
    assert answer["code"] == "OK", site.diagnosis(answer)
    refused = provision(site, plaintext=True, **fields)
    assert refused["code"] == "UNAVAILABLE", refused


def test_an_emulated_machine_joins_with_the_https_kernel_args_of_a_join_config(
    site: JoinServer, tmp_path: Path
) -> None:
    provider = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "InfraProvider",
        "metadata": {"name": "tls-edge"},
        "spec": {"displayName": "machines that check herder's certificate"},
    }
    (tmp_path / "provider.yaml").write_text(yaml.safe_dump(provider))
    site.herder("apply", "-f", str(tmp_path / "provider.yaml"))
    args = _until(
        lambda: site.kubectl_json("get", "joinconfig", "tls-edge")["spec"].get("kernelArgs"),
        what="a JoinConfig",
    )
    assert args[0].startswith(f"siderolink.api={site.api}?jointoken=")
    emulator = joined_emulator(site, tmp_path / "emulator", 1, " ".join(args))
    (machine,) = [m["uuid"] for m in emulator.published()]
    try:

        def connected() -> bool:
            found = site.kubectl_json("get", "machines")["items"]
            return any(
                m["metadata"]["name"] == machine
                and any(
                    c["type"] == "Connected" and c["status"] == "True"
                    for c in (m.get("status") or {}).get("conditions", [])
                )
                for m in found
            )

        try:
            _until(connected, 90, "the machine joined over TLS, connected")
        except AssertionError as timed_out:
            machines = asyncio.run(emulator.control("GET", "/machines"))
            said = [m.get("last_error") for m in machines]
            raise AssertionError(site.diagnosis(f"{timed_out}; the machine says {said}")) from None
    finally:
        emulator.stop()
        sh("ip", "netns", "del", Joiner.netns_of(machine), check=False)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--siderolink-tls-cert", "{cert}"], "--siderolink-tls-cert and --siderolink-tls-key go together"),
        (["--siderolink-tls-cert", "{junk}", "--siderolink-tls-key", "{key}"], "not a PEM certificate"),
        (["--siderolink-tls-cert", "{cert}", "--siderolink-tls-key", "{missing}"], "No such file"),
    ],
)
def test_bad_tls_flags_are_refused_naming_the_flag(
    site: JoinServer, tmp_path: Path, flags: list[str], said: str
) -> None:
    files = {
        "cert": str(site.server.data_dir.parent / "provision-tls.crt"),
        "key": str(site.server.data_dir.parent / "provision-tls.key"),
        "junk": str(tmp_path / "junk.pem"),
        "missing": str(tmp_path / "missing.key"),
    }
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    argv = [f.format(**files) for f in flags]
    result = subprocess.run(
        [HERDER, "serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
         "--siderolink-listen", "[::1]:1", "--siderolink-wireguard", "[::1]:2", *argv],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
