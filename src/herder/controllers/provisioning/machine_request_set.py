"""MachineRequestSets: each keeps ``machineCount`` MachineRequests named ``<set>-<random>``, labelled with
its provider and itself, and owned by it.

A request that failed for good (stage ``Failed``) is deleted and replaced; one whose machine another
request holds (``Conflict``) is not counted as provisioned, and the set says why. Shrinking deletes the requests
whose machines no cluster uses first, then workers before control planes, oldest first. A set that a
MachineSet owns (an auto-provisioning class) deletes only unused requests: the machine set decides which
of its machines leave, with its own gates (etcd health for control planes), and the set follows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from herder.controllers.provisioning.requests import in_use, request_status, role_of
from herder.resources import InvalidObject, Resource
from herder.resources.access import HIDDEN_LABEL
from herder.resources.clusters import MACHINE_SET, MACHINE_SET_NODE
from herder.resources.machines import MACHINE_SET_LABEL
from herder.resources.provisioning import (
    CONFLICT,
    MACHINE_REQUEST,
    MACHINE_REQUEST_SET,
    MACHINE_REQUEST_SET_LABEL,
    PROVIDER_FINALIZER,
    PROVISIONING,
    RELEASE_FINALIZER,
    REQUESTS_FAILING,
    MachineRequestSetSpec,
    MachineRequestSetStatus,
    MachineRequestStatus,
)
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    labelled_owner,
)
from herder.runtime.index import ViewIndex
from herder.runtime.outputs import Owns, Writes
from herder.state.errors import AlreadyExists
from herder.state.store import WatchEvent

_RETRY = 10.0
_NAME_DRAWS = 5


@dataclass(frozen=True)
class _Request:
    """A request of a set, with what the set reads of its status read once (a set of thousands reads
    every request at each reconcile)."""

    request: Resource
    status: MachineRequestStatus
    failed: bool
    provisioned: bool
    going: bool

    @classmethod
    def of(cls, request: Resource) -> _Request:
        status = request_status(request)
        going = bool(request.metadata.deletion_timestamp)
        return cls(request, status, status.stage == "Failed", status.provisioned, going)

    @property
    def troubled(self) -> bool:
        """Whether an error holds it up: its provider's last one, or another request holding its machine."""
        return self.status.last_error is not None or self.status.condition_true(CONFLICT)

    @property
    def counted(self) -> tuple[str, str, bool, bool]:
        """What the set counts of it: a change of anything else is progress within a stage."""
        error = self.status.last_error.message if self.status.last_error is not None else ""
        return self.status.stage, error, self.provisioned, self.going


