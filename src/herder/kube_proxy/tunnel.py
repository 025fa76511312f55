"""Upgraded connections through the proxy: exec, attach and port-forward, over WebSocket or SPDY.

The request goes to the cluster on a connection of its own, as it came but for its credentials. If the
cluster answers ``101 Switching Protocols``, the caller's connection is taken over from the HTTP server
and both are relayed byte for byte until either side closes, or the caller's access ends; any other
answer is relayed as a plain response (a refusal from the cluster's RBAC, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from herder.krm.takeover import TakeOver
from herder.kube_proxy.upstreams import Upstream

log = logging.getLogger("herder.kube_proxy")

_HEAD_LIMIT = 64 << 10
# Bytes buffered towards one side before reading from the other pauses.
_HIGH_WATER = 1 << 20

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def open_tunnel(
    request: Request,
    path: str,
    upstream: Upstream,
    headers: list[tuple[str, str]],
    send: Send,
    take_over: TakeOver,
    revoked: Awaitable[None],
) -> int:
    """Carry one upgrade request to the cluster and, once it agrees, relay the connection; the status
    code the cluster answered."""
    parsed = urlsplit(upstream.endpoint)
    host, port = parsed.hostname or "", parsed.port or 443
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=upstream.context, server_hostname=host), 10
        )
    except (OSError, ssl.SSLError, TimeoutError) as exc:
        body = f"the cluster's Kubernetes API is unreachable: {exc or type(exc).__name__}".encode()
        await _plain(send, 503, [], body)
        return 503
    head = [f"{request.method} {path} HTTP/1.1", f"Host: {parsed.netloc}"]
    head += [f"{k}: {v}" for k, v in headers]
    head += [f"Connection: {request.headers.get('connection', 'Upgrade')}"]
    if "upgrade" in request.headers:
        head.append(f"Upgrade: {request.headers['upgrade']}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    try:
        answer = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
        writer.close()
        await _plain(send, 502, [], f"the cluster did not answer the upgrade: {exc}".encode())
        return 502
    status_line, *lines = answer.decode("latin-1").split("\r\n")
    code = int(status_line.split(" ", 2)[1])
    if code != 101:
        fields = [tuple(line.split(":", 1)) for line in lines if ":" in line]
        length = next((int(v) for k, v in fields if k.strip().lower() == "content-length"), None)
        body = await (reader.readexactly(length) if length is not None else reader.read(_HEAD_LIMIT))
        writer.close()
        kept = [
            (k.strip(), v.strip())
            for k, v in fields
            if k.strip().lower() not in ("connection", "transfer-encoding", "content-length")
        ]
        await _plain(send, code, kept, body)
        return code
    relay = _Relay(answer, writer)
    take_over(relay)
    await relay.run(reader, revoked)
    return code


class _Relay(asyncio.Protocol):
    """The caller's side of a tunnel: what it sends goes to the cluster, and back."""

    def __init__(self, answer: bytes, upstream: asyncio.StreamWriter) -> None:
        self._answer = answer
        self._upstream = upstream
        self._transport: asyncio.Transport | None = None
        self._closed = asyncio.Event()
        self._resuming: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._answer)

    def data_received(self, data: bytes) -> None:
        self._upstream.write(data)
        if self._upstream.transport.get_write_buffer_size() > _HIGH_WATER and self._transport is not None:
            self._transport.pause_reading()
            self._resuming = asyncio.ensure_future(self._resume())

    async def _resume(self) -> None:
        with contextlib.suppress(Exception):
            await self._upstream.drain()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def eof_received(self) -> bool | None:
        with contextlib.suppress(Exception):
            self._upstream.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed.set()
        self._upstream.close()

    async def run(self, reader: asyncio.StreamReader, revoked: Awaitable[None]) -> None:
        async def back() -> None:
            while chunk := await reader.read(65536):
                assert self._transport is not None
                self._transport.write(chunk)
                if self._transport.get_write_buffer_size() > _HIGH_WATER:
                    await asyncio.sleep(0.01)

        tasks = [
            asyncio.ensure_future(back()),
            asyncio.ensure_future(self._closed.wait()),
            asyncio.ensure_future(revoked),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._transport is not None:
                self._transport.close()
            self._upstream.close()


async def _plain(send: Send, code: int, headers: list[tuple[str, str]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
            + [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
