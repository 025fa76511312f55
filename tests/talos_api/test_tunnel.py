"""The TLS end of herder's relays (``tunnel.TLSRelay``) on real sockets: a refused handshake tells the client
why with its alert, and a connection it closes ends at once, even when the other end is not reading (asyncio's
own TLS waits up to 30 s for the peer's close_notify, while the relay drops what it is given)."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import pytest

from herder.api.tls import ensure_tls
from herder.talos.machine.tunnel import TLSRelay


def _server_context(tmp_path: Path, *, require_client: bool) -> tuple[ssl.SSLContext, bytes]:
    files = ensure_tls(tmp_path, ["127.0.0.1"], prefix="t-")
    assert files.ca is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(files.cert, files.key)
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(files.ca)
    return context, files.ca.read_bytes()


async def _serve(context: ssl.SSLContext) -> tuple[asyncio.Server, list[TLSRelay]]:
    accepted: list[TLSRelay] = []

    def end() -> TLSRelay:
        relay = TLSRelay(context, server_side=True)
        accepted.append(relay)
        return relay

    server = await asyncio.get_running_loop().create_server(end, "127.0.0.1", 0)
    return server, accepted


async def test_a_refused_client_is_told_why(tmp_path: Path) -> None:
    context, ca = _server_context(tmp_path, require_client=True)
    server, _accepted = await _serve(context)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cadata=ca.decode())
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
        await asyncio.wait_for(reader.read(1), 5)
    writer.close()
    server.close()


async def test_a_closed_connection_ends_at_once_though_the_peer_reads_nothing(tmp_path: Path) -> None:
    context, ca = _server_context(tmp_path, require_client=False)
    server, accepted = await _serve(context)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cadata=ca.decode())
    port = server.sockets[0].getsockname()[1]
    transport, _protocol = await asyncio.get_running_loop().create_connection(
        asyncio.Protocol, "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
    )
    await asyncio.wait_for(accepted[0].handshake, 5)
    lost = asyncio.get_running_loop().create_future()
    accepted[0].on_lost = lambda _exc: lost.set_result(time.monotonic())
    transport.pause_reading()  # a busy client
    closed = time.monotonic()
    accepted[0].close()
    assert await asyncio.wait_for(lost, 5) - closed < 1
    transport.close()
    server.close()
