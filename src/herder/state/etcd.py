"""The etcd backend: the raw storage contract on an etcd v3 cluster, for several herder replicas.

It speaks etcd's gRPC API through aetcd's generated stubs (``aetcd.rpc``), the one etcd client this
process may load (shared/reference/deps.md): aetcd's high-level client has no range limits, does not
resume watches and has no lease keep-alive, so this module drives the stubs itself.

- One channel over every endpoint, balanced round-robin: a killed member costs the requests in flight
  on it; the next ones go to the members that are up.
- Reads are retried on UNAVAILABLE and timeouts. A write is a transaction with a precondition, so of
  all its attempts at most one can apply; when an attempt's outcome is unknown and a retry finds the
  precondition already spent, the key's history tells whether the earlier attempt was ours.
- A watch resumes on a new stream from the last delivered event's revision + 1 (never from a response
  header, which runs ahead of the events during catch-up) and raises ``Compacted`` when etcd has
  forgotten the revision it needs.
- Leases, create-if-absent with a lease and watches of coordination keys serve the leader election and
  the shards; their keys live beside the object keys (``<prefix>.coord/…``), so no object range or watch
  ever sees them. A write made under a fence (``herder.state.fence``) also compares the fence's claim in
  its transaction, and fails with ``Fenced`` once the claim is gone.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import socket
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from aetcd import rpc

from herder.state import fence as fencing
from herder.state.backend import KV, Backend, Compacted, KeyExists, RawEvent, RevisionMismatch
from herder.state.errors import Fenced, Invalid, StateError, Unavailable
from herder.state.fence import Fence

log = logging.getLogger(__name__)

T = TypeVar("T")

_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Errors a later attempt cannot cure; every other failure of a watch stream is resumed.
_FATAL_FOR_WATCH = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
)
# A watch stream on a member that has lost its raft leader is closed by that member, so the watch
# moves on to a member that still hears about new revisions (etcd's "require leader" option).
_REQUIRE_LEADER = (("hasleader", "true"),)
_COMPACTED_MARK = "compacted"


def _range_end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix``."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def _split(endpoint: str) -> tuple[str, int]:
    hostport = endpoint.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"etcd endpoint {endpoint!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


async def _target(endpoints: list[str]) -> str:
    """A gRPC target naming every member's address, so one channel can fail over between them."""
    loop = asyncio.get_running_loop()
    v4: list[str] = []
    v6: list[str] = []
    for endpoint in endpoints:
        host, port = _split(endpoint)
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as err:
            raise Unavailable(f"etcd endpoint {endpoint}: cannot resolve {host!r}: {err}") from None
        addrs = {ipaddress.ip_address(info[4][0]) for info in infos}
        v4 += [f"{a}:{port}" for a in sorted(addrs, key=str) if a.version == 4]
        v6 += [f"[{a}]:{port}" for a in sorted(addrs, key=str) if a.version == 6]
    # gRPC takes one address family per target; IPv4 wins when both are there.
    return f"ipv4:{','.join(v4)}" if v4 else f"ipv6:{','.join(v6)}"


def _modified_at(stored: bytes, rev: int) -> Any:
    return rpc.Compare(key=stored, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=rev)


@dataclass(frozen=True, slots=True)
class _Stubs:
    kv: Any
    watch: Any
    lease: Any


def _kv(key: str, kv: Any) -> KV:
    return KV(key, bytes(kv.value), int(kv.mod_revision))


