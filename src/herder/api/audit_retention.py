"""Audit retention: the stored trail of ``AuditEvent`` objects kept within an age and a count.

A background task deletes the oldest events, beyond ``max_events`` or older than ``max_age``, a batch
at a time and yielding between deletes, so that pruning a large backlog never holds up the requests
being answered. Events are named by the time they were recorded, so a list returns them oldest first
and a pass stops at the first event it keeps. ``audit.log`` in the data directory is the operator's
and is not pruned here (rotate it with the system's tools).

The count is read from the store once an hour (a cheap count, not a read of every event) and kept up
to date in between from this server's own writes, so the trail is checked without scanning it. Every
replica prunes; two deleting the same oldest events is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from herder.resources import Resource
from herder.resources.access import AUDIT_EVENT
from herder.state.errors import Conflict, NotFound, StateError
from herder.state.store import SYSTEM, Store

log = logging.getLogger(__name__)

DEFAULT_MAX_AGE = timedelta(days=90)
DEFAULT_MAX_EVENTS = 1_000_000
# How many events one list reads, and how often the trail is checked for age.
BATCH = 500
CHECK_INTERVAL = 60.0
# How often the count is read again, to take in what other replicas recorded and pruned.
RECOUNT_INTERVAL = 3600.0


@dataclass(frozen=True)
class Retention:
    max_age: timedelta = DEFAULT_MAX_AGE
    max_events: int = DEFAULT_MAX_EVENTS

    def __post_init__(self) -> None:
        if self.max_age <= timedelta(0) or self.max_events < 1:
            raise ValueError("audit retention needs a positive age and at least one event")


class AuditPruner:
    """Keeps the store's audit trail within its ``Retention`` (a ``Background`` of ``herder serve``)."""

    def __init__(
        self, store: Store, retention: Retention, *, batch: int = BATCH, interval: float = CHECK_INTERVAL
    ) -> None:
        self._store = store
        self._retention = retention
        self._batch = batch
        self._interval = interval
        self._count: int | None = None
        self._counted_at = 0.0
        # Pruning for count starts once the trail is this far over, so that a trail at its limit is
        # not listed for every new event.
        self._slack = min(batch, max(1, retention.max_events // 100))
        self._wake = asyncio.Event()
        self._stopping = False

    def recorded(self) -> None:
        """One more event was stored (the audit log calls this)."""
        if self._count is None:
            return
        self._count += 1
        if self._count > self._retention.max_events + self._slack:
            self._wake.set()

    async def run(self) -> None:
        while not self._stopping:
            # Cleared before the pass: events recorded during it wake the next one.
            self._wake.clear()
            try:
                await self.prune()
            except StateError:
                log.exception("could not prune the audit trail; trying again in %.0f s", self._interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def prune(self) -> int:
        """One pass: delete the events beyond the count and those older than the age; how many went."""
        if self._count is None or time.monotonic() - self._counted_at > RECOUNT_INTERVAL:
            self._count = await self._store.count(AUDIT_EVENT)
            self._counted_at = time.monotonic()
        cutoff = datetime.now(UTC) - self._retention.max_age
        deleted = 0
        while not self._stopping:
            page = await self._store.list(AUDIT_EVENT, limit=self._batch)
            for event in page.items:
                if self._count <= self._retention.max_events and not _older(event, cutoff):
                    return deleted
                with contextlib.suppress(NotFound, Conflict):  # another replica pruned it first
                    await self._store.delete(AUDIT_EVENT, event.name, actor=SYSTEM)
                self._count -= 1
                deleted += 1
            if page.continue_token is None:
                return deleted
            # A large backlog goes a batch at a time, letting everything else run in between.
            await asyncio.sleep(0)
        return deleted


def _older(event: Resource, cutoff: datetime) -> bool:
    """Whether the request an event records was answered before ``cutoff``."""
    at = (event.spec or {}).get("time") or event.metadata.creation_timestamp
    return isinstance(at, str) and datetime.fromisoformat(at) < cutoff
