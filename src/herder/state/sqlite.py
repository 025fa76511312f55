"""The embedded default backend: one SQLite file in WAL mode.

Every acknowledged write is committed with ``synchronous=FULL`` by default, so it survives a process
crash and a power loss; ``synchronous=normal`` trades the latter for speed. Commits never overlap, so
the revision counter needs no lock. While commits are fast (a local disk's fsync takes a few hundred
microseconds, less than a round trip to a thread and back) they run on the event loop itself; when
the disk is slow they move to a writer thread, so that the loop keeps serving while the disk works.
Readers use their own connections, which WAL lets run beside the writer: scans in reader threads,
point reads on the event loop. An event table keeps recent changes so that watches resume across
reconnects and restarts; older rows are pruned. A create or an update is a single statement that
checks its precondition and writes the object's row (in place), and triggers append its event in the
same transaction; an update's event names the revision of the value it replaced instead of holding a
second copy of it. A file lock stops a second process from opening the same database.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
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

# The layout's version, in ``PRAGMA user_version``: 0 is the first (objects WITHOUT ROWID, where a
# value of more than ~1 KB spills into an overflow page, and every event carrying its previous value).
_LAYOUT = 1
OBJECTS_TABLE = "objects (key TEXT PRIMARY KEY, value BLOB NOT NULL, mod_rev INTEGER NOT NULL)"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {OBJECTS_TABLE};
CREATE TABLE IF NOT EXISTS events (
    rev INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB, prev BLOB, prev_rev INTEGER
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
PRAGMA user_version={_LAYOUT};
"""
# Every connection's own (TEMP) triggers log each create and update as its event, in the same
# statement. An update's event names the revision its previous value was written at when that
# revision is at most ``reach`` older, so that its row is sure to outlive this one (compaction keeps
# that many rows below the oldest event); an older previous value is copied into the event.
_LOG_TRIGGERS = """
CREATE TEMP TRIGGER log_create AFTER INSERT ON objects BEGIN
    INSERT INTO events (rev, key, value) VALUES (new.mod_rev, new.key, new.value);
END;
CREATE TEMP TRIGGER log_update AFTER UPDATE ON objects BEGIN
    INSERT INTO events (rev, key, value, prev, prev_rev) VALUES (
        new.mod_rev, new.key, new.value,
        CASE WHEN new.mod_rev - old.mod_rev > {reach} THEN old.value END, old.mod_rev
    );
END;
"""
# From layout 0: the objects move to a table with rowids (values up to a page stay in their row,
# and an update rewrites one page in place); events gain the revision their previous value is at.
_MIGRATE_FROM_0 = f"""
ALTER TABLE objects RENAME TO objects_0;
CREATE TABLE {OBJECTS_TABLE};
INSERT INTO objects SELECT key, value, mod_rev FROM objects_0;
DROP TABLE objects_0;
ALTER TABLE events ADD COLUMN prev_rev INTEGER;
PRAGMA user_version={_LAYOUT};
"""


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
        # How far back an update's event may refer to its previous value (see _LOG_TRIGGERS).
        self._prev_reach = history // 4
        self._triggers = _LOG_TRIGGERS.format(reach=self._prev_reach)
        self._layout_ready = False
        self._prune_every = prune_every
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="sqlite-reader")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._conn_lock = threading.Lock()
        self._rev = 0
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
            self._rev, oldest = await self._write(self._init)
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
            if self._layout_ready:
                conn.executescript(self._triggers)
            self._local.conn = conn
            with self._conn_lock:
                self._connections.append(conn)
        return conn

    def _init(self) -> tuple[int, int]:
        conn = self._conn()
        layout = conn.execute("PRAGMA user_version").fetchone()[0]
        if layout > _LAYOUT:
            raise Unavailable(f"{self.path} has storage layout {layout}; this herder knows up to {_LAYOUT}")
        first = layout == 0 and conn.execute("SELECT 1 FROM sqlite_master WHERE name='objects'").fetchone()
        conn.executescript(f"BEGIN IMMEDIATE;{_MIGRATE_FROM_0 if first else ''}{_SCHEMA}COMMIT;")
        conn.executescript(self._triggers)
        self._layout_ready = True
        rev = conn.execute("SELECT max(rev) FROM events").fetchone()[0]
        floor = conn.execute("SELECT value FROM meta WHERE name='compacted'").fetchone()
        compacted = floor[0] if floor else 0
        rev = max(rev or 0, compacted)
        return rev, compacted + 1

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
        """Write the row and its event in one transaction, if the precondition holds. A create or an
        update is a single statement that checks it, and the triggers log it."""
        started = time.perf_counter()
        conn = self._conn()
        rev = self._rev + 1
        prev = None
        if expected is None:
            try:
                conn.execute("INSERT INTO objects VALUES (?,?,?)", (key, value, rev))
            except sqlite3.IntegrityError:
                raise KeyExists(key) from None
        else:
            # The value being replaced, for watchers: from the events in memory, or read from its row.
            prev = self._log.value_at(key, expected)
            if prev is None:
                current = self._row(conn, key)
                if current is None or current.mod_rev != expected:
                    raise RevisionMismatch(current)
                prev = current.value
            if value is None:
                self._delete(conn, key, expected, rev, prev)
            elif (
                conn.execute(
                    "UPDATE objects SET value=?, mod_rev=? WHERE key=? AND mod_rev=?",
                    (value, rev, key, expected),
                ).rowcount
                != 1
            ):
                raise RevisionMismatch(self._row(conn, key))
        self._rev = rev
        # A moving average: one slow commit does not move the writes off the loop, a slow disk does.
        self._commit_seconds += (time.perf_counter() - started - self._commit_seconds) / 16
        self._log.append(RawEvent(rev, key, value, prev))
        self._since_prune += 1
        if self._since_prune >= self._prune_every:
            self._prune(conn)
        return rev

    @staticmethod
    def _row(conn: sqlite3.Connection, key: str) -> KV | None:
        row = conn.execute("SELECT value, mod_rev FROM objects WHERE key=?", (key,)).fetchone()
        return KV(key, row[0], row[1]) if row else None

    def _delete(self, conn: sqlite3.Connection, key: str, expected: int, rev: int, prev: bytes) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("DELETE FROM objects WHERE key=? AND mod_rev=?", (key, expected)).rowcount != 1:
                raise RevisionMismatch(self._row(conn, key))
            # A delete has no value of its own: its event holds the last state, which is what its
            # watchers are sent.
            conn.execute("INSERT INTO events (rev, key, prev) VALUES (?,?,?)", (rev, key, prev))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _prune(self, conn: sqlite3.Connection) -> None:
        self._since_prune = 0
        self._compact_to(conn, self._rev - self._history_size + 1)

    def _compact_to(self, conn: sqlite3.Connection, oldest: int) -> None:
        """Forget the events before ``oldest``. Writer thread only.

        Their rows stay for ``_prev_reach`` revisions more: newer events refer to them for their
        previous values.
        """
        floor = min(oldest, self._rev + 1) - 1
        if floor <= 0:
            return
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM events WHERE rev <= ?", (floor - self._prev_reach,))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (floor,))
        conn.execute("COMMIT")
        self._log.compact(floor + 1)

    async def compact(self, revision: int) -> None:
        await self._write(lambda: self._compact_to(self._conn(), revision))

    async def _read_history(self, from_rev: int, limit: int) -> list[RawEvent]:
        def read(conn: sqlite3.Connection) -> list[RawEvent]:
            rows = conn.execute(
                "SELECT e.rev, e.key, e.value, coalesce(e.prev, p.value) FROM events e"
                " LEFT JOIN events p ON p.rev = e.prev_rev WHERE e.rev >= ? ORDER BY e.rev LIMIT ?",
                (from_rev, limit),
            ).fetchall()
            return [RawEvent(*row) for row in rows]

        return await self._read(read)

    async def get(self, key: str) -> KV | None:
        # A point read in WAL mode takes microseconds and never waits for the writer, so it runs
        # on the event loop's own connection: a hop to a thread would cost ten times the read.
        return self._row(self._conn(), key)

    async def range(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> tuple[list[KV], int]:
        # Keys are ASCII paths, so every key under the prefix sorts below prefix + U+FFFF.
        upper = prefix + "\uffff"
        lower = start_after if start_after is not None and start_after >= prefix else None

        def read(conn: sqlite3.Connection) -> tuple[list[KV], int]:
            conn.execute("BEGIN")
            try:
                # The revision is read in the same snapshot as the rows: a watch from it misses nothing.
                rev = conn.execute("SELECT coalesce(max(rev), 0) FROM events").fetchone()[0]
                floor = conn.execute("SELECT value FROM meta WHERE name='compacted'").fetchone()
                sql = "SELECT key, value, mod_rev FROM objects WHERE key < ? AND "
                sql += "key > ?" if lower is not None else "key >= ?"
                sql += " ORDER BY key"
                params: tuple[object, ...] = (upper, lower if lower is not None else prefix)
                if limit is not None:
                    sql += " LIMIT ?"
                    params += (limit,)
                rows = conn.execute(sql, params).fetchall()
            finally:
                conn.execute("COMMIT")
            return [KV(*row) for row in rows], max(rev, floor[0] if floor else 0)

        return await self._read(read)

    async def count(self, prefix: str) -> int:
        def read(conn: sqlite3.Connection) -> int:
            sql = "SELECT count(*) FROM objects WHERE key >= ? AND key < ?"
            return int(conn.execute(sql, (prefix, prefix + "\uffff")).fetchone()[0])

        return await self._read(read)

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
