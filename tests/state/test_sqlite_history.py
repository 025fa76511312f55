"""SQLite's revision log as watchers and readers find it after a restart: previous values (kept by
reference or copied into the row), pruning, and databases written by the earlier storage layouts."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from herder.resources.catalog import herder_registry
from herder.state.errors import Gone, Unavailable
from herder.state.sqlite import SQLiteBackend
from herder.state.store import Store, WatchEvent
from tests.state.conftest import ns, patch


async def _open(path: Path, **options: int) -> Store:
    return await Store(await SQLiteBackend(path, **options).open(), herder_registry()).start()


async def _replay(store: Store, after: int, count: int) -> list[WatchEvent]:
    """``count`` events from after revision ``after``, as a watcher resuming from it sees them."""
    stream = store.watch("configpatches", resource_version=after)
    try:
        return [await asyncio.wait_for(anext(stream), 10) for _ in range(count)]
    finally:
        await stream.aclose()


def _summary(events: list[WatchEvent]) -> list[tuple[str, str, str | None, str | None]]:
    """Type, name, the object's data and the previous object's data of each event."""
    return [
        (
            e.type,
            e.object.name,
            (e.object.spec or {}).get("data"),
            (e.previous.spec or {}).get("data") if e.previous is not None else None,
        )
        for e in events
    ]


async def test_a_watch_resumed_after_a_restart_sees_previous_objects(tmp_path: Path) -> None:
    store = await _open(tmp_path / "h.db")
    await store.create(ns("default"))
    start = await store.revision()
    a = await store.create(patch("a", "one: 1"))
    a.spec = {"data": "one: 11"}
    await store.update(a)
    await store.create(patch("b", "two: 2"))
    await store.delete("cp", "a", "default")
    await store.close()

    store = await _open(tmp_path / "h.db")
    try:
        events = await _replay(store, start, 4)
    finally:
        await store.close()
    # A DELETED event carries the object's last state.
    assert _summary(events) == [
        ("ADDED", "a", "one: 1", None),
        ("MODIFIED", "a", "one: 11", "one: 1"),
        ("ADDED", "b", "two: 2", None),
        ("DELETED", "a", "one: 11", None),
    ]


async def test_a_previous_value_older_than_the_history_is_kept_in_its_event(tmp_path: Path) -> None:
    # history=16, pruned on every write: "a" is updated 25 writes after its creation, whose own
    # event is gone by then.
    store = await _open(tmp_path / "h.db", history=16, prune_every=1)
    await store.create(ns("default"))
    a = await store.create(patch("a", "one: 1"))
    for i in range(25):
        await store.create(patch(f"f{i:02d}"))
    a.spec = {"data": "one: 11"}
    await store.update(a)
    last = await store.revision()
    await store.close()

    store = await _open(tmp_path / "h.db", history=16, prune_every=1)
    try:
        events = await _replay(store, last - 16, 16)
    finally:
        await store.close()
    assert _summary(events[-1:]) == [("MODIFIED", "a", "one: 11", "one: 1")]


async def test_pruning_keeps_what_objects_hold_and_forgets_what_they_held(tmp_path: Path) -> None:
    # history=8, pruned on every write. "keep" is never written again: its row outlives the history.
    # "gone" is created, outlived by the history too, then deleted: its old row must go before its
    # delete's row does (or a restart would bring it back), also when the backend stopped between.
    path = tmp_path / "h.db"
    backend = await SQLiteBackend(path, history=8, prune_every=1).open()
    await backend.create("/k/keep", b"kept")
    gone = await backend.create("/k/gone", b"old")
    for i in range(20):
        await backend.create(f"/k/f{i:02d}", b"x")
    await backend.close()
    # Deleted, then closed before a prune (as by a crash).
    backend = await SQLiteBackend(path, history=8, prune_every=1000).open()
    await backend.remove("/k/gone", gone)
    await backend.close()
    backend = await SQLiteBackend(path, history=8, prune_every=1).open()
    for i in range(20):
        await backend.create(f"/k/g{i:02d}", b"x")
    await backend.close()

    backend = await SQLiteBackend(path, history=8, prune_every=1).open()
    try:
        assert await backend.get("/k/gone") is None
        kept = await backend.get("/k/keep")
        assert kept is not None and kept.value == b"kept"
        kvs, _ = await backend.range("/k/")
        assert [kv.key for kv in kvs][:2] == ["/k/f00", "/k/f01"] and len(kvs) == 41
        assert await backend.count("/k/") == 41
    finally:
        await backend.close()
    conn = sqlite3.connect(path)
    # What is left: each key's current row, and the last 8 revisions with the 2 they refer to.
    assert conn.execute("SELECT count(*) FROM revisions").fetchone()[0] <= 41 + 2
    assert conn.execute("SELECT count(*) FROM revisions WHERE key = '/k/gone'").fetchone()[0] == 0
    conn.close()


async def test_compaction_keeps_the_values_newer_events_refer_to(tmp_path: Path) -> None:
    # history=8 (references reach 2 revisions back), pruned on every write.
    store = await _open(tmp_path / "h.db", history=8, prune_every=1)
    await store.create(ns("default"))
    made = await store.create(patch("a", "v: 0"))
    for i in range(1, 12):
        made.spec = {"data": f"v: {i}"}
        made = await store.update(made)
    last = await store.revision()
    await store.close()

    store = await _open(tmp_path / "h.db", history=8, prune_every=1)
    try:
        # The oldest watchable event refers to a revision already compacted away for watches.
        events = await _replay(store, last - 8, 8)
        with pytest.raises(Gone):
            await _replay(store, last - 9, 1)
    finally:
        await store.close()
    assert _summary(events) == [("MODIFIED", "a", f"v: {i}", f"v: {i - 1}") for i in range(4, 12)]


def _patch_json(data: str, name: str = "a") -> bytes:
    return (
        '{"apiVersion":"herder.dev/v1alpha1","kind":"ConfigPatch","metadata":{"name":"' + name + '",'
        '"namespace":"default","uid":"9d1c4a8e-0000-4000-8000-000000000001","generation":1,'
        f'"creationTimestamp":"2025-01-01T00:00:00Z"}},"spec":{{"data":"{data}"}}}}'
    ).encode()


def _old_database(path: Path, schema: str, rows: list[tuple[str, tuple[object, ...]]]) -> None:
    """A database as an earlier herder left it: its ``schema``, then each (statement, parameters)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(schema)
    for sql, params in rows:
        conn.execute(sql, params)
    conn.close()


