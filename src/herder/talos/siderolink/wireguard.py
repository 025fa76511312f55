"""A WireGuard interface run by Debian's ``wireguard-go`` (userspace WireGuard on a TUN device), optionally
inside a network namespace, configured through its UAPI socket (WireGuard's cross-platform configuration
protocol: ``set=1`` / ``get=1`` over ``/var/run/wireguard/IFACE.sock``) and addressed with iproute2.

herder's side of SideroLink runs one (many peers, one per joined machine); the emulator runs one per joined
machine, each in the machine's own network namespace. The TUN device lives as long as the wireguard-go
process: killing it removes the interface, so nothing outlives a crash.

Interface names are global through their UAPI socket path (a file, not per namespace): callers pick unique
ones. Creating TUN devices and addresses needs CAP_NET_ADMIN.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

SOCKET_DIR = Path("/var/run/wireguard")
MTU = 1280
"""SideroLink's link MTU: IPv6's minimum, which fits inside any path once WireGuard's overhead is added."""
KEEPALIVE = 25
"""Talos's persistent keepalive towards the server, in seconds."""
START_TIMEOUT = 10.0
END_WITH_PARENT = ("setpriv", "--pdeathsig", "TERM")
"""wireguard-go is sent SIGTERM when the process that started it dies, however it died (kill -9 included),
so that no interface outlives its owner. util-linux's ``setpriv`` sets that, not a ``preexec_fn``: one makes
Python fork instead of vfork, and in a process that uses gRPC the fork runs gRPC's fork handlers, whose
restarted poller can kill the child before it runs wireguard-go (seen under load as "did not start")."""


class WireGuardError(RuntimeError):
    """The interface could not be made or configured, with what wireguard-go or iproute2 said."""


@dataclass(frozen=True)
class KeyPair:
    private: str
    public: str
    """base64, as WireGuard's tools and SideroLink's messages write keys."""


def generate_keys() -> KeyPair:
    key = X25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KeyPair(base64.b64encode(private).decode(), base64.b64encode(public).decode())


def public_key_of(private: str) -> str:
    key = X25519PrivateKey.from_private_bytes(base64.b64decode(private))
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def valid_key(text: str) -> bool:
    """Whether ``text`` is a WireGuard key: 32 bytes in base64."""
    try:
        return len(base64.b64decode(text, validate=True)) == 32
    except ValueError:
        return False


def _hex(key: str) -> str:
    return base64.b64decode(key).hex()


def _b64(hex_key: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_key)).decode()


def missing() -> str | None:
    """What is missing to run WireGuard here (wireguard-go, iproute2), or None."""
    for tool in ("wireguard-go", "ip", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install wireguard-go iproute2 util-linux)"
    return None


@dataclass(frozen=True)
class Peer:
    public_key: str
    endpoint: str
    """Where its packets come from (HOST:PORT), empty until it sent one."""
    last_handshake: float | None
    """Unix time of the last completed handshake, None if none."""
    allowed_ips: tuple[str, ...]
    received: int
    """Bytes received from it (a keepalive every few seconds keeps this growing while it is there)."""


