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

from herder.bench.report import emit, percentile
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.backend import Backend
from herder.state.store import Store, WatchEvent

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


async def _rate(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return n / (time.perf_counter() - start)


def _sqlite_baseline(path: Path, n: int) -> tuple[float, float]:
    """Plain sqlite3, one row per commit, WAL + synchronous=FULL: inserts/s and updates/s."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (key TEXT PRIMARY KEY, value BLOB, rev INTEGER) WITHOUT ROWID")
    value = (PAYLOAD + "x" * 100).encode()
    start = time.perf_counter()
    for i in range(n):
        conn.execute("INSERT INTO t VALUES (?,?,?)", (f"k{i}", value, i))
    inserts = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(n):
        conn.execute("UPDATE t SET value=?, rev=? WHERE key=? AND rev=?", (value, i + n, f"k{i}", i))
    updates = n / (time.perf_counter() - start)
    conn.close()
    return inserts, updates


@contextlib.asynccontextmanager
async def _backend(kind: str, workdir: Path, etcd_url: str | None) -> AsyncIterator[tuple[Backend, str]]:
    if kind == "sqlite":
        from herder.state.sqlite import SQLiteBackend

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


async def _etcd_baseline(store_backend: Backend, n: int) -> tuple[float, float]:
    """Plain etcd puts (and compare-and-put updates) through the same client, one at a time.

    They go under a prefix of their own: the store's watch would choke on values it cannot decode.
    """
    from herder.state.etcd import EtcdBackend

    assert isinstance(store_backend, EtcdBackend)
    backend = await EtcdBackend(store_backend.endpoints, prefix=store_backend.prefix + "-baseline").open()
    value = (PAYLOAD + "x" * 100).encode()
    revs: list[int] = []

    async def put(i: int) -> None:
        revs.append(await backend.raw_put(f"/baseline/k{i}", value))

    inserts = await _rate(n, put)

    async def cas(i: int) -> None:
        await backend.raw_put(f"/baseline/k{i}", value, expected_rev=revs[i])

    updates = await _rate(n, cas)
    await backend.close()
    return inserts, updates


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
            if label == "sqlite":
                base_create, base_update = _sqlite_baseline(workdir / "baseline.db", n)
            else:
                base_create, base_update = await _etcd_baseline(backend, n)
            made: list[Resource] = []

            async def create(i: int) -> None:
                made.append(await store.create(_patch(f"w{i:06d}")))

            creates = await _rate(n, create)

            async def update(i: int) -> None:
                obj = made[i]
                obj.spec = {"data": PAYLOAD[:-1] + "y"}
                await store.update(obj)

            updates = await _rate(n, update)
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
