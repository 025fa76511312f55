"""Driving a provider's steps the way the SDK's runner does, without a herder: a MachineRequest as the
provider sees it, its steps run in order (a ``Retry`` waited out, up to a deadline), its private state
kept between them as the runner keeps it on the request."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, cast

from pydantic import BaseModel

from herder.client import Client
from herder.infra import JoinConfig, Provider, RequestContext, Retry
from herder.resources import Resource
from herder.resources.provisioning import MACHINE_REQUEST, MachineRequestSpec


def context(
    provider: Provider[Any, Any],
    config: BaseModel,
    name: str = "workers-abc12",
    data: dict[str, Any] | None = None,
    talos_version: str = "v1.13.9",
    provider_id: str = "cloud",
) -> RequestContext[Any, Any]:
    """A new request of ``provider`` (a fresh uid), as its runner hands it to the steps."""
    spec = {"providerID": provider_id, "talosVersion": talos_version, "providerData": data or {}}
    request = Resource.model_validate(
        {
            "apiVersion": MACHINE_REQUEST.api_version,
            "kind": MACHINE_REQUEST.kind,
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": spec,
        }
    )
    return RequestContext(
        request=request,
        spec=MachineRequestSpec.model_validate(spec),
        data=provider.data_model.model_validate(data or {}),
        config=config,
        join=JoinConfig(),
        # The steps driven here make no config patches: they never reach herder.
        client=cast(Client, None),
        provider_id=provider_id,
    )


async def run_step(
    provider: Provider[Any, Any], ctx: RequestContext[Any, Any], name: str, timeout: float = 30
) -> None:
    """Run the step ``name`` until it neither fails nor asks to be retried (its ``Retry`` waited out)."""
    step = next(s for s in provider.steps() if s.name == name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await step.run(ctx)
            return
        except Retry as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"step {name} still waits after {timeout}s: {exc}") from None
            await asyncio.sleep(min(exc.after, 0.5))