class WireGuard:
    """One interface; ``start`` makes it, ``close`` removes it (by ending its wireguard-go)."""

    def __init__(self, name: str, *, netns: str | None = None) -> None:
        if not 0 < len(name) <= 15:
            raise ValueError(f"interface name {name!r}: 1 to 15 characters")
        self.name = name
        self.netns = netns
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    @property
    def socket_path(self) -> Path:
        return SOCKET_DIR / f"{self.name}.sock"

    def _in_netns(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)

    async def _run(self, *argv: str) -> None:
        process = await asyncio.create_subprocess_exec(
            *self._in_netns(*argv), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        _, err = await process.communicate()
        if process.returncode != 0:
            raise WireGuardError(f"{' '.join(argv)}: {err.decode(errors='replace').strip()}")

    async def start(self, private_key: str, address: str, *, listen_port: int | None = None) -> None:
        """Make the interface with its key and ``address`` (IP/PREFIX), listening on ``listen_port`` (UDP, all
        addresses of its namespace), and bring it up."""
        problem = missing()
        if problem is not None:
            raise WireGuardError(problem)
        interface = ipaddress.ip_interface(address)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # left by a wireguard-go killed with -9
        env = {**os.environ, "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD": "1", "LOG_LEVEL": "error"}
        self._process = await asyncio.create_subprocess_exec(
            *END_WITH_PARENT,
            *self._in_netns("wireguard-go", "-f", self.name),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.socket_path.exists():
            if self._process.returncode is not None or time.monotonic() > deadline:
                err = b""
                if self._process.stderr is not None and self._process.returncode is not None:
                    err = await self._process.stderr.read()
                await self.close()
                raise WireGuardError(
                    f"wireguard-go {self.name} did not start: {err.decode(errors='replace').strip() or 'timeout'}"
                )
            await asyncio.sleep(0.05)
        settings = [f"private_key={_hex(private_key)}"]
        if listen_port is not None:
            settings.append(f"listen_port={listen_port}")
        try:
            await self._set(settings)
            # No duplicate address detection: the tunnel has no neighbours, and a tentative address could
            # not be listened on for the second DAD takes.
            nodad = ["nodad"] if interface.version == 6 else []
            await self._run("ip", "address", "add", str(interface), "dev", self.name, *nodad)
            await self._run("ip", "link", "set", self.name, "mtu", str(MTU), "up")
        except (WireGuardError, OSError):
            await self.close()
            raise

    async def _uapi(self, request: str) -> str:
        async with self._lock:
            reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
            try:
                writer.write(request.encode())
                await writer.drain()
                answer = await reader.readuntil(b"\n\n")
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        text = answer.decode()
        errno = next((line[6:] for line in text.splitlines() if line.startswith("errno=")), "0")
        if errno != "0":
            raise WireGuardError(f"{self.name}: the interface refused the setting (errno {errno})")
        return text

    async def _set(self, lines: list[str]) -> None:
        await self._uapi("set=1\n" + "".join(f"{line}\n" for line in lines) + "\n")

    async def set_peer(
        self,
        public_key: str,
        allowed_ips: list[str],
        *,
        endpoint: str | None = None,
        keepalive: int | None = None,
    ) -> None:
        """Add the peer, or replace its allowed IPs (and endpoint, keepalive)."""
        lines = [f"public_key={_hex(public_key)}", "replace_allowed_ips=true"]
        if endpoint:
            lines.append(f"endpoint={endpoint}")
        if keepalive is not None:
            lines.append(f"persistent_keepalive_interval={keepalive}")
        lines += [f"allowed_ip={ip}" for ip in allowed_ips]
        await self._set(lines)

    async def remove_peer(self, public_key: str) -> None:
        await self._set([f"public_key={_hex(public_key)}", "remove=true"])

    async def peers(self) -> list[Peer]:
        """The interface's peers as it sees them now."""
        text = await self._uapi("get=1\n\n")
        peers: list[Peer] = []
        fields: dict[str, str] = {}
        ips: list[str] = []

        def done() -> None:
            if "public_key" in fields:
                seconds = int(fields.get("last_handshake_time_sec", "0"))
                peers.append(
                    Peer(
                        _b64(fields["public_key"]),
                        fields.get("endpoint", ""),
                        float(seconds) if seconds else None,
                        tuple(ips),
                        int(fields.get("rx_bytes", "0")),
                    )
                )

        for line in text.splitlines():
            name, _, value = line.partition("=")
            if name == "public_key":
                done()
                fields, ips = {}, []
            if name == "allowed_ip":
                ips.append(value)
            elif name in ("public_key", "endpoint", "last_handshake_time_sec", "rx_bytes"):
                fields[name] = value
        done()
        return peers

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
