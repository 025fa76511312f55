"""The work queue of one controller: keys to reconcile, each at most once in the queue and once in flight.

A key added while it is being reconciled is remembered and queued again when that reconcile ends, so
no change is lost and no key is reconciled twice at the same time. Delayed adds serve backoff and
requeue-after; settled adds gather the adds of a burst into one (``add_settled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue is shutting down: no more keys will come."""


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._settling: set[K] = set()
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._shutting_down = False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def delayed(self) -> int:
        return len(self._delayed)

    def add(self, key: K) -> None:
        if self._shutting_down:
            return
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._wake.set()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._seq), key))
        self._wake.set()

    def add_settled(self, key: K, delay: float) -> None:
        """Add ``key`` in ``delay`` seconds, and nothing more for the adds of ``key`` meanwhile: they are
        the same burst, which that one reconcile sees whole."""
        if delay <= 0:
            self.add(key)
        elif key not in self._queued and key not in self._settling:
            self._settling.add(key)
            self.add_after(key, delay)

    def _promote_due(self) -> float | None:
        """Move due delayed keys into the queue; the seconds until the next one is due."""
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._settling.discard(key)
            self.add(key)
        return self._delayed[0][0] - now if self._delayed else None

    async def get(self) -> K:
        """The next key to reconcile; call ``done`` with it afterwards."""
        while True:
            wait = self._promote_due()
            if self._queue:
                key = self._queue.popleft()
                self._queued.discard(key)
                self._processing.add(key)
                return key
            if self._shutting_down:
                raise ShutDown
            self._wake.clear()
            # asyncio.timeout, not wait_for: it adds no task of its own to each wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shut_down(self) -> None:
        self._shutting_down = True
        self._queue.clear()
        self._queued.clear()
        self._delayed.clear()
        self._settling.clear()
        self._wake.set()
