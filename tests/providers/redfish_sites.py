"""What the Redfish provider's tests run against: OpenStack's Redfish emulator (``sushy-emulator``, its
fake driver, each PATCH it accepts recorded) on loopback over TLS with basic authentication, and an image
server on loopback that plays the Image Factory (a BMC fetches the ISO it is given). Each is a child
process ended by its PID."""

from __future__ import annotations

import json
import ssl
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bcrypt
import httpx

from herder.talos.pki import ExtUsage, KeyType, Usage, issue_certificate, new_ca
from tests.api.server import free_port
from tests.providers.child import Child

USER, PASSWORD = "operator", "bmc-pass-7f3e9a"


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) files."""
    now = datetime.now(UTC)
    ca = new_ca(KeyType.ECDSA_P256, organization="bmc test ca")
    server = issue_certificate(
        ca,
        common_name="127.0.0.1",
        not_before=now - timedelta(minutes=5),
        not_after=now + timedelta(days=1),
        usage=Usage.DIGITAL_SIGNATURE | Usage.KEY_ENCIPHERMENT,
        ext_usage=ExtUsage.SERVER_AUTH,
        sans=["127.0.0.1"],
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server-key.pem"
    for path, data in zip(paths, (ca.crt, server.crt, server.key), strict=True):
        path.write_bytes(data)
    return paths


class ImageServer(Child):
    """A loopback HTTP server of fake ISOs under ``/image/…``; its log lists what was fetched."""

    def __init__(self, workdir: Path) -> None:
        self.root = workdir / "images"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        super().__init__(
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                str(self.root),
                str(self.port),
            ],
            workdir / "images.log",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, schematic: str, version: str) -> str:
        """Serve an ISO for this schematic and Talos version; its path."""
        path = self.root / "image" / schematic / version / "metal-amd64.iso"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"CD001 a Talos ISO of the tests " + f"{schematic} {version}".encode())
        return f"/image/{schematic}/{version}/metal-amd64.iso"

    def fetched(self) -> str:
        return self.log.read_text()


class SushyEmulator(Child):
    """``sushy-emulator`` with its fake driver: ``systems`` (uuid → name), over TLS, basic auth."""

    def __init__(self, workdir: Path, systems: dict[str, str], vmedia: bool = True) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.ca, cert, key = tls_files(workdir)
        auth = workdir / "htpasswd"
        auth.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
        fake = [{"uuid": u, "name": n, "power_state": "Off", "nics": []} for u, n in systems.items()]
        config = workdir / "sushy.conf"
        config.write_text(
            "\n".join(
                [
                    "SUSHY_EMULATOR_FAKE_DRIVER = True",
                    "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
                    f"SUSHY_EMULATOR_LISTEN_PORT = {self.port}",
                    f"SUSHY_EMULATOR_SSL_CERT = {str(cert)!r}",
                    f"SUSHY_EMULATOR_SSL_KEY = {str(key)!r}",
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(auth)!r}",
                    f"SUSHY_EMULATOR_STATE_DIR = {str(workdir / 'state')!r}",
                    f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}",
                    *([] if vmedia else ["SUSHY_EMULATOR_VMEDIA_DEVICES = {}"]),
                ]
            )
            + "\n"
        )
        self.record = workdir / "patches.jsonl"
        command = [
            sys.executable,
            "-m",
            "tests.providers.sushy_server",
            str(self.record),
            "--config",
            str(config),
        ]
        super().__init__(command, workdir / "sushy.log", cwd=Path(__file__).parents[2])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start_serving(self) -> SushyEmulator:
        self.start(self.url + "/redfish/v1/", verify=self.tls())
        return self

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def patches(self, path: str) -> list[Any]:
        """The bodies of the PATCHes of ``path`` the emulator accepted, oldest first."""
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return [entry["body"] for entry in map(json.loads, lines) if entry["path"] == path]

    def get(self, path: str) -> Any:
        answer = httpx.get(self.url + path, auth=(USER, PASSWORD), verify=self.tls(), timeout=10)
        answer.raise_for_status()
        return answer.json()
