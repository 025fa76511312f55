"""Keeping an etcd lease alive, for the leader election and the shards: what holds a key bound to a lease
must learn that it lost it before anyone else can have taken the key over; and ending the tasks that keep
it and watch its keys."""

from __future__ import annotations

import asyncio
import contextlib

from herder.state.errors import StateError
from herder.state.etcd import EtcdBackend


async def keep(backend: EtcdBackend, lease: int, ttl: float) -> str:
    """Refresh ``lease`` every ttl/3 until it is lost; returns why it was. A lease that could not be
    refreshed for 2/3 of its ttl counts as lost before it can have run out, so that two processes never
    both hold its keys."""
    loop = asyncio.get_running_loop()
    last_ok = loop.time()
    while True:
        try:
            remaining = await backend.keep_alive(lease)
        except StateError as err:
            if loop.time() - last_ok > ttl * 2 / 3:
                return f"lease not renewed for {loop.time() - last_ok:.1f} s ({err})"
            await asyncio.sleep(min(1.0, ttl / 10))
            continue
        if remaining <= 0:
            return "the lease expired"
        last_ok = loop.time()
        await asyncio.sleep(ttl / 3)


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` (a lease's keep-alive and watches) and wait until they have ended; empties the list."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    tasks.clear()


__all__ = ["keep", "stop"]