class EtcdBackend(Backend):
    # The cluster's revision also counts coordination keys (and any other program's keys).
    watch_reaches_revision = False

    def __init__(self, endpoints: list[str], *, prefix: str = "/herder", timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("EtcdBackend needs at least one endpoint")
        for endpoint in endpoints:
            _split(endpoint)
        self.endpoints = list(endpoints)
        # Contract keys start with "/", so the object keys are exactly those under "<prefix>/".
        self._root = prefix.rstrip("/")
        self._coord = f"{self._root}.coord"
        self.timeout = timeout
        # How long an operation keeps retrying through a member failure before giving up.
        self.retry_for = 3 * timeout
        self._channel: grpc.aio.Channel | None = None
        self._stubs: _Stubs | None = None
        # The highest revision any response has shown: a write sent now can only apply above it.
        self._seen_rev = 0

    @property
    def prefix(self) -> str:
        return self._root

    def __repr__(self) -> str:
        return f"EtcdBackend({self.endpoints!r}, prefix={self._root!r})"

    async def open(self) -> EtcdBackend:
        """Connect to the cluster; ``Unavailable`` if no member answers within the retry time."""
        self._channel = grpc.aio.insecure_channel(
            await _target(self.endpoints),
            options=[
                ("grpc.lb_policy_name", "round_robin"),
                # Pings on open streams find a member that vanished without closing its sockets.
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ],
        )
        self._stubs = _Stubs(
            rpc.KVStub(self._channel), rpc.WatchStub(self._channel), rpc.LeaseStub(self._channel)
        )
        try:
            await self.revision()
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        self._stubs = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    @property
    def _rpc(self) -> _Stubs:
        if self._stubs is None:
            raise Unavailable(f"{self!r} is not open")
        return self._stubs

    # keys

    def _key(self, key: str) -> bytes:
        if not key.startswith("/"):
            raise Invalid(f"key {key!r} must start with '/'")
        return (self._root + key).encode()

    def _prefix(self, prefix: str) -> bytes:
        # Every contract key starts with "/", so the empty prefix and "/" select the same keys.
        return (self._root + (prefix or "/")).encode()

    def _unkey(self, stored: bytes) -> str:
        return stored.decode()[len(self._root) :]

    def _coord_key(self, key: str) -> bytes:
        return (self._coord + "/" + key.lstrip("/")).encode()

    def _uncoord(self, stored: bytes) -> str:
        return stored.decode()[len(self._coord) :]

    # calls

    def _note(self, header: Any) -> None:
        self._seen_rev = max(self._seen_rev, int(header.revision))

    def _fail(self, what: str, err: grpc.aio.AioRpcError) -> StateError:
        where = f"etcd {','.join(self.endpoints)}"
        if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
            return Invalid(f"{where} refused {what}: {err.details()}")
        return Unavailable(f"{where}: {what} failed: {err.code().name}: {err.details()}")

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent call, again on UNAVAILABLE or a timeout, until ``retry_for`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_for
        delay = 0.05
        while True:
            try:
                return await call()
            except grpc.aio.AioRpcError as err:
                if err.code() not in _TRANSIENT or loop.time() + delay > deadline:
                    raise self._fail(what, err) from None
                log.debug("etcd %s: %s; retrying", what, err.details())
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _range(self, what: str, request: Any) -> Any:
        resp = await self._retrying(what, lambda: self._rpc.kv.Range(request, timeout=self.timeout))
        self._note(resp.header)
        return resp

    async def _read_at(self, stored: bytes, revision: int) -> Any | None:
        """The key as it was at ``revision``; ``Compacted`` if etcd no longer has that revision."""
        try:
            resp = await self._range("read history", rpc.RangeRequest(key=stored, revision=revision))
        except StateError as err:
            if _COMPACTED_MARK in str(err):
                raise Compacted(revision + 1) from None
            raise
        return resp.kvs[0] if resp.kvs else None

    # reads

    async def get(self, key: str) -> KV | None:
        resp = await self._range(f"get {key}", rpc.RangeRequest(key=self._key(key)))
        return _kv(key, resp.kvs[0]) if resp.kvs else None

    async def range(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> tuple[list[KV], int]:
        base = self._prefix(prefix)
        end = _range_end(base)
        start = base
        if start_after is not None:
            # The smallest key after ``start_after`` is that key with a NUL byte appended.
            start = max(base, self._key(start_after) + b"\0")
        if start >= end:
            return [], await self.revision()
        request = rpc.RangeRequest(key=start, range_end=end, limit=limit or 0)
        # One request: every row comes from the single revision in its header.
        resp = await self._range(f"list {prefix or '/'}", request)
        return [_kv(self._unkey(kv.key), kv) for kv in resp.kvs], int(resp.header.revision)

    async def count(self, prefix: str) -> int:
        base = self._prefix(prefix)
        request = rpc.RangeRequest(key=base, range_end=_range_end(base), count_only=True)
        return int((await self._range(f"count {prefix or '/'}", request)).count)

    async def revision(self) -> int:
        resp = await self._range("read the revision", rpc.RangeRequest(key=self._key("/"), count_only=True))
        return int(resp.header.revision)

    # writes

    async def _txn(
        self,
        what: str,
        stored: bytes,
        compare: Any,
        op: Any,
        settle: Callable[[Any | None, int], Awaitable[int | None]],
        fence: Fence | None = None,
    ) -> tuple[bool, int, Any | None]:
        """Run ``compare ? op : read the key``; returns (applied, revision, current key if not applied).

        With a ``fence``, the transaction also compares the fence's claim, and ``Fenced`` is raised when it
        failed for that reason.

        An attempt whose outcome is unknown (the member died, the call timed out) is retried as it is:
        its precondition lets at most one of the attempts apply. If a retry finds the precondition
        spent, ``settle(current, seen_before)`` decides from the key's history whether the unknown
        attempt was the one that spent it, and returns that attempt's revision (else None).
        """
        compares = [compare]
        failure = [rpc.RequestOp(request_range=rpc.RangeRequest(key=stored))]
        if fence is not None:
            claim = self._coord_key(fence.key)
            compares.append(_modified_at(claim, fence.revision))
            failure.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=claim)))
        request = rpc.TxnRequest(compare=compares, success=[op], failure=failure)
        seen_before = self._seen_rev
        unknown: list[str] = []

        async def attempt() -> Any:
            try:
                return await self._rpc.kv.Txn(request, timeout=self.timeout)
            except grpc.aio.AioRpcError as err:
                if err.code() in _TRANSIENT:
                    unknown.append(err.details() or err.code().name)
                raise

        try:
            resp = await self._retrying(what, attempt)
        except Unavailable as err:
            if unknown:
                raise Unavailable(f"{err}; the write may or may not have been applied") from None
            raise
        self._note(resp.header)
        if resp.succeeded:
            return True, int(resp.header.revision), None
        if fence is not None:
            claims = resp.responses[1].response_range.kvs
            if not claims or int(claims[0].mod_revision) != fence.revision:
                maybe = "; an earlier attempt may have applied" if unknown else ""
                raise Fenced(f"etcd: {what}: this replica no longer holds {fence.key}{maybe}")
        kvs = resp.responses[0].response_range.kvs
        current = kvs[0] if kvs else None
        if unknown:
            try:
                rev = await settle(current, seen_before)
            except Compacted:
                raise Unavailable(
                    f"etcd: {what}: an attempt failed ({unknown[0]}) and the history that would "
                    "tell whether it applied is compacted; read the key to see its state"
                ) from None
            if rev is not None:
                return True, rev, None
        return False, int(resp.header.revision), current

    async def _create(
        self, key: str, stored: bytes, value: bytes, lease: int, fence: Fence | None
    ) -> tuple[bool, int, Any | None]:
        async def settle(current: Any | None, seen_before: int) -> int | None:
            # Ours, if the key's present life began after our first attempt was sent, with our value.
            # One case stays open: a lost attempt that applied, then was deleted by another writer
            # before the retry; the retry then creates the key again. That writer must have deleted
            # within the retry's backoff a key it could only just have seen.
            if current is None or current.create_revision <= seen_before:
                return None
            first = current if current.version == 1 else await self._read_at(stored, current.create_revision)
            return int(current.create_revision) if first is not None and first.value == value else None

        compare = rpc.Compare(
            key=stored, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0
        )
        op = rpc.RequestOp(request_put=rpc.PutRequest(key=stored, value=value, lease=lease))
        return await self._txn(f"create {key}", stored, compare, op, settle, fence)

    async def create(self, key: str, value: bytes) -> int:
        done, rev, _ = await self._create(key, self._key(key), value, 0, fencing.current())
        if not done:
            raise KeyExists(key)
        return rev

    async def _change(self, key: str, value: bytes | None, expected_rev: int) -> int:
        stored = self._key(key)
        if expected_rev <= 0:
            # etcd gives a missing key mod revision 0: the comparison below would let this create it.
            raise RevisionMismatch(await self.get(key))

        async def settle(current: Any | None, seen_before: int) -> int | None:
            # Revisions are never reused, so the key held ``expected_rev`` once; the change right after
            # it is the only one our attempt could have been. (Another writer's delete from the same
            # revision would look the same, and leaves the same state.)
            before = await self._read_at(stored, expected_rev)
            if before is None or before.mod_revision != expected_rev:
                return None
            event = await self._first_event(stored, expected_rev + 1)
            if value is None:
                ours = event.type == rpc.Event.DELETE
            else:
                ours = event.type == rpc.Event.PUT and event.kv.value == value
            return int(event.kv.mod_revision) if ours else None

        compare = _modified_at(stored, expected_rev)
        if value is None:
            op = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=stored))
        else:
            op = rpc.RequestOp(request_put=rpc.PutRequest(key=stored, value=value))
        what = f"{'remove' if value is None else 'replace'} {key}"
        done, rev, current = await self._txn(what, stored, compare, op, settle, fencing.current())
        if not done:
            raise RevisionMismatch(_kv(key, current) if current is not None else None)
        return rev

    async def replace(self, key: str, value: bytes, expected_rev: int) -> int:
        return await self._change(key, value, expected_rev)

    async def remove(self, key: str, expected_rev: int) -> int:
        return await self._change(key, None, expected_rev)

    async def raw_put(self, key: str, value: bytes, *, expected_rev: int | None = None) -> int:
        """One plain put, or compare-and-put on ``expected_rev``, with no retry: the benchmarks' baseline."""
        stored = self._key(key)
        put = rpc.PutRequest(key=stored, value=value)
        try:
            if expected_rev is None:
                resp = await self._rpc.kv.Put(put, timeout=self.timeout)
            else:
                request = rpc.TxnRequest(
                    compare=[_modified_at(stored, expected_rev)], success=[rpc.RequestOp(request_put=put)]
                )
                resp = await self._rpc.kv.Txn(request, timeout=self.timeout)
                if not resp.succeeded:
                    raise RevisionMismatch(None)
        except grpc.aio.AioRpcError as err:
            raise self._fail(f"put {key}", err) from None
        return int(resp.header.revision)

    async def compact(self, revision: int) -> None:
        # etcd refuses a revision it has not reached, or one at or below its last compaction.
        revision = min(revision, await self.revision())
        request = rpc.CompactionRequest(revision=revision, physical=True)
        try:
            await self._retrying("compact", lambda: self._rpc.kv.Compact(request, timeout=self.timeout))
        except StateError as err:
            if _COMPACTED_MARK not in str(err):
                raise

    # watch

    async def _events(self, key: bytes, range_end: bytes | None, from_rev: int) -> AsyncGenerator[Any, None]:
        """etcd's events on ``key`` (or ``[key, range_end)``) from ``from_rev``, across stream failures."""
        next_rev = from_rev
        delay = 0.05
        while True:
            call = self._rpc.watch.Watch(metadata=_REQUIRE_LEADER)
            try:
                # Progress notifications move the resume point of a quiet watch past revisions that
                # compaction may remove; etcd sends them only to watchers that have caught up.
                create = rpc.WatchCreateRequest(
                    key=key, start_revision=next_rev, prev_kv=True, progress_notify=True
                )
                if range_end is not None:
                    create.range_end = range_end
                await call.write(rpc.WatchRequest(create_request=create))
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        break
                    if resp.compact_revision:
                        raise Compacted(int(resp.compact_revision))
                    if resp.canceled:
                        log.warning("etcd closed a watch at revision %d: %s", next_rev, resp.cancel_reason)
                        break
                    if not resp.events and not resp.created:
                        next_rev = max(next_rev, int(resp.header.revision) + 1)
                    for event in resp.events:
                        # The resume point comes from the events themselves, never the header.
                        next_rev = int(event.kv.mod_revision) + 1
                        yield event
                    delay = 0.05
            except grpc.aio.AioRpcError as err:
                if err.code() in _FATAL_FOR_WATCH:
                    raise self._fail("watch", err) from None
                log.info("etcd watch stream failed (%s); resuming from revision %d", err.details(), next_rev)
            finally:
                call.cancel()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _first_event(self, key: bytes, from_rev: int) -> Any:
        events = self._events(key, None, from_rev)
        try:
            async with asyncio.timeout(self.retry_for):
                return await anext(events)
        except TimeoutError:
            raise Unavailable(
                f"etcd: no change of {key.decode()} after revision {from_rev - 1} arrived"
            ) from None
        finally:
            await events.aclose()

    def _raw_event(self, event: Any) -> RawEvent:
        prev = bytes(event.prev_kv.value) if event.HasField("prev_kv") else None
        value = None if event.type == rpc.Event.DELETE else bytes(event.kv.value)
        return RawEvent(int(event.kv.mod_revision), self._unkey(event.kv.key), value, prev)

    async def watch(self, prefix: str, from_rev: int) -> AsyncGenerator[RawEvent, None]:
        base = self._prefix(prefix)
        async for event in self._events(base, _range_end(base), max(from_rev, 1)):
            yield self._raw_event(event)

    # coordination: leases, create-if-absent with a lease, one-key watch

    async def grant_lease(self, ttl: float) -> int:
        """A new lease of ``ttl`` seconds (rounded up; etcd's own floor may lengthen it)."""
        request = rpc.LeaseGrantRequest(TTL=max(1, math.ceil(ttl)))
        # A grant that applied but whose answer was lost leaves an unused lease that expires by itself.
        resp = await self._retrying(
            "grant a lease", lambda: self._rpc.lease.LeaseGrant(request, timeout=self.timeout)
        )
        if resp.error:
            raise Unavailable(f"etcd: grant a lease: {resp.error}")
        return int(resp.ID)

    async def keep_alive(self, lease: int) -> float:
        """Refresh ``lease``; returns its new time to live in seconds, 0 when it has already expired."""

        async def refresh() -> Any:
            call = self._rpc.lease.LeaseKeepAlive(timeout=self.timeout)
            try:
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
                return await call.read()
            finally:
                call.cancel()

        resp = await self._retrying("keep a lease alive", refresh)
        if resp is grpc.aio.EOF:
            raise Unavailable("etcd: keep a lease alive: the stream ended without an answer")
        return float(resp.TTL)

    async def revoke_lease(self, lease: int) -> None:
        """End ``lease`` now; the keys attached to it are deleted."""
        request = rpc.LeaseRevokeRequest(ID=lease)
        try:
            await self._retrying(
                "revoke a lease", lambda: self._rpc.lease.LeaseRevoke(request, timeout=self.timeout)
            )
        except Unavailable as err:
            if "not found" not in str(err):
                raise

    async def claim(self, key: str, value: bytes, lease: int) -> tuple[bool, KV]:
        """Create coordination key ``key`` bound to ``lease`` unless it exists.

        Returns whether this call created it, and the key as it now is (the holder's value).
        """
        # Never fenced: claiming is how a fence is had.
        done, rev, current = await self._create(key, self._coord_key(key), value, lease, None)
        # A failed create read the key in the same transaction, so ``current`` is the holder.
        return (True, KV(key, value, rev)) if done else (False, _kv(key, current))

    async def get_coordination(self, key: str) -> KV | None:
        resp = await self._range(f"get {key}", rpc.RangeRequest(key=self._coord_key(key)))
        return _kv(key, resp.kvs[0]) if resp.kvs else None

    async def range_coordination(self, prefix: str) -> tuple[list[KV], int]:
        """The coordination keys under ``prefix`` and the revision they were read at."""
        base = self._coord_key(prefix)
        request = rpc.RangeRequest(key=base, range_end=_range_end(base))
        resp = await self._range(f"list {prefix}", request)
        return [_kv(self._uncoord(kv.key), kv) for kv in resp.kvs], int(resp.header.revision)

    async def release_claim(self, key: str, revision: int) -> None:
        """Delete coordination key ``key`` if it still holds the claim made at ``revision`` (nothing
        otherwise: another process's claim is never deleted)."""
        stored = self._coord_key(key)
        request = rpc.TxnRequest(
            compare=[_modified_at(stored, revision)],
            success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=stored))],
        )
        # Deleting is idempotent: a retry of an attempt that applied finds the claim gone and does nothing.
        await self._retrying(f"release {key}", lambda: self._rpc.kv.Txn(request, timeout=self.timeout))

    async def watch_coordination(
        self, key: str, from_rev: int, *, prefix: bool = False
    ) -> AsyncGenerator[RawEvent, None]:
        """Every change of coordination key ``key`` (or, with ``prefix``, of every key under it) from
        ``from_rev``."""
        stored = self._coord_key(key)
        async for event in self._events(stored, _range_end(stored) if prefix else None, max(from_rev, 1)):
            raw = self._raw_event(event)
            yield RawEvent(raw.rev, self._uncoord(event.kv.key), raw.value, raw.prev)


__all__ = ["EtcdBackend"]
