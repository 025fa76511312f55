"""The time controllers read: the wall clock for what they record, a monotonic one for how long they wait.

Controllers take it from their ``Context``, so that a unit test can set the time (``FakeClock``) and see
a reconcile's decision at any moment of a retry schedule or a timeout, without sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class Clock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def rfc3339(self) -> str:
        """Now as Kubernetes writes timestamps: RFC 3339, UTC, whole seconds."""
        return self.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def micro(self) -> str:
        """Now as Kubernetes' MicroTime (stamps of events within one second still order as strings)."""
        return self.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def age(self, stamp: str) -> float | None:
        """How many seconds ago an RFC 3339 timestamp was (None when it is not one)."""
        try:
            then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None
        if then.tzinfo is None:
            then = then.replace(tzinfo=UTC)
        return (self.now() - then).total_seconds()


class FakeClock(Clock):
    """A clock that moves only when told to (``advance``): for tests."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._monotonic = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds


REAL_CLOCK = Clock()
