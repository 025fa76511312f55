"""herder's per-cluster TCP load balancer on real loopback sockets: it forwards to healthy backends only,
spreads connections over them, notices a backend that comes and goes, and keeps checking while its
backends change; while every backend answers it checks less often, but a connection that cannot reach
one makes it look again at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from herder.controllers.clusters.endpoint_balancer import EndpointBalancer
from tests.api.server import free_port


async def _echo_server(name: bytes) -> tuple[asyncio.Server, str]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        writer.write(name + b":" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def balancer() -> AsyncIterator[EndpointBalancer]:
    lb = EndpointBalancer("127.0.0.1", free_port(), check_every=0.1, check_timeout=0.5)
    await lb.start()
    yield lb
    await lb.stop()


async def _ask(lb: EndpointBalancer) -> bytes:
    reader, writer = await asyncio.open_connection(lb.host, lb.port)
    writer.write(b"hi")
    await writer.drain()
    data = await reader.read(100)
    writer.close()
    return data


async def _healthy(lb: EndpointBalancer, count: int) -> None:
    async with asyncio.timeout(5):
        while len(lb.healthy) != count:  # noqa: ASYNC110 - the balancer offers nothing to wait on
            await asyncio.sleep(0.02)


async def test_connections_go_to_healthy_backends_in_turn(balancer: EndpointBalancer) -> None:
    a, a_addr = await _echo_server(b"a")
    b, b_addr = await _echo_server(b"b")
    dead = f"127.0.0.1:{free_port()}"
    balancer.set_backends([a_addr, b_addr, dead])
    await _healthy(balancer, 2)
    assert set(balancer.healthy) == {a_addr, b_addr}
    answers = {await _ask(balancer) for _ in range(4)}
    assert answers == {b"a:hi", b"b:hi"}
    a.close()
    await a.wait_closed()
    await _healthy(balancer, 1)
    assert {await _ask(balancer) for _ in range(3)} == {b"b:hi"}
    b.close()


async def test_without_a_healthy_backend_a_connection_is_closed_at_once(balancer: EndpointBalancer) -> None:
    balancer.set_backends([f"127.0.0.1:{free_port()}"])
    await asyncio.sleep(0.3)
    with pytest.raises(ConnectionResetError):
        await _ask(balancer)


async def test_backends_changing_while_checked_keep_the_checks_going(balancer: EndpointBalancer) -> None:
    servers = [await _echo_server(str(i).encode()) for i in range(6)]
    for i in range(30):
        balancer.set_backends([addr for _, addr in servers[: 1 + i % 6]])
        await asyncio.sleep(0.01)
    balancer.set_backends([addr for _, addr in servers])
    await _healthy(balancer, 6)
    for server, _ in servers:
        server.close()


async def test_healthy_backends_are_checked_less_often_until_one_fails_a_connection() -> None:
    checks = 0

    async def count(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal checks
        checks += 1
        writer.close()

    server = await asyncio.start_server(count, "127.0.0.1", 0)
    lb = EndpointBalancer("127.0.0.1", free_port(), check_every=0.05, quiet_every=30, check_timeout=0.5)
    await lb.start()
    try:
        lb.set_backends([f"127.0.0.1:{server.sockets[0].getsockname()[1]}"])
        await _healthy(lb, 1)
        await asyncio.sleep(2)
        # Every 0.05 s that would be 40 checks; doubling the wait while all is well, a handful.
        assert checks < 10
        server.close()
        await server.wait_closed()
        # The wait between checks is seconds by now: the connection that found no backend ends it.
        with contextlib.suppress(ConnectionResetError):  # closed at once, maybe before "hi" was read
            assert await _ask(lb) == b""
        async with asyncio.timeout(1):
            while lb.healthy:  # noqa: ASYNC110 - the balancer offers nothing to wait on
                await asyncio.sleep(0.02)
    finally:
        await lb.stop()


async def test_stopping_with_open_connections_ends_them_without_an_error() -> None:
    """A cluster deleted while clients are connected through its balancer: the connections end, and asyncio
    reports no error (a cancelled connection handler made it log a CancelledError traceback each)."""
    held = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.set()
        await reader.read()  # until the balancer closes its side
        writer.close()

    backend = await asyncio.start_server(hold, "127.0.0.1", 0)
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    lb = EndpointBalancer("127.0.0.1", free_port(), check_every=0.1, check_timeout=0.5)
    await lb.start()
    try:
        lb.set_backends([f"127.0.0.1:{backend.sockets[0].getsockname()[1]}"])
        await _healthy(lb, 1)
        reader, writer = await asyncio.open_connection(lb.host, lb.port)
        async with asyncio.timeout(5):
            await held.wait()
        await lb.stop()
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # the client's connection ended
        writer.close()
        await asyncio.sleep(0.1)  # the loop runs the done callbacks of the ended handlers
        assert reported == []
    finally:
        loop.set_exception_handler(None)
        backend.close()


async def test_stopping_as_the_backends_change_ends_the_checks() -> None:
    """A cluster deleted as its control planes change: the checker is woken and cancelled at once, and must
    still end (Python 3.11's ``wait_for`` lost such a cancellation: the stop, and the controller behind
    it, hung for ever)."""
    lb = EndpointBalancer("127.0.0.1", free_port(), check_every=30)
    await lb.start()
    await asyncio.sleep(0.05)  # the checker waits for its next round
    lb.set_backends(["127.0.0.1:1"])
    await asyncio.wait_for(lb.stop(), 5)
