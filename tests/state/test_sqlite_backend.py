"""The raw contract of the SQLite backend where its write path has shortcuts: preconditions checked
against the index in memory, and previous values taken from the events still in memory."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from herder.state.backend import KeyExists, RawEvent, RevisionMismatch
from herder.state.errors import Unavailable
from herder.state.sqlite import SQLiteBackend


async def _events(backend: SQLiteBackend, from_rev: int, count: int) -> list[RawEvent]:
    stream = backend.watch("/", from_rev)
    try:
        return [await asyncio.wait_for(anext(stream), 10) for _ in range(count)]
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("restart", [False, True], ids=["in-memory", "after-restart"])
async def test_failed_preconditions_write_nothing(tmp_path: Path, restart: bool) -> None:
    backend = await SQLiteBackend(tmp_path / "h.db").open()
    first = await backend.create("/k/a", b"1")
    second = await backend.replace("/k/a", b"2", first)
    if restart:
        # Nothing in memory any more: the backend reads what it replaces from the rows.
        await backend.close()
        backend = await SQLiteBackend(tmp_path / "h.db").open()
    try:
        with pytest.raises(KeyExists):
            await backend.create("/k/a", b"x")
        # A revision the key had (its value may still be in memory), and a key that never was.
        for stale in (backend.replace("/k/a", b"x", first), backend.remove("/k/a", first)):
            with pytest.raises(RevisionMismatch) as err:
                await stale
            assert err.value.current is not None
            assert (err.value.current.value, err.value.current.mod_rev) == (b"2", second)
        with pytest.raises(RevisionMismatch) as err:
            await backend.replace("/k/b", b"x", first)
        assert err.value.current is None
        assert await backend.revision() == second
        kv = await backend.get("/k/a")
        assert kv is not None and (kv.value, kv.mod_rev) == (b"2", second)

        third = await backend.replace("/k/a", b"3", second)
        gone = await backend.remove("/k/a", third)
        events = await _events(backend, first, 4)
    finally:
        await backend.close()
    assert [(e.rev, e.value, e.prev) for e in events] == [
        (first, b"1", None),
        (second, b"2", b"1"),
        (third, b"3", b"2"),
        (gone, None, b"3"),
    ]


async def test_a_row_missing_from_the_file_is_an_error_not_a_wait(tmp_path: Path) -> None:
    # The index says the key is at a revision whose row someone removed behind the backend's back.
    backend = await SQLiteBackend(tmp_path / "h.db").open()
    try:
        rev = await backend.create("/k/a", b"1")
        conn = sqlite3.connect(tmp_path / "h.db")
        conn.execute("DELETE FROM revisions WHERE rev = ?", (rev,))
        conn.commit()
        conn.close()
        with pytest.raises(Unavailable, match=f"revision {rev} of /k/a is missing"):
            await asyncio.wait_for(backend.range("/k/"), 10)
    finally:
        await backend.close()
