"""The store's list cache: lists stay right when the watch misses changes, and memory stays bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from herder.resources.catalog import herder_registry
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