class MachineRequestSetController(Controller):
    name = "MachineRequestSet"
    primary = MACHINE_REQUEST_SET.kind
    outputs = (
        Writes(
            MACHINE_REQUEST_SET.kind,
            "status.requests",
            "status.provisioned",
            "status.failed",
            "status.observedGeneration",
            "status.conditions[Ready]",
        ),
        Owns(MACHINE_REQUEST.kind, releasable=True),
    )
    concurrency = 4
    # A summary too: a provider's requests move in bursts (its machines come within a moment of each
    # other), and each step of each request was a write of the set.
    settle = 0.5

    def __init__(self) -> None:
        # Each set's requests as the watch last showed them: a set whose count is right takes its
        # status from here, without listing its requests again at every change of one of them.
        self._requests = ViewIndex(
            MACHINE_REQUEST.kind, lambda r: r.metadata.labels.get(MACHINE_REQUEST_SET_LABEL), _Request.of
        )
        self.watches = (
            Watch(MACHINE_REQUEST_SET.kind),
            Watch(MACHINE_REQUEST.kind, self._request_changed),
            # A machine set letting a machine go makes its request unused: the set may then shrink.
            Watch(MACHINE_SET_NODE.kind, labelled_owner(MACHINE_REQUEST_SET.kind, MACHINE_SET_LABEL)),
        )

    def _request_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        self._requests.update(event)
        if (
            event.type == "MODIFIED"
            and event.previous is not None
            and _Request.of(event.previous).counted == _Request.of(event.object).counted
        ):
            return ()  # progress within a stage changes nothing the set counts
        return controller_owner(MACHINE_REQUEST_SET.kind)(event)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        request_set = await ctx.get(key)
        if request_set is None or request_set.metadata.deletion_timestamp:
            return None  # its requests are garbage-collected after it
        spec = MACHINE_REQUEST_SET.spec_of(request_set, MachineRequestSetSpec)
        wanted = spec.machine_count
        requests = _standing(self._requests.views(key.namespace, key.name))
        if len(requests) != wanted or any(r.failed for r in requests):
            # About to act: on what the store holds, not on what the watch has shown so far.
            listed = await ctx.list(
                MACHINE_REQUEST.kind, key.namespace, label_selector=f"{MACHINE_REQUEST_SET_LABEL}={key.name}"
            )
            requests = _standing(_Request.of(r) for r in listed)
        failed = [r for r in requests if r.failed]
        for gone in failed:
            why = gone.status.reason or gone.status.message or "failed"
            await ctx.delete(ObjectKey.of(gone.request))
            await ctx.event(request_set, "Normal", "Replacing", f"request {gone.request.name} failed ({why})")
        live = [r for r in requests if not r.failed]
        problem = ""
        if len(live) < wanted:
            made, problem = await self._grow(ctx, request_set, spec, wanted - len(live))
            # Counted now: the status says them in this write, not in one more once the watch shows them.
            live += [_Request.of(r) for r in made]
        elif len(live) > wanted:
            await self._shrink(ctx, request_set, live, len(live) - wanted)
        provisioned = sum(r.provisioned for r in live)
        ready = not problem and len(live) == wanted and provisioned == wanted
        if problem:
            message = problem
        elif ready:
            message = f"{wanted} machine(s) provisioned"
        else:
            message = f"{provisioned}/{wanted} provisioned"
            waiting = [r for r in live if not r.provisioned]
            # A request held up by an error is the one to tell of (and what a machine set waiting for
            # the set tells too, where it says no more than "being provisioned" of plain progress).
            failing = [r for r in waiting if r.troubled]
            pending = min(failing or waiting, key=_named, default=None)
            if pending is not None:
                detail = pending.status.detail
                message += f"; {pending.request.name}: {pending.status.stage}" + (
                    f": {detail}" if detail else ""
                )

        def record(_: Resource, status: MachineRequestSetStatus) -> None:
            status.requests = len(live)
            status.provisioned = provisioned
            status.failed = len(failed)
            status.observed_generation = request_set.metadata.generation or 0
            if ready:
                reason = "Provisioned"
            else:
                reason = "RequestsRefused" if problem else (REQUESTS_FAILING if failing else PROVISIONING)
            status.set_condition("Ready", ready, reason, message, now=ctx.clock.rfc3339())

        await ctx.mutate_status(key, MachineRequestSetStatus, record)
        return Result(requeue_after=_RETRY) if problem else None

    async def _grow(
        self, ctx: Context, request_set: Resource, spec: MachineRequestSetSpec, count: int
    ) -> tuple[list[Resource], str]:
        """Create ``count`` requests: those made, and why the others could not be, if they could not."""
        request_spec = spec.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude={"machine_count"}
        )
        made: list[Resource] = []
        labels = {MACHINE_REQUEST_SET_LABEL: request_set.name}
        if HIDDEN_LABEL in request_set.metadata.labels:
            labels[HIDDEN_LABEL] = "true"
        for _ in range(count):
            request = Resource.model_validate(
                {
                    "apiVersion": MACHINE_REQUEST.api_version,
                    "kind": MACHINE_REQUEST.kind,
                    "metadata": {
                        "generateName": f"{request_set.name}-",
                        "namespace": request_set.namespace,
                        "labels": labels,
                        # herder's own and the provider's, from the start: two writes (and an audit
                        # event) less per request. Deleting one the provider never saw waits for the
                        # provider all the same (it destroys nothing and lets go).
                        "finalizers": [RELEASE_FINALIZER, PROVIDER_FINALIZER],
                    },
                    "spec": request_spec,
                }
            )
            try:
                made.append(await _create(ctx, request_set, request))
            except InvalidObject as exc:
                why = "; ".join(f"{c.field}: {c.message}" for c in exc.causes) or str(exc)
                told = status_of(request_set, MachineRequestSetStatus).condition("Ready")
                if told is None or told.message != why:
                    await ctx.event(request_set, "Warning", "RequestRefused", why)
                break
        else:
            why = ""
        # A new set's first requests are its making, which its status counts (its first write): an Event
        # of every new set was a write more. Growing later is told, one event for the lot, not one per
        # request: a set of thousands stays readable.
        if made and status_of(request_set, MachineRequestSetStatus).observed_generation:
            shown = ", ".join(r.name for r in made[:3]) + (", …" if len(made) > 3 else "")
            await ctx.event(
                request_set, "Normal", "Requested", f"{len(made)} machine request(s) created: {shown}"
            )
        return made, why

    async def _shrink(self, ctx: Context, request_set: Resource, live: list[_Request], count: int) -> None:
        owned_by_set = (
            ref := request_set.metadata.controller_ref()
        ) is not None and ref.kind == MACHINE_SET.kind
        ranked = []
        for each in live:
            request = each.request
            uuid = each.status.uuid
            node = await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, request.namespace, uuid)) if uuid else None
            used = in_use(node)
            if used and owned_by_set:
                continue  # its machine set lets it go first
            ranked.append(
                (
                    # A request with no machine yet costs nothing to let go; then machines nobody uses.
                    bool(uuid),
                    used,
                    role_of(node) == "controlplane",
                    request.metadata.creation_timestamp or "",
                    request.name,
                    request,
                )
            )
        for *_, request in sorted(ranked, key=lambda r: r[:5])[:count]:
            await ctx.delete(ObjectKey.of(request))
            await ctx.event(request_set, "Normal", "ScalingDown", f"machine request {request.name} deleted")


async def _create(ctx: Context, request_set: Resource, request: Resource) -> Resource:
    """Create a request of a generated name, drawing another when the one drawn is taken (a set of
    thousands meets that now and then)."""
    for _ in range(_NAME_DRAWS - 1):
        try:
            return await ctx.apply_output(request_set, request)
        except AlreadyExists:
            continue
    return await ctx.apply_output(request_set, request)


def _standing(requests: Iterable[_Request]) -> list[_Request]:
    return [r for r in requests if not r.going]


def _named(request: _Request) -> str:
    return request.request.name
