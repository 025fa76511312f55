"""A real ``herder serve`` for tests: a subprocess on a free loopback port with a temporary data dir.

It is always ended by its PID (SIGTERM, then SIGKILL if it lingers), even when a test fails.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from herder.api.datadir import write_kubeconfig
from herder.client import Client
from herder.client.kubeconfig import load
from herder.emu.options import DEFAULT_MACHINE_PORT, listenable
from herder.state.free_ports import claim, free_port

HERDER = str(Path(sys.executable).with_name("herder"))
KUBECTL = "/usr/bin/kubectl"


def support_token_file(directory: Path) -> tuple[Path, str]:
    """A file for ``herder serve --support-token-file`` (mode 0600) in ``directory``, and its token."""
    path = directory / "support.token"
    token = secrets.token_urlsafe(32)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path, token


def random_cidr() -> str:
    """A /24 of 127.0.0.0/8 nobody else is likely to use at the same time: of 127.2-63.*, apart from the
    /16s the benchmarks' emulators take (``herder.emu.options.spare_network``: 127.64-250) and from the
    emulator's default network (127.100.0.0/16), which a user's ``make run`` demo holds. Claimed, as free
    ports are, so that tests running at once never share one (two emulators on one network collide)."""
    for _ in range(100):
        network = f"127.{random.randint(2, 63)}.{random.randint(0, 255)}"
        if claim(f"network-{network}") and listenable(f"{network}.1", DEFAULT_MACHINE_PORT):
            return f"{network}.0/24"
    raise RuntimeError("no unclaimed /24 of 127.2-63.*.* for a test's emulator")


@dataclass
class Server:
    data_dir: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "admin.kubeconfig"

    @property
    def ca(self) -> bytes:
        ca = load(self.kubeconfig).ca_pem
        assert ca is not None
        return ca

    def client(self, kubeconfig: Path | None = None) -> Client:
        return Client.from_kubeconfig(kubeconfig or self.kubeconfig)

    def http(self, token: str | None) -> httpx.AsyncClient:
        """A raw HTTP client: for status codes and bodies exactly as the server sends them."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        context = ssl.create_default_context(cadata=self.ca.decode())
        return httpx.AsyncClient(base_url=self.url, headers=headers, verify=context, timeout=30)

    def kubeconfig_for(self, token: str, name: str) -> Path:
        path = self.data_dir.parent / f"{name}.kubeconfig"
        write_kubeconfig(path, self.url, self.ca, token)
        return path

    def run(
        self, *args: str, kubeconfig: Path | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command line (``kubectl …`` or ``herder …``) against this server (``--kubeconfig`` goes last)."""
        program = {"kubectl": KUBECTL, "herder": HERDER}[args[0]]
        return subprocess.run(
            [program, *args[1:], "--kubeconfig", str(kubeconfig or self.kubeconfig)],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=60,
        )


def _wait_ready(server: Server, deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"herder serve exited with {server.process.returncode}:\n{server.log.read_text()}"
            )
        if server.kubeconfig.exists():
            try:
                context = ssl.create_default_context(cadata=server.ca.decode())
                if httpx.get(f"{server.url}/version", verify=context, timeout=2).status_code == 200:
                    return
            except (httpx.HTTPError, OSError, ValueError):
                pass
        time.sleep(0.1)
    raise RuntimeError(f"herder serve did not come up:\n{server.log.read_text()}")


def stop(process: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """End the server by its PID: SIGTERM, and SIGKILL if it does not stop in time."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


@contextmanager
def running(
    data_dir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
) -> Iterator[Server]:
    """``herder serve`` on ``port`` (default: a free one) of ``host`` (a loopback address), until the block
    ends."""
    port = port or free_port()
    log = data_dir.parent / f"{data_dir.name}.log"
    # The Talos API gateway's default port (the API's + 1) may be taken by another test's server.
    gateway = [] if "--talos-listen" in extra else ["--talos-listen", f"{host}:{free_port()}"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [HERDER, "serve", "--data-dir", str(data_dir), "--listen", f"{host}:{port}", *gateway, *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    server = Server(data_dir, port, process, log, host)
    try:
        _wait_ready(server, time.monotonic() + 30)
        yield server
    finally:
        stop(process)
