"""The store's list cache: lists stay right when the watch misses changes, and memory stays bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from herder.resources.catalog import herder_registry
from herder.state.errors import NotFound
from herder.state.list_cache import KindSnapshot, ListCache
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from herder.state.stored import Stored
from tests.state.conftest import ns, patch


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    # A history of 5 changes: a watch that falls 5 changes behind cannot catch up.
    store = await Store(MemoryBackend(history=5), herder_registry()).start()
    await store.create(ns("default"))
    try:
        yield store
    finally:
        await store.close()


async def names(store: Store) -> list[str]:
    return [o.name for o in (await store.list("cp")).items]


async def test_a_list_after_the_watch_fell_behind_compaction_shows_every_object(store: Store) -> None:
    await store.create(patch("first"))
    assert await names(store) == ["first"]  # the kind is now kept in memory
    # The memory backend's writes do not yield to the event loop: the store's watch runs only after
    # all 20, by when its history has moved past them.
    for i in range(20):
        await store.create(patch(f"p{i:02d}"))
    await asyncio.sleep(0.2)
    assert await names(store) == ["first", *(f"p{i:02d}" for i in range(20))]


async def test_a_kind_larger_than_the_cache_is_listed_from_the_backend() -> None:
    store = await Store(MemoryBackend(), herder_registry(), list_cache=100).start()
    try:
        await store.create(ns("default"))
        for name in ("a", "b"):
            await store.create(patch(name))
            assert await names(store) == ["a", "b"][: 1 + (name == "b")]
        await store.delete("cp", "a", "default")
        assert await names(store) == ["b"]
    finally:
        await store.close()


def _state(key: str, size: int) -> Stored:
    return Stored(key, 1, b"x" * size, lambda key, value: value)


def test_the_cache_drops_the_kinds_listed_least_recently_past_its_cap() -> None:
    cache = ListCache(cap=250)
    for plural in ("as", "bs", "cs"):
        snapshot = KindSnapshot(f"/g/{plural}/", 1)
        snapshot.put(_state(f"/g/{plural}/one", 100))
        assert cache.install(snapshot)
        cache.get("/g/as/")  # listed again: the most recently listed now
    assert cache.get("/g/bs/") is None
    assert cache.get("/g/cs/") is not None and cache.get("/g/as/") is not None
    # A change that grows a kind past the cap drops the kind listed least recently (cs, before as).
    cache.apply("/g/as/two", 2, _state("/g/as/two", 100))
    assert cache.get("/g/cs/") is None
    listed = cache.get("/g/as/")
    assert listed is not None and [s.key for s in listed.states("/g/as/")] == ["/g/as/one", "/g/as/two"]
    big = KindSnapshot("/g/ds/", 1)
    big.put(_state("/g/ds/one", 251))
    assert not cache.install(big) and "/g/ds/" in cache.too_large


async def test_a_label_selected_list_follows_labels_that_change(store: Store) -> None:
    for name, pool in (("a", "x"), ("b", "y"), ("c", "x")):
        await store.create(patch(name, labels={"pool": pool}))

    async def pool(selector: str) -> list[str]:
        await asyncio.sleep(0.05)  # the watch has published every write
        return [o.name for o in (await store.list("cp", "default", label_selector=selector)).items]

    assert await pool("pool=x") == ["a", "c"]  # the kind is cached and its pool label indexed
    relabelled = await store.get("cp", "a", "default")
    relabelled.metadata.labels = {"pool": "y"}
    await store.update(relabelled)
    await store.delete("cp", "c", "default")
    await store.create(patch("d", labels={"pool": "x", "zone": "1"}))
    await store.create(patch("e", namespace="default", labels={"pool": "x", "zone": "2"}))
    assert await pool("pool=x") == ["d", "e"]
    assert await pool("pool in (x,y)") == ["a", "b", "d", "e"]
    assert await pool("pool=x,zone=2") == ["e"]
    assert await pool("pool=z") == []


async def test_a_get_answered_from_the_cache_is_the_stored_state(store: Store) -> None:
    created = await store.create(patch("a", data="one"))
    assert await names(store) == ["a"]  # the kind is now kept in memory
    await asyncio.sleep(0.05)
    assert (await store.get("cp", "a", "default")).spec["data"] == "one"
    created.spec = {"data": "two"}
    updated = await store.update(created)
    # Asked at once, before the watch has published the update: the backend answers.
    got = await store.get("cp", "a", "default")
    assert got.spec["data"] == "two"
    assert got.metadata.resource_version == updated.metadata.resource_version
    await asyncio.sleep(0.05)
    assert (
        await store.get("cp", "a", "default")
    ).metadata.resource_version == updated.metadata.resource_version
    await store.delete("cp", "a", "default")
    with pytest.raises(NotFound):
        await store.get("cp", "a", "default")
    await asyncio.sleep(0.05)
    with pytest.raises(NotFound):
        await store.get("cp", "a", "default")
