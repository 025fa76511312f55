"""Runs controllers: one watch loop per watched kind, a work queue and workers per controller.

Controllers run for what this process holds (``runtime.shards``): everything while it leads (leader
election over etcd; always with an embedded store), or, with shards, the keys of the shards it holds,
each reconcile fenced by its shard's claim. When what it holds changes, the controllers stop, what is now
another replica's is handed over, and they start again on what it holds then. A watch that falls behind
the retained history re-lists. Shutdown stops the watches, lets reconciles in flight finish within a grace
period, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence

from herder.runtime.controller import Context, Controller, ObjectKey, Watch
from herder.runtime.event_recorder import EventRecorder
from herder.runtime.leader import AlwaysLeader
from herder.runtime.metrics import (
    IS_LEADER,
    QUEUE_DEPTH,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    RECONCILES,
    SHARD_HELD,
    SKIPPED,
)
from herder.runtime.outputs import ANY_KIND, Declaration, declarations_of
from herder.runtime.shards import Held, Leadership, Ownership, ShardMap, shard_names
from herder.state.errors import Gone
from herder.state.fence import Fence, fenced
from herder.state.store import Store, WatchEvent
from herder.workqueue import Backoff, ShutDown, WorkQueue

log = logging.getLogger(__name__)


class ControllerRunner:
    """One controller's queue, watch loops and workers."""

    def __init__(
        self,
        store: Store,
        controller: Controller,
        *,
        backoff: Backoff | None = None,
        events: EventRecorder | None = None,
        owners: Mapping[str, Declaration] | None = None,
        shards: ShardMap | None = None,
        held: Held | None = None,
    ) -> None:
        """With ``shards``, only the keys of the ``held`` shards are reconciled, under their fences."""
        self.store = store
        self.controller = controller
        self.shards = shards
        self.held = held
        self.queue: WorkQueue[ObjectKey] = WorkQueue()
        self.backoff = backoff or Backoff()
        self.ctx = Context(
            store,
            controller.name,
            controller.outputs,
            primary=controller.primary,
            events=events,
            owners=owners,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self.synced = asyncio.Event()
        self._unsynced = len(controller.watches)
        # Looked up once: finding a metric's child by its labels costs more than setting it.
        self._depth = QUEUE_DEPTH.labels(controller.name)

    def start(self) -> None:
        self.controller.started()
        for watch in self.controller.watches:
            self._tasks.append(asyncio.create_task(self._watch(watch), name=f"{self.controller.name}-watch"))
        for i in range(max(1, self.controller.concurrency)):
            self._workers.append(asyncio.create_task(self._work(), name=f"{self.controller.name}-worker-{i}"))

    async def stop(self, grace: float) -> None:
        for task in self._tasks:
            task.cancel()
        self.queue.shut_down()
        _, pending = await asyncio.wait(self._workers, timeout=grace) if self._workers else (set(), set())
        for task in (*self._tasks, *pending):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._workers, return_exceptions=True)
        try:
            await self.controller.shutdown()
        except Exception:
            log.exception("%s: shutdown failed", self.controller.name)

    async def _watch(self, watch: Watch) -> None:
        resource_version: str | None = None
        synced = False
        while True:
            try:
                if resource_version is None:
                    listed = await self.store.list(watch.kind, label_selector=watch.label_selector)
                    for obj in listed.items:
                        self._enqueue(watch, WatchEvent("ADDED", obj))
                    resource_version = str(listed.resource_version)
                    if not synced:
                        synced = True
                        self._mark_synced()
                async for event in self.store.watch(
                    watch.kind,
                    label_selector=watch.label_selector,
                    resource_version=resource_version,
                    bookmark_interval=30.0,
                ):
                    resource_version = event.object.metadata.resource_version
                    if event.type != "BOOKMARK":
                        self._enqueue(watch, event)
            except Gone:
                log.info("%s: watch of %s is too old; listing again", self.controller.name, watch.kind)
                resource_version = None
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: watch of %s failed; resuming", self.controller.name, watch.kind)
                await asyncio.sleep(1)

    def _enqueue(self, watch: Watch, event: WatchEvent) -> None:
        primary = self.controller.primary
        for key in watch.map(event):
            if key.kind != primary and primary != ANY_KIND:
                log.error(
                    "%s: a watch of %s mapped to %s, not its primary kind",
                    self.controller.name,
                    watch.kind,
                    key,
                )
                continue
            if self.shards is not None and self.shards.count > 1 and key == ObjectKey.of(event.object):
                self.shards.note(key, event)
            self.queue.add_settled(key, self.controller.settle)
        self._depth.set(len(self.queue))

    def _mark_synced(self) -> None:
        self._unsynced -= 1
        if self._unsynced <= 0:
            self.synced.set()

    async def _work(self) -> None:
        name = self.controller.name
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            started = time.perf_counter()
            try:
                held, fence = await self._fence(key)
                if not held:
                    SKIPPED.labels(name).inc()
                    continue
                with fenced(fence):
                    result = await self.controller.reconcile(key, self.ctx)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                delay = self.backoff.next_delay(key)
                RECONCILE_ERRORS.labels(name).inc()
                RECONCILES.labels(name, "error").inc()
                log.warning(
                    "%s: reconcile %s failed (attempt %d, retry in %.2fs): %s",
                    name,
                    key,
                    self.backoff.failures(key),
                    delay,
                    err,
                )
                self.queue.add_after(key, delay)
            else:
                self.backoff.forget(key)
                RECONCILES.labels(name, "success").inc()
                if result is not None and result.requeue_after is not None:
                    self.queue.add_after(key, result.requeue_after)
            finally:
                RECONCILE_SECONDS.labels(name).observe(time.perf_counter() - started)
                self.queue.done(key)
                self._depth.set(len(self.queue))

    async def _fence(self, key: ObjectKey) -> tuple[bool, Fence | None]:
        """Whether this process holds ``key``'s shard, and the fence of its writes."""
        if self.shards is None or self.held is None:
            return True, None
        shard = await self.shards.shard_of(key)
        return shard in self.held, self.held.get(shard)


