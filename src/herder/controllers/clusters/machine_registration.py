"""Registration: a MachineRegistration names a Talos endpoint; herder connects to it in maintenance mode,
reads the UUID the machine reports, and makes (or updates) the Machine of that UUID with the endpoint.

A machine that does not answer, or answers only to a client certificate (it is configured already, by a
cluster herder does not manage), keeps its registration not Ready with the reason and the attempt count,
and is tried again with backoff: an endpoint added before its machine boots registers once it is up.
"""

from __future__ import annotations

from herder.resources import Resource
from herder.resources.machines import (
    MACHINE,
    MACHINE_REGISTRATION,
    MachineRegistrationSpec,
    MachineRegistrationStatus,
    MachineSpec,
)
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.state.errors import AlreadyExists
from herder.talos.machine import MachineAPIError, Unauthenticated
from herder.talos.machine.pool import ClientPool
from herder.workqueue import retry_delay

RETRY_FIRST, RETRY_MAX = 1.0, 60.0


class MachineRegistrationController(Controller):
    name = "MachineRegistration"
    primary = MACHINE_REGISTRATION.kind
    outputs = (
        Writes(MACHINE_REGISTRATION.kind, "status"),
        Writes(MACHINE.kind, "spec.endpoint", creates=True),
    )
    concurrency = 16
    watches = (Watch(MACHINE_REGISTRATION.kind),)

    def __init__(self, clients: ClientPool | None = None) -> None:
        # Each endpoint is asked once (or once per retry): nothing to keep open.
        self._clients = (
            clients if clients is not None else ClientPool(keep=0, timeout=10, connect_timeout=5, retries=0)
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        registration = await ctx.get(key)
        if registration is None or registration.metadata.deletion_timestamp:
            return None
        endpoint = MACHINE_REGISTRATION.spec_of(registration, MachineRegistrationSpec).endpoint
        status = status_of(registration, MachineRegistrationStatus)
        if status.machine:
            machine = await ctx.get(ObjectKey(MACHINE.kind, key.namespace, status.machine))
            if machine is not None and MACHINE.spec_of(machine, MachineSpec).endpoint == endpoint:
                return None
        try:
            async with self._clients.client(endpoint, None) as client:
                uuid = (await client.system_information()).uuid.lower()
        except Unauthenticated:
            return await self._failed(
                ctx,
                registration,
                status,
                f"{endpoint} is not in maintenance mode: it runs a config herder did not give it (herder "
                "registers machines in maintenance mode)",
            )
        except MachineAPIError as exc:
            return await self._failed(ctx, registration, status, str(exc))
        if not uuid:
            return await self._failed(ctx, registration, status, f"{endpoint} reports no machine UUID")
        await self._machine(ctx, key.namespace, uuid, endpoint)

        def record(_: Resource, current: MachineRegistrationStatus) -> None:
            current.machine, current.last_error, current.attempts = uuid, "", 0

        updated = await ctx.mutate_status(key, MachineRegistrationStatus, record)
        if updated is not None:
            await ctx.condition(
                updated, "Ready", True, "Registered", f"{endpoint} is machine {uuid}", event="Normal"
            )
        return None

    async def _machine(self, ctx: Context, namespace: str | None, uuid: str, endpoint: str) -> None:
        """Make the Machine of ``uuid``, or point the existing one at the endpoint it answers on now."""
        try:
            await ctx.create(
                Resource.model_validate(
                    {
                        "apiVersion": MACHINE.api_version,
                        "kind": MACHINE.kind,
                        "metadata": {"name": uuid, "namespace": namespace},
                        "spec": {"endpoint": endpoint},
                    }
                )
            )
        except AlreadyExists:

            def point(machine: Resource) -> None:
                machine.spec = {**(machine.spec or {}), "endpoint": endpoint}

            await ctx.mutate(ObjectKey(MACHINE.kind, namespace, uuid), point)

    async def _failed(
        self, ctx: Context, registration: Resource, status: MachineRegistrationStatus, error: str
    ) -> Result:
        """Keep the error and count the attempt; the first failure (of each kind) is told as a Warning."""
        attempts = status.attempts + 1

        def record(_: Resource, current: MachineRegistrationStatus) -> None:
            current.last_error, current.attempts = error, attempts

        updated = await ctx.mutate_status(ObjectKey.of(registration), MachineRegistrationStatus, record)
        if updated is not None:
            await ctx.condition(updated, "Ready", False, "Unreachable", error, event="Warning")
        return Result(requeue_after=retry_delay(attempts, RETRY_FIRST, RETRY_MAX))
