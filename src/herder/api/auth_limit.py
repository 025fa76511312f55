"""The rate limit of failed authentication, per source address.

Each source (an IPv4 address, or the /64 network of an IPv6 one, which one host usually holds whole)
may fail ``burst`` times in quick succession, and then once per ``refill_seconds``; a failure beyond that is
answered 429 TooManyRequests with ``Retry-After`` instead of 401, and is not written to
``audit.log`` (the server log says once when a source starts being limited). A request is always
authenticated first, so a valid token from a limited source still works: clients behind one NAT with
a misconfigured neighbour keep working, and successful requests never reach the limiter at all.
A token cannot be guessed anyway (256 random bits); the limit is back-pressure on clients that keep
failing, and keeps a flood of failures from filling the audit log.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

BURST = 20
REFILL_SECONDS = 6.0
# Sources remembered at once; the one that failed longest ago is forgotten first.
MAX_SOURCES = 10_000


@dataclass(slots=True)
class _Bucket:
    allowance: float
    at: float
    limited: bool = False


def source_of(address: str) -> str:
    """The unit a limit applies to: the address, or an IPv6 address's /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class AuthFailureLimit:
    """A bucket of allowed failures per source, refilled with time (one process's view)."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
        max_sources: int = MAX_SOURCES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = burst
        self._refill = refill_seconds
        self._max_sources = max_sources
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def failed(self, address: str) -> int | None:
        """Count one failed authentication from ``address``: None while it is within its limit, else
        the whole seconds until it may fail again (the ``Retry-After``)."""
        source, now = source_of(address), self._clock()
        bucket = self._buckets.pop(source, None) or _Bucket(float(self._burst), now)
        bucket.allowance = min(float(self._burst), bucket.allowance + (now - bucket.at) / self._refill)
        bucket.at = now
        self._buckets[source] = bucket
        if len(self._buckets) > self._max_sources:
            self._buckets.popitem(last=False)
        if bucket.allowance >= 1:
            bucket.allowance -= 1
            bucket.limited = False
            return None
        if not bucket.limited:
            bucket.limited = True
            log.warning(
                "authentication from %s failed more than %d times in quick succession: "
                "its failures are answered 429 until it slows down",
                source,
                self._burst,
            )
        return max(1, math.ceil((1 - bucket.allowance) * self._refill))
