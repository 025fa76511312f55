"""What the join tests run: ``herder serve`` with SideroLink on an uplink of their own, and the network
namespaces machines join from.

The uplink is a veth pair between the test's namespace (herder's) and a namespace the test makes for the
machines' side, each end with an address of a random ULA prefix; herder's Provision API listens on its end
only. herder's WireGuard interface has a random name and tunnel prefix (it goes with the server's process:
wireguard-go's TUN device dies with it). Every namespace is deleted and every process ended by its PID when
the test ends, passing or failing. Skipped where they cannot run (not root, no wireguard-go).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.api.server import Server, free_port, running


def _reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, CAP_NET_ADMIN)"
    for tool in ("wireguard-go", "ip", "nft"):
        if shutil.which(tool) is None:
            return f"needs {tool} (make test installs wireguard-go and wireguard-tools)"
    return None


needs_netns = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


def free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.bind(("::", 0))
        return int(s.getsockname()[1])


@dataclass
class Uplink:
    """The veth pair between herder's namespace and the machines' side (namespace ``netns``)."""

    netns: str
    host_side: str
    herder_address: str
    """herder's end (in the test's namespace)."""
    far_address: str
    """The machines' side's end."""


@contextmanager
def uplink() -> Iterator[Uplink]:
    tag = secrets.token_hex(3)
    netns, host, far = f"hjup-{tag}", f"hju{tag}", f"hjf{tag}"
    prefix = f"fd{secrets.token_hex(1)}:{secrets.token_hex(2)}:{secrets.token_hex(2)}:{secrets.token_hex(2)}"
    link = Uplink(netns, host, f"{prefix}::1", f"{prefix}::2")
    try:
        sh("ip", "netns", "add", netns)
        sh("ip", "link", "add", host, "type", "veth", "peer", "name", far)
        sh("ip", "link", "set", far, "netns", netns)
        sh("ip", "address", "add", f"{link.herder_address}/64", "dev", host, "nodad")
        sh("ip", "link", "set", host, "up")
        inside = ("ip", "netns", "exec", netns)
        sh(*inside, "ip", "link", "set", "lo", "up")
        sh(*inside, "ip", "address", "add", f"{link.far_address}/64", "dev", far, "nodad")
        sh(*inside, "ip", "link", "set", far, "up")
        sh(*inside, "ip", "-6", "route", "add", "default", "via", link.herder_address)
        yield link
    finally:
        sh("ip", "link", "del", host, check=False)
        sh("ip", "netns", "del", netns, check=False)


@dataclass
class JoinServer:
    server: Server
    uplink: Uplink
    api: str
    """``siderolink.api`` without its token."""
    wireguard_port: int
    interface: str
    prefix: str

    def herder(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        from tests.api.server import HERDER

        result = subprocess.run(
            [HERDER, *args, "--kubeconfig", str(self.server.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"herder {' '.join(args)}: {result.stdout}{result.stderr}")
        return result


@contextmanager
def join_server(workdir: Path, *serve_args: str) -> Iterator[JoinServer]:
    """``herder serve`` with SideroLink on an uplink of its own."""
    with uplink() as link:
        port, wireguard = free_port(), free_udp_port()
        interface = f"hsl{secrets.token_hex(4)}"
        prefix = f"fd{secrets.token_hex(1)}:{secrets.token_hex(2)}:{secrets.token_hex(2)}::/64"
        with running(
            workdir / "server",
            "--siderolink-listen", f"[{link.herder_address}]:{port}",
            "--siderolink-wireguard", f"[{link.herder_address}]:{wireguard}",
            "--siderolink-prefix", prefix,
            "--siderolink-interface", interface,
            *serve_args,
        ) as server:  # fmt: skip
            api = f"grpc://[{link.herder_address}]:{port}"
            made = JoinServer(server, link, api, wireguard, interface, prefix)
            _wait_interface(made)
            yield made


def _wait_interface(made: JoinServer) -> None:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if sh("ip", "link", "show", made.interface, check=False).returncode == 0:
            return
        if made.server.process.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(
        f"herder made no WireGuard interface {made.interface}:\n{made.server.log.read_text()}"
    )