def _layout(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        layout: int = conn.execute("PRAGMA user_version").fetchone()[0]
        return layout
    finally:
        conn.close()


async def test_a_database_of_the_second_layout_is_migrated(tmp_path: Path) -> None:
    # The second layout: objects updated in place, events beside them; "b" was deleted, and "a"'s
    # creation event is pruned (its row holds it).
    path = tmp_path / "h.db"
    a, b = "/herder.dev/configpatches/default/a", "/herder.dev/configpatches/default/b"
    _old_database(
        path,
        """
        CREATE TABLE objects (key TEXT PRIMARY KEY, value BLOB NOT NULL, mod_rev INTEGER NOT NULL);
        CREATE TABLE events (
            rev INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB, prev BLOB, prev_rev INTEGER
        );
        CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        PRAGMA user_version=1;
        """,
        [
            ("INSERT INTO objects VALUES (?,?,?)", (a, _patch_json("v: 1"), 1)),
            ("INSERT INTO events VALUES (2,?,?,NULL,NULL)", (b, _patch_json("b: 1", "b"))),
            ("INSERT INTO events VALUES (3,?,NULL,?,NULL)", (b, _patch_json("b: 1", "b"))),
            ("INSERT INTO meta VALUES ('compacted', 1)", ()),
        ],
    )

    store = await _open(path)
    try:
        made = await store.get("cp", "a", "default")
        assert (made.spec, made.metadata.resource_version) == ({"data": "v: 1"}, "1")
        assert [o.name for o in (await store.list("cp", "default")).items] == ["a"]
        made.spec = {"data": "v: 2"}
        await store.update(made)
        events = await _replay(store, 1, 3)
    finally:
        await store.close()
    assert _summary(events) == [
        ("ADDED", "b", "b: 1", None),
        ("DELETED", "b", "b: 1", None),
        ("MODIFIED", "a", "v: 2", "v: 1"),
    ]
    assert _layout(path) == 2


async def test_a_database_of_the_first_layout_is_migrated(tmp_path: Path) -> None:
    # The first layout: objects WITHOUT ROWID, and each event carrying its previous value.
    path = tmp_path / "h.db"
    key = "/herder.dev/configpatches/default/a"
    _old_database(
        path,
        """
        CREATE TABLE objects (key TEXT PRIMARY KEY, value BLOB NOT NULL, mod_rev INTEGER NOT NULL)
            WITHOUT ROWID;
        CREATE TABLE events (rev INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB, prev BLOB);
        CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        """,
        [
            ("INSERT INTO objects VALUES (?,?,?)", (key, _patch_json("v: 2"), 2)),
            ("INSERT INTO events VALUES (1,?,?,NULL)", (key, _patch_json("v: 1"))),
            ("INSERT INTO events VALUES (2,?,?,?)", (key, _patch_json("v: 2"), _patch_json("v: 1"))),
        ],
    )

    store = await _open(path)
    try:
        made = await store.get("cp", "a", "default")
        assert (made.spec, made.metadata.resource_version) == ({"data": "v: 2"}, "2")
        made.spec = {"data": "v: 3"}
        await store.update(made)
        events = await _replay(store, 1, 2)
    finally:
        await store.close()
    # The first previous value was copied into its event; the new event refers to a migrated one.
    assert _summary(events) == [
        ("MODIFIED", "a", "v: 2", "v: 1"),
        ("MODIFIED", "a", "v: 3", "v: 2"),
    ]
    assert _layout(path) == 2


async def test_a_database_of_a_newer_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(Unavailable, match="layout 99"):
        await SQLiteBackend(path).open()
    # The refusal let go of the file: a herder that knows the layout may open it.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=1")
    conn.close()
    await (await SQLiteBackend(path).open()).close()
