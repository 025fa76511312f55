"""The raw storage contract on a real etcd, and on a 3-member cluster losing members while in use.

Every etcd here is started by the tests on free loopback ports and ended by PID, pass or fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from herder.state.backend import Compacted, KeyExists, RawEvent, RevisionMismatch
from herder.state.errors import Unavailable
from herder.state.etcd import EtcdBackend
from herder.state.etcd_process import EtcdCluster, etcd_available
from herder.state.free_ports import free_port

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(
        not etcd_available(),
        reason="the etcd binary is not installed (make test installs Debian's etcd-server)",
    ),
]


@pytest.fixture(scope="module")
def single() -> Iterator[EtcdCluster]:
    with EtcdCluster(1) as cluster:
        yield cluster


@pytest.fixture
async def backend(single: EtcdCluster) -> AsyncIterator[EtcdBackend]:
    b = await EtcdBackend(single.endpoints, prefix=f"/t-{uuid.uuid4().hex[:8]}").open()
    try:
        yield b
    finally:
        await b.close()


async def test_create_replace_remove_check_their_preconditions(backend: EtcdBackend) -> None:
    r1 = await backend.create("/a/x", b"one")
    with pytest.raises(KeyExists):
        await backend.create("/a/x", b"two")
    r2 = await backend.replace("/a/x", b"two", r1)
    assert r2 > r1
    with pytest.raises(RevisionMismatch) as stale:
        await backend.replace("/a/x", b"three", r1)
    assert stale.value.current is not None and (stale.value.current.value, stale.value.current.mod_rev) == (
        b"two",
        r2,
    )
    with pytest.raises(RevisionMismatch):
        await backend.remove("/a/x", r1)
    r3 = await backend.remove("/a/x", r2)
    assert r3 > r2 and await backend.get("/a/x") is None
    with pytest.raises(RevisionMismatch) as gone:
        await backend.replace("/a/x", b"four", r2)
    assert gone.value.current is None
    assert await backend.revision() == r3


async def test_range_is_ordered_paged_and_confined_to_its_prefix(backend: EtcdBackend) -> None:
    for name in ["c", "a", "d", "b"]:
        await backend.create(f"/a/{name}", name.encode())
    await backend.create("/ab/z", b"not under /a/")
    kvs, rev = await backend.range("/a/")
    assert [kv.key for kv in kvs] == ["/a/a", "/a/b", "/a/c", "/a/d"]
    assert rev == await backend.revision()
    page, _ = await backend.range("/a/", limit=2)
    assert [kv.key for kv in page] == ["/a/a", "/a/b"]
    page, _ = await backend.range("/a/", start_after="/a/b", limit=10)
    assert [kv.key for kv in page] == ["/a/c", "/a/d"]
    assert (await backend.range("/a/", start_after="/a/d"))[0] == []
    assert len((await backend.range(""))[0]) == 5


async def test_backends_with_neighbouring_prefixes_do_not_see_each_other(single: EtcdCluster) -> None:
    base = f"/n-{uuid.uuid4().hex[:8]}"
    first = await EtcdBackend(single.endpoints, prefix=base).open()
    second = await EtcdBackend(single.endpoints, prefix=base + "2").open()
    try:
        await first.create("/k", b"1")
        await second.create("/k", b"2")
        assert [kv.value for kv in (await first.range(""))[0]] == [b"1"]
        assert [kv.value for kv in (await second.range("/"))[0]] == [b"2"]
    finally:
        await first.close()
        await second.close()


async def _take(it: AsyncIterator[RawEvent], n: int) -> list[RawEvent]:
    return [await asyncio.wait_for(anext(it), 10) for _ in range(n)]


async def test_watch_from_an_older_revision_then_live(backend: EtcdBackend) -> None:
    r1 = await backend.create("/w/a", b"1")
    r2 = await backend.replace("/w/a", b"2", r1)
    await backend.create("/elsewhere", b"x")
    r3 = await backend.remove("/w/a", r2)
    it = backend.watch("/w/", r1)
    try:
        assert await _take(it, 3) == [
            RawEvent(r1, "/w/a", b"1", None),
            RawEvent(r2, "/w/a", b"2", b"1"),
            RawEvent(r3, "/w/a", None, b"2"),
        ]
        r4 = await backend.create("/w/b", b"live")
        assert await _take(it, 1) == [RawEvent(r4, "/w/b", b"live", None)]
    finally:
        await it.aclose()


async def test_watch_from_a_compacted_revision_raises_compacted(backend: EtcdBackend) -> None:
    old = await backend.create("/c/a", b"1")
    for i in range(3):
        await backend.create(f"/c/{i}", b"x")
    live = backend.watch("/c/", old)
    assert (await _take(live, 1))[0].rev == old
    now = await backend.revision()
    await backend.compact(now)
    it = backend.watch("/c/", old)
    with pytest.raises(Compacted) as err:
        await asyncio.wait_for(anext(it), 10)
    assert err.value.oldest == now
    # A watch that had already caught up is not affected by the compaction.
    later = await backend.create("/c/after", b"y")
    assert [e.rev for e in await _take(live, 4)][-1] == later
    await live.aclose()


async def test_unreachable_etcd_is_unavailable_with_the_endpoint_named() -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(Unavailable, match=endpoint):
        await EtcdBackend([endpoint], timeout=0.3).open()


async def test_three_members_lose_each_member_in_turn_while_writes_and_a_watch_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herder.state.etcd")
    with EtcdCluster(3) as cluster:
        # A write forwarded to a leader that just died waits out its attempt's timeout: keep it short.
        writer = await EtcdBackend(cluster.endpoints, prefix="/f", timeout=1).open()
        watcher = await EtcdBackend(cluster.endpoints, prefix="/f", timeout=1).open()
        try:
            await _failover_run(cluster, writer, watcher)
        finally:
            await writer.close()
            await watcher.close()
    # Every member was killed once, so the watch's own stream was among the casualties.
    assert any("resuming from revision" in r.getMessage() for r in caplog.records)


async def _failover_run(cluster: EtcdCluster, writer: EtcdBackend, watcher: EtcdBackend) -> None:
    start = await writer.revision() + 1
    seen: list[RawEvent] = []
    arrived = asyncio.Event()

    async def watch() -> None:
        async for event in watcher.watch("/", start):
            seen.append(event)
            arrived.set()

    # What each acknowledged operation left: key -> [(revision, value or None for a delete)].
    acked: dict[str, list[tuple[int, bytes | None]]] = {}
    unknown: set[str] = set()
    stop = asyncio.Event()

    async def write() -> None:
        i = 0
        while not stop.is_set():
            key, value = f"/k/{i:05d}", f"v{i}".encode()
            try:
                rev = await writer.create(key, value)
                acked[key] = [(rev, value)]
                if i % 3 == 0:
                    rev = await writer.replace(key, value + b"+", rev)
                    acked[key].append((rev, value + b"+"))
                if i % 5 == 0:
                    rev = await writer.remove(key, rev)
                    acked[key].append((rev, None))
            except Unavailable:
                unknown.add(key)
            i += 1
            await asyncio.sleep(0.003)

    watch_task = asyncio.create_task(watch())
    write_task = asyncio.create_task(write())
    try:
        leader = cluster.leader()
        assert leader is not None
        for victim in [leader, *(i for i in range(3) if i != leader)]:
            await asyncio.sleep(0.5)
            await asyncio.to_thread(cluster.kill, victim)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(cluster.restart, victim)
        await asyncio.sleep(0.3)
    finally:
        stop.set()
        await write_task
    last = await writer.revision()
    try:
        async with asyncio.timeout(15):
            while not seen or seen[-1].rev < last:
                arrived.clear()
                await arrived.wait()
    finally:
        watch_task.cancel()

    assert len(acked) > 50, "too few writes went through to make the test meaningful"
    assert len(unknown) <= 3, f"writes that failed through the member losses: {sorted(unknown)}"
    # Every acknowledged write reads back as it was acknowledged.
    for key, ops in acked.items():
        if key in unknown:
            continue
        kv = await writer.get(key)
        final_rev, final_value = ops[-1]
        got = (kv.value, kv.mod_rev) if kv is not None else None
        assert got == ((final_value, final_rev) if final_value is not None else None), key
    # Nothing but these writes touched the cluster: the watch saw every revision once, in order.
    assert [e.rev for e in seen] == list(range(start, last + 1))
    by_key: dict[str, list[tuple[int, bytes | None]]] = {}
    for event in seen:
        by_key.setdefault(event.key, []).append((event.rev, event.value))
    for key, ops in acked.items():
        if key not in unknown:
            assert by_key.get(key) == ops, key


class LossyProxy:
    """A loopback TCP proxy to one etcd member that can lose bytes in either direction, then cut.

    Losing etcd's answers makes a write apply while its client never hears so; losing the requests
    makes a write vanish on the way. Either way the client only sees a broken connection.
    """

    def __init__(self, endpoint: str) -> None:
        host, port = endpoint.rsplit(":", 1)
        self._upstream = (host, int(port))
        self.lose_answers = False
        self.lose_requests = False
        self.lost = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.endpoint = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.endpoint = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._upstream)
        self._writers += [client_w, server_w]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, answers: bool) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    if self.lose_answers if answers else self.lose_requests:
                        self.lost += len(data)
                        continue
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(client_r, server_w, False), pump(server_r, client_w, True))

    def cut(self) -> None:
        """Drop every connection and stop losing bytes: the client reconnects to a working path."""
        self.lose_answers = self.lose_requests = False
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def lossy(single: EtcdCluster) -> AsyncIterator[tuple[LossyProxy, EtcdBackend, EtcdBackend]]:
    """A backend through the proxy, and one straight to etcd with the same prefix to look behind it."""
    proxy = LossyProxy(single.endpoints[0])
    await proxy.start()
    prefix = f"/l-{uuid.uuid4().hex[:8]}"
    through = await EtcdBackend([proxy.endpoint], prefix=prefix, timeout=2).open()
    direct = await EtcdBackend(single.endpoints, prefix=prefix).open()
    try:
        yield proxy, through, direct
    finally:
        await through.close()
        await direct.close()
        await proxy.close()


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(10):
        while not await check():  # noqa: ASYNC110 - the state polled is in etcd, nothing here to wait on
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("op", ["create", "replace", "remove"])
async def test_a_write_whose_answer_was_lost_is_retried_and_recognised_as_applied(
    lossy: tuple[LossyProxy, EtcdBackend, EtcdBackend], op: str
) -> None:
    proxy, through, direct = lossy
    before = await direct.create("/k", b"old") if op != "create" else 0
    mark = await direct.revision()
    proxy.lose_answers = True
    writes = {
        "create": lambda: through.create("/k", b"new"),
        "replace": lambda: through.replace("/k", b"new", before),
        "remove": lambda: through.remove("/k", before),
    }
    task = asyncio.ensure_future(writes[op]())

    async def applied() -> bool:
        kv = await direct.get("/k")
        return kv is None if op == "remove" else kv is not None and kv.value == b"new"

    await _until(applied)
    assert proxy.lost > 0
    proxy.cut()
    rev = await asyncio.wait_for(task, 20)
    # The revision reported is the one the lost attempt applied at, and the key changed only once.
    events = direct.watch("/k", mark + 1)
    (change,) = await _take(events, 1)
    await events.aclose()
    assert (change.rev, change.value) == (rev, None if op == "remove" else b"new")
    kv = await direct.get("/k")
    assert (kv.mod_rev if kv else rev) == rev


@pytest.mark.parametrize("op", ["create", "replace"])
async def test_a_lost_write_whose_precondition_someone_else_spent_fails(
    lossy: tuple[LossyProxy, EtcdBackend, EtcdBackend], op: str
) -> None:
    proxy, through, direct = lossy
    before = await direct.create("/k", b"old") if op == "replace" else 0
    proxy.lose_requests = True
    task = asyncio.ensure_future(
        through.create("/k", b"ours") if op == "create" else through.replace("/k", b"ours", before)
    )

    async def sent() -> bool:
        return proxy.lost > 0

    await _until(sent)
    if op == "create":
        await direct.create("/k", b"theirs")
    else:
        await direct.replace("/k", b"theirs", before)
    proxy.cut()
    with pytest.raises(KeyExists if op == "create" else RevisionMismatch):
        await asyncio.wait_for(task, 20)
    kv = await direct.get("/k")
    assert kv is not None and kv.value == b"theirs"
