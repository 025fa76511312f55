"""Registering the emulator's own machines with herder (``herder emu run --register KUBECONFIG``), through
herder's API as ``herder machine add`` does: one MachineRegistration per machine endpoint, after which
herder connects to each machine in maintenance mode and makes its Machine. Machines an infra provider
asks the emulator for later come to herder through that provider instead."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from herder.client import AlreadyExists, ApiError, Client, TransportError
from herder.emu.control.emulator import Emulator
from herder.resources import Resource
from herder.resources.machines import MACHINE_REGISTRATION, registration_name

log = logging.getLogger("herder.emu")

_RETRY = 2.0


async def register_machines(emulator: Emulator, kubeconfig: Path, namespace: str = "default") -> None:
    """Register every machine the emulator runs now; herder may still be starting: keep trying."""
    endpoints = sorted(m.record.endpoint for m in emulator.machines.values())
    while True:
        try:
            async with Client.from_kubeconfig(kubeconfig) as client:
                for endpoint in endpoints:
                    with contextlib.suppress(AlreadyExists):
                        await client.create(
                            Resource.model_validate(
                                {
                                    "apiVersion": MACHINE_REGISTRATION.api_version,
                                    "kind": MACHINE_REGISTRATION.kind,
                                    "metadata": {"name": registration_name(endpoint), "namespace": namespace},
                                    "spec": {"endpoint": endpoint},
                                }
                            )
                        )
            log.warning("emulator: %d machines registered with herder", len(endpoints))
            return
        except (TransportError, ApiError, OSError) as exc:
            log.warning("emulator: cannot register machines with herder yet: %s", exc)
            await asyncio.sleep(_RETRY)
