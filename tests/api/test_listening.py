"""The listeners herder makes before its servers send each reply at once: without ``TCP_NODELAY`` on
their connections, a reply written in two parts waited 40 ms for the client's delayed acknowledgement, on
every request of the API and the Talos gateway."""

from __future__ import annotations

import asyncio
import socket

from herder.api.listening import tcp_listener


async def test_the_connections_of_a_listener_send_at_once() -> None:
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    listener = tcp_listener("127.0.0.1", 0, backlog=8)
    server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
    try:
        _, writer = await asyncio.open_connection(*listener.getsockname())
        assert await asyncio.wait_for(accepted, 5) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


def test_a_port_in_use_is_an_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        try:
            tcp_listener("127.0.0.1", port, backlog=8).close()
        except OSError:
            return
        raise AssertionError(f"127.0.0.1:{port} was listened on twice")
