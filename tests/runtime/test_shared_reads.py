"""Controllers read shared objects: one decode per stored state for every reader, and a reader that
changes one is caught (the suite runs with ``HERDER_CHECK_SHARED=1``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from herder.resources.catalog import herder_registry
from herder.runtime.controller import Context, ObjectKey
from herder.runtime.outputs import Writes
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from herder.state.stored import CHECK_SHARED, SharedObjectChanged
from tests.state.conftest import ns, patch

KEY = ObjectKey("ConfigPatch", "default", "p")


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    store = await Store(MemoryBackend(), herder_registry()).start()
    await store.create(ns("default"))
    await store.create(patch("p", labels={"pool": "a"}))
    try:
        yield Context(store, "test", (Writes("ConfigPatch", "metadata.labels", deletes=True),))
    finally:
        await store.close()


async def test_readers_of_one_state_share_one_object_and_a_write_gives_a_new_one(ctx: Context) -> None:
    first = await ctx.get(KEY)
    assert first is not None
    assert await ctx.get(KEY) is first
    [listed] = await ctx.list("ConfigPatch", "default", label_selector="pool=a")
    assert listed is first
    updated = await ctx.mutate(KEY, lambda obj: obj.metadata.labels.update(pool="b"))
    assert updated is not None and updated.metadata.labels["pool"] == "b"
    assert first.metadata.labels["pool"] == "a"  # mutate changed a copy, not what readers hold
    again = await ctx.get(KEY)
    assert again is not first and again is not None and again.metadata.labels["pool"] == "b"
    assert await ctx.list("ConfigPatch", "default", label_selector="pool=a") == []


async def test_a_reader_that_changes_a_shared_object_is_caught_by_the_next_reader(ctx: Context) -> None:
    assert CHECK_SHARED, "the suite's conftest turns the check on"
    shared = await ctx.get(KEY)
    assert shared is not None
    shared.metadata.labels["pool"] = "changed in place"
    with pytest.raises(SharedObjectChanged, match="clone"):
        await ctx.get(KEY)


async def test_watch_events_carry_the_objects_that_readers_share(ctx: Context) -> None:
    await ctx.list("ConfigPatch", "default")  # the kind is now kept in memory, as controllers' kinds are
    before = await ctx.get(KEY)
    assert before is not None
    stream = ctx.store.watch("ConfigPatch", "default", resource_version=before.metadata.resource_version)
    try:
        await ctx.mutate(KEY, lambda obj: obj.metadata.labels.update(pool="b"))
        event = await anext(stream)
        assert event.type == "MODIFIED"
        assert event.previous is before  # not decoded again for the watch
        assert event.object is await ctx.get(KEY)
        await ctx.delete(KEY)
        gone = await anext(stream)
        # A deletion's last state carries the deletion's revision, not the state's own.
        assert gone.type == "DELETED" and gone.object.metadata.labels["pool"] == "b"
        assert gone.object.resource_version > event.object.resource_version
    finally:
        await stream.aclose()
