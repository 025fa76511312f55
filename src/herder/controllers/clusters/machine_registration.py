"""Registration: a MachineRegistration names a Talos endpoint; herder connects to it in maintenance mode,
reads the UUID the machine reports, and makes (or updates) the Machine of that UUID with the endpoint.

A machine that does not answer, or answers only to a client certificate (it is configured already, by a
cluster herder does not manage), keeps its registration not Ready with the reason and the attempt count,
and is tried again with backoff: an endpoint added before its machine boots registers once it is up.
"""

from __future__ import annotations

from typing import Any

from herder.resources import Resource
from herder.resources.machines import MACHINE, MACHINE_REGISTRATION, MachineRegistrationSpec, MachineSpec
from herder.resources.status import set_condition
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.state.errors import AlreadyExists
from herder.talos.machine import MachineAPIError, MachineClient, Unauthenticated

_RETRY_FIRST, _RETRY_MAX = 1.0, 60.0


class MachineRegistrationController(Controller):
    name = "MachineRegistration"
    primary = MACHINE_REGISTRATION.kind
    outputs = (
        Writes(MACHINE_REGISTRATION.kind, "status"),
        Writes(MACHINE.kind, "spec.endpoint", creates=True),
    )
    concurrency = 16
    watches = (Watch(MACHINE_REGISTRATION.kind),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        registration = await ctx.get(key)
        if registration is None or registration.metadata.deletion_timestamp:
            return None
        endpoint = MACHINE_REGISTRATION.spec_of(registration, MachineRegistrationSpec).endpoint
        status = registration.status or {}
        known = str(status.get("machine") or "")
        if known:
            machine = await ctx.get(ObjectKey(MACHINE.kind, key.namespace, known))
            if machine is not None and MACHINE.spec_of(machine, MachineSpec).endpoint == endpoint:
                return None
        try:
            async with MachineClient.insecure(endpoint, timeout=10, connect_timeout=5, retries=0) as client:
                uuid = (await client.system_information()).uuid.lower()
        except Unauthenticated:
            return await self._failed(
                ctx,
                registration,
                f"{endpoint} is not in maintenance mode: it runs a config herder did not give it (herder "
                "registers machines in maintenance mode)",
            )
        except MachineAPIError as exc:
            return await self._failed(ctx, registration, str(exc))
        if not uuid:
            return await self._failed(ctx, registration, f"{endpoint} reports no machine UUID")
        await self._machine(ctx, key.namespace, uuid, endpoint)

        def record(_: Resource, current: dict[str, Any]) -> None:
            current.update(machine=uuid, lastError="", attempts=0)
            conditions = list(current.get("conditions") or [])
            set_condition(conditions, "Ready", True, "Registered", f"machine {uuid}")
            current["conditions"] = conditions

        await ctx.mutate_status(key, record)
        await ctx.event(registration, "Normal", "Registered", f"{endpoint} is machine {uuid}")
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

    async def _failed(self, ctx: Context, registration: Resource, error: str) -> Result:
        attempts = int((registration.status or {}).get("attempts") or 0) + 1

        def record(_: Resource, current: dict[str, Any]) -> None:
            current.update(lastError=error, attempts=attempts)
            conditions = list(current.get("conditions") or [])
            set_condition(conditions, "Ready", False, "Unreachable", error)
            current["conditions"] = conditions

        await ctx.mutate_status(ObjectKey.of(registration), record)
        if attempts == 1:
            await ctx.event(registration, "Warning", "NotRegistered", error)
        return Result(requeue_after=min(_RETRY_FIRST * 2 ** (attempts - 1), _RETRY_MAX))
