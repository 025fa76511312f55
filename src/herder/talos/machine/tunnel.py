"""Byte relays that put gRPC over a TLS connection made by Python's ``ssl``.

Why: grpc's TLS cannot use Talos's Ed25519 certificates (see ``tls``), and a grpc server that refuses a
client's certificate closes the connection without the TLS alert saying why (the client sees a bare EOF).
So a gRPC channel talks plaintext HTTP/2 to a listener on 127.0.0.1 inside this process, and each
connection it opens is relayed over a TLS connection to the machine (``ClientTunnel``); the other way round,
a TLS listener relays each connection it accepts to a plaintext gRPC server on 127.0.0.1 and tells that
server who called (``ServerTunnel``, ``open_upstream``): the emulator's machines and herder's Talos API
gateway serve so.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass


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
        """Bytes forwarded to the peer (after decryption, for a ``TLSRelay``)."""
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
                end._forward(chunk)

    def data_received(self, data: bytes) -> None:
        self._forward(data)

    def _forward(self, data: bytes) -> None:
        self.received += len(data)
        peer = self.peer
        if peer is None or peer.transport is None or self._held:
            self._pending.append(data)
            self.received -= len(data)
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
            peer.send(b"".join(chunks))

    def send(self, data: bytes) -> None:
        """Write what the peer forwards on this end's connection."""
        assert self.transport is not None
        self.transport.write(data)

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
                    end._forward(chunk)
                end.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.close()

    @property
    def closed(self) -> bool:
        return self._closed


class TLSRelay(Relay):
    """A relay end that speaks TLS on its connection (OpenSSL, through ``ssl.SSLObject``): it decrypts what
    it receives for its peer and encrypts what its peer forwards. Unlike asyncio's own TLS, a handshake
    that fails sends the alert saying why (certificate required, unknown CA…) before the connection
    closes, as Go's TLS does; ``handshake`` tells when the handshake is done, or why it failed."""

    def __init__(
        self, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None
    ) -> None:
        super().__init__()
        self._incoming = ssl.MemoryBIO()
        self._outgoing_tls = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(
            self._incoming, self._outgoing_tls, server_side=server_side, server_hostname=server_hostname
        )
        self._server_side = server_side
        self._established = False
        self._early: list[bytes] = []
        """What the peer forwarded before the handshake was done."""
        self.error: Exception | None = None
        self.handshake: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._server_side:
            self._advance()

    def data_received(self, data: bytes) -> None:
        self._incoming.write(data)
        if not self._established:
            self._advance()
            if not self._established:
                return
        self._decrypt()

    def _advance(self) -> None:
        """Take the handshake as far as what arrived allows."""
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            self._send_tls()
            return
        except (ssl.SSLError, ssl.CertificateError) as e:
            self._fail(e)
            return
        self._established = True
        self._send_tls()
        if not self.handshake.done():
            self.handshake.set_result(None)
        early, self._early = self._early, []
        for chunk in early:
            self.send(chunk)

    def _decrypt(self) -> None:
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self.ssl_object.read(1 << 18)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                # The other end said close_notify: what came before it still goes through.
                self._closed_by_peer(chunks)
                return
            except ssl.SSLError as e:
                # An alert after the handshake (in TLS 1.3, a server refusing the client's certificate).
                self._closed_by_peer(chunks, e)
                return
            if not chunk:
                break
            chunks.append(chunk)
        # Reading can make TLS records to send (a key update's answer).
        self._send_tls()
        if chunks:
            self._forward(b"".join(chunks))

    def _closed_by_peer(self, chunks: list[bytes], error: Exception | None = None) -> None:
        if chunks:
            self._forward(b"".join(chunks))
            self._flush()
        self.error = error
        self.close()

    def _fail(self, error: Exception) -> None:
        self.error = error
        self._send_tls()  # the alert
        if not self.handshake.done():
            self.handshake.set_exception(error)
            self.handshake.exception()  # retrieved: a failed handshake is reported through ``error``
        self.close()

    def _send_tls(self) -> None:
        pending = self._outgoing_tls.read()
        if pending and self.transport is not None and not self._closed:
            self.transport.write(pending)

    def send(self, data: bytes) -> None:
        if not self._established:
            self._early.append(data)
            return
        try:
            self.ssl_object.write(data)
        except ssl.SSLError as e:
            self._fail(e)
            return
        self._send_tls()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(exc or ConnectionResetError("closed during the TLS handshake"))
            self.handshake.exception()
        super().connection_lost(exc or self.error)


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
        """Why the latest connection to the machine failed or broke (a TLS refusal shows here); None once
        one is made."""

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
        remote = TLSRelay(self._context, server_side=False, server_hostname=self._server_hostname)

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

        local.on_lost = lambda _exc: self._relays.discard(local)

        async def handshake() -> None:
            await loop.create_connection(lambda: remote, self._host, self._port)
            await remote.handshake

        try:
            await asyncio.wait_for(handshake(), self._handshake_timeout)
        except (OSError, TimeoutError, ssl.SSLError, ssl.CertificateError) as e:
            self.last_error = remote.error or e
            remote.close()
            local.close()
            return
        # What the latest connection found, not one before it: gRPC may fail a call on a connection it
        # tried before the call began, so the error is never cleared by a call, only by a connection.
        self.last_error = None
        remote.on_lost = lost
        self._relays.add(remote)
        if local.closed or remote.closed:
            remote.close()
            local.close()
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


