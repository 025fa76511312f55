"""The force release of a MachineRequest (``herder machinerequest release NAME --force``, an Admin's
audited action): for a request whose provider is gone for good, so that it holds nothing hostage.

The request is deleted, the provider's finalizer dropped, and its machine (if herder knows one) let go
of its cluster without a reset, since whoever could reach it is gone. herder's own finalizer stays: it
still takes the machine out of its machine set before the request goes.
"""

from __future__ import annotations

from typing import Any

from herder.controllers.provisioning.requests import reported_uuid
from herder.resources import Resource
from herder.resources.machines import FORCE_RELEASE_ANNOTATION, MACHINE
from herder.resources.provisioning import MACHINE_REQUEST, PROVIDER_FINALIZER
from herder.runtime.controller import Context, ObjectKey
from herder.runtime.event_recorder import EventRecorder
from herder.runtime.outputs import Writes
from herder.state.store import SYSTEM, Store


class ReleaseRefused(ValueError):
    """A release asked without ``force``."""


class ForceRelease:
    """The ``release`` action of MachineRequests."""

    def __init__(self, store: Store) -> None:
        self._ctx = Context(
            store,
            SYSTEM,
            (
                Writes(MACHINE_REQUEST.kind, f"metadata.finalizers[{PROVIDER_FINALIZER}]", deletes=True),
                Writes(MACHINE.kind, f"metadata.annotations[{FORCE_RELEASE_ANNOTATION}]"),
            ),
            events=EventRecorder(store),
        )

    async def __call__(self, request: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        if options.get("force") is not True:
            raise ReleaseRefused(
                "a request is released by deleting it; force (force: true) lets go of one whose "
                "provider is gone, without waiting for it to destroy the machine"
            )
        ctx = self._ctx
        key = ObjectKey.of(request)
        if not request.metadata.deletion_timestamp:
            await ctx.release(key)
        uuid = reported_uuid(request)
        if uuid:

            def force(machine: Resource) -> None:
                machine.metadata.annotations[FORCE_RELEASE_ANNOTATION] = "true"

            await ctx.mutate(ObjectKey(MACHINE.kind, request.namespace, uuid), force)

        def drop(obj: Resource) -> None:
            obj.metadata.finalizers = [f for f in obj.metadata.finalizers if f != PROVIDER_FINALIZER]

        await ctx.mutate(key, drop)
        await ctx.event(
            request, "Warning", "ForceReleased", f"{user} let the request go without its provider"
        )
        return f"{MACHINE_REQUEST.plural}/{request.name} released\n".encode()
