"""``python -m herder.bench store --backend sqlite|etcd``: the store's write, list and watch figures.

Writes are ~1 KB objects one at a time, beside the raw store doing the same work with the same
durability in the same run (plain sqlite3 with WAL and synchronous=FULL; plain etcd puts through the
same client). Listing is 10,000 objects filtered by a label selector. Watches: 100 watchers see
10,000 objects written one at a time (delivery latency), then 100 more replay those 10,000 events
from an earlier revision (fan-out rate), all in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from herder.bench.report import emit, percentile
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.backend import Backend
from herder.state.sqlite import SQLiteBackend
from herder.state.store import Store, WatchEvent

if TYPE_CHECKING:
    from herder.state.etcd import EtcdBackend

PAYLOAD = "x" * 900  # with metadata, about 1 KB stored


def _patch(name: str, labels: dict[str, str] | None = None, data: str = PAYLOAD) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"data": data},
        }
    )


class Baseline(Protocol):
    """The raw store's writes that the store's are measured against: ``insert(i)``, then ``update(i)``."""

    async def insert(self, i: int) -> None: ...

    async def update(self, i: int) -> None: ...

    async def close(self) -> None: ...


async def _paired_rates(
    n: int, ours: Callable[[int], Awaitable[object]], theirs: Callable[[int], Awaitable[object]]
) -> tuple[float, float]:
    """Writes/s of ``ours`` and of the baseline's ``theirs``, n each, run in alternating blocks: the
    machine is shared and its disk and CPU speed drift, so both sides must see the same moments."""
    spent = [0.0, 0.0]
    block = max(1, n // 20)
    for first in range(0, n, block):
        for side, op in enumerate((theirs, ours)):
            start = time.perf_counter()
            for i in range(first, min(first + block, n)):
                await op(i)
            spent[side] += time.perf_counter() - start
    return n / spent[1], n / spent[0]


class SQLiteBaseline:
    """Plain sqlite3 keeping the objects the plainest way, with the backend's durability: a table of
    keys and values updated in place (no history, no Python), one transaction per write, WAL +
    synchronous=FULL, the backend's key shape, and updates conditional on the revision."""

    def __init__(self, path: Path, value: bytes) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(
            "CREATE TABLE objects (key TEXT PRIMARY KEY, value BLOB NOT NULL, mod_rev INTEGER NOT NULL)"
        )
        self._value = value

    async def insert(self, i: int) -> None:
        self._conn.execute("INSERT INTO objects VALUES (?,?,?)", (_key(i), self._value, 1))

    async def update(self, i: int) -> None:
        sql = "UPDATE objects SET value=?, mod_rev=? WHERE key=? AND mod_rev=?"
        if self._conn.execute(sql, (self._value, 2, _key(i), 1)).rowcount != 1:
            raise RuntimeError(f"baseline update of {_key(i)} matched no row")

    async def close(self) -> None:
        self._conn.close()


class EtcdBaseline:
    """Plain etcd puts (and compare-and-put updates) through the same client, one at a time.

    They go under a prefix of their own: the store's watch would choke on values it cannot decode.
    """

    def __init__(self, backend: EtcdBackend, value: bytes) -> None:
        self._backend = backend
        self._value = value
        self._revs: dict[int, int] = {}

    @classmethod
    async def open(cls, store_backend: Backend, value: bytes) -> EtcdBaseline:
        from herder.state.etcd import EtcdBackend

        assert isinstance(store_backend, EtcdBackend)
        prefix = store_backend.prefix + "-baseline"
        return cls(await EtcdBackend(store_backend.endpoints, prefix=prefix).open(), value)

    async def insert(self, i: int) -> None:
        self._revs[i] = await self._backend.raw_put(_key(i), self._value)

    async def update(self, i: int) -> None:
        await self._backend.raw_put(_key(i), self._value, expected_rev=self._revs[i])

    async def close(self) -> None:
        await self._backend.close()


def _key(i: int) -> str:
    return f"/herder.dev/configpatches/default/w{i:06d}"


@contextlib.asynccontextmanager
async def _backend(kind: str, workdir: Path, etcd_url: str | None) -> AsyncIterator[tuple[Backend, str]]:
    if kind == "sqlite":
        sqlite = await SQLiteBackend(workdir / "herder.db").open()
        yield sqlite, "sqlite"
        return
    from herder.state.etcd import EtcdBackend
    from herder.state.etcd_process import EtcdCluster

    with contextlib.ExitStack() as stack:
        if etcd_url:
            endpoints = etcd_url.removeprefix("etcd://").split(",")
        else:
            endpoints = stack.enter_context(EtcdCluster(members=1, data_dir=workdir / "etcd")).endpoints
        backend = await EtcdBackend(endpoints, prefix=f"/bench-{int(time.time())}").open()
        yield backend, "etcd"