class Manager:
    """Runs ``controllers`` for what ``ownership`` gives this process (by default: everything, at once);
    with ``shards``, each key by its shard (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        controllers: Sequence[Controller],
        *,
        ownership: Ownership | None = None,
        shards: ShardMap | None = None,
        shutdown_grace: float = 10.0,
    ) -> None:
        self.store = store
        self.controllers = list(controllers)
        self.declarations = declarations_of((c.name, c.outputs) for c in self.controllers)
        self.ownership: Ownership = ownership or Leadership(AlwaysLeader())
        self.shards = shards
        self.shutdown_grace = shutdown_grace
        self.events = EventRecorder(store)
        self.runners: list[ControllerRunner] = []
        self.held: Held = {}
        self._stop = asyncio.Event()
        self._leading = asyncio.Event()

    async def run(self) -> None:
        """Hold what the ownership gives, run the controllers for it until that changes or ``stop`` is
        called; hand over what is no longer this process's; repeat."""
        while not self._stop.is_set():
            acquire = asyncio.create_task(self.ownership.acquire())
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({acquire, stop}, return_when=asyncio.FIRST_COMPLETED)
            if self._stop.is_set():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await acquire
                break
            stop.cancel()
            self.held = acquire.result()
            log.info(
                "running %d controllers for shards %s", len(self.controllers), ",".join(sorted(self.held))
            )
            self._gauges()
            self.runners = [
                ControllerRunner(
                    self.store,
                    c,
                    events=self.events,
                    owners=self.declarations,
                    shards=self.shards,
                    held=self.held,
                )
                for c in self.controllers
            ]
            for runner in self.runners:
                runner.start()
            self._leading.set()
            changed = asyncio.create_task(self.ownership.changed.wait())
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({changed, stop}, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            stop.cancel()
            self._leading.clear()
            await asyncio.gather(*(r.stop(self.shutdown_grace) for r in self.runners))
            self.held = {}
            self._gauges()
            if not self._stop.is_set():
                log.warning(
                    "what this replica holds changed: controllers stopped; taking up what it holds now"
                )
                await self.ownership.hand_over()
        await self.ownership.release()

    def _gauges(self) -> None:
        IS_LEADER.set(1 if self.held else 0)
        count = self.shards.count if self.shards is not None else 1
        for shard in shard_names(count):
            SHARD_HELD.labels(shard).set(1 if shard in self.held else 0)

    async def wait_synced(self) -> None:
        """Wait until every controller has seen the initial state of every kind it watches."""
        await self._leading.wait()
        await asyncio.gather(*(r.synced.wait() for r in self.runners))

    def stop(self) -> None:
        self._stop.set()
