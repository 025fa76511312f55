"""Following machines: one long-lived link per Machine, streaming its Talos events into its status.

A link connects to the machine's Talos API as Talos and Omni do: without a client certificate while the
machine is in maintenance mode, and with herder's own certificate from the cluster's Talos CA once the
machine has been given that cluster's config. It tries the other way when the first one is refused (a
machine reset behind herder's back is in maintenance again). While connected it watches the machine's
MachineStatus resource (its stage as it changes) over the Talos resource API, and reads its hardware and
addresses once, so nothing polls each machine every few seconds; when the stream breaks it
reconnects with backoff, and only a machine that stays unreachable past a grace period is reported so.
Status is written only when something a user sees changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.machine_facts import read_facts
from herder.controllers.members import cluster_of
from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS
from herder.resources.clusters import CLUSTER_MACHINE, ClusterMachineStatus
from herder.resources.join import SIDERO_LINK, SideroLinkStatus
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.clock import REAL_CLOCK, Clock
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, same_name
from herder.runtime.outputs import Writes
from herder.state.store import WatchEvent
from herder.talos.machine import Credentials, MachineAPIError, MachineStage, Unauthenticated
from herder.talos.machine.pool import ClientPool
from herder.talos.machine.resources import (
    MACHINE_STATUS,
    MACHINE_STATUS_ID,
    RUNTIME,
    MachineStatusSpec,
    ResourceEventType,
)
from herder.workqueue import retry_delay

log = logging.getLogger(__name__)

# How long a machine may be out of reach before it is reported Unreachable (a reboot takes a while).
UNREACHABLE_AFTER = 15.0
# Reconnects: doubling from 0.2 s, at most every 10 s.
_RETRY_FIRST, _RETRY_MAX = 0.2, 10.0
# How long a stage must stand before it is written.
_SETTLE = 0.1
# How long a new connection waits for the machine's stage, to report both in one write.
_FIRST_STAGE = 1.0
# Stages a machine passes through in seconds. One that stands this long while the connection stays up
# may be a stream that stopped telling: a new connection reads the machine afresh. A safety net only:
# the stream that stopped telling was a relay whose TLS close waited up to 30 s for the peer's
# close_notify (asyncio's TLS; the relays now drive OpenSSL themselves and close at once), and the
# metric counts how often the net still catches something.
_PASSING = frozenset({"Booting", "Rebooting", "Installing", "Upgrading", "ShuttingDown", "Resetting"})
RESYNC_AFTER = 30.0
RESYNCS = Counter(
    "herder_machine_link_resyncs_total",
    "Machine links read afresh after a passing stage stood too long; outcome repaired: the stage had moved",
    ["outcome"],
)


# MachineStatus's attributes by their JSON names (what ``_report`` is given).
_ATTRIBUTES = {field.alias or name: name for name, field in MachineStatus.model_fields.items()}

STAGES: dict[MachineStage, str] = {
    MachineStage.UNKNOWN: "Unknown",
    MachineStage.BOOTING: "Booting",
    MachineStage.INSTALLING: "Installing",
    MachineStage.MAINTENANCE: "Maintenance",
    MachineStage.RUNNING: "Running",
    MachineStage.REBOOTING: "Rebooting",
    MachineStage.SHUTTING_DOWN: "ShuttingDown",
    MachineStage.RESETTING: "Resetting",
    MachineStage.UPGRADING: "Upgrading",
}


@dataclass
class _Link:
    key: ObjectKey
    endpoint: str
    secure: Credentials | None
    prefer_secure: bool
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    reported: dict[str, Any] = field(default_factory=dict)
    stage_since: float = 0.0
    resyncing: bool = False
    """Read afresh because a passing stage stood too long: the next stage read tells whether it had moved."""
    tunnel_down: str = ""
    """Why the machine's SideroLink tunnel carries nothing, while it does not (a joined machine)."""
    cluster: str = ""
    """The cluster the machine is a member of ('' for none): its secrets' changes reach the link."""
    powered_off: bool = False
    """Its provider says it is off: when it does not answer, that is why, with no grace to wait out."""


