"""Shards: the controllers' work split between the replicas on one etcd (``herder serve --shards N``).

Every object the controllers reconcile belongs to one of N shards, by its cluster: a Cluster by its name,
anything else by its ``herder.dev/cluster`` label, hashed onto shards ``1`` to ``N-1``. Objects of no
cluster (machines no cluster has taken, providers, users, requests) are on shard ``0`` of their own. With
one shard everything is on ``0``, and holding it is today's leader election.

Each replica registers itself under a key bound to its etcd lease and holds the shards given to it
(``assign``: round robin over the live replicas in name order) as keys bound to the same lease. A replica
that dies loses its lease within its ttl (10 s), its keys with it, and the others take its shards at once;
one that joins gets its share once the others have stopped the controllers of what they give it and
released it. A shard's claim is the fence of every write made for it (``herder.state.fence``): a replica
that lost a shard while it was busy cannot write after another took it, so no object is reconciled by two
replicas at once.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Protocol

from herder.resources.machines import CLUSTER_LABEL
from herder.runtime.controller import ObjectKey
from herder.runtime.leader import LeaderElection
from herder.runtime.lease import keep, stop
from herder.state.backend import KV, Compacted
from herder.state.errors import NotFound, StateError
from herder.state.etcd import EtcdBackend
from herder.state.fence import Fence
from herder.state.store import Store, WatchEvent

log = logging.getLogger(__name__)

NO_CLUSTER = "0"
"""The shard of the objects of no cluster (and, with one shard, of everything)."""

Held = Mapping[str, Fence | None]
"""The shards a replica holds, each with the fence its writes carry (None: nobody else could write)."""


def shard_names(count: int) -> list[str]:
    return [str(i) for i in range(count)]


def shard_of_cluster(cluster: str | None, count: int) -> str:
    """The shard of the objects of ``cluster`` (None: of no cluster). The hash is the same in every
    process (CRC-32 of the name), so that every replica places an object alike."""
    if count <= 1 or not cluster:
        return NO_CLUSTER
    return str(1 + zlib.crc32(cluster.encode()) % (count - 1))


def assign(shards: Sequence[str], members: Sequence[str]) -> dict[str, str]:
    """Which member should hold each shard: round robin over the members in name order, so that every
    replica that sees the same members computes the same answer, and shares differ by one at most."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    return {shard: ordered[i % len(ordered)] for i, shard in enumerate(shards)}


class ShardMap:
    """Where a reconcile key's object belongs. A key's cluster is read from its object's labels as its
    watch events bring it (kept for the keys seen last, so that an object's final reconcile after its
    deletion still finds its shard), else from the store."""

    def __init__(self, store: Store, count: int, *, remember: int = 200_000) -> None:
        self.store = store
        self.count = count
        self._remember = remember
        self._known: OrderedDict[ObjectKey, str] = OrderedDict()

    def note(self, key: ObjectKey, event: WatchEvent) -> None:
        """Learn ``key``'s shard from an event about its own object (with several shards: the runtime asks
        only then)."""
        if key.kind != "Cluster":
            self._keep(key, shard_of_cluster(event.object.metadata.labels.get(CLUSTER_LABEL), self.count))

    def _keep(self, key: ObjectKey, shard: str) -> None:
        self._known[key] = shard
        self._known.move_to_end(key)
        if len(self._known) > self._remember:
            self._known.popitem(last=False)

    async def shard_of(self, key: ObjectKey) -> str:
        if self.count <= 1:
            return NO_CLUSTER
        if key.kind == "Cluster":
            return shard_of_cluster(key.name, self.count)
        known = self._known.get(key)
        if known is not None:
            return known
        try:
            stored = await self.store.read(key.kind, key.name, key.namespace)
        except NotFound:
            return NO_CLUSTER
        shard = shard_of_cluster(stored.shared().metadata.labels.get(CLUSTER_LABEL), self.count)
        self._keep(key, shard)
        return shard


class Ownership(Protocol):
    """What a replica's controllers run for. ``acquire`` returns once it holds some shards; ``changed`` is
    set when what it holds should change (a shard lost, one to give away, one free to take); after its
    controllers stopped, ``hand_over`` gives away what is no longer its own, then ``acquire`` again."""

    changed: asyncio.Event

    async def acquire(self) -> Held: ...

    async def hand_over(self) -> None: ...

    async def release(self) -> None: ...


class Leadership:
    """One shard, held by the leader: a leader election as ``Ownership``."""

    def __init__(self, election: LeaderElection) -> None:
        self.election = election
        self.changed = election.lost

    async def acquire(self) -> Held:
        await self.election.acquire()
        return {NO_CLUSTER: self.election.fence}

    async def hand_over(self) -> None:
        """A leader that lost its lease has nothing left to give."""

    async def release(self) -> None:
        await self.election.release()


