"""What the join tests run: ``herder serve`` with SideroLink on an uplink of their own, and the network
namespaces machines join from.

The uplink is a veth pair between the test's namespace (herder's) and a namespace the test makes for the
machines' side, each end with an address of a random ULA prefix; herder's Provision API listens on its end
only. herder's WireGuard interface has a random name and tunnel prefix (it goes with the server's process:
wireguard-go's TUN device dies with it). Every namespace is deleted and every process ended by its PID when
the test ends, passing or failing. Skipped where they cannot run (not root, no wireguard-go).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.api.tls import ensure_tls
from herder.emu.control.process import EmulatorProcess
from tests.api.server import Server, free_port, random_cidr, running


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


# A Provision call made from inside a namespace (the machines' side of the uplink): Python with grpc, run by
# ``ip netns exec``, printing the answer as JSON or the gRPC error code. Over TLS when given a CA to trust.
CALL = """
import json, sys
import grpc
from herder.talos.api.siderolink import provision_pb2 as pb, provision_pb2_grpc as pb_grpc
target, fields, ca = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
# Over TLS the call waits for the channel to connect (a server still starting is not a refusal); plaintext
# to a TLS server never connects, which is what its callers look for.
channel = (
    grpc.secure_channel(target, grpc.ssl_channel_credentials(open(ca, "rb").read())) if ca
    else grpc.insecure_channel(target)
)
with channel:
    try:
        answer = pb_grpc.ProvisionServiceStub(channel).Provision(
            pb.ProvisionRequest(**fields), timeout=20, wait_for_ready=bool(ca)
        )
    except grpc.RpcError as e:
        print(json.dumps({"code": e.code().name, "details": e.details()}))
    else:
        print(json.dumps({"code": "OK", "endpoints": list(answer.server_endpoint), "key": answer.server_public_key,
                          "address": answer.node_address_prefix, "server": answer.server_address}))
"""


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
    # In canonical form (a random hextet may start with 0): gRPC's hostname check compares the text.
    herder_end, far_end = (str(ipaddress.IPv6Address(f"{prefix}::{n}")) for n in (1, 2))
    link = Uplink(netns, host, herder_end, far_end)
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
    ca: Path | None = None
    """The CA of the Provision API's certificate (None: plaintext)."""

    def diagnosis(self, what: object) -> str:
        """``what`` went wrong, with what the server logged and who listens on the Provision port."""
        port = self.api.rsplit(":", 1)[1]
        listening = sh("ss", "-Hltnp", f"sport = :{port}", check=False).stdout
        log = self.server.log.read_text(errors="replace").splitlines()[-40:]
        return f"{what}\nlistening on port {port}:\n{listening}\nherder serve logged:\n" + "\n".join(log)

    def kubectl_json(self, *args: str) -> Any:
        """``kubectl ARGS -o json`` as the site's admin: what it printed, decoded."""
        result = subprocess.run(
            ["/usr/bin/kubectl", "--kubeconfig", str(self.server.kubeconfig), *args, "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

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
def join_server(workdir: Path, *serve_args: str, tls: bool = False) -> Iterator[JoinServer]:
    """``herder serve`` with SideroLink on an uplink of its own; with ``tls``, its Provision API serves TLS
    with a certificate of its uplink address from a CA of the test's (``JoinServer.ca``)."""
    with uplink() as link:
        port, wireguard = free_port(), free_udp_port()
        interface = f"hsl{secrets.token_hex(4)}"
        prefix = f"fd{secrets.token_hex(1)}:{secrets.token_hex(2)}:{secrets.token_hex(2)}::/64"
        ca: Path | None = None
        if tls:
            files = ensure_tls(workdir, [link.herder_address], prefix="provision-")
            ca = files.ca
            serve_args = (
                *serve_args,
                "--siderolink-tls-cert",
                str(files.cert),
                "--siderolink-tls-key",
                str(files.key),
            )
        with running(
            workdir / "server",
            "--siderolink-listen", f"[{link.herder_address}]:{port}",
            "--siderolink-wireguard", f"[{link.herder_address}]:{wireguard}",
            "--siderolink-prefix", prefix,
            "--siderolink-interface", interface,
            *serve_args,
        ) as server:  # fmt: skip
            api = f"{'https' if tls else 'grpc'}://[{link.herder_address}]:{port}"
            made = JoinServer(server, link, api, wireguard, interface, prefix, ca)
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


def joined_emulator(site: JoinServer, data_dir: Path, machines: int, join: str) -> EmulatorProcess:
    """``herder emu run --join`` on the machines' side of the uplink, started and ready; machines trust the
    site's CA, as a real machine trusts its system's roots."""
    import asyncio

    trust = ["env", f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={site.ca}"] if site.ca is not None else []
    made = EmulatorProcess(
        data_dir=data_dir,
        machines=machines,
        machine_cidr=random_cidr(),
        listen=f"[{site.uplink.far_address}]:0",
        # Its network namespace only (``ip netns exec`` would give it a mount namespace of its own too,
        # where the namespaces it makes for its machines would not be seen from here).
        prefix=["nsenter", f"--net=/var/run/netns/{site.uplink.netns}", *trust],
        extra_args=["--join", join],
    )
    made.data_dir.mkdir(parents=True)
    made.start()
    asyncio.run(made.wait_ready())
    return made


def provision(site: JoinServer, *, plaintext: bool = False, **fields: object) -> dict[str, object]:
    """Provision as a machine on the uplink's far side calls it (over TLS where the site serves it, unless
    ``plaintext``): the answer's fields, or the gRPC error code."""
    target = site.api.partition("://")[2]
    ca = "" if plaintext or site.ca is None else str(site.ca)
    result = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            site.uplink.netns,
            sys.executable,
            "-c",
            CALL,
            target,
            json.dumps(fields),
            ca,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def token(site: JoinServer, name: str, *flags: str) -> str:
    made = site.herder("jointoken", "create", name, *flags)
    assert "shown this once only" in made.stderr
    return made.stdout.strip()
