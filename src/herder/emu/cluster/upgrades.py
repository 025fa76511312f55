"""Connections the emulated kube-apiserver took over from HTTP (``krm.takeover``) for a stream: a
WebSocket (RFC 6455, framed by wsproto) whose messages go to a handler, and SPDY/3.1 (``spdy``) on the raw
connection. Both answer the upgrade themselves: the WebSocket handshake's 101 (with the subprotocol chosen),
SPDY's 101 with ``X-Stream-Protocol-Version``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from herder.emu.cluster import spdy

log = logging.getLogger(__name__)

NORMAL_CLOSURE = 1000


def request_head(scope: MutableMapping[str, Any]) -> bytes:
    """The HTTP request head of an ASGI scope, as the client sent it (for a WebSocket handshake)."""
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    lines = [scope["method"].encode() + b" " + target + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in scope["headers"]]
    return b"\r\n".join(lines) + b"\r\n\r\n"


class WebSocket(asyncio.Protocol):
    """A WebSocket, server side: ``on_message`` gets each complete message (bytes; text as UTF-8),
    ``on_close`` is called once when it ends, either way."""

    def __init__(
        self,
        head: bytes,
        subprotocol: str | None,
        on_message: Callable[[bytes], None],
        on_close: Callable[[], None],
    ) -> None:
        self._head = head
        self._subprotocol = subprotocol
        self._on_message = on_message
        self._on_close = on_close
        self._ws = WSConnection(ConnectionType.SERVER)
        self._parts: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._receive(self._head)

    def data_received(self, data: bytes) -> None:
        self._receive(data)

    def _receive(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, Request):
                    self.transport.write(self._ws.send(AcceptConnection(subprotocol=self._subprotocol)))
                elif isinstance(event, Message):
                    payload = event.data.encode() if isinstance(event, TextMessage) else bytes(event.data)
                    self._parts.append(payload)
                    if event.message_finished:
                        message, self._parts = b"".join(self._parts), []
                        self._on_message(message)
                elif isinstance(event, Ping):
                    self.transport.write(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    if not self.closed:
                        self.transport.write(self._ws.send(event.response()))
                    self._end()
        except (RemoteProtocolError, LocalProtocolError) as e:
            log.debug("websocket protocol error: %s", e)
            self._end()

    def send(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(self._ws.send(BytesMessage(data=data)))

    def close(self, code: int = NORMAL_CLOSURE, reason: str = "") -> None:
        """Say goodbye (a close frame) and end the connection."""
        if not self.closed and self.transport is not None:
            # Not when the client's own close frame came first: then it was answered already.
            with contextlib.suppress(LocalProtocolError):
                self.transport.write(self._ws.send(CloseConnection(code=code, reason=reason)))
        self._end()

    def _end(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.closed:
            self.closed = True
            self._on_close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self._on_close()


class SpdyConnection(asyncio.Protocol):
    """A connection upgraded to SPDY/3.1: the 101 answer, then a ``spdy.Session`` over it."""

    def __init__(self, protocol_version: str, on_stream: Callable[[spdy.Stream], None]) -> None:
        self._protocol_version = protocol_version
        self._on_stream = on_stream
        self.transport: asyncio.Transport | None = None
        self.session: spdy.Session | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        head = [
            "HTTP/1.1 101 Switching Protocols",
            "Connection: Upgrade",
            "Upgrade: SPDY/3.1",
            f"X-Stream-Protocol-Version: {self._protocol_version}",
        ]
        transport.write(("\r\n".join(head) + "\r\n\r\n").encode())
        self.session = spdy.Session(transport.write, self._on_stream)

    def data_received(self, data: bytes) -> None:
        assert self.session is not None and self.transport is not None
        try:
            self.session.feed(data)
        except spdy.ProtocolError as e:
            log.debug("SPDY protocol error: %s", e)
            self.transport.abort()

    def close(self) -> None:
        """End the session (GOAWAY) and the connection."""
        if self.session is not None:
            self.session.go_away()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.session is not None:
            self.session.lost()
