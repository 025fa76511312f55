"""Following machines' logs: while herder is connected to a configured machine, it follows the machine's
kernel log (``Dmesg``) and each of its services' logs (``Logs``) through the Talos API, takes out the
secrets it knows, and keeps the lines in the machine's ring (``herder.state.machine_logs``). A machine that
joined over SideroLink sends its kernel log to herder's sink itself (``herder.siderolink.kernel_logs``
keeps it): its services' logs only are followed.

Cost: one connection per machine (its own, beside the machine link's status stream), over which every
follow is a stream of that one HTTP/2 connection: the Talos API has no call that streams every service's
log at once, so a stream per service is what following them costs; an idle stream costs neither side any
CPU. Nothing is written to the state store.

A new connection reads each log's backlog (Talos keeps a service's recent lines in memory until the
machine reboots): lines already kept are recognised by the last lines written of that log and skipped,
so a restart of herder or a dropped connection loses nothing the machine still holds and stores nothing
twice. A reboot ends the streams; herder follows the new boot once the machine answers again.

It writes nothing to the store, so every replica runs it (``herder.runtime.replica``): each keeps every
machine's logs in its own data directory, and a read is answered by whichever replica it reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.members import cluster_of
from herder.resources import Resource
from herder.resources.clusters import CLUSTER_MACHINE, ClusterMachineStatus
from herder.resources.join import SIDERO_LINK
from herder.resources.machines import MACHINE, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    on_change,
    own_key,
    same_name,
)
from herder.state.machine_logs import KERNEL, LogScope, MachineLogs, scope_of
from herder.state.store import Store, WatchEvent
from herder.talos.machine import Credentials, MachineAPIError, MachineClient, NotFound, Unimplemented
from herder.talos.machine.pool import ClientPool
from herder.talos.redaction import LineRedactor, Redactor, bundle_secrets

log = logging.getLogger(__name__)

QUIET = 1.0
"""Seconds without a line that end a new stream's backlog (Talos sends it at once)."""
BACKLOG_MAX = 20_000
"""Lines taken as a backlog at most before the rest counts as new."""
_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
PRUNE_EVERY = 3600.0


def after_known(lines: list[str], recent: list[str]) -> list[str]:
    """The lines of a backlog that follow its last run of ``recent`` (the last lines kept of that log):
    all of them when ``recent`` is not in it (a new boot, or kept lines the machine no longer has)."""
    if not recent:
        return lines
    width = len(recent)
    for end in range(len(lines), width - 1, -1):
        if lines[end - width : end] == recent:
            return lines[end:]
    return lines


class _Lines:
    """A log's bytes, as the machine sends them in chunks, cut into lines."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._rest + chunk
        *lines, self._rest = data.split(b"\n")
        return [line.rstrip(b"\r").decode("utf-8", "replace") for line in lines]

    def rest(self) -> list[str]:
        rest, self._rest = self._rest, b""
        return [rest.decode("utf-8", "replace")] if rest else []


@dataclass
class _Follower:
    key: ObjectKey
    endpoint: str
    credentials: Credentials
    scope: LogScope
    redactor: Redactor
    joined: bool
    """It joined over SideroLink: it sends its kernel log to herder's sink itself (``herder.siderolink``)."""
    task: asyncio.Task[None] | None = None