class ShardLeases:
    """This replica's share of ``count`` shards, held as keys of its etcd lease (module docstring)."""

    def __init__(self, backend: EtcdBackend, name: str, identity: str, count: int, ttl: float = 10) -> None:
        self._backend = backend
        self.prefix = f"/shards/{name}/"
        self.identity = identity
        self.shards = shard_names(count)
        self.ttl = ttl
        self.changed = asyncio.Event()
        self._news = asyncio.Event()
        self._lease: int | None = None
        self._joined = False
        self._members: set[str] = set()
        self._claims: dict[str, KV] = {}
        self._running: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []

    def _member_key(self, identity: str) -> str:
        return f"{self.prefix}members/{identity}"

    def _shard_key(self, shard: str) -> str:
        return f"{self.prefix}shards/{shard}"

    def wanted(self) -> set[str]:
        """The shards this replica should hold, as the live members share them now."""
        return {s for s, m in assign(self.shards, sorted(self._members)).items() if m == self.identity}

    def held(self) -> dict[str, KV]:
        return {s: kv for s, kv in self._claims.items() if kv.value == self.identity.encode()}

    async def acquire(self) -> Held:
        retry = min(1.0, self.ttl / 10)
        while True:
            self._news.clear()
            try:
                if not self._joined:
                    await self._join()
                held = await self._take_free()
            except StateError as err:
                log.warning("shards %s: %s; trying again", self.prefix, err)
                await asyncio.sleep(retry)
                continue
            if held:
                self._running = set(held)
                self.changed.clear()
                self._check()
                log.info("%s holds shards %s of %s", self.identity, ",".join(sorted(held)), self.prefix)
                return {s: Fence(self._shard_key(s), kv.mod_rev) for s, kv in held.items()}
            await self._news.wait()

    async def _join(self) -> None:
        """Take a lease, register under it, read the members and claims, and follow them."""
        await stop(self._tasks)
        await self._end_lease()
        lease = await self._backend.grant_lease(self.ttl)
        self._lease = lease
        await self._backend.claim(self._member_key(self.identity), b"", lease)
        kvs, rev = await self._backend.range_coordination(self.prefix)
        self._members, self._claims = set(), {}
        for kv in kvs:
            self._apply(kv.key, kv)
        self._joined = True
        self._tasks = [
            asyncio.create_task(self._keep(lease), name=f"lease {self.prefix}"),
            asyncio.create_task(self._follow(rev + 1), name=f"watch {self.prefix}"),
        ]

    def _apply(self, key: str, kv: KV | None) -> None:
        kind, _, name = key.removeprefix(self.prefix).partition("/")
        if kind == "members" and kv is not None:
            self._members.add(name)
        elif kind == "members":
            self._members.discard(name)
        elif kind == "shards" and kv is not None:
            self._claims[name] = kv
        elif kind == "shards":
            self._claims.pop(name, None)

    async def _take_free(self) -> dict[str, KV]:
        assert self._lease is not None
        for shard in sorted(self.wanted() - set(self._claims)):
            won, holder = await self._backend.claim(
                self._shard_key(shard), self.identity.encode(), self._lease
            )
            self._claims[shard] = holder
            if not won:
                log.info("shard %s is %s's; waiting for it", shard, holder.value.decode())
        return self.held()

    def _check(self) -> None:
        """Set ``changed`` when what this replica runs should change: a shard it runs is no longer its own,
        one it runs is wanted by another, or one it wants is free."""
        held, wanted = set(self.held()), self.wanted()
        lost = self._running - held
        give = held - wanted
        take = {s for s in wanted - held if s not in self._claims}
        if lost or give or take:
            self.changed.set()

    async def _follow(self, from_rev: int) -> None:
        try:
            async for event in self._backend.watch_coordination(self.prefix, from_rev, prefix=True):
                kv = KV(event.key, event.value, event.rev) if event.value is not None else None
                self._apply(event.key, kv)
                self._news.set()
                self._check()
        except (Compacted, StateError) as err:
            # History compacted past it, or the backend failing for good: start over from a fresh read.
            log.warning("shards %s: watch ended (%s); joining again", self.prefix, err)
            self._lost()

    async def _keep(self, lease: int) -> None:
        why = await keep(self._backend, lease, self.ttl)
        log.warning("%s lost its shards of %s: %s", self.identity, self.prefix, why)
        self._lost()

    def _lost(self) -> None:
        self._joined = False
        self._claims = {s: kv for s, kv in self._claims.items() if kv.value != self.identity.encode()}
        self.changed.set()
        self._news.set()

    async def hand_over(self) -> None:
        """Give away the shards that are now another replica's (this one's controllers have stopped)."""
        for shard in sorted(set(self.held()) - self.wanted()):
            kv = self._claims.pop(shard)
            try:
                await self._backend.release_claim(self._shard_key(shard), kv.mod_rev)
            except StateError as err:
                log.warning("handing shard %s over: %s; it goes when the lease does", shard, err)
            else:
                log.info("%s handed shard %s over", self.identity, shard)
        self._running = set()

    async def _end_lease(self) -> None:
        if self._lease is not None:
            lease, self._lease = self._lease, None
            try:
                await self._backend.revoke_lease(lease)
            except StateError as err:
                log.warning("ending a lease of %s: %s; it expires within %s s", self.prefix, err, self.ttl)

    async def release(self) -> None:
        """Leave: end the lease, which deletes this replica's keys, so the others take its shards now."""
        await stop(self._tasks)
        await self._end_lease()
        self._joined = False
        self._claims = {}
        self.changed.set()


__all__ = [
    "NO_CLUSTER",
    "Held",
    "Leadership",
    "Ownership",
    "ShardLeases",
    "ShardMap",
    "assign",
    "shard_names",
    "shard_of_cluster",
]
