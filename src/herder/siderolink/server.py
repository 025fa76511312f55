"""The SideroLink server as ``herder serve --siderolink-listen HOST:PORT --siderolink-wireguard HOST:PORT``
runs it: the Provision API (over TLS with ``--siderolink-tls-cert``, as ``siderolink.api=https://…`` asks;
else plaintext gRPC, as ``grpc://…`` asks), herder's WireGuard
interface (wireguard-go, the prefix's first address, one peer per joined machine), and a watch over the
peers that tells on each machine's SideroLink whether its tunnel carries anything.

The peers are the SideroLinks in the store, resynced every poll: a link deleted by an Admin drops its peer,
and after a restart every machine that joined is a peer again (herder's key is kept in the data directory,
so machines need not rejoin). A peer is Connected while packets keep coming from it (Talos keeps the tunnel
alive every 25 s); once none came for ``peer_timeout`` seconds its link says Connected=False with the time of
its last handshake, and recovers by itself when packets come again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from herder.api.audit import AuditLog
from herder.resources.join import SIDERO_LINK, SideroLinkSpec, SideroLinkStatus
from herder.resources.status import status_of
from herder.siderolink.addresses import server_address
from herder.siderolink.kernel_logs import KernelLogs
from herder.siderolink.provision import NAMESPACE, ProvisionService, Tunnel
from herder.siderolink.records import mutate_status
from herder.siderolink.sinks import Sinks
from herder.state.machine_logs import MachineLogs
from herder.state.store import Store
from herder.talos.api.siderolink import provision_pb2_grpc as pb_grpc
from herder.talos.siderolink.wireguard import WireGuard, WireGuardError, generate_keys, public_key_of

log = logging.getLogger("herder.siderolink")

KEY_FILE = "siderolink.key"
PEER_TIMEOUT = 90.0
"""Seconds without a packet from a machine before its tunnel is reported down (Talos keeps it alive every
25 s, so three keepalives lost)."""
POLL = 2.0
CAP_NET_ADMIN = 12


@dataclass(frozen=True)
class ProvisionTls:
    """The certificate (its chain after it) and key the Provision API serves TLS with."""

    chain: bytes
    key: bytes

    @classmethod
    def read(cls, cert: Path | None, key: Path | None) -> ProvisionTls | None:
        """From ``--siderolink-tls-cert`` and ``--siderolink-tls-key`` (None: neither); ValueError naming the
        flag and what is wrong."""
        if cert is None and key is None:
            return None
        if cert is None or key is None:
            raise ValueError(
                "--siderolink-tls-cert and --siderolink-tls-key go together: give both, or neither"
            )
        chain, private = _read(cert, "--siderolink-tls-cert"), _read(key, "--siderolink-tls-key")
        try:
            leaf = x509.load_pem_x509_certificate(chain)
        except ValueError:
            raise ValueError(f"--siderolink-tls-cert {cert}: not a PEM certificate") from None
        try:
            loaded = serialization.load_pem_private_key(private, None)
        except (ValueError, TypeError):
            raise ValueError(f"--siderolink-tls-key {key}: not an unencrypted PEM private key") from None
        public = serialization.PublicFormat.SubjectPublicKeyInfo
        if loaded.public_key().public_bytes(
            serialization.Encoding.DER, public
        ) != leaf.public_key().public_bytes(serialization.Encoding.DER, public):
            raise ValueError(f"--siderolink-tls-key {key}: not the key of --siderolink-tls-cert {cert}")
        return cls(chain, private)


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class SideroLinkOptions:
    listen: tuple[str, int]
    """Where the Provision API listens."""
    wireguard: tuple[str, int]
    """The WireGuard endpoint machines are told (its port is where herder's interface listens, on every
    address)."""
    prefix: ipaddress.IPv6Network
    interface: str = "siderolink"
    peer_timeout: float = PEER_TIMEOUT
    poll: float = POLL
    tls: ProvisionTls | None = None
    """None: the Provision API is plaintext gRPC (``siderolink.api=grpc://``)."""


def has_net_admin() -> bool:
    """Whether this process may make network interfaces (CAP_NET_ADMIN in its effective set)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return os.geteuid() == 0


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def server_key(data_dir: Path) -> str:
    """herder's WireGuard private key, made on first start (mode 0600) and kept."""
    path = data_dir / KEY_FILE
    if path.exists():
        return path.read_text().strip()
    key = generate_keys().private
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


@dataclass
class _Seen:
    received: int
    at: float


def _knock(address: ipaddress.IPv6Address) -> None:
    """An empty datagram to a machine's tunnel address (the discard port): WireGuard, having a packet for
    the peer and no session with it, starts a handshake."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as knock:
        knock.setblocking(False)
        knock.sendto(b"", (str(address), 9))


class SideroLinkServer:
    """Listens (Provision) from the moment it is made; the interface comes up in ``run``."""

    def __init__(
        self, store: Store, audit: AuditLog, data_dir: Path, options: SideroLinkOptions, logs: MachineLogs
    ) -> None:
        self._store = store
        self._options = options
        self._private = server_key(data_dir)
        self._address = server_address(options.prefix)
        self.tunnel = Tunnel(
            public_key=public_key_of(self._private),
            endpoints=(_host_port(*options.wireguard),),
            prefix=options.prefix,
            server_address=self._address,
        )
        self.wireguard = WireGuard(options.interface)
        self._server = grpc.aio.server()
        pb_grpc.add_ProvisionServiceServicer_to_server(  # type: ignore[no-untyped-call]
            ProvisionService(store, audit, self.tunnel, self._add_peer), self._server
        )
        target = _host_port(*options.listen)
        try:
            if options.tls is not None:
                credentials = grpc.ssl_server_credentials([(options.tls.key, options.tls.chain)])
                self._server.add_secure_port(target, credentials)
            else:
                self._server.add_insecure_port(target)
        except RuntimeError:
            raise OSError(
                f"--siderolink-listen {target}: cannot listen there (is the port in use?)"
            ) from None
        self._seen: dict[str, _Seen] = {}
        self._restored = False
        """Whether the peers of the links herder had when it started were made again."""
        self._by_address: dict[str, str] = {}
        self.sinks = Sinks(KernelLogs(store, logs, NAMESPACE), self._by_address.get)
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()

    async def _add_peer(self, uuid: str, public_key: str, address: str, replaced: str | None) -> None:
        await self._ready.wait()
        self._by_address[address] = uuid  # its events may come before the next resync
        if replaced:
            with contextlib.suppress(WireGuardError):
                await self.wireguard.remove_peer(replaced)
            self._seen.pop(replaced, None)
        await self.wireguard.set_peer(public_key, [f"{address}/128"])
        self._seen[public_key] = _Seen(0, time.monotonic())

    async def run(self) -> None:
        if not has_net_admin():
            log.error(
                "SideroLink: herder needs CAP_NET_ADMIN to make its WireGuard interface %s (run it as root, "
                "or grant it: setcap cap_net_admin+ep, or --cap-add NET_ADMIN in a container)",
                self._options.interface,
            )
        await self.wireguard.start(self._private, str(self._address), listen_port=self._options.wireguard[1])
        await self._server.start()
        try:
            await self.sinks.start(str(self._address.ip))
        except OSError as exc:
            log.error(
                "SideroLink: the events and kernel log sinks cannot listen on %s: %s", self._address.ip, exc
            )
        self._ready.set()
        if self._options.tls is None:
            log.warning(
                "SideroLink: the Provision API is plaintext gRPC: join tokens travel in the clear to it "
                "(--siderolink-tls-cert and --siderolink-tls-key serve it over TLS)"
            )
        log.info(
            "SideroLink: Provision API on %s (%s), WireGuard %s on %s (interface %s, %s)",
            _host_port(*self._options.listen),
            "TLS" if self._options.tls is not None else "plaintext",
            self.tunnel.public_key,
            self.tunnel.endpoints[0],
            self._options.interface,
            self._address,
        )
        try:
            while not self._stopping.is_set():
                try:
                    await self._sync()
                except (WireGuardError, OSError) as exc:
                    log.warning("SideroLink: reading the WireGuard peers failed: %s", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self._options.poll)
        finally:
            await self._server.stop(1.0)
            await self.sinks.stop()
            await self.wireguard.close()

    def stop(self) -> None:
        self._stopping.set()

    async def _sync(self) -> None:
        """Peers as the links say, and each link's Connected as its peer's packets say."""
        # The peers before the links: Provision makes a link before its peer, so every peer read here has its
        # link in the list read after (the other way round, a machine joining in between lost its new peer).
        peers = {peer.public_key: peer for peer in await self.wireguard.peers()}
        links = {
            SIDERO_LINK.spec_of(link, SideroLinkSpec).node_public_key: link
            for link in (await self._store.list(SIDERO_LINK, NAMESPACE)).items
        }
        for key in peers.keys() - links.keys():
            await self.wireguard.remove_peer(key)
            self._seen.pop(key, None)
        now = time.monotonic()
        addresses = {
            key: ipaddress.IPv6Interface(SIDERO_LINK.spec_of(link, SideroLinkSpec).node_address).ip
            for key, link in links.items()
        }
        # In place and at once: the sinks look senders up in it meanwhile.
        self._by_address.clear()
        self._by_address.update({str(addresses[key]): link.name for key, link in links.items()})
        restoring, self._restored = not self._restored, True
        for key, link in links.items():
            address = addresses[key]
            peer = peers.get(key)
            if peer is None or peer.allowed_ips != (f"{address}/128",):
                # The peers made again as herder starts again are told where their machines last were, and
                # a first packet there makes the handshake at once: a machine itself would only when it
                # rekeys, up to two minutes on. (Only then: a machine joining now comes from elsewhere.)
                endpoint = status_of(link, SideroLinkStatus).peer_endpoint if restoring else ""
                await self.wireguard.set_peer(key, [f"{address}/128"], endpoint=endpoint or None)
                if endpoint:
                    _knock(address)
            seen = self._seen.setdefault(key, _Seen(0, now))
            received = peer.received if peer is not None else 0
            if received != seen.received:
                seen.received, seen.at = received, now
            handshake = peer.last_handshake if peer is not None else None
            up = handshake is not None and now - seen.at < self._options.peer_timeout
            await self._report(
                link.name, up, handshake, peer.endpoint if peer is not None else "", now - seen.at
            )

    async def _report(
        self, name: str, up: bool, handshake: float | None, endpoint: str, quiet: float
    ) -> None:
        at = datetime.fromtimestamp(handshake, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if handshake else ""
        if up:
            reason, message = "Handshaking", f"WireGuard peer at {endpoint}"
        elif handshake is None:
            reason, message = "NoHandshake", "the machine has not completed a WireGuard handshake with herder"
        else:
            reason = "HandshakeStale"
            message = f"no WireGuard packet from the machine for {quiet:.0f}s; last handshake at {at}"

        received = self.sinks.received.get(name)
        # What came since the last write (added to what was counted before, across restarts of herder).
        events, lines = (received.events, received.kernel_lines) if received is not None else (0, 0)

        def record(status: dict[str, Any]) -> None:
            current = SideroLinkStatus.model_validate(status)
            current.last_handshake, current.peer_endpoint = at, endpoint
            if received is not None and (events or lines):
                current.events += events
                current.kernel_log_lines += lines
                current.last_event = received.last_event
                current.last_event_at = (
                    datetime.fromtimestamp(received.last_event_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    if received.last_event_at
                    else ""
                )
            known = current.condition("Connected")
            # The quiet time ticks every poll: rewrite only a change of state, not of that count.
            if known is None or known.status != ("True" if up else "False") or known.reason != reason:
                current.set_condition("Connected", up, reason, message)
            status.clear()
            status.update(current.model_dump(by_alias=True, exclude_defaults=True))

        await mutate_status(self._store, SIDERO_LINK, name, NAMESPACE, record)
        if received is not None:
            received.events -= events
            received.kernel_lines -= lines
