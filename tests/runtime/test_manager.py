"""The controller runtime against a real store: queueing, concurrency, backoff, outputs, GC, shutdown."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import REGISTRY

from herder.resources import OwnerReference
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, controller_owner
from herder.runtime.garbage_collector import GarbageCollector
from herder.runtime.manager import Manager
from herder.runtime.outputs import Owns
from herder.state.errors import Forbidden
from herder.state.store import Store
from tests.state.conftest import patch


async def eventually(check: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


class Recorder(Controller):
    """Counts reconciles and how many run at once, overall and per key."""

    primary = "ConfigPatch"
    watches = [Watch("ConfigPatch")]

    def __init__(self, name: str = "Recorder", concurrency: int = 1, delay: float = 0.0) -> None:
        self.name = name
        self.concurrency = concurrency
        self.delay = delay
        self.calls: Counter[ObjectKey] = Counter()
        self.running: Counter[ObjectKey] = Counter()
        self.max_per_key = 0
        self.max_total = 0
        self.fail_first: dict[str, int] = {}
        self.call_times: dict[str, list[float]] = {}
        self.requeue: float | None = None

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        self.calls[key] += 1
        self.call_times.setdefault(key.name, []).append(time.monotonic())
        self.running[key] += 1
        self.max_per_key = max(self.max_per_key, self.running[key])
        self.max_total = max(self.max_total, sum(self.running.values()))
        try:
            await asyncio.sleep(self.delay)
            if self.fail_first.get(key.name, 0) > 0:
                self.fail_first[key.name] -= 1
                raise RuntimeError("transient failure")
        finally:
            self.running[key] -= 1
        return Result(self.requeue) if self.requeue else None


async def run(manager: Manager) -> asyncio.Task[None]:
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(manager.wait_synced(), 10)
    return task


async def test_initial_listing_and_events_reach_reconcile(store: Store) -> None:
    await store.create(patch("before"))
    rec = Recorder()
    manager = Manager(store, [rec])
    task = await run(manager)
    await store.create(patch("after"))
    await eventually(lambda: {k.name for k in rec.calls} == {"before", "after"})
    manager.stop()
    await task


async def test_one_reconcile_per_key_and_bounded_concurrency(store: Store) -> None:
    rec = Recorder(concurrency=3, delay=0.05)
    manager = Manager(store, [rec])
    task = await run(manager)
    objs = [await store.create(patch(f"p{i}")) for i in range(8)]
    for _ in range(5):  # a burst of changes to the same keys while they are being reconciled
        for obj in objs:
            obj.metadata.labels["n"] = str(time.monotonic_ns())
            obj.metadata.resource_version = None
            await store.update(obj)
    await eventually(lambda: len(rec.calls) == 8 and sum(rec.running.values()) == 0)
    await asyncio.sleep(0.3)
    manager.stop()
    await task
    assert rec.max_per_key == 1
    assert 1 < rec.max_total <= 3
    # Changes made while a key was queued or in flight were folded together, not replayed one by one.
    assert sum(rec.calls.values()) < 8 * 6


async def test_a_settled_controller_sees_a_burst_of_changes_in_one_reconcile(store: Store) -> None:
    rec = Recorder(name="Settled")
    rec.settle = 0.3
    manager = Manager(store, [rec])
    task = await run(manager)
    obj = await store.create(patch("summary"))
    for n in range(10):  # a burst: the set's machines boot, install and run within a moment
        obj.metadata.labels["n"] = str(n)
        obj.metadata.resource_version = None
        obj = await store.update(obj)
    key = ObjectKey("ConfigPatch", "default", "summary")
    await asyncio.sleep(0.2)
    assert rec.calls[key] == 0  # still settling
    await eventually(lambda: rec.calls[key] == 1)
    obj.metadata.labels["n"] = "later"
    obj.metadata.resource_version = None
    await store.update(obj)  # a change after the burst is a reconcile of its own
    await eventually(lambda: rec.calls[key] == 2)
    await asyncio.sleep(0.5)
    manager.stop()
    await task
    assert rec.calls[key] == 2


async def test_failures_back_off_exponentially_then_succeed(store: Store) -> None:
    rec = Recorder()
    rec.fail_first["flaky"] = 4
    manager = Manager(store, [rec])
    task = await run(manager)
    await store.create(patch("flaky"))
    await eventually(lambda: rec.calls[ObjectKey("ConfigPatch", "default", "flaky")] == 5)
    manager.stop()
    await task
    times = rec.call_times["flaky"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[-1] > gaps[0] * 3, gaps  # 0.05 doubling, with ±20% jitter
    sample = REGISTRY.get_sample_value("herder_reconcile_errors_total", {"controller": "Recorder"})
    assert sample is not None and sample >= 4


async def test_requeue_after(store: Store) -> None:
    rec = Recorder(name="Requeuer")
    rec.requeue = 0.05
    manager = Manager(store, [rec])
    task = await run(manager)
    await store.create(patch("tick"))
    await eventually(lambda: rec.calls[ObjectKey("ConfigPatch", "default", "tick")] >= 4)
    manager.stop()
    await task


class Mirror(Controller):
    """For every ConfigPatch named src-*, keeps an owned copy named out-*."""

    name = "Mirror"
    primary = "ConfigPatch"
    outputs = (Owns("ConfigPatch"),)
    watches = [Watch("ConfigPatch"), Watch("ConfigPatch", controller_owner("ConfigPatch"))]

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        if not key.name.startswith("src-"):
            return None
        src = await ctx.get(key)
        if src is None or src.metadata.deletion_timestamp:
            return None
        out = patch("out-" + key.name[4:], data=(src.spec or {})["data"])
        await ctx.apply_output(src, out)
        return None


async def test_outputs_are_owned_protected_and_collected(store: Store) -> None:
    manager = Manager(store, [Mirror(), GarbageCollector(store.registry)])
    task = await run(manager)
    await store.create(patch("src-a", data="a: 1"))
    await eventually(lambda: _exists(store, "out-a"))
    out = await store.get("cp", "out-a", "default")
    ref = out.metadata.controller_ref()
    assert ref is not None and ref.name == "src-a" and ref.controller
    out.spec = {"data": "tampered: true"}
    with pytest.raises(Forbidden, match="managed by controller Mirror on behalf of ConfigPatch 'src-a'"):
        await store.update(out, actor="user:mallory")
    # The owner's change flows to the output.
    src = await store.get("cp", "src-a", "default")
    src.spec = {"data": "a: 2"}
    await store.update(src)
    await eventually(lambda: _data(store, "out-a", "a: 2"))
    await store.delete("cp", "src-a", "default")
    await eventually(lambda: _gone(store, "out-a"))
    manager.stop()
    await task


async def test_orphans_left_while_no_controller_ran_are_collected(store: Store) -> None:
    owner = await store.create(patch("owner"))
    orphan = patch("orphan")
    orphan.metadata.owner_references = [
        OwnerReference(apiVersion="herder.dev/v1alpha1", kind="ConfigPatch", name="owner", uid="not-the-uid")
    ]
    await store.create(orphan)
    kept = patch("kept")
    kept.metadata.owner_references = [
        orphan.metadata.owner_references[0].model_copy(update={"uid": owner.metadata.uid})
    ]
    await store.create(kept)
    manager = Manager(store, [GarbageCollector(store.registry)])
    task = await run(manager)
    await eventually(lambda: _gone(store, "orphan"))
    await asyncio.sleep(0.2)
    assert await _exists(store, "kept")
    manager.stop()
    await task


async def test_shutdown_lets_reconciles_in_flight_finish(store: Store) -> None:
    rec = Recorder(name="Slow", delay=0.5)
    manager = Manager(store, [rec], shutdown_grace=5)
    task = await run(manager)
    await store.create(patch("slow"))
    await eventually(lambda: sum(rec.running.values()) == 1)
    manager.stop()
    await asyncio.wait_for(task, 5)
    assert sum(rec.running.values()) == 0  # it ran to its end, not cancelled midway


async def _exists(store: Store, name: str) -> bool:
    return any(o.name == name for o in (await store.list("cp", "default")).items)


async def _gone(store: Store, name: str) -> bool:
    return not await _exists(store, name)


async def _data(store: Store, name: str, data: str) -> bool:
    return (await store.get("cp", name, "default")).spec == {"data": data, "description": ""}
