"""Leader election: of several herder processes on one store, only the leader runs controllers.

``AlwaysLeader`` is for the single-process backends (memory, SQLite), where the process owning the
store is the only one. ``EtcdLeaderElection`` holds a key bound to an etcd lease kept alive every
ttl/3; the others watch that key and claim it once it is gone, which happens at most ``ttl`` after
the leader dies (its lease expires) or at once when it releases leadership.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from herder.runtime.lease import keep, stop
from herder.state.backend import KV, Compacted
from herder.state.errors import StateError
from herder.state.etcd import EtcdBackend
from herder.state.fence import Fence

log = logging.getLogger(__name__)


class LeaderElection(Protocol):
    """``acquire`` returns once this process leads; ``lost`` is set when it no longer does. ``fence`` is
    what the leader's writes carry (``herder.state.fence``), None where no other process could write."""

    lost: asyncio.Event
    fence: Fence | None

    async def acquire(self) -> None: ...

    async def release(self) -> None: ...


class AlwaysLeader:
    """The only process on its store leads from the start."""

    def __init__(self) -> None:
        self.lost = asyncio.Event()
        self.fence: Fence | None = None

    async def acquire(self) -> None:
        self.lost.clear()

    async def release(self) -> None:
        self.lost.set()


class EtcdLeaderElection:
    def __init__(self, backend: EtcdBackend, name: str, identity: str, ttl: float = 10) -> None:
        self._backend = backend
        self.key = f"/leader/{name}"
        self.identity = identity
        self.ttl = ttl
        self.lost = asyncio.Event()
        self.fence: Fence | None = None
        self._lease: int | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def leader(self) -> str | None:
        """The identity of the current leader, if any."""
        kv = await self._backend.get_coordination(self.key)
        return kv.value.decode() if kv is not None else None

    async def acquire(self) -> None:
        retry = min(1.0, self.ttl / 10)
        while True:
            try:
                lease = await self._backend.grant_lease(self.ttl)
                won, holder = await self._backend.claim(self.key, self.identity.encode(), lease)
                if won:
                    self._lead(lease, holder)
                    return
                await self._backend.revoke_lease(lease)
                log.info("%s leads %s; waiting for it to go", holder.value.decode(), self.key)
                await self._until_gone(holder)
            except StateError as err:
                log.warning("leader election %s: %s; trying again", self.key, err)
                await asyncio.sleep(retry)

    async def _until_gone(self, holder: KV) -> None:
        """Return once the leader key no longer holds ``holder``'s claim."""
        from_rev = holder.mod_rev + 1
        while True:
            try:
                async for event in self._backend.watch_coordination(self.key, from_rev):
                    if event.value is None:
                        return
            except Compacted as err:
                current = await self._backend.get_coordination(self.key)
                if current is None or current.mod_rev != holder.mod_rev:
                    return
                # Unchanged until now, and every revision from ``oldest`` on is still there to watch.
                from_rev = err.oldest

    def _lead(self, lease: int, claim: KV) -> None:
        log.info("%s leads %s", self.identity, self.key)
        self._lease = lease
        self.fence = Fence(self.key, claim.mod_rev)
        self.lost.clear()
        self._tasks = [
            asyncio.create_task(self._keep_alive(lease), name=f"lease {self.key}"),
            asyncio.create_task(self._watch_own_key(claim), name=f"watch {self.key}"),
        ]

    def _lose(self, why: str) -> None:
        if not self.lost.is_set():
            log.warning("%s lost leadership of %s: %s", self.identity, self.key, why)
            self.lost.set()

    async def _keep_alive(self, lease: int) -> None:
        self._lose(await keep(self._backend, lease, self.ttl))

    async def _watch_own_key(self, claim: KV) -> None:
        try:
            await self._until_gone(claim)
        except StateError as err:
            self._lose(f"cannot watch the leader key: {err}")
            return
        self._lose("the leader key was deleted")

    async def release(self) -> None:
        """Stop leading: end the lease, which deletes the key so that another process takes over now."""
        await stop(self._tasks)
        if self._lease is not None:
            lease, self._lease = self._lease, None
            try:
                await self._backend.revoke_lease(lease)
            except StateError as err:
                log.warning(
                    "releasing %s: %s; the lease expires by itself within %s s", self.key, err, self.ttl
                )
        self.lost.set()


__all__ = ["AlwaysLeader", "EtcdLeaderElection", "LeaderElection"]