def _powered_off(machine: Resource) -> bool:
    power = status_of(machine, MachineStatus).power
    return power is not None and not power.on


class MachineLinkController(Controller):
    name = "MachineLink"
    primary = MACHINE.kind
    outputs = (
        Writes(
            MACHINE.kind,
            *(
                f"status.{field}"
                for field in (
                    "connected",
                    "stage",
                    "maintenance",
                    "talosVersion",
                    "hostname",
                    "addresses",
                    "hardware",
                    "lastError",
                    "connectedAt",
                )
            ),
            "status.conditions[Connected]",
        ),
    )
    concurrency = 8

    def __init__(
        self,
        keys: ClusterKeys,
        *,
        unreachable_after: float = UNREACHABLE_AFTER,
        resync_after: float = RESYNC_AFTER,
        clients: ClientPool | None = None,
    ) -> None:
        self._keys = keys
        # Its streams are its own, never shared: the pool only dials them.
        self._clients = clients if clients is not None else ClientPool()
        self._unreachable_after = unreachable_after
        self._resync_after = resync_after
        self._links: dict[ObjectKey, _Link] = {}
        self._ctx: Context | None = None
        self.watches = (
            Watch(MACHINE.kind, self._spec_changed),
            Watch(CLUSTER_MACHINE.kind, self._config_applied),
            Watch(SIDERO_LINK.kind, self._tunnel_changed),
            Watch(CLUSTER_SECRETS.kind, self._secrets_changed),
        )

    @staticmethod
    def _spec_changed(event: WatchEvent) -> Iterable[ObjectKey]:
        # The link writes status: only a change of what it connects to, or of the power its provider
        # reports, needs a reconcile.
        before = event.previous
        if (
            before is not None
            and before.spec == event.object.spec
            and before.metadata.deletion_timestamp == (event.object.metadata.deletion_timestamp)
            and _powered_off(before) == _powered_off(event.object)
        ):
            return ()
        return (ObjectKey.of(event.object),)

    @staticmethod
    def _tunnel_changed(event: WatchEvent) -> Iterable[ObjectKey]:
        # A joined machine's tunnel went down or came back: a stream through it neither fails nor ends by
        # itself (nothing comes, nothing is refused), so the link is told.
        before = event.previous
        was = status_of(before, SideroLinkStatus).condition_true("Connected") if before is not None else None
        if event.type != "DELETED" and was == status_of(event.object, SideroLinkStatus).condition_true(
            "Connected"
        ):
            return ()
        return same_name(MACHINE.kind)(event)

    @staticmethod
    def _config_applied(event: WatchEvent) -> Iterable[ObjectKey]:
        # A new member may be configured already (an imported cluster's): it is reached with herder's
        # certificate from the start.
        before = event.previous
        if (
            before is not None
            and event.type != "DELETED"
            and status_of(before, ClusterMachineStatus).config_hash
            == status_of(event.object, ClusterMachineStatus).config_hash
        ):
            return ()
        return same_name(MACHINE.kind)(event)

    def _secrets_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        # A cluster's secrets may come after its members (an imported cluster's are handed in by the
        # import): its links take herder's certificate then.
        secrets = event.object
        return [
            key
            for key, link in self._links.items()
            if link.cluster == secrets.name and key.namespace == secrets.namespace
        ]

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        self._ctx = ctx
        machine = await ctx.get(key)
        link = self._links.get(key)
        if machine is None or machine.metadata.deletion_timestamp:
            if link is not None:
                await self._stop(link)
                del self._links[key]
            return None
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        cluster, secure, configured = await self._credentials(ctx, machine)
        if link is not None and link.endpoint != endpoint:
            await self._stop(link)
            link = None
        if link is None:
            link = _Link(key, endpoint, secure, configured)
            self._links[key] = link
        elif (link.secure, link.prefer_secure) != (secure, configured):
            link.secure, link.prefer_secure = secure, configured
            link.changed.set()
        link.cluster = cluster
        tunnel_down = await self._tunnel_down(ctx, key)
        if tunnel_down != link.tunnel_down:
            link.tunnel_down = tunnel_down
            link.changed.set()
        powered_off = _powered_off(machine)
        if powered_off != link.powered_off:
            link.powered_off = powered_off
            link.changed.set()
        if link.task is None or link.task.done():
            link.task = asyncio.create_task(self._follow(link), name=f"link-{key.name}")
        return None

    @property
    def _clock(self) -> Clock:
        """The clock of the reconciles that started the links."""
        return self._ctx.clock if self._ctx is not None else REAL_CLOCK

    async def _credentials(self, ctx: Context, machine: Resource) -> tuple[str, Credentials | None, bool]:
        """The machine's cluster, herder's credentials for it, and whether the machine has been given its
        config."""
        member = await ctx.get(ObjectKey(CLUSTER_MACHINE.kind, machine.namespace, machine.name))
        if member is None:
            return "", None, False
        name = member.metadata.labels.get(CLUSTER_LABEL, "")
        cluster = await cluster_of(ctx, member)
        view = await self._keys.of(cluster) if cluster is not None else None
        if view is None:
            return name, None, False
        return name, view.talos, bool(status_of(member, ClusterMachineStatus).config_hash)

    @staticmethod
    async def _tunnel_down(ctx: Context, key: ObjectKey) -> str:
        """Why the machine's SideroLink tunnel is down ('' when it is up, or the machine did not join)."""
        joined = await ctx.get(ObjectKey(SIDERO_LINK.kind, key.namespace, key.name))
        if joined is None:
            return ""
        connected = status_of(joined, SideroLinkStatus).condition("Connected")
        if connected is None or connected.status != "False":
            return ""
        return f"SideroLink tunnel down: {connected.message}"

    async def shutdown(self) -> None:
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(self._stop(link) for link in links))

    @staticmethod
    async def _stop(link: _Link) -> None:
        if link.task is not None:
            link.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await link.task

    async def _follow(self, link: _Link) -> None:
        failures = 0
        lost_at: float | None = None
        # Whether the last connection ended cleanly (herder's own doing: new credentials, a resync): the
        # machine did not reboot nor drop, and the next connection keeps connectedAt.
        resumed = False
        while True:
            link.changed.clear()
            if link.tunnel_down:
                # Nothing can come through: say so at once, and wait for the tunnel (or a change) to come back.
                was_up = link.reported.get("connected") is not False
                await self._report(link, connected=False, lastError=link.tunnel_down, lost=was_up)
                await link.changed.wait()
                continue
            error = ""
            for credentials in self._order(link):
                try:
                    await self._stream(link, credentials, resumed=resumed)
                    error = ""
                    break
                except Unauthenticated as exc:
                    error = str(exc)  # perhaps configured (or reset) behind our back: try the other way
                except (MachineAPIError, OSError) as exc:
                    error = str(exc) or type(exc).__name__
                    break
            resumed = not error
            if not error:
                failures, lost_at = 0, None
                continue  # the stream ended cleanly (credentials changed): connect again at once
            failures += 1
            lost_at = lost_at or time.monotonic()
            if link.powered_off or time.monotonic() - lost_at >= self._unreachable_after:
                await self._report(link, connected=False, lastError=error, lost=True)
            delay = retry_delay(failures, _RETRY_FIRST, _RETRY_MAX)
            # Not wait_for, which (Python 3.11) loses a cancellation that comes as the link changes.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await link.changed.wait()

    @staticmethod
    def _order(link: _Link) -> list[Credentials | None]:
        if link.secure is None:
            return [None]
        return [link.secure, None] if link.prefer_secure else [None, link.secure]

    async def _stream(self, link: _Link, credentials: Credentials | None, *, resumed: bool = False) -> None:
        """Connect once and report the machine's state until the stream ends or the link must reconnect
        (``resumed``: after a connection herder ended itself, which the machine's connectedAt outlives)."""
        client = self._clients.dial(link.endpoint, credentials, timeout=10, connect_timeout=5, retries=0)
        async with client:
            latest: list[str] = []
            staged = asyncio.Event()

            async def follow() -> None:
                # The MachineStatus resource starts the watch as it is, then changes as stages do.
                async for event in client.watch_resources(RUNTIME, MACHINE_STATUS, MACHINE_STATUS_ID):
                    if event.resource is not None and event.type != ResourceEventType.DESTROYED:
                        stage = event.resource.typed(MachineStatusSpec).machine_stage
                        latest.append(STAGES.get(stage, "Unknown"))
                        staged.set()
                raise MachineAPIError("the machine's status stream ended")

            def standing() -> str:
                """The stage that stands, about to be reported: when it began, and what a resync found."""
                staged.clear()
                del latest[:-1]
                moved = latest[-1] != link.reported.get("stage")
                if moved:
                    link.stage_since = time.monotonic()
                if link.resyncing:
                    link.resyncing = False
                    RESYNCS.labels("repaired" if moved else "unchanged").inc()
                return latest[-1]

            async def write() -> None:
                # Stages can follow each other closely: only the one that stands is written.
                while True:
                    await staged.wait()
                    await asyncio.sleep(_SETTLE)
                    await self._report(link, stage=standing())

            async def stalled() -> None:
                # Ends (and so does this connection, cleanly) when a passing stage stood too long.
                link.stage_since = time.monotonic()
                while True:
                    await asyncio.sleep(self._resync_after / 4)
                    standing = time.monotonic() - link.stage_since
                    if link.reported.get("stage") in _PASSING and standing > self._resync_after:
                        link.resyncing = True
                        log.info(
                            "machine %s: %s for %.0fs; reading it afresh",
                            link.key.name,
                            link.reported.get("stage"),
                            standing,
                        )
                        return

            # The stream opens with the stage as it is: it is written with the connection, in one write. It
            # is opened first, so that the stage comes while the version and the facts are read (under
            # load, it came after the connection was written, a second write).
            following = asyncio.create_task(follow())
            tasks = {following}
            changed = asyncio.create_task(link.changed.wait())
            try:
                version = await client.version()
                facts = await read_facts(client)
                first = asyncio.create_task(staged.wait())
                try:
                    await asyncio.wait({following, first}, timeout=_FIRST_STAGE)
                finally:
                    first.cancel()
                stage: dict[str, Any] = {"stage": standing()} if latest else {}
                # A new connection is a new boot as often as not: when it began tells rollouts the machine
                # came back from a reboot. One that resumes what herder ended itself is none (and telling
                # it was a write of every machine that joins a cluster, and that gets its config).
                since: dict[str, Any] = {} if resumed else {"connectedAt": self._clock.micro()}
                await self._report(
                    link,
                    connected=True,
                    **since,
                    talosVersion=version.tag,
                    maintenance=credentials is None,
                    lastError="",
                    **facts,
                    **stage,
                )
                tasks |= {asyncio.create_task(write()), asyncio.create_task(stalled())}
                done, _ = await asyncio.wait({*tasks, changed}, return_when=asyncio.FIRST_COMPLETED)
                for task in done - {changed}:
                    task.result()
            finally:
                for task in (*tasks, changed):
                    task.cancel()
                await asyncio.gather(*tasks, changed, return_exceptions=True)

    async def _report(self, link: _Link, *, lost: bool = False, **fields: Any) -> None:
        """Write what changed of the machine's status (nothing when nothing did)."""
        if all(link.reported.get(k) == v for k, v in fields.items()) and not lost:
            return
        if lost and link.reported.get("connected") is False:
            return
        ctx = self._ctx
        assert ctx is not None
        given = MachineStatus.model_validate(fields)
        now = ctx.clock.rfc3339()

        def record(machine: Resource, status: MachineStatus) -> None:
            for name in fields:
                attribute = _ATTRIBUTES[name]
                setattr(status, attribute, getattr(given, attribute))
            if lost:
                powered_off = status.power is not None and not status.power.on
                status.stage = "PoweredOff" if powered_off else "Unreachable"
            up = status.connected
            status.set_condition(
                "Connected",
                up,
                "Connected" if up else "Unreachable",
                "" if up else status.last_error,
                now=now,
            )

        await ctx.mutate_status(link.key, MachineStatus, record)
        link.reported.update(fields)
        if lost:
            link.reported["stage"] = None
