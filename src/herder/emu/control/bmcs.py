"""The emulator's BMCs (``--bmc``): the machines that have one, each BMC's persisted state and firmware, and
their Redfish service on the control address, wired to the emulated machines they manage."""

from __future__ import annotations

import asyncio
import contextlib
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from typing import Any

from herder.emu.bmc.firmware import BmcFirmware
from herder.emu.bmc.redfish import SYSTEMS, ManagedMachine, RedfishService
from herder.emu.bmc.service import BmcEndpoint, new_ca, serving_certificate
from herder.emu.bmc.state import BmcState
from herder.emu.control.store import Store
from herder.emu.errors import ApiError
from herder.emu.machine.lifecycle import Machine

WaitFor = Callable[[Callable[[], bool], float], Awaitable[None]]
"""Waits until a condition of the machines holds (``Emulator.wait_for``)."""
SHUTDOWN_SECONDS = 30.0
"""How long a graceful shutdown may take before the BMC cuts the power."""


class _Managed:
    """An emulated machine as its BMC sees it."""

    def __init__(self, machine: Machine, wait_for: WaitFor) -> None:
        self._machine = machine
        self._wait_for = wait_for

    @property
    def uuid(self) -> str:
        return self._machine.uuid

    @property
    def hostname(self) -> str:
        return self._machine.hostname

    @property
    def powered_on(self) -> bool:
        return self._machine.record.powered_on

    @property
    def hardware(self) -> tuple[str, str, int, int]:
        hardware = self._machine.record.hardware
        return hardware.manufacturer, hardware.product_name, hardware.cpus, hardware.memory_mib

    def power_on(self) -> None:
        self._machine.power_on()

    async def power_off(self) -> None:
        await self._machine.power_off()

    async def shut_down(self) -> None:
        try:
            self._machine.shutdown()
        except ApiError:
            await self._machine.power_off()  # no system up to shut down (it boots, installs…): cut it
            return
        with contextlib.suppress(TimeoutError):
            await self._wait_for(lambda: not self._machine.record.powered_on, SHUTDOWN_SECONDS)
        if self._machine.record.powered_on:
            await self._machine.power_off()


class EmulatedBmcs:
    """Every BMC of the emulator, and the Redfish service they answer on."""

    def __init__(
        self,
        store: Store,
        machines: Callable[[], dict[str, Machine]],
        wait_for: WaitFor,
        username: str,
        password: str,
    ) -> None:
        self._store = store
        self._machines = machines
        self._wait_for = wait_for
        self._states: dict[str, BmcState] = {
            uuid: BmcState.from_json(raw) for uuid, raw in store.load_bmcs().items()
        }
        service_uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"herder-emulator-bmcs:{store.root}"))
        self.service = RedfishService(self, username, password, service_uuid)
        self._endpoint: BmcEndpoint | None = None

    # --- the machines that have a BMC (the service's view) ---

    def machine(self, uuid: str) -> ManagedMachine | None:
        machine = self._machines().get(uuid)
        return _Managed(machine, self._wait_for) if machine is not None and uuid in self._states else None

    def uuids(self) -> list[str]:
        machines = self._machines()
        return [uuid for uuid in machines if uuid in self._states]

    def state(self, uuid: str) -> BmcState:
        return self._states[uuid]

    def save(self, uuid: str) -> None:
        self._store.save_bmc(uuid, self._states[uuid].to_json())

    # --- the emulator's view ---

    def add(self, machine: Machine) -> None:
        """Give a new machine a BMC (with nothing in its virtual CD and no boot override)."""
        self._states[machine.uuid] = BmcState()
        self.save(machine.uuid)
        self.attach(machine)

    def attach(self, machine: Machine) -> None:
        """Put the machine's firmware in its BMC's hands, if it has one."""
        if machine.uuid in self._states:
            machine.firmware = BmcFirmware(self._states[machine.uuid], lambda: self.save(machine.uuid))

    def remove(self, uuid: str) -> None:
        if self._states.pop(uuid, None) is not None:
            self._store.delete_bmc(uuid)

    def address(self, uuid: str) -> str:
        """The machine's BMC: its System's URL on the service, or empty for a machine without one."""
        if self._endpoint is None or uuid not in self._states:
            return ""
        return f"{self._endpoint.url}{SYSTEMS}/{uuid}"

    def summary(self, uuid: str) -> dict[str, Any]:
        state = self._states.get(uuid)
        if state is None:
            return {"bmc": ""}
        return {
            "bmc": self.address(uuid),
            "boots": state.boots,
            "media": state.image if state.inserted else "",
        }

    async def start(self, host: str, port: int) -> str:
        """Serve the Redfish service on ``host:port``; its URL."""
        ca = self._store.load_bmc_ca()
        if ca is None:
            ca = new_ca()
            self._store.save_bmc_ca(ca)
        self._endpoint = BmcEndpoint(self.service, host, port)
        await self._endpoint.start(await asyncio.to_thread(serving_certificate, ca, host))
        return self._endpoint.url

    async def stop(self) -> None:
        if self._endpoint is not None:
            await self._endpoint.close()
