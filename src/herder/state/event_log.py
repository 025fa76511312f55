"""The change log of the in-process backends (memory, SQLite): recent events in memory, a wake-up
for watchers on every commit, a watch that reads older history from the backend's own store, and a
listener (the store's watch hub) handed each event as part of its commit."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from herder.state.backend import Compacted, RawEvent

History = Callable[[int, int], Awaitable[list[RawEvent]]]


class EventLog:
    """Holds the newest events and wakes watchers; commits may come from a writer thread."""

    def __init__(self, history: History | None, *, tail: int = 4096, first_rev: int = 1) -> None:
        # ``history(from_rev, limit)`` reads events older than the tail; without one the tail is all.
        self._history = history
        self._tail: deque[RawEvent] = deque(maxlen=tail)
        self._lock = threading.Lock()
        # Set (and dropped) by the next commit, for the watches waiting for one; made only when one
        # waits: the store's hub is handed each commit and waits for none.
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        # The oldest revision a watch may still start from.
        self.oldest = first_rev
        self._listener: Callable[[RawEvent], None] | None = None

    def listen(self, listener: Callable[[RawEvent], None] | None) -> None:
        """Hand ``listener`` every event appended from now on, on the event loop (see
        ``Backend.listen``); a commit in a writer thread hands it over through the loop, ahead of the
        commit's own completion, so the listener still sees every event before its writer does."""
        self.bind()
        self._listener = listener

    def bind(self) -> None:
        """Attach to the running event loop, where watchers wait (once; later calls do nothing)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()

    def append(self, event: RawEvent) -> None:
        """Record a committed event, from the event loop or from a writer thread."""
        with self._lock:
            self._tail.append(event)
            if self._history is None and len(self._tail) == self._tail.maxlen:
                self.oldest = self._tail[0].rev
        if self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._deliver(event)
        else:
            self._loop.call_soon_threadsafe(self._deliver, event)

    def _deliver(self, event: RawEvent) -> None:
        if self._listener is not None:
            self._listener(event)
        self._wake()

    def value_at(self, key: str, rev: int) -> bytes | None:
        """The value ``key`` was given at revision ``rev``, if that event is still in memory."""
        with self._lock:
            if not self._tail or not self._tail[0].rev <= rev <= self._tail[-1].rev:
                return None
            # Revisions are consecutive, so the event is found by its distance from the oldest.
            event = self._tail[rev - self._tail[0].rev]
        return event.value if event.rev == rev and event.key == key else None

    def changed_after(self, key: str, rev: int, newest: int) -> bool | None:
        """Whether an event of ``key`` came after ``rev`` (up to ``newest``, the last committed), if the
        events in memory reach back that far."""
        if rev >= newest:
            return False
        with self._lock:
            if not self._tail or self._tail[0].rev > rev + 1 or self._tail[-1].rev < newest:
                return None
            # The few events after ``rev`` are at the newest end.
            for event in reversed(self._tail):
                if event.rev <= rev:
                    return False
                if event.key == key:
                    return True
        return False

    def compact(self, oldest: int) -> None:
        with self._lock:
            self.oldest = max(self.oldest, oldest)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _from_tail(self, from_rev: int) -> list[RawEvent] | None:
        with self._lock:
            if self._tail and from_rev >= self._tail[0].rev:
                # Readers are nearly always at the newest end: walk back from there, not forward.
                newer: list[RawEvent] = []
                for event in reversed(self._tail):
                    if event.rev < from_rev:
                        break
                    newer.append(event)
                newer.reverse()
                return newer
            if self._history is None:
                return [] if from_rev >= self.oldest else None
            # Older than the tail, or the tail is empty (just after a restart): ask the history.
            return None

    async def watch(self, prefix: str, from_rev: int) -> AsyncIterator[RawEvent]:
        next_rev = from_rev
        while True:
            # Take the wake-up before reading, so a commit during the read is never missed.
            if self._changed is None:
                self._changed = asyncio.Event()
            changed = self._changed
            if next_rev < self.oldest:
                raise Compacted(self.oldest)
            events = self._from_tail(next_rev)
            if events is None:
                assert self._history is not None
                events = await self._history(next_rev, 1000)
                if not events and next_rev < self.oldest:
                    raise Compacted(self.oldest)
            for event in events:
                next_rev = event.rev + 1
                if event.key.startswith(prefix):
                    yield event
            if not events:
                await changed.wait()
