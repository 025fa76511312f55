"""Shards of the controllers' work: where an object belongs, how replicas on a real etcd share the shards
(a join takes a share, a death gives its shards away within the lease's ttl), fencing of a replica that
lost a shard, and the runtime reconciling only the keys of the shards it holds."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from herder.resources.catalog import herder_registry
from herder.resources.machines import CLUSTER_LABEL
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.lease import stop
from herder.runtime.manager import Manager
from herder.runtime.shards import (
    NO_CLUSTER,
    Held,
    ShardLeases,
    ShardMap,
    assign,
    shard_names,
    shard_of_cluster,
)
from herder.state.errors import Fenced
from herder.state.etcd import EtcdBackend
from herder.state.etcd_process import EtcdCluster
from herder.state.fence import fenced
from herder.state.store import Store
from tests.runtime.test_manager import eventually
from tests.state.conftest import ns, patch


def test_objects_of_a_cluster_share_its_shard_and_objects_of_none_have_their_own() -> None:
    clusters = [f"c{i}" for i in range(200)]
    placed = Counter(shard_of_cluster(c, 5) for c in clusters)
    # Four shards of clusters, each with its share; shard 0 has none of them.
    assert sorted(placed) == ["1", "2", "3", "4"]
    assert min(placed.values()) > 200 / 4 / 2
    assert shard_of_cluster(None, 5) == NO_CLUSTER
    assert shard_of_cluster("c1", 5) == shard_of_cluster("c1", 5)
    # One shard is everything: the leader's.
    assert {shard_of_cluster(c, 1) for c in clusters} == {NO_CLUSTER}


def test_assignment_is_the_same_for_every_replica_and_shares_differ_by_one_at_most() -> None:
    shards = shard_names(5)
    one = assign(shards, ["b", "a"])
    assert one == assign(shards, ["a", "b", "a"])
    assert sorted(Counter(one.values()).values()) == [2, 3]
    assert set(assign(shards, ["a"]).values()) == {"a"}
    assert assign(shards, []) == {}


class Recorder(Controller):
    name = "Recorder"
    primary = "ConfigPatch"
    watches = [Watch("ConfigPatch")]

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        self.calls[key.name] += 1
        return None


class Given:
    """An ownership that hands the manager a fixed set of shards."""

    def __init__(self, held: Held) -> None:
        self.held = held
        self.changed = asyncio.Event()

    async def acquire(self) -> Held:
        return self.held

    async def hand_over(self) -> None:
        pass

    async def release(self) -> None:
        pass


async def test_the_runtime_reconciles_only_the_keys_of_the_shards_it_holds(store: Store) -> None:
    count = 3
    mine = shard_of_cluster("alpha", count)
    theirs = next(
        c for c in (f"c{i}" for i in range(50)) if shard_of_cluster(c, count) not in (mine, NO_CLUSTER)
    )
    await store.create(patch("of-alpha", labels={CLUSTER_LABEL: "alpha"}))
    await store.create(patch("of-theirs", labels={CLUSTER_LABEL: theirs}))
    await store.create(patch("of-none"))
    recorder = Recorder()
    manager = Manager(store, [recorder], ownership=Given({mine: None}), shards=ShardMap(store, count))
    task = asyncio.create_task(manager.run())
    try:
        await asyncio.wait_for(manager.wait_synced(), 10)
        await eventually(lambda: recorder.calls["of-alpha"] == 1)
        # An object that joins the shard later (labelled with its cluster) is reconciled then.
        moved = await store.get("ConfigPatch", "of-none", "default")
        moved.metadata.labels[CLUSTER_LABEL] = "alpha"
        await store.update(moved)
        await eventually(lambda: recorder.calls["of-none"] == 1)
        await asyncio.sleep(0.2)
        assert recorder.calls["of-theirs"] == 0
    finally:
        manager.stop()
        await task


async def _settled(*replicas: ShardLeases, count: int) -> list[set[str]]:
    """What the replicas hold once, each doing what its manager would whenever told to (hand over what it
    should give, take what it may), they hold every shard between them, none twice."""
    async with asyncio.timeout(20):
        while True:
            held = [set(r.held()) for r in replicas]
            if set().union(*held) == set(shard_names(count)) and sum(map(len, held)) == count:
                return held
            for replica in replicas:
                if replica.changed.is_set() or not replica.held():
                    await replica.hand_over()
                    await replica.acquire()
            await asyncio.sleep(0.05)


@pytest.mark.etcd
async def test_replicas_share_the_shards_and_a_dead_ones_are_taken_within_its_ttl(
    backend: EtcdBackend,
) -> None:
    count, ttl = 5, 2.0
    a = ShardLeases(backend, "controllers", "a", count, ttl=ttl)
    b = ShardLeases(backend, "controllers", "b", count, ttl=ttl)
    try:
        assert await _settled(a, count=count) == [set(shard_names(count))]
        # b joins: a is told to give b its share, and hands it over once its controllers stopped.
        joining = asyncio.create_task(b.acquire())
        await asyncio.wait_for(a.changed.wait(), 10)
        await a.hand_over()
        await asyncio.wait_for(joining, 10)
        of_a, of_b = await _settled(a, b, count=count)
        assert {len(of_a), len(of_b)} == {2, 3}
        # b dies without a word (its lease is no longer kept alive): its shards are a's within the ttl.
        await stop(b._tasks)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(a.changed.wait(), ttl + 5)
        assert await _settled(a, count=count) == [set(shard_names(count))]
        assert asyncio.get_running_loop().time() - started < ttl + 5
    finally:
        await a.release()
        await b.release()


@pytest.mark.etcd
async def test_a_replica_that_lost_its_shard_cannot_write(etcd: EtcdCluster) -> None:
    backend = await EtcdBackend(etcd.endpoints, prefix=f"/sf-{uuid.uuid4().hex[:8]}").open()
    store = await Store(backend, herder_registry()).start()
    a = ShardLeases(backend, "controllers", "a", 2)
    b = ShardLeases(backend, "controllers", "b", 2)
    try:
        await store.create(ns("default"))
        await _settled(a, count=2)
        stale = (await a.acquire())["1"]
        with fenced(stale):
            await store.create(patch("while-held"))
        # b takes shard 1 over from a...
        joining = asyncio.create_task(b.acquire())
        await asyncio.wait_for(a.changed.wait(), 10)
        await a.hand_over()
        assert "1" in await asyncio.wait_for(joining, 10)
        # ...and a write a makes under its old claim, as a reconcile that ran on would, is refused.
        with fenced(stale), pytest.raises(Fenced, match="no longer holds"):
            await store.create(patch("after-losing"))
        current = await store.get("ConfigPatch", "while-held", "default")
        current.metadata.labels["changed"] = "yes"
        with fenced(stale), pytest.raises(Fenced):
            await store.update(current)
        assert [p.name for p in (await store.list("ConfigPatch", "default")).items] == ["while-held"]
        # b's own writes go through under its claim.
        with fenced((await asyncio.wait_for(b.acquire(), 10))["1"]):
            await store.create(patch("by-b"))
    finally:
        await a.release()
        await b.release()
        await store.close()
