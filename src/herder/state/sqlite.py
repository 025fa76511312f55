"""The embedded default backend: one SQLite file in WAL mode.

Every acknowledged write is committed with ``synchronous=FULL`` by default, so it survives a process
crash and a power loss; ``synchronous=normal`` trades the latter for speed. Commits never overlap, so
the revision counter needs no lock. While commits are fast (a local disk's fsync takes a few hundred
microseconds, less than a round trip to a thread and back) they run on the event loop itself; when
the disk is slow they move to a writer thread, so that the loop keeps serving while the disk works.

The file is a log of revisions, as etcd's is: a change appends one row (the key, its new value or none
for a delete, and the revision it replaced), which is both the object's stored state and its watch
event, and an index in memory (rebuilt from the rows when the file is opened) tells which revision
holds each key's current value. A write so changes one table's newest page, where an object table
updated in place and an event table beside it changed two: the WAL writes and syncs half the pages.
Replaced revisions are pruned once the watch history no longer reaches them, so that watches resume
across reconnects and restarts. Readers use their own connections, which WAL lets run beside the
writer: scans in reader threads, point reads on the event loop. A file lock stops a second process
from opening the same database.
"""

from __future__ import annotations

import asyncio
import bisect
import fcntl
import functools
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from herder.state.backend import KV, Backend, KeyExists, RawEvent, RevisionMismatch
from herder.state.errors import Unavailable
from herder.state.event_log import EventLog

T = TypeVar("T")

# Commits taking longer than this on average run in the writer thread instead of on the event loop
# (0: always in the thread).
INLINE_COMMIT_BUDGET = 0.002
# Inline commits hold the event loop for at most about this long before letting other tasks run.
INLINE_SLICE = 0.001

# The layout's version, in ``PRAGMA user_version``: 0 was objects WITHOUT ROWID (a value of more than
# ~1 KB spilled into an overflow page) and events carrying their previous values; 1 an objects table
# updated in place and an event table holding each new value again.
_LAYOUT = 2
_REVISIONS = """revisions (
    rev INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB, prev_rev INTEGER, prev BLOB
)"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_REVISIONS};
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
PRAGMA user_version={_LAYOUT};
"""
# From layouts 0 and 1: every event becomes a revision, and so does each object's current value
# where its event was pruned already.
_MIGRATE = f"""
CREATE TABLE {_REVISIONS};
INSERT INTO revisions (rev, key, value, prev_rev, prev) SELECT rev, key, value, {{prev_rev}}, prev FROM events;
INSERT INTO revisions (rev, key, value)
    SELECT mod_rev, key, value FROM objects WHERE mod_rev NOT IN (SELECT rev FROM revisions);
DROP TABLE events;
DROP TABLE objects;
"""
# Rows deleted or read by revision per statement (SQLite's bound on parameters is far above).
_CHUNK = 500


