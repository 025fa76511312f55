"""The in-memory backend: for tests and throwaway servers. Nothing survives the process."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Callable

from herder.state.backend import KV, Backend, KeyExists, RawEvent, RevisionMismatch
from herder.state.event_log import EventLog


class MemoryBackend(Backend):
    def __init__(self, *, history: int = 10_000) -> None:
        self._data: dict[str, KV] = {}
        self._keys: list[str] = []
        self._rev = 0
        self._log = EventLog(None, tail=history)

    def _commit(self, key: str, value: bytes | None) -> int:
        self._rev += 1
        prev = self._data.get(key)
        if value is None:
            del self._data[key]
            self._keys.pop(bisect.bisect_left(self._keys, key))
        else:
            if prev is None:
                bisect.insort(self._keys, key)
            self._data[key] = KV(key, value, self._rev)
        self._log.bind()
        self._log.append(RawEvent(self._rev, key, value, prev.value if prev else None))
        return self._rev

    async def get(self, key: str) -> KV | None:
        return self._data.get(key)

    async def range(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> tuple[list[KV], int]:
        lo = (
            bisect.bisect_right(self._keys, start_after)
            if start_after
            else bisect.bisect_left(self._keys, prefix)
        )
        out: list[KV] = []
        for key in self._keys[lo:]:
            if not key.startswith(prefix) or (limit is not None and len(out) >= limit):
                break
            out.append(self._data[key])
        return out, self._rev

    async def create(self, key: str, value: bytes) -> int:
        if key in self._data:
            raise KeyExists(key)
        return self._commit(key, value)

    async def replace(self, key: str, value: bytes, expected_rev: int) -> int:
        current = self._data.get(key)
        if current is None or current.mod_rev != expected_rev:
            raise RevisionMismatch(current)
        return self._commit(key, value)

    async def remove(self, key: str, expected_rev: int) -> int:
        current = self._data.get(key)
        if current is None or current.mod_rev != expected_rev:
            raise RevisionMismatch(current)
        return self._commit(key, None)

    def watch(self, prefix: str, from_rev: int) -> AsyncIterator[RawEvent]:
        self._log.bind()
        return self._log.watch(prefix, from_rev)

    async def compact(self, revision: int) -> None:
        self._log.compact(revision)

    async def revision(self) -> int:
        return self._rev

    def changed_after(self, key: str, rev: int) -> bool | None:
        return self._log.changed_after(key, rev, self._rev)

    def listen(self, listener: Callable[[RawEvent], None] | None) -> bool:
        self._log.listen(listener)
        return True