HANDSHAKE_TIMEOUT = 10.0
"""How long an accepted connection may take to finish its TLS handshake."""


async def handshake(inbound: TLSRelay, timeout: float) -> bool:
    """Wait for an accepted connection's TLS handshake; False (and the connection closed) if it failed or
    took longer than ``timeout``."""
    try:
        await asyncio.wait_for(asyncio.shield(inbound.handshake), timeout)
    except (OSError, TimeoutError, ssl.SSLError, ssl.CertificateError):
        inbound.close()
        return False
    return True


async def open_upstream(inbound: Relay, port: int) -> tuple[Relay, str] | None:
    """The plaintext leg of a connection accepted with TLS: a connection to the server on 127.0.0.1:``port``
    and the peer name that server's gRPC gives it (``ipv4:127.0.0.1:PORT``), by which the server asks who
    called. None when the server cannot be reached (the accepted connection is then closed). The two legs
    are not joined yet: the caller records who the peer is first, then ``inbound.link(upstream)``."""
    upstream = Relay()
    try:
        await asyncio.get_running_loop().create_connection(lambda: upstream, "127.0.0.1", port)
    except OSError:
        inbound.close()
        return None
    assert upstream.transport is not None
    return upstream, "ipv4:127.0.0.1:{}".format(upstream.transport.get_extra_info("sockname")[1])


@dataclass(frozen=True)
class TLSPeer:
    """Who is at the other end of a connection a ``ServerTunnel`` relays."""

    address: str
    """The caller's IP address."""
    certificate: bytes
    """The client certificate the TLS handshake verified (DER)."""


class _Accepted(TLSRelay):
    def __init__(self, tunnel: ServerTunnel) -> None:
        super().__init__(tunnel.context, server_side=True)
        self._tunnel = tunnel

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._tunnel.accepted(self)


class ServerTunnel:
    """A TLS listener (OpenSSL's handshake: a refused client certificate ends with its alert, ``certificate
    required`` or ``unknown ca``) on a bound socket, whose every connection is relayed in plaintext to a
    gRPC server on 127.0.0.1:``upstream_port``. ``peers`` maps the peer name that server sees for a relayed
    connection to the ``TLSPeer`` behind it, for as long as the connection lasts."""

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        upstream_port: int,
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self._sock = sock
        self.context = context
        self._handshake_timeout = handshake_timeout
        self._upstream_port = upstream_port
        self._server: asyncio.Server | None = None
        self._relays: set[Relay] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.peers: dict[str, TLSPeer] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Accepted(self), sock=self._sock, backlog=256)

    def accepted(self, inbound: TLSRelay) -> None:
        self._relays.add(inbound)
        inbound.on_lost = lambda _exc: self._relays.discard(inbound)
        task = asyncio.get_running_loop().create_task(self._connect(inbound))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, inbound: TLSRelay) -> None:
        if not await handshake(inbound, self._handshake_timeout):
            return
        assert inbound.transport is not None
        certificate = inbound.ssl_object.getpeercert(binary_form=True)
        address = (inbound.transport.get_extra_info("peername") or ("",))[0]
        opened = await open_upstream(inbound, self._upstream_port)
        if opened is None:
            return
        upstream, name = opened
        self.peers[name] = TLSPeer(str(address), certificate or b"")

        def lost(_exc: Exception | None) -> None:
            self.peers.pop(name, None)
            self._relays.discard(upstream)

        upstream.on_lost = lost
        self._relays.add(upstream)
        if inbound.closed:
            upstream.close()
            return
        inbound.link(upstream)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for relay in list(self._relays):
            relay.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
