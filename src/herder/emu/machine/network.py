"""The network side of emulated machines: one TLS listener per machine on its own loopback address (as a real
machine has its own IP), relayed to the emulator's single internal gRPC server.

The relay tells the gRPC server who is calling: each relayed connection reaches the internal server from its
own local port, and the peer string gRPC reports for it (``ipv4:127.0.0.1:PORT``) is looked up in
``peers`` to find the machine the caller dialled and the roles in the caller's verified certificate.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field

from herder.emu import netns
from herder.talos.machine import roles as talos_roles
from herder.talos.machine.tls import peer_organizations
from herder.talos.machine.tunnel import HANDSHAKE_TIMEOUT, Relay, TLSRelay, handshake, open_upstream

GRACE = 0.5
"""How long connections of a restarted apid may finish what they were doing before they are cut."""


@dataclass(frozen=True)
class Peer:
    machine: str
    """The uuid of the machine the caller connected to."""
    roles: frozenset[str]
    authenticated: bool
    """Whether the caller presented a certificate the machine verified (not in maintenance mode)."""


class _Inbound(TLSRelay):
    def __init__(self, listener: _Listener, context: ssl.SSLContext) -> None:
        super().__init__(context, server_side=True)
        self._listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._listener.accepted(self)


@dataclass
class _Listener:
    network: Network
    machine: str
    authenticated: bool
    context: ssl.SSLContext
    """What new connections are served with (replaced when apid reloads its certificates)."""
    server: asyncio.Server | None = None
    relays: set[Relay] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    stopped: bool = False

    def accepted(self, inbound: _Inbound) -> None:
        if self.stopped:
            # Its TLS handshake began before apid went away: the connection must not outlive it.
            inbound.close()
            return
        self.relays.add(inbound)
        task = asyncio.get_running_loop().create_task(self._connect(inbound))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self, inbound: _Inbound) -> None:
        if not await handshake(inbound, HANDSHAKE_TIMEOUT):
            return
        roles = (
            peer_organizations(inbound.ssl_object) if self.authenticated else talos_roles.MAINTENANCE_ROLES
        )
        opened = await open_upstream(inbound, self.network.upstream_port)
        if opened is None:
            return
        upstream, key = opened
        self.network.peers[key] = Peer(self.machine, roles, self.authenticated)

        def lost(_exc: Exception | None) -> None:
            self.network.peers.pop(key, None)
            self.relays.discard(upstream)

        upstream.on_lost = lost
        inbound.on_lost = lambda _exc: self.relays.discard(inbound)
        self.relays.add(upstream)
        if inbound.closed:
            upstream.close()
            return
        inbound.link(upstream)
        if self.network.is_partitioned(self.machine):
            inbound.hold(True)

    def stop(self, *, grace: float) -> None:
        self.stopped = True
        if self.server is not None:
            self.server.close()
            self.server = None
        relays = list(self.relays)
        if grace > 0:
            asyncio.get_running_loop().call_later(grace, _close_all, relays)
        else:
            _close_all(relays)


def _close_all(relays: list[Relay]) -> None:
    for relay in relays:
        relay.close()


class Network:
    """Every machine's apid listener, and the table of callers the internal gRPC server consults."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.peers: dict[str, Peer] = {}
        self._listeners: dict[str, _Listener] = {}
        self._partitioned: set[str] = set()

    async def serve(
        self, machine: str, address: str, port: int, context: ssl.SSLContext, *, authenticated: bool
    ) -> None:
        """(Re)start a machine's apid with a TLS context; open connections get a short grace, then are cut."""
        self.stop(machine)
        listener = _Listener(self, machine, authenticated, context)
        loop = asyncio.get_running_loop()
        inside = await netns.listener(address, port)
        if inside is not None:  # a joined machine: in its own namespace, on its tunnel address
            listener.server = await loop.create_server(
                lambda: _Inbound(listener, listener.context), sock=inside
            )
        else:
            listener.server = await loop.create_server(
                lambda: _Inbound(listener, listener.context), address, port, reuse_address=True, backlog=256
            )
        self._listeners[machine] = listener

    def recredential(self, machine: str, context: ssl.SSLContext) -> None:
        """New connections to the machine's apid get ``context``; open ones keep theirs."""
        listener = self._listeners.get(machine)
        if listener is not None:
            listener.context = context

    def stop(self, machine: str, *, grace: float = GRACE) -> None:
        """The machine's apid goes away: new connections are refused, open ones end after ``grace``."""
        listener = self._listeners.pop(machine, None)
        if listener is not None:
            listener.stop(grace=grace)

    def serving(self, machine: str) -> bool:
        return machine in self._listeners

    def is_partitioned(self, machine: str) -> bool:
        return machine in self._partitioned

    def partition(self, machine: str, partitioned: bool) -> None:
        """Cut a machine off (its connections stop carrying anything) or heal it."""
        if partitioned:
            self._partitioned.add(machine)
        else:
            self._partitioned.discard(machine)
        listener = self._listeners.get(machine)
        if listener is not None:
            for relay in list(listener.relays):
                if isinstance(relay, _Inbound):
                    relay.hold(partitioned)

    async def close(self) -> None:
        for machine in list(self._listeners):
            self.stop(machine, grace=0)
        await asyncio.sleep(0)
