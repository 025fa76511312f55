"""Audit retention on a real SQLite store: the trail is kept within its age and count, pruned in the
background, a batch at a time, while writes go on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from herder.api.audit import AuditLog
from herder.api.audit_retention import AuditPruner, Retention
from herder.krm.policy import Access, Identity
from herder.resources import Resource
from herder.resources.access import AUDIT_EVENT
from herder.resources.catalog import herder_registry
from herder.resources.configuration import CONFIG_PATCH
from herder.state.store import SYSTEM, Store
from herder.state.url import open_store

WHO = Identity("serviceaccount:ci", "Operator")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    # synchronous=normal: the same SQLite, without an fsync per delete of a large backlog.
    store = await open_store(
        f"sqlite://{tmp_path / 'herder.db'}?synchronous=normal", herder_registry(), key=os.urandom(32)
    )
    yield store
    await store.close()


async def record(audit: AuditLog, *names: str) -> None:
    for name in names:
        access = Access("create", CONFIG_PATCH, "default", name)
        await audit.record(WHO, access, method="POST", source="127.0.0.1", user_agent="test", code=201)


async def recorded_names(store: Store) -> list[str]:
    return [e.spec["name"] for e in (await store.list(AUDIT_EVENT)).items if e.spec]


async def test_the_oldest_events_beyond_the_count_are_deleted(store: Store, tmp_path: Path) -> None:
    pruner = AuditPruner(store, Retention(max_events=5))
    audit = AuditLog(store, tmp_path / "audit.log", on_stored=pruner.recorded)
    await record(audit, *(f"p{i:02d}" for i in range(12)))
    assert await pruner.prune() == 7
    assert await recorded_names(store) == [f"p{i:02d}" for i in range(7, 12)]
    assert await pruner.prune() == 0
    # audit.log is the operator's: every line stays.
    assert len((tmp_path / "audit.log").read_text().splitlines()) == 12
    audit.close()


async def test_events_older_than_the_age_are_deleted(store: Store, tmp_path: Path) -> None:
    pruner = AuditPruner(store, Retention(max_age=timedelta(seconds=1)))
    audit = AuditLog(store, tmp_path / "audit.log")
    await record(audit, "old-1", "old-2", "old-3")
    await asyncio.sleep(1.2)
    await record(audit, "new-1", "new-2")
    assert await pruner.prune() == 3
    assert await recorded_names(store) == ["new-1", "new-2"]
    audit.close()


async def test_the_background_pruner_wakes_when_the_trail_outgrows_its_count(
    store: Store, tmp_path: Path
) -> None:
    # The interval is far away: only the count of new events can wake the pruner in time.
    pruner = AuditPruner(store, Retention(max_events=10), interval=3600)
    audit = AuditLog(store, tmp_path / "audit.log", on_stored=pruner.recorded)
    running = asyncio.create_task(pruner.run())
    try:
        await asyncio.sleep(0.2)  # the first pass counts the (empty) trail
        await record(audit, *(f"e{i:02d}" for i in range(30)))
        for _ in range(100):
            if await store.count(AUDIT_EVENT) <= 11:
                break
            await asyncio.sleep(0.05)
        names = await recorded_names(store)
        assert len(names) <= 11 and names[-1] == "e29"
    finally:
        pruner.stop()
        await asyncio.wait_for(running, 10)
        audit.close()


async def test_a_large_backlog_is_pruned_in_batches_while_writes_go_on(store: Store, tmp_path: Path) -> None:
    audit = AuditLog(store, tmp_path / "audit.log")
    await record(audit, *(f"b{i:03d}" for i in range(400)))
    pruner = AuditPruner(store, Retention(max_events=10), batch=50)
    pruning = asyncio.create_task(pruner.prune())
    await asyncio.sleep(0.01)
    patch = Resource.model_validate(
        {
            "apiVersion": CONFIG_PATCH.api_version,
            "kind": CONFIG_PATCH.kind,
            "metadata": {"name": "written-meanwhile", "namespace": "default"},
            "spec": {"data": "machine: {}"},
        }
    )
    namespace = Resource.model_validate(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    )
    await store.create(namespace, actor=SYSTEM)
    await store.create(patch, actor=SYSTEM)
    # The writes got in while the pass was still deleting: it yields between deletes and batches.
    assert not pruning.done()
    assert await pruning == 390
    assert await store.count(AUDIT_EVENT) == 10
    assert (await recorded_names(store))[0] == "b390"
    audit.close()
