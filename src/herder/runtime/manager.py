"""Runs controllers: one watch loop per watched kind, a work queue and workers per controller.

Controllers run only while this process leads (leader election over etcd; always with an embedded
store). A watch that falls behind the retained history re-lists. Shutdown stops the watches, lets
reconciles in flight finish within a grace period, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence

from herder.runtime.controller import Context, Controller, ObjectKey, Watch
from herder.runtime.event_recorder import EventRecorder
from herder.runtime.leader import AlwaysLeader, LeaderElection
from herder.runtime.metrics import IS_LEADER, QUEUE_DEPTH, RECONCILE_ERRORS, RECONCILE_SECONDS, RECONCILES
from herder.runtime.outputs import ANY_KIND, Declaration, declarations_of
from herder.state.errors import Gone
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
    ) -> None:
        self.store = store
        self.controller = controller
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


class Manager:
    def __init__(
        self,
        store: Store,
        controllers: Sequence[Controller],
        *,
        leader: LeaderElection | None = None,
        shutdown_grace: float = 10.0,
    ) -> None:
        self.store = store
        self.controllers = list(controllers)
        self.declarations = declarations_of((c.name, c.outputs) for c in self.controllers)
        self.leader: LeaderElection = leader or AlwaysLeader()
        self.shutdown_grace = shutdown_grace
        self.events = EventRecorder(store)
        self.runners: list[ControllerRunner] = []
        self._stop = asyncio.Event()
        self._leading = asyncio.Event()

    async def run(self) -> None:
        """Lead, run the controllers until leadership is lost or ``stop`` is called; repeat."""
        while not self._stop.is_set():
            acquire = asyncio.create_task(self.leader.acquire())
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({acquire, stop}, return_when=asyncio.FIRST_COMPLETED)
            if self._stop.is_set():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await acquire
                break
            stop.cancel()
            acquire.result()
            log.info("leading: starting %d controllers", len(self.controllers))
            IS_LEADER.set(1)
            self.runners = [
                ControllerRunner(self.store, c, events=self.events, owners=self.declarations)
                for c in self.controllers
            ]
            for runner in self.runners:
                runner.start()
            self._leading.set()
            lost = asyncio.create_task(self.leader.lost.wait())
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({lost, stop}, return_when=asyncio.FIRST_COMPLETED)
            lost.cancel()
            stop.cancel()
            IS_LEADER.set(0)
            self._leading.clear()
            await asyncio.gather(*(r.stop(self.shutdown_grace) for r in self.runners))
            if not self._stop.is_set():
                log.warning("leadership lost: controllers stopped; campaigning again")
        await self.leader.release()

    async def wait_synced(self) -> None:
        """Wait until every controller has seen the initial state of every kind it watches."""
        await self._leading.wait()
        await asyncio.gather(*(r.synced.wait() for r in self.runners))

    def stop(self) -> None:
        self._stop.set()