class MachineLogController(Controller):
    name = "MachineLogs"
    primary = MACHINE.kind
    outputs = ()
    concurrency = 4

    def __init__(self, logs: MachineLogs, keys: ClusterKeys, *, clients: ClientPool | None = None) -> None:
        self._logs = logs
        self._keys = keys
        # Its streams are its own: the pool only dials them.
        self._clients = clients if clients is not None else ClientPool()
        self._followers: dict[ObjectKey, _Follower] = {}
        self._redactors: dict[tuple[str, str], tuple[str, Redactor]] = {}
        self._pruning: asyncio.Task[None] | None = None
        self.watches = (
            Watch(
                MACHINE.kind,
                on_change(
                    own_key,
                    "metadata.labels",
                    "metadata.annotations",
                    "metadata.deletionTimestamp",
                    "spec.endpoint",
                    "status.connected",
                    "status.maintenance",
                ),
            ),
            # A machine is followed once it has its cluster's config (herder's credentials then work).
            Watch(CLUSTER_MACHINE.kind, on_change(same_name(MACHINE.kind), "status.configHash")),
            Watch(SIDERO_LINK.kind, _joined_or_left),
        )

    def started(self) -> None:
        self._pruning = asyncio.create_task(self._prune(self._keys.store), name="machine-logs-prune")

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        machine = await ctx.get(key)
        follower = self._followers.get(key)
        wanted = await self._wanted(ctx, machine) if machine is not None else None
        if wanted is None:
            if follower is not None:
                await self._stop(self._followers.pop(key))
            return None
        endpoint, credentials, scope, redactor = wanted
        joined = await ctx.get(ObjectKey(SIDERO_LINK.kind, key.namespace, key.name)) is not None
        if follower is not None and (follower.endpoint, follower.credentials, follower.joined) != (
            endpoint,
            credentials,
            joined,
        ):
            await self._stop(self._followers.pop(key))
            follower = None
        if follower is None:
            follower = self._followers[key] = _Follower(key, endpoint, credentials, scope, redactor, joined)
        follower.scope, follower.redactor = scope, redactor
        if follower.task is None or follower.task.done():
            follower.task = asyncio.create_task(self._follow(follower), name=f"logs-{key.name}")
        return None

    async def _wanted(
        self, ctx: Context, machine: Resource
    ) -> tuple[str, Credentials, LogScope, Redactor] | None:
        """Where and how to follow the machine, if it is to be: connected, configured for a cluster whose
        credentials herder holds (a machine in maintenance has no logs to give)."""
        status = status_of(machine, MachineStatus)
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        if machine.metadata.deletion_timestamp or not endpoint or not status.connected:
            return None
        if status.maintenance:
            return None
        member = await ctx.get(ObjectKey(CLUSTER_MACHINE.kind, machine.namespace, machine.name))
        if member is None or not status_of(member, ClusterMachineStatus).config_hash:
            return None
        cluster = await cluster_of(ctx, member)
        view = await self._keys.of(cluster) if cluster is not None else None
        if cluster is None or view is None:
            return None
        where = (cluster.namespace or "", cluster.name)
        known = self._redactors.get(where)
        if known is None or known[0] != view.revision:
            known = self._redactors[where] = (view.revision, Redactor(bundle_secrets(view.bundle)))
        return endpoint, view.talos, scope_of(machine), known[1]

    async def shutdown(self) -> None:
        followers, self._followers = list(self._followers.values()), {}
        await asyncio.gather(*(self._stop(f) for f in followers))
        if self._pruning is not None:
            self._pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pruning

    @staticmethod
    async def _stop(follower: _Follower) -> None:
        if follower.task is not None:
            follower.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follower.task

    async def _follow(self, follower: _Follower) -> None:
        failures = 0
        while True:
            try:
                await self._session(follower)
                failures = 0
                delay = _BACKOFF[0]  # the streams ended: the machine reboots
            except (MachineAPIError, OSError) as exc:
                failures += 1
                delay = _BACKOFF[min(failures, len(_BACKOFF)) - 1]
                log.debug("machine %s: logs: %s; again in %.0fs", follower.key.name, exc, delay)
            except Exception:
                failures += 1
                delay = _BACKOFF[-1]
                log.exception(
                    "machine %s: following its logs failed; again in %.0fs", follower.key.name, delay
                )
            await asyncio.sleep(delay)

    async def _session(self, follower: _Follower) -> None:
        """Follow every log of the machine over one connection until the kernel's stream ends (a reboot;
        for a joined machine, whose kernel log comes by the sink, until every stream ended) or the
        connection fails."""
        client = self._clients.dial(
            follower.endpoint, follower.credentials, timeout=10, connect_timeout=5, retries=0
        )
        async with client:
            services = [s.id for s in await client.service_list()]
            sources = services if follower.joined else [KERNEL, *services]
            tasks = [asyncio.create_task(self._source(follower, client, s)) for s in sources]
            anchor = tasks[0] if not follower.joined and tasks else None
            try:
                pending: set[asyncio.Task[None]] = set(tasks)
                while pending and (anchor is None or anchor in pending):
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        error = task.exception()
                        # A service without a log to follow is left alone; anything else ends the session.
                        if error is not None and not isinstance(error, NotFound | Unimplemented):
                            raise error
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _source(self, follower: _Follower, client: MachineClient, source: str) -> None:
        """Keep one log's new lines as they come, its backlog first (what was kept already left out)."""
        namespace, uuid = follower.scope.namespace, follower.key.name
        recent = self._logs.recent(namespace, uuid, source)
        batches: asyncio.Queue[list[str] | None] = asyncio.Queue()
        redact = LineRedactor(follower.redactor)

        async def pump() -> None:
            try:
                async for lines in _lines_of(client, source):
                    batches.put_nowait([redact(line) for line in lines])
            finally:
                batches.put_nowait(None)

        pumping = asyncio.create_task(pump())
        try:
            ended = False
            if recent:
                backlog: list[str] = []
                while len(backlog) < BACKLOG_MAX:
                    try:
                        batch = await asyncio.wait_for(batches.get(), QUIET)
                    except TimeoutError:
                        break
                    if batch is None:
                        ended = True
                        break
                    backlog.extend(batch)
                self._write(follower, source, after_known(backlog, recent))
            while not ended and (batch := await batches.get()) is not None:
                self._write(follower, source, batch)
            await pumping  # its error, if the stream failed
        finally:
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pumping

    def _write(self, follower: _Follower, source: str, lines: list[str]) -> None:
        self._logs.append(follower.key.name, follower.scope, source, lines)

    async def _prune(self, store: Store) -> None:
        """Now and then, the logs of machines gone for longer than the store keeps them are removed."""
        while True:
            await asyncio.sleep(PRUNE_EVERY)
            try:
                listed = await store.list(MACHINE)
                existing = {(m.namespace or "default", m.name) for m in listed.items}
                for namespace, uuid in await asyncio.to_thread(self._logs.prune, existing, time.time()):
                    log.info("logs of machine %s/%s removed: gone since long", namespace, uuid)
            except Exception:
                log.exception("pruning machine logs failed")


def _joined_or_left(event: WatchEvent) -> Iterable[ObjectKey]:
    """A machine joined (its SideroLink is made) or its link went: where its kernel log comes from changed."""
    if event.type == "MODIFIED":
        return ()
    return same_name(MACHINE.kind)(event)


async def _lines_of(client: MachineClient, source: str) -> AsyncIterator[list[str]]:
    """A log's lines as the machine sends them, all it holds first, until the stream ends."""
    if source == KERNEL:
        async for message in client.dmesg(follow=True):
            yield message.rstrip("\n").split("\n")
        return
    split = _Lines()
    async for chunk in client.logs(source, follow=True, tail=-1):
        lines = split.feed(chunk)
        if lines:
            yield lines
    if rest := split.rest():
        yield rest