class SQLiteBackend(Backend):
    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        history: int = 100_000,
        prune_every: int = 1000,
        inline_commit_budget: float = INLINE_COMMIT_BUDGET,
    ) -> None:
        self.path = Path(path)
        self._synchronous = synchronous.upper()
        if self._synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
        self._history_size = history
        # A change's row refers to the value it replaced when that is at most this many revisions
        # older, so sure to outlive it (pruning keeps that many rows below the history); an older one
        # is copied into the row.
        self._prev_reach = history // 4
        self._prune_every = prune_every
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="sqlite-reader")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._conn_lock = threading.Lock()
        self._rev = 0
        # The index: each key's current revision, and the keys in order (for ranges). The writer
        # changes it (perhaps in its thread), the event loop reads it: under _index_lock.
        self._live: dict[str, int] = {}
        self._keys: list[str] = []
        self._index_lock = threading.Lock()
        # The history starts after ``_compacted``; rows up to ``_pruned_to`` are pruned but for keys'
        # current ones, and ``_replaced_pruned`` lists those replaced since, to prune next.
        self._compacted = 0
        self._replaced_pruned: list[int] = []
        self._since_prune = 0
        self._log = EventLog(self._read_history)
        self._lock_fd: int | None = None
        self._threaded = 0
        self._commit_seconds = 0.0
        self._yielded = 0.0
        self._inline_budget = inline_commit_budget

    async def open(self) -> SQLiteBackend:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise Unavailable(f"{self.path} is in use by another process") from None
        self._log.bind()
        try:
            oldest = await self._write(self._init)
        except BaseException:
            await self.close()
            raise
        self._log.compact(oldest)
        return self

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            self._local.conn = conn
            with self._conn_lock:
                self._connections.append(conn)
        return conn

    def _init(self) -> int:
        """Bring the file to this layout and build the index from its rows; the oldest revision a
        watch may start from."""
        conn = self._conn()
        layout = conn.execute("PRAGMA user_version").fetchone()[0]
        if layout > _LAYOUT:
            raise Unavailable(f"{self.path} has storage layout {layout}; this herder knows up to {_LAYOUT}")
        old = layout < _LAYOUT and conn.execute("SELECT 1 FROM sqlite_master WHERE name='objects'").fetchone()
        migrate = _MIGRATE.format(prev_rev="prev_rev" if layout == 1 else "NULL") if old else ""
        conn.executescript(f"BEGIN IMMEDIATE;{migrate}{_SCHEMA}COMMIT;")
        floor = conn.execute("SELECT value FROM meta WHERE name='compacted'").fetchone()
        self._compacted = compacted = floor[0] if floor else 0
        last = 0
        for last, key, deleted in conn.execute("SELECT rev, key, value IS NULL FROM revisions ORDER BY rev"):
            if deleted:
                self._live.pop(key, None)
            else:
                self._live[key] = last
        self._keys = sorted(self._live)
        self._rev = max(last, compacted)
        # What a prune would have taken but for a stop before it (rows replaced after theirs passed).
        passed = conn.execute("SELECT rev, key FROM revisions WHERE rev <= ?", (self._pruned_to,))
        self._delete(conn, [rev for rev, key in passed.fetchall() if self._live.get(key) != rev])
        return compacted + 1

    async def _write(self, fn: Callable[[], T]) -> T:
        # Inline only when no threaded commit is under way: two commits must never overlap.
        if self._threaded == 0 and self._commit_seconds < self._inline_budget:
            result = fn()
            # Let watchers and requests run between commits, as a thread round trip would, but once
            # per time slice rather than after every commit: a turn of the loop costs about as much
            # CPU as the commit's own statements.
            if time.perf_counter() - self._yielded >= INLINE_SLICE:
                await asyncio.sleep(0)
                self._yielded = time.perf_counter()
            return result
        self._threaded += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._writer, fn)
        finally:
            self._threaded -= 1

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._readers, lambda: fn(self._conn()))

    def _commit(self, key: str, value: bytes | None, expected: int | None) -> int:
        """Append the change's row, if the precondition holds (this is the only writer: the index in
        memory tells), and follow it in the index."""
        started = time.perf_counter()
        conn = self._conn()
        current = self._live.get(key)
        if current != expected:
            if expected is None:
                raise KeyExists(key)
            raise RevisionMismatch(None if current is None else KV(key, self._value(conn, current), current))
        rev = self._rev + 1
        prev = None
        if expected is not None:
            # The value being replaced, for watchers: from the events in memory, or read from its row.
            prev = self._log.value_at(key, expected)
            if prev is None:
                prev = self._value(conn, expected)
        far = expected is not None and rev - expected > self._prev_reach
        conn.execute(
            "INSERT INTO revisions VALUES (?,?,?,?,?)", (rev, key, value, expected, prev if far else None)
        )
        with self._index_lock:
            if value is None:
                del self._live[key]
                del self._keys[bisect.bisect_left(self._keys, key)]
            else:
                if expected is None:
                    bisect.insort(self._keys, key)
                self._live[key] = rev
            self._rev = rev
        if expected is not None and expected <= self._pruned_to:
            self._replaced_pruned.append(expected)
        # A moving average: one slow commit does not move the writes off the loop, a slow disk does.
        self._commit_seconds += (time.perf_counter() - started - self._commit_seconds) / 16
        self._log.append(RawEvent(rev, key, value, prev))
        self._since_prune += 1
        if self._since_prune >= self._prune_every:
            self._prune(conn)
        return rev

    @staticmethod
    def _value(conn: sqlite3.Connection, rev: int) -> bytes:
        row = conn.execute("SELECT value FROM revisions WHERE rev=?", (rev,)).fetchone()
        if row is None:
            raise LookupError(rev)
        value: bytes = row[0]
        return value

    def _require_moved(self, key: str, rev: int) -> None:
        """A reader missed ``key``'s row at ``rev``: fine when the key has moved past it since (replaced,
        and the row pruned, while it read), and it reads again; else the row is missing from the file,
        which no retry mends."""
        with self._index_lock:
            if self._live.get(key) != rev:
                return
        raise Unavailable(f"{self.path}: revision {rev} of {key} is missing from the file")

    @staticmethod
    def _delete(conn: sqlite3.Connection, revs: list[int]) -> None:
        for marks, chunk in _chunks(revs):
            conn.execute(f"DELETE FROM revisions WHERE rev IN ({marks})", chunk)

    def _prune(self, conn: sqlite3.Connection) -> None:
        self._since_prune = 0
        self._compact_to(conn, self._rev - self._history_size + 1)

    def _compact_to(self, conn: sqlite3.Connection, oldest: int) -> None:
        """Forget the history before ``oldest``. Writer only.

        The rows a key no longer holds stay for ``_prev_reach`` revisions more: newer rows refer to
        them for their previous values. A key's current row stays, however old.
        """
        floor = min(oldest, self._rev + 1) - 1
        if floor <= self._compacted:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            passed = conn.execute(
                "SELECT rev, key FROM revisions WHERE rev > ? AND rev <= ?",
                (self._pruned_to, floor - self._prev_reach),
            ).fetchall()
            self._delete(
                conn, [rev for rev, key in passed if self._live.get(key) != rev] + self._replaced_pruned
            )
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (floor,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._replaced_pruned.clear()
        self._compacted = floor
        self._log.compact(floor + 1)

    @property
    def _pruned_to(self) -> int:
        return self._compacted - self._prev_reach

    async def compact(self, revision: int) -> None:
        await self._write(lambda: self._compact_to(self._conn(), revision))

    async def _read_history(self, from_rev: int, limit: int) -> list[RawEvent]:
        def read(conn: sqlite3.Connection) -> list[RawEvent]:
            rows = conn.execute(
                "SELECT e.rev, e.key, e.value, coalesce(e.prev, p.value) FROM revisions e"
                " LEFT JOIN revisions p ON p.rev = e.prev_rev WHERE e.rev >= ? ORDER BY e.rev LIMIT ?",
                (from_rev, limit),
            ).fetchall()
            return [RawEvent(*row) for row in rows]

        return await self._read(read)

    async def get(self, key: str) -> KV | None:
        while True:
            with self._index_lock:
                rev = self._live.get(key)
            if rev is None:
                return None
            value = self._log.value_at(key, rev)
            if value is not None:
                return KV(key, value, rev)
            # A point read in WAL mode takes microseconds and never waits for the writer, so it runs
            # on the event loop's own connection: a hop to a thread would cost ten times the read.
            try:
                return KV(key, self._value(self._conn(), rev), rev)
            except LookupError:
                self._require_moved(key, rev)

    async def range(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> tuple[list[KV], int]:
        while True:
            with self._index_lock:
                keys = self._keys
                lo = (
                    bisect.bisect_right(keys, start_after)
                    if start_after is not None and start_after >= prefix
                    else bisect.bisect_left(keys, prefix)
                )
                # Keys are ASCII paths, so every key under the prefix sorts below prefix + U+FFFF.
                hi = bisect.bisect_left(keys, prefix + "\uffff", lo)
                if limit is not None:
                    hi = min(hi, lo + limit)
                picked = [(key, self._live[key]) for key in keys[lo:hi]]
                rev = self._rev
            values = await self._read(functools.partial(_values, revs=[r for _, r in picked]))
            missed = next(((key, r) for key, r in picked if r not in values), None)
            if missed is None:
                return [KV(key, values[r], r) for key, r in picked], rev
            self._require_moved(*missed)

    async def count(self, prefix: str) -> int:
        with self._index_lock:
            lo = bisect.bisect_left(self._keys, prefix)
            return bisect.bisect_left(self._keys, prefix + "\uffff", lo) - lo

    async def create(self, key: str, value: bytes) -> int:
        return await self._write(lambda: self._commit(key, value, None))

    async def replace(self, key: str, value: bytes, expected_rev: int) -> int:
        return await self._write(lambda: self._commit(key, value, expected_rev))

    async def remove(self, key: str, expected_rev: int) -> int:
        return await self._write(lambda: self._commit(key, None, expected_rev))

    def watch(self, prefix: str, from_rev: int) -> AsyncIterator[RawEvent]:
        return self._log.watch(prefix, from_rev)

    async def revision(self) -> int:
        return self._rev

    def changed_after(self, key: str, rev: int) -> bool | None:
        return self._log.changed_after(key, rev, self._rev)

    def listen(self, listener: Callable[[RawEvent], None] | None) -> bool:
        self._log.listen(listener)
        return True

    async def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._conn_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _values(conn: sqlite3.Connection, revs: list[int]) -> dict[int, bytes]:
    """The values at these revisions (those still there), read in one snapshot."""
    out: dict[int, bytes] = {}
    conn.execute("BEGIN")
    try:
        for marks, chunk in _chunks(revs):
            out.update(conn.execute(f"SELECT rev, value FROM revisions WHERE rev IN ({marks})", chunk))
    finally:
        conn.execute("COMMIT")
    return out


def _chunks(revs: list[int]) -> Iterator[tuple[str, list[int]]]:
    """``revs`` in chunks of at most ``_CHUNK``, each with its parameter marks (``?,?,…``)."""
    for i in range(0, len(revs), _CHUNK):
        chunk = revs[i : i + _CHUNK]
        yield ",".join("?" * len(chunk)), chunk
