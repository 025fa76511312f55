"""Fan-out of one backend watch to many watchers, with a ring of recent changes.

Each Store opens a single backend watch and shares it: a change is decoded once, however many
watchers see it. A watcher that starts from a revision still in the ring joins at once; an older one
first catches up from the backend's history, then joins the live feed without a gap or a duplicate.
A watcher that falls too far behind is ended with ``Gone`` (its client re-lists) instead of letting
its backlog grow without bound. A watcher of one kind is handed that kind's changes only: a change
wakes the few watchers that want it, not every controller's watch of every kind. An embedded backend
hands the hub each change as part of its commit (``Backend.listen``): no task switch per change, and
the caches fed by the hub hold a write by the time its writer is told it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from herder.state.backend import Backend, Compacted, RawEvent
from herder.state.errors import Gone
from herder.state.list_cache import kind_prefix_of

log = logging.getLogger(__name__)

C = TypeVar("C")


_EVERY_KIND = ""


def _route(prefix: str) -> str:
    """The kind a subscription's prefix names (``/group/plural/``, perhaps narrowed to a namespace), or
    every kind."""
    return kind_prefix_of(prefix) if prefix.count("/") >= 3 else _EVERY_KIND


class Subscription(Generic[C]):
    """The changes under ``prefix`` one watcher has yet to read, in revision order."""

    def __init__(self, hub: WatchHub[C], next_rev: int, prefix: str = "") -> None:
        self._hub = hub
        self.prefix = prefix
        self.next_rev = next_rev
        self._pending: deque[tuple[int, C]] = deque()
        self._ready = asyncio.Event()
        self._error: Exception | None = None
        self._catch_up: asyncio.Task[None] | None = None
        self.closed = False

    def push(self, rev: int, key: str, change: C) -> None:
        if rev < self.next_rev or self._error is not None:
            return
        self.next_rev = rev + 1
        if not key.startswith(self.prefix):
            return
        self._pending.append((rev, change))
        if len(self._pending) > self._hub.max_pending:
            self.fail(Gone(rev, rev))
        self._ready.set()

    def fail(self, error: Exception) -> None:
        self._error = error
        self._pending.clear()
        self._ready.set()

    async def next_batch(self, timeout: float | None = None) -> list[tuple[int, C]]:
        """Every pending change; an empty list when ``timeout`` passes first. Raises the end error."""
        if not self._pending and self._error is None:
            if timeout is None:
                await self._ready.wait()
            else:
                # asyncio.timeout, not wait_for: it adds no task of its own to each wait.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._ready.wait()
        if self._error is not None:
            raise self._error
        batch = list(self._pending)
        self._pending.clear()
        self._ready.clear()
        return batch

    @property
    def idle_revision(self) -> int:
        """The revision this watcher has fully seen when nothing is pending (for bookmarks)."""
        return self._hub.last_rev if not self._pending else self._pending[-1][0]

    def close(self) -> None:
        self.closed = True
        self._hub._leave(self)
        if self._catch_up is not None:
            self._catch_up.cancel()


class WatchHub(Generic[C]):
    def __init__(
        self,
        backend: Backend,
        decode: Callable[[RawEvent], C],
        *,
        reset: Callable[[], None] = lambda: None,
        ring: int = 10_000,
        max_pending: int = 100_000,
        retry_delay: float = 0.5,
    ) -> None:
        self._backend = backend
        self._decode = decode
        # Called when the hub skips changes it can no longer read (it fell behind compaction).
        self._reset = reset
        self._ring: deque[tuple[int, str, C]] = deque(maxlen=ring)
        self._subs: set[Subscription[C]] = set()
        # The joined subscriptions by the kind they watch (its key prefix; "" for every kind).
        self._routes: dict[str, set[Subscription[C]]] = {}
        self.max_pending = max_pending
        self._retry_delay = retry_delay
        self.last_rev = 0
        # Every change with a revision >= covered_from is in the ring or still to come.
        self.covered_from = 1
        self._task: asyncio.Task[None] | None = None
        # Set (and replaced) when last_rev moves, for those waiting for it to reach a revision.
        self._advanced: asyncio.Event | None = None
        self._listening = False

    async def start(self) -> None:
        self.last_rev = await self._backend.revision()
        self.covered_from = self.last_rev + 1
        self._listening = self._backend.listen(self._committed)
        if not self._listening:
            self._task = asyncio.create_task(self._run(), name="watch-hub")

    def _committed(self, raw: RawEvent) -> None:
        """A change handed over by its commit. Should publishing it fail, the commit still stands: the
        hub goes back to watching, from this change on, which retries it as any failed read is."""
        try:
            self._publish(raw)
        except Exception:
            log.exception("publishing revision %d failed; watching from it", raw.rev)
            self._backend.listen(None)
            self._listening = False
            self._task = asyncio.create_task(self._run(), name="watch-hub")

    async def stop(self) -> None:
        if self._listening:
            self._backend.listen(None)
            self._listening = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sub in list(self._subs):
            sub.fail(Gone(self.last_rev, self.last_rev))

    async def _run(self) -> None:
        while True:
            try:
                async for raw in self._backend.watch("", self.last_rev + 1):
                    self._publish(raw)
            except Compacted:
                # The hub itself fell behind the history: its watchers cannot be served without a gap.
                log.warning(
                    "watch hub fell behind compaction at revision %d; watchers must re-list", self.last_rev
                )
                for sub in list(self._subs):
                    sub.fail(Gone(self.last_rev, self.last_rev))
                self._subs.clear()
                self._routes.clear()
                self._ring.clear()
                rev = await self._backend.revision()
                self._reset()
                self.last_rev = rev
                self.covered_from = self.last_rev + 1
                self._wake()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("backend watch failed; resuming from revision %d", self.last_rev + 1)
                await asyncio.sleep(self._retry_delay)

    def _publish(self, raw: RawEvent) -> None:
        change = self._decode(raw)
        if len(self._ring) == self._ring.maxlen:
            self.covered_from = self._ring[1][0] if len(self._ring) > 1 else raw.rev
        self._ring.append((raw.rev, raw.key, change))
        self.last_rev = raw.rev
        for route in (_EVERY_KIND, kind_prefix_of(raw.key)):
            for sub in self._routes.get(route, ()):
                sub.push(raw.rev, raw.key, change)
        self._wake()

    def _wake(self) -> None:
        if self._advanced is not None:
            self._advanced.set()
            self._advanced = None

    async def reached(self, rev: int, timeout: float) -> bool:
        """Whether every change up to ``rev`` has been published, waiting at most ``timeout`` seconds."""
        if self.last_rev >= rev:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.last_rev < rev:
            remaining = deadline - loop.time()
            if remaining <= 0 or (not self._listening and (self._task is None or self._task.done())):
                return False
            if self._advanced is None:
                self._advanced = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._advanced.wait()
        return True

    def since(self, rev: int) -> list[tuple[int, C]] | None:
        """The published changes from revision ``rev`` on; None when the ring no longer holds them all."""
        if rev < self.covered_from:
            return None
        return [(r, change) for r, _, change in self._ring if r >= rev]

    def subscribe(self, from_rev: int, prefix: str = "") -> Subscription[C]:
        """The changes from ``from_rev`` on of the keys under ``prefix``."""
        sub: Subscription[C] = Subscription(self, from_rev, prefix)
        if from_rev >= self.covered_from:
            self._join(sub)
        else:
            sub._catch_up = asyncio.create_task(self._catch_up(sub), name="watch-catch-up")
        return sub

    def _join(self, sub: Subscription[C]) -> None:
        # No await between copying the ring and registering: nothing can slip in between.
        for rev, key, change in self._ring:
            if rev >= sub.next_rev:
                sub.push(rev, key, change)
        self._subs.add(sub)
        self._routes.setdefault(_route(sub.prefix), set()).add(sub)

    def _leave(self, sub: Subscription[C]) -> None:
        self._subs.discard(sub)
        route = self._routes.get(_route(sub.prefix))
        if route is not None:
            route.discard(sub)
            if not route:
                del self._routes[_route(sub.prefix)]

    async def _catch_up(self, sub: Subscription[C]) -> None:
        try:
            async for raw in self._backend.watch("", sub.next_rev):
                sub.push(raw.rev, raw.key, self._decode(raw))
                if sub.closed:
                    return
                if sub.next_rev >= self.covered_from:
                    self._join(sub)
                    return
        except Compacted as err:
            sub.fail(Gone(sub.next_rev, err.oldest))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            sub.fail(err)
