"""Fencing: a write made for work this process holds a lease on goes through only while it still holds it.

A replica that runs the controllers of a shard (``herder.runtime.shards``) holds a coordination key in
etcd; it sets that key's claim as the fence of every reconcile it runs. A backend that others write too
(etcd) makes each write of such a reconcile compare the claim in the same transaction, so a replica whose
lease ran out while it was busy (a long pause, a partition) cannot write over the replica that took the
shard over: its write fails with ``Fenced``. Backends that one process owns have no one to be fenced
from and ignore it.

The fence is a context variable: set by the runtime around a reconcile, it reaches the backend through
every ``Store`` call the reconcile awaits, without each of them passing it on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple


class Fence(NamedTuple):
    """A coordination key and the revision at which this process claimed it."""

    key: str
    revision: int


_FENCE: ContextVar[Fence | None] = ContextVar("herder_fence", default=None)


def current() -> Fence | None:
    """The fence of the work the caller is doing, if any."""
    return _FENCE.get()


@contextmanager
def fenced(fence: Fence | None) -> Iterator[None]:
    """Make the writes of the enclosed code (and of the tasks it starts) conditional on ``fence``."""
    token = _FENCE.set(fence)
    try:
        yield
    finally:
        _FENCE.reset(token)


__all__ = ["Fence", "current", "fenced"]
