"""Exponential backoff with jitter, per key: each failure doubles the wait, a success forgets it."""

from __future__ import annotations

import random
from collections.abc import Hashable


class Backoff:
    def __init__(self, base: float = 0.05, cap: float = 300.0, jitter: float = 0.2) -> None:
        self.base, self.cap, self.jitter = base, cap, jitter
        self._failures: dict[Hashable, int] = {}

    def next_delay(self, key: Hashable) -> float:
        """Record one more failure of ``key`` and return how long to wait before retrying it."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self.cap, self.base * (2**n))
        # Jitter spreads the retries of many keys that failed together (a store outage, say).
        return float(delay * random.uniform(1 - self.jitter, 1 + self.jitter))

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)
