"""A machine's event log as machined keeps it: recent events with sortable ids, and live subscribers."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from google.protobuf import any_pb2
from google.protobuf.message import Message

from herder.talos.machine.client import EVENT_TYPE_PREFIX

HISTORY = 100
"""Events kept per machine for tails (Talos keeps a bounded buffer too)."""

# An xid is seconds, then 5 bytes naming the process, then a counter: no randomness per id (urandom is a
# system call, and thousands of machines publish events at once).
_PROCESS = int.from_bytes(os.urandom(5), "big") << 24
_counter = itertools.count(int.from_bytes(os.urandom(3), "big"))
_ENCODING = "0123456789abcdefghijklmnopqrstuv"


def new_event_id() -> str:
    """A 20-character id ordered by time, shaped like the xids Talos uses."""
    value = (int(time.time()) << 64) | _PROCESS | (next(_counter) & 0xFFFFFF)
    chars = []
    for _ in range(20):
        chars.append(_ENCODING[value & 31])
        value >>= 5
    return "".join(reversed(chars))


@dataclass(frozen=True)
class LoggedEvent:
    id: str
    at: float
    actor_id: str
    data: any_pb2.Any


class EventLog:
    def __init__(self) -> None:
        self._history: deque[LoggedEvent] = deque(maxlen=HISTORY)
        self._subscribers: set[asyncio.Queue[LoggedEvent | None]] = set()

    def publish(self, message: Message, actor_id: str = "") -> LoggedEvent:
        data = any_pb2.Any(
            type_url=EVENT_TYPE_PREFIX + message.DESCRIPTOR.full_name, value=message.SerializeToString()
        )
        event = LoggedEvent(new_event_id(), time.time(), actor_id, data)
        self._history.append(event)
        for queue in self._subscribers:
            queue.put_nowait(event)
        return event

    def clear(self) -> None:
        """Forget the history (a crash loses machined's memory); live subscribers are ended."""
        self._history.clear()
        for queue in self._subscribers:
            queue.put_nowait(None)

    def backlog(self, *, tail_events: int, tail_id: str, tail_seconds: int) -> list[LoggedEvent]:
        history = list(self._history)
        if tail_id:
            return [e for e in history if e.id > tail_id]
        if tail_seconds > 0:
            since = time.time() - tail_seconds
            return [e for e in history if e.at >= since]
        if tail_events < 0:
            return history
        return history[len(history) - tail_events :] if tail_events else []

    async def follow(
        self, *, tail_events: int = 0, tail_id: str = "", tail_seconds: int = 0, actor_id: str = ""
    ) -> AsyncIterator[LoggedEvent]:
        """The backlog asked for, then live events, until the log is cleared or the caller stops."""
        queue: asyncio.Queue[LoggedEvent | None] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            for event in self.backlog(tail_events=tail_events, tail_id=tail_id, tail_seconds=tail_seconds):
                if not actor_id or event.actor_id == actor_id:
                    yield event
            while (live := await queue.get()) is not None:
                if not actor_id or live.actor_id == actor_id:
                    yield live
        finally:
            self._subscribers.discard(queue)
