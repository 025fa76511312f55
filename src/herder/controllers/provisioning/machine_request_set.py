"""MachineRequestSets: each keeps ``machineCount`` MachineRequests named ``<set>-<random>``, labelled with
its provider and itself, and owned by it.

A request that failed for good (stage ``Failed``) is deleted and replaced. Shrinking deletes the requests
whose machines no cluster uses first, then workers before control planes, oldest first. A set that a
MachineSet owns (an auto-provisioning class) deletes only unused requests: the machine set decides which
of its machines leave, with its own gates (etcd health for control planes), and the set follows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from herder.controllers.provisioning.requests import in_use, node_of_request, role_of
from herder.resources import InvalidObject, Resource
from herder.resources.access import HIDDEN_LABEL
from herder.resources.clusters import MACHINE_SET, MACHINE_SET_NODE
from herder.resources.machines import MACHINE_SET_LABEL
from herder.resources.provisioning import (
    MACHINE_REQUEST,
    MACHINE_REQUEST_SET,
    MACHINE_REQUEST_SET_LABEL,
    RELEASE_FINALIZER,
)
from herder.resources.status import find_condition, set_condition
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    labelled_owner,
)
from herder.runtime.outputs import Owns, Writes
from herder.state.store import WatchEvent

_RETRY = 10.0


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

    def __init__(self) -> None:
        # Each set's requests as the watch last showed them: a set whose count is right takes its
        # status from here, without listing its requests again at every change of one of them.
        self._seen: defaultdict[tuple[str | None, str], dict[str, Resource]] = defaultdict(dict)
        self.watches = (
            Watch(MACHINE_REQUEST_SET.kind),
            Watch(MACHINE_REQUEST.kind, self._request_changed),
            # A machine set letting a machine go makes its request unused: the set may then shrink.
            Watch(MACHINE_SET_NODE.kind, labelled_owner(MACHINE_REQUEST_SET.kind, MACHINE_SET_LABEL)),
        )

    def _request_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        obj = event.object
        owner = obj.metadata.labels.get(MACHINE_REQUEST_SET_LABEL)
        if owner:
            if event.type == "DELETED":
                self._seen[(obj.namespace, owner)].pop(obj.name, None)
            else:
                self._seen[(obj.namespace, owner)][obj.name] = obj
        before = (event.previous.status or {}) if event.previous is not None else None
        after = event.object.status or {}
        if (
            event.type == "MODIFIED"
            and before is not None
            and before.get("stage") == after.get("stage")
            and before.get("lastError") == after.get("lastError")
            and event.previous is not None
            and event.previous.metadata.deletion_timestamp == event.object.metadata.deletion_timestamp
        ):
            return ()  # progress within a stage changes nothing the set counts
        return controller_owner(MACHINE_REQUEST_SET.kind)(event)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        request_set = await ctx.get(key)
        if request_set is None or request_set.metadata.deletion_timestamp:
            if request_set is None and not self._seen.get((key.namespace, key.name)):
                self._seen.pop((key.namespace, key.name), None)
            return None  # its requests are garbage-collected after it
        wanted = int((request_set.spec or {}).get("machineCount") or 0)
        requests = _standing(self._seen[(key.namespace, key.name)].values())
        if len(requests) != wanted or any(_failed(r) for r in requests):
            # About to act: on what the store holds, not on what the watch has shown so far.
            requests = _standing(
                await ctx.list(
                    MACHINE_REQUEST.kind,
                    key.namespace,
                    label_selector=f"{MACHINE_REQUEST_SET_LABEL}={key.name}",
                )
            )
        failed = [r for r in requests if _failed(r)]
        for request in failed:
            why = (request.status or {}).get("reason") or (request.status or {}).get("message") or "failed"
            await ctx.delete(ObjectKey.of(request))
            await ctx.event(request_set, "Normal", "Replacing", f"request {request.name} failed ({why})")
        live = [r for r in requests if r not in failed]
        problem = ""
        if len(live) < wanted:
            problem = await self._grow(ctx, request_set, wanted - len(live))
        elif len(live) > wanted:
            await self._shrink(ctx, request_set, live, len(live) - wanted)
        provisioned = [r for r in live if (r.status or {}).get("stage") == "Provisioned"]
        ready = not problem and len(live) == wanted and len(provisioned) == wanted
        if problem:
            message = problem
        elif ready:
            message = f"{wanted} machine(s) provisioned"
        else:
            pending = next((r for r in live if (r.status or {}).get("stage") != "Provisioned"), None)
            message = f"{len(provisioned)}/{wanted} provisioned"
            if pending is not None:
                status = pending.status or {}
                detail = ((status.get("lastError") or {}).get("message")) or status.get("message") or ""
                message += f"; {pending.name}: {status.get('stage', 'Pending')}" + (
                    f": {detail}" if detail else ""
                )

        def record(_: Resource, status: dict[str, Any]) -> None:
            status.update(
                requests=len(live),
                provisioned=len(provisioned),
                failed=len(failed),
                observedGeneration=request_set.metadata.generation or 0,
            )
            conditions = list(status.get("conditions") or [])
            reason = "Provisioned" if ready else ("RequestsRefused" if problem else "Provisioning")
            set_condition(conditions, "Ready", ready, reason, message)
            status["conditions"] = conditions

        await ctx.mutate_status(key, record)
        return Result(requeue_after=_RETRY) if problem else None

    async def _grow(self, ctx: Context, request_set: Resource, count: int) -> str:
        """Create ``count`` requests; why they could not be, if they could not."""
        spec = {k: v for k, v in (request_set.spec or {}).items() if k != "machineCount"}
        made: list[str] = []
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
                        # herder's own, from the start: one write less per request.
                        "finalizers": [RELEASE_FINALIZER],
                    },
                    "spec": spec,
                }
            )
            try:
                made.append((await ctx.apply_output(request_set, request)).name)
            except InvalidObject as exc:
                why = "; ".join(f"{c.field}: {c.message}" for c in exc.causes) or str(exc)
                current = find_condition((request_set.status or {}).get("conditions"), "Ready") or {}
                if current.get("message") != why:
                    await ctx.event(request_set, "Warning", "RequestRefused", why)
                break
        else:
            why = ""
        if made:
            # One event for the lot, not one per request: a set of thousands stays readable.
            shown = ", ".join(made[:3]) + (", …" if len(made) > 3 else "")
            await ctx.event(
                request_set, "Normal", "Requested", f"{len(made)} machine request(s) created: {shown}"
            )
        return why

    async def _shrink(self, ctx: Context, request_set: Resource, live: list[Resource], count: int) -> None:
        owned_by_set = (
            ref := request_set.metadata.controller_ref()
        ) is not None and ref.kind == MACHINE_SET.kind
        ranked = []
        for request in live:
            node = await node_of_request(ctx, request)
            used = in_use(node)
            if used and owned_by_set:
                continue  # its machine set lets it go first
            ranked.append(
                (
                    used,
                    role_of(node) == "controlplane",
                    request.metadata.creation_timestamp or "",
                    request.name,
                    request,
                )
            )
        for *_, request in sorted(ranked, key=lambda r: r[:4])[:count]:
            await ctx.delete(ObjectKey.of(request))
            await ctx.event(request_set, "Normal", "ScalingDown", f"machine request {request.name} deleted")


def _standing(requests: Iterable[Resource]) -> list[Resource]:
    return [r for r in requests if not r.metadata.deletion_timestamp]


def _failed(request: Resource) -> bool:
    return (request.status or {}).get("stage") == "Failed"
