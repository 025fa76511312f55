"""Byte relays that put gRPC over a TLS connection made by Python's ``ssl``.

Why: grpc's TLS cannot use Talos's Ed25519 certificates (see ``tls``). So a gRPC channel talks plaintext
HTTP/2 to a listener on 127.0.0.1 inside this process, and each connection it opens is relayed over a TLS
connection to the machine. The emulator uses the same relay the other way round: TLS in, plaintext to its
gRPC server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable


class RefusedAfterHandshake(ConnectionError):
    """The machine closed a connection right after the TLS handshake without sending anything: in TLS 1.3 this
    is how a server that rejects the client's certificate (or its absence) answers."""


class Relay(asyncio.Protocol):
    """One end of a relay: what it receives is written to its peer, with backpressure both ways."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Relay | None = None
        self._pending: list[bytes] = []
        self._closed = False
        self._held = False
        self._outgoing: list[bytes] = []
        self._flush_scheduled = False
        self.received = 0
        self.on_lost: Callable[[Exception | None], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def link(self, peer: Relay) -> None:
        """Join two ends; data that arrived before the peer existed is flushed now."""
        self.peer, peer.peer = peer, self
        for end in (self, peer):
            pending, end._pending = end._pending, []
            for chunk in pending:
                end.data_received(chunk)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        peer = self.peer
        if peer is None or peer.transport is None or self._held:
            self._pending.append(data)
            return
        # gRPC writes many small frames; gathering what arrives in one loop iteration into one write
        # halves the system calls (measured: a send costs more than the rest of the relay).
        self._outgoing.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        chunks, self._outgoing = self._outgoing, []
        peer = self.peer
        if chunks and peer is not None and peer.transport is not None and not peer._closed:
            peer.transport.write(b"".join(chunks))

    def eof_received(self) -> bool | None:
        # HTTP/2 never half-closes usefully: the end of one direction ends the connection.
        self.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self.on_lost is not None:
            self.on_lost(exc)
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer._held:
            self.peer.transport.resume_reading()

    def hold(self, held: bool) -> None:
        """Stop (or restart) forwarding in both directions, as a network partition would."""
        for end in (self, self.peer):
            if end is None or end.transport is None or end._closed:
                continue
            end._held = held
            if held:
                end.transport.pause_reading()
            else:
                pending, end._pending = end._pending, []
                for chunk in pending:
                    end.data_received(chunk)
                end.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.close()

    @property
    def closed(self) -> bool:
        return self._closed


class ClientTunnel:
    """A listener on 127.0.0.1 whose every connection is relayed to ``host:port`` over TLS."""

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext,
        *,
        server_hostname: str | None,
        handshake_timeout: float = 10.0,
    ) -> None:
        self._host = host
        self._port = port
        self._context = context
        self._server_hostname = server_hostname
        self._handshake_timeout = handshake_timeout
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._relays: set[Relay] = set()
        self.last_error: BaseException | None = None
        """Why the last connection to the machine failed or broke (a TLS refusal shows here)."""

    async def start(self) -> int:
        """Start listening; the local port is returned."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._local_end, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def _local_end(self) -> Relay:
        local = Relay()
        self._relays.add(local)
        task = asyncio.get_running_loop().create_task(self._connect(local))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return local

    async def _connect(self, local: Relay) -> None:
        loop = asyncio.get_running_loop()
        remote = Relay()

        def lost(exc: Exception | None) -> None:
            if remote.received == 0 and (exc is None or isinstance(exc, ConnectionResetError)):
                # A gRPC server speaks first (its SETTINGS frame): a connection closed or reset before it
                # said anything, right after a completed handshake, means the machine refused us.
                self.last_error = RefusedAfterHandshake(
                    "the machine closed the connection after the TLS handshake: it refused the client certificate"
                )
            elif exc is not None:
                self.last_error = exc
            self._relays.discard(remote)

        remote.on_lost = lost
        local.on_lost = lambda _exc: self._relays.discard(local)
        try:
            await loop.create_connection(
                lambda: remote,
                self._host,
                self._port,
                ssl=self._context,
                server_hostname=self._server_hostname,
                ssl_handshake_timeout=self._handshake_timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            self.last_error = e
            local.close()
            return
        self._relays.add(remote)
        if local.closed:
            remote.close()
            return
        local.link(remote)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for relay in list(self._relays):
            relay.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
