"""Exponential backoff: each failure doubles the wait, up to a cap.

``Backoff`` counts failures per key in memory (a controller's retries of a reconcile); ``retry_delay``
is the same schedule for a count kept elsewhere (the attempts a status records across restarts).
"""

from __future__ import annotations

import random
from collections.abc import Hashable


def retry_delay(attempts: int, first: float, cap: float) -> float:
    """How long to wait after the ``attempts``-th failure in a row: ``first``, doubling, at most ``cap``."""
    return float(min(first * 2 ** max(attempts - 1, 0), cap))


class Backoff:
    def __init__(self, base: float = 0.05, cap: float = 300.0, jitter: float = 0.2) -> None:
        self.base, self.cap, self.jitter = base, cap, jitter
        self._failures: dict[Hashable, int] = {}

    def next_delay(self, key: Hashable) -> float:
        """Record one more failure of ``key`` and return how long to wait before retrying it."""
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        delay = retry_delay(n, self.base, self.cap)
        # Jitter spreads the retries of many keys that failed together (a store outage, say).
        return float(delay * random.uniform(1 - self.jitter, 1 + self.jitter))

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)
