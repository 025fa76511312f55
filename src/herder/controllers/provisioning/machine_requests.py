"""herder's side of each MachineRequest: the Machine of the UUID its provider reports, the machine's way
out when the request goes, and the story told in Events.

- **Join.** Once the provider reports the request Provisioned with a machine UUID (and the address at
  which herder reaches it), herder makes the Machine of that UUID (or adopts the one registered under it)
  with the request's labels (``herder.dev/machine-request``, ``herder.dev/machine-request-set``,
  ``herder.dev/infra-provider-id``) and ``machineLabels``, and connects to it as to any machine.
- **Release** (a request is deleted). herder holds a finalizer on every request: it takes the machine
  out of its machine set (which leaves etcd and resets it), waits until it is out, deletes the Machine,
  and only then drops its finalizer; the provider destroys the machine after that.
- **The machine is gone in the cloud** (the provider reports reason ``MachineGone``) or **is deleted in
  herder** (faulty hardware): herder deletes the request, releasing the machine without a reset (there is
  nothing left to reset), and its set replaces it.
- **Two claims of one machine** (the provider reported one UUID on two requests): the machine is the
  request's that got it first; the other is refused, with the condition ``Conflict`` (True, reason
  ``MachineClaimed``) and a Warning Event naming the request that holds it, and its set does not count
  it as provisioned. Once the holder lets the machine go, the other takes it, and the condition flips.
- **Events.** A failed attempt (``lastError``) is a Warning event on the request, Provisioned and Failed
  are Events too: the provider writes status, herder tells the story.
"""

from __future__ import annotations

from collections.abc import Iterable

from herder.controllers.provisioning.requests import machine_of_request, node_of_request, request_status
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL, READ_ONLY_ANNOTATION
from herder.resources.clusters import MACHINE_SET_NODE
from herder.resources.join import SIDERO_LINK
from herder.resources.machines import FORCE_RELEASE_ANNOTATION, MACHINE, normalize_endpoint
from herder.resources.provisioning import (
    CONFLICT,
    MACHINE_CLAIMED,
    MACHINE_REQUEST,
    MACHINE_REQUEST_LABEL,
    MACHINE_REQUEST_SET_LABEL,
    RELEASE_FINALIZER,
    RELEASING_ANNOTATION,
    MachineRequestSpec,
    MachineRequestStatus,
)
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.index import FieldIndex
from herder.runtime.outputs import Writes
from herder.state.errors import AlreadyExists
from herder.state.store import WatchEvent

MACHINE_FINALIZER = "herder.dev/machine-request"
"""On a provider's Machine: it stays until its request has released it."""
MACHINE_GONE = "MachineGone"


def _reported(request: Resource) -> str | None:
    return request_status(request).uuid or None


