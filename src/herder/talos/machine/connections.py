"""Connections to machines' apid, shared by every client of one endpoint and credentials in this process.

A connection is a gRPC channel (through a TLS tunnel where Python's TLS must carry the machine's keys),
about 150 KiB of memory and a TLS handshake to open; gRPC multiplexes any number of calls and streams over
it. herder follows each machine from several places at once (its status stream, its logs, the probes of
a control plane, a config apply): each ``MachineClient`` takes the endpoint's open connection and gives
it back when closed, and the last one to give it back closes it, so a machine costs one connection
however many follow it.

A client that finds the machine unreachable retires the connection: clients made later (a pool's, once it
dropped the one that failed; a follower dialling again) open a new one, a new TCP connection and
handshake rather than gRPC's reconnect backoff on the old one. The old one closes once the clients still
holding it give it back; a client keeps its connection, retired or not, until it is closed, as its streams
run on it. Connections belong to the event loop they
were opened on (gRPC's channels do).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from herder.talos.machine.tunnel import ClientTunnel

Key = tuple[str, bytes, bytes]
"""An endpoint and the client certificate and CA it is reached with (empty: insecure)."""


@dataclass(eq=False)
class Connection:
    """One connection to an apid: its channel, the tunnel under it if any, and its service stubs."""

    channel: grpc.aio.Channel
    tunnel: ClientTunnel | None
    stubs: Any
    users: int = field(default=0)

    async def close(self) -> None:
        await self.channel.close()
        if self.tunnel is not None:
            await self.tunnel.close()


class Connections:
    """The open connections of one event loop, by key."""

    def __init__(self) -> None:
        self._open: dict[Key, Connection] = {}
        self._opening: dict[Key, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._open)

    async def take(self, key: Key, open_connection: Callable[[], Awaitable[Connection]]) -> Connection:
        """The open connection of ``key``, or one opened now with ``open_connection``; give it back."""
        connection = self._open.get(key)
        if connection is None:
            # One opening per key: clients that ask at once share what it opens.
            lock = self._opening.setdefault(key, asyncio.Lock())
            async with lock:
                connection = self._open.get(key)
                if connection is None:
                    connection = await open_connection()
                    self._open[key] = connection
            if not lock.locked():
                self._opening.pop(key, None)
        connection.users += 1
        return connection

    def retire(self, key: Key, connection: Connection) -> None:
        """No new client gets ``connection``; it closes once its clients gave it back."""
        if self._open.get(key) is connection:
            del self._open[key]

    async def give_back(self, key: Key, connection: Connection) -> None:
        connection.users -= 1
        if connection.users > 0:
            return
        self.retire(key, connection)
        await connection.close()


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connections] = weakref.WeakKeyDictionary()


def of_this_loop() -> Connections:
    """The connections of the running event loop."""
    loop = asyncio.get_running_loop()
    connections = _BY_LOOP.get(loop)
    if connections is None:
        connections = _BY_LOOP[loop] = Connections()
    return connections


__all__ = ["Connection", "Connections", "Key", "of_this_loop"]