async def _watchers(
    store: Store, count: int, events: int, resource_version: int | None, latencies: list[float] | None
) -> list[asyncio.Task[None]]:
    """``count`` watchers of the fan-out namespace, each ending after ``events`` events; they are
    subscribed when this returns."""

    async def watch(stream: AsyncGenerator[WatchEvent, None], first: asyncio.Future[WatchEvent]) -> None:
        event = await first
        for seen in range(1, events + 1):
            if latencies is not None:
                latencies.append(time.perf_counter() - float(event.object.metadata.annotations["t"]))
            if seen < events:
                event = await anext(stream)
        await stream.aclose()

    tasks = []
    for _ in range(count):
        stream = store.watch("configpatches", "fanout", resource_version=resource_version)
        first = asyncio.ensure_future(anext(stream))
        tasks.append(asyncio.create_task(watch(stream, first)))
    await asyncio.sleep(0.2)  # every watcher is subscribed, waiting for its first event
    return tasks


async def _fan_out(store: Store, watchers: int, events: int) -> tuple[float, float, float]:
    """Live: ``watchers`` watch while ``events`` objects are written one at a time (delivery p99 and
    rate). Then fan-out proper: as many new watchers replay those events from the revision before
    them, so the rate is the watch machinery's alone, not bounded by the writes."""
    before = await store.revision()
    latencies: list[float] = []
    live = await _watchers(store, watchers, events, None, latencies)
    start = time.perf_counter()
    for i in range(events):
        obj = _patch(f"e{i:05d}", data="x")
        obj.metadata.namespace = "fanout"
        obj.metadata.annotations["t"] = repr(time.perf_counter())
        await store.create(obj)
    await asyncio.gather(*live)
    live_rate = watchers * events / (time.perf_counter() - start)
    # Timed from before the watchers subscribe: they start replaying at once.
    start = time.perf_counter()
    replay = await _watchers(store, watchers, events, before, None)
    await asyncio.gather(*replay)
    return watchers * events / (time.perf_counter() - start), live_rate, percentile(latencies, 99) * 1000


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="herder-bench-") as tmp:
        workdir = Path(tmp)
        async with _backend(args.backend, workdir, args.etcd) as (backend, label):
            store = await Store(backend, herder_registry()).start()
            for ns in ("default", "fanout"):
                await store.create(
                    Resource.model_validate(
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    )
                )
            n = args.writes
            # The baseline writes values as large as the store's: the bytes it keeps for one object.
            probe = await store.create(_patch("probe"))
            stored = await backend.get(Store.key(store.kind("ConfigPatch"), probe.name, probe.namespace))
            assert stored is not None
            baseline: Baseline
            if label == "sqlite":
                baseline = SQLiteBaseline(workdir / "baseline.db", stored.value)
            else:
                baseline = await EtcdBaseline.open(backend, stored.value)
            # The objects are made before the clock starts, as the baseline's value is: building
            # them is the caller's work, not the store's.
            new = [_patch(f"w{i:06d}") for i in range(n)]
            made: list[Resource] = []

            async def create(i: int) -> None:
                made.append(await store.create(new[i]))

            async def update(i: int) -> None:
                obj = made[i]
                obj.spec = {"data": PAYLOAD[:-1] + "y"}
                await store.update(obj)

            creates, base_create = await _paired_rates(n, create, baseline.insert)
            updates, base_update = await _paired_rates(n, update, baseline.update)
            await baseline.close()
            emit(f"store.{label}.create", creates, "objects/s", baseline=base_create)
            emit(f"store.{label}.update", updates, "objects/s", baseline=base_update)

            batch = 500
            for start in range(0, args.list_size, batch):
                await asyncio.gather(
                    *(
                        store.create(_patch(f"l{i:06d}", {"pool": "a" if i % 2 else "b"}))
                        for i in range(start, min(start + batch, args.list_size))
                    )
                )
            t0 = time.perf_counter()
            listed = await store.list("configpatches", "default", label_selector="pool=a")
            list_ms = (time.perf_counter() - t0) * 1000
            emit(
                f"store.{label}.list_label_selector",
                list_ms,
                "ms",
                objects=args.list_size,
                matched=len(listed.items),
            )

            rate, live, p99 = await _fan_out(store, args.watchers, args.events)
            emit(f"store.{label}.watch_fanout", rate, "events/s", watchers=args.watchers, events=args.events)
            emit(f"store.{label}.watch_live_delivery", live, "events/s", watchers=args.watchers)
            emit(f"store.{label}.watch_p99_latency", p99, "ms", watchers=args.watchers)
            await store.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench store")
    parser.add_argument("--backend", choices=["sqlite", "etcd"], default="sqlite")
    parser.add_argument("--etcd", help="etcd://HOST:PORT[,…] of an existing etcd (default: start one)")
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--list-size", type=int, default=10_000)
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--events", type=int, default=10_000)
    asyncio.run(run(parser.parse_args(argv)))
    return 0