class MachineRequestController(Controller):
    name = "MachineRequest"
    primary = MACHINE_REQUEST.kind
    outputs = (
        Writes(
            MACHINE_REQUEST.kind,
            f"metadata.finalizers[{RELEASE_FINALIZER}]",
            f"status.conditions[{CONFLICT}]",
            deletes=True,
        ),
        Writes(
            MACHINE.kind,
            "metadata.labels",
            f"metadata.annotations[{READ_ONLY_ANNOTATION}]",
            f"metadata.annotations[{RELEASING_ANNOTATION}]",
            f"metadata.annotations[{FORCE_RELEASE_ANNOTATION}]",
            f"metadata.finalizers[{MACHINE_FINALIZER}]",
            "spec.endpoint",
            creates=True,
            deletes=True,
        ),
        Writes(MACHINE_SET_NODE.kind, deletes=True),
    )
    concurrency = 8

    def __init__(self) -> None:
        # The requests reporting each machine UUID (two, when a provider reported one twice), so that the
        # events of a machine and of its node find every request that claims it.
        self._by_uuid = FieldIndex(MACHINE_REQUEST.kind, _reported)
        # What was last told of each request (stage, error time), so that each change is told once.
        self._told: dict[ObjectKey, tuple[str, str]] = {}
        # Requests whose failed attempts were told (their provisioning, when it comes, is told after them).
        self._failed: set[ObjectKey] = set()
        self.watches = (
            Watch(MACHINE_REQUEST.kind, self._request_changed),
            Watch(MACHINE.kind, self._machine_changed),
            Watch(MACHINE_SET_NODE.kind, self._by_uuid.by_name()),
        )

    def _request_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        if event.type == "DELETED":
            self._told.pop(ObjectKey.of(event.object), None)
            self._failed.discard(ObjectKey.of(event.object))
        return self._by_uuid.track(event)

    def _machine_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        keys = set(self._by_uuid.by_name()(event))
        name = event.object.metadata.labels.get(MACHINE_REQUEST_LABEL)
        if name:
            keys.add(ObjectKey(MACHINE_REQUEST.kind, event.object.namespace, name))
        return sorted(keys)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        request = await ctx.get(key)
        if request is None:
            return None
        status = request_status(request)
        machine = await machine_of_request(ctx, request)
        holder = await _holder(ctx, request, machine)
        if holder:
            machine = None  # another request's (the provider reported its UUID twice): not this one's
        if request.metadata.deletion_timestamp:
            return await self._release(ctx, request, status, machine)
        request = await ctx.ensure_finalizer(request, RELEASE_FINALIZER)
        await self._tell(ctx, request, status)
        if machine is not None and machine.metadata.deletion_timestamp:
            return await self._drop(ctx, request, f"machine {machine.name} was deleted")
        if status.stage == "Failed" and status.reason == MACHINE_GONE:
            return await self._drop(ctx, request, f"machine {status.uuid} is gone")
        if status.stage == "Provisioned" and status.uuid:
            holder = holder or await self._join(ctx, request, status, machine)
        await self._claim(ctx, request, status, holder)
        return None

    async def _tell(self, ctx: Context, request: Resource, status: MachineRequestStatus) -> None:
        error = status.last_error
        told = (status.stage, error.time if error is not None else "")
        key = ObjectKey.of(request)
        before = self._told.get(key)
        self._told[key] = told
        # What a request went through before this process first saw it was told by the one before.
        if before is None or before == told:
            return
        if error is not None and before[1] != told[1]:
            self._failed.add(key)
            step = f"step {status.step!r}" if status.step else "provisioning"
            await ctx.event(
                request,
                "Warning",
                "ProvisioningFailed",
                f"{step}, attempt {status.attempts}: {error.message}",
            )
        if before[0] == status.stage:
            return
        if status.stage == "Provisioned":
            # Its status (the machine and its address) tells it, and the Machine is made: an Event of
            # every request was a write more. After failed attempts, it is told after their Warnings.
            if key in self._failed:
                self._failed.discard(key)
                address = status.machine.address if status.machine is not None else ""
                where = f" at {address}" if address else ""
                await ctx.event(request, "Normal", "Provisioned", f"machine {status.uuid}{where}")
        elif status.stage == "Failed":
            await ctx.event(
                request, "Warning", status.reason or "Failed", status.message or "provisioning failed"
            )

    async def _claim(
        self, ctx: Context, request: Resource, status: MachineRequestStatus, holder: str
    ) -> None:
        """Say whether the machine the request reports is another request's (its ``Conflict`` condition,
        only once there is one to tell)."""
        if holder:
            await ctx.condition(
                request,
                CONFLICT,
                True,
                MACHINE_CLAIMED,
                f"machine {status.uuid} is request {holder}'s: the provider reported it for both",
                event="Warning",
            )
        elif status.condition_true(CONFLICT):
            why = f"machine {status.uuid} is this request's" if status.uuid else "no machine reported"
            await ctx.condition(request, CONFLICT, False, "Resolved", why, event="Normal")

    async def _drop(self, ctx: Context, request: Resource, why: str) -> Result | None:
        """Delete a request whose machine is gone (a set's request by its controller's leave); its set
        replaces it."""
        await ctx.release(ObjectKey.of(request))
        await ctx.event(request, "Normal", "Deleting", f"{why}: the request goes, and its set replaces it")
        return None

    async def _join(
        self, ctx: Context, request: Resource, status: MachineRequestStatus, machine: Resource | None
    ) -> str:
        """Make or adopt the Machine the request reports; the request holding it instead, if another
        got it first."""
        spec = MACHINE_REQUEST.spec_of(request, MachineRequestSpec)
        reported = status.machine
        assert reported is not None
        try:
            endpoint = normalize_endpoint(reported.address) if reported.address else ""
        except ValueError as exc:
            await ctx.event(request, "Warning", "BadAddress", f"the reported address is not usable: {exc}")
            endpoint = ""
        labels = {
            **spec.machine_labels,
            MACHINE_REQUEST_LABEL: request.name,
            INFRA_PROVIDER_LABEL: spec.provider_id,
        }
        if MACHINE_REQUEST_SET_LABEL in request.metadata.labels:
            labels[MACHINE_REQUEST_SET_LABEL] = request.metadata.labels[MACHINE_REQUEST_SET_LABEL]
        # The machines of hidden requests (a managed control plane's) are shown, but nobody may touch them.
        annotations = {READ_ONLY_ANNOTATION: "true"} if HIDDEN_LABEL in request.metadata.labels else {}
        if machine is None:
            if not endpoint:
                return ""  # herder cannot reach it yet: it is adopted once registered under its UUID
            try:
                await ctx.create(
                    Resource.model_validate(
                        {
                            "apiVersion": MACHINE.api_version,
                            "kind": MACHINE.kind,
                            "metadata": {
                                "name": status.uuid,
                                "namespace": request.namespace,
                                "labels": labels,
                                "annotations": annotations,
                                "finalizers": [MACHINE_FINALIZER],
                            },
                            "spec": {"endpoint": endpoint},
                        }
                    )
                )
            except AlreadyExists:
                # Registered meanwhile, or made for another request reporting the same UUID.
                machine = await machine_of_request(ctx, request)
                holder = await _holder(ctx, request, machine)
                if holder or machine is None:
                    return holder
            else:
                return ""  # its Provisioned event says where herder reaches it
        # Whom the machine may be taken from: nobody, or a request that is gone.
        free = (None, request.name, machine.metadata.labels.get(MACHINE_REQUEST_LABEL))
        if await ctx.get(ObjectKey(SIDERO_LINK.kind, machine.namespace, machine.name)) is not None:
            endpoint = ""  # it joined: herder reaches it through the tunnel, not where its provider says

        def adopt(m: Resource) -> None:
            if m.metadata.labels.get(MACHINE_REQUEST_LABEL) not in free:
                return  # claimed meanwhile: its event brings this request back
            m.metadata.labels.update(labels)
            m.metadata.annotations.update(annotations)
            if MACHINE_FINALIZER not in m.metadata.finalizers:
                m.metadata.finalizers.append(MACHINE_FINALIZER)
            if endpoint:
                m.spec = {**(m.spec or {}), "endpoint": endpoint}

        await ctx.mutate(ObjectKey.of(machine), adopt)
        return ""

    async def _release(
        self, ctx: Context, request: Resource, status: MachineRequestStatus, machine: Resource | None
    ) -> Result | None:
        if RELEASE_FINALIZER not in request.metadata.finalizers:
            return None
        if machine is not None:
            gone = bool(machine.metadata.deletion_timestamp) or status.reason == MACHINE_GONE
            node = await node_of_request(ctx, request)
            marks = {RELEASING_ANNOTATION: "true", **({FORCE_RELEASE_ANNOTATION: "true"} if gone else {})}
            if node is not None:
                if any(k not in machine.metadata.annotations for k in marks):

                    def mark(m: Resource) -> None:
                        m.metadata.annotations.update(marks)

                    await ctx.mutate(ObjectKey.of(machine), mark)
                if not node.metadata.deletion_timestamp:
                    await ctx.delete(ObjectKey.of(node))
                    await ctx.event(
                        request, "Normal", "Releasing", f"machine {machine.name} leaves its machine set"
                    )
                return None  # the node's deletion brings us back
            await self._forget(ctx, machine)
        await ctx.remove_finalizer(request, RELEASE_FINALIZER)
        await ctx.event(request, "Normal", "Released", "herder let the machine go: the provider destroys it")
        return None

    async def _forget(self, ctx: Context, machine: Resource) -> None:
        """Delete a released machine's Machine: it is about to be destroyed."""
        key = ObjectKey.of(machine)

        def unblock(m: Resource) -> None:
            m.metadata.finalizers = [f for f in m.metadata.finalizers if f != MACHINE_FINALIZER]

        current = await ctx.mutate(key, unblock)
        if current is not None and not current.metadata.deletion_timestamp:
            await ctx.delete(key)


async def _holder(ctx: Context, request: Resource, machine: Resource | None) -> str:
    """The other request that holds ``machine``, if one does (a request that is gone holds nothing)."""
    name = machine.metadata.labels.get(MACHINE_REQUEST_LABEL) if machine is not None else None
    if not name or name == request.name:
        return ""
    other = await ctx.get(ObjectKey(MACHINE_REQUEST.kind, request.namespace, name))
    return name if other is not None else ""
