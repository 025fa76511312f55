"""The emulator as ``herder demo`` runs it: in the server's process, with four machines that it registers
with herder through herder's API (as ``herder emu run --register`` does), so that herder forms the demo
cluster's control planes on them itself; its workers are made on demand by the emulator's infra provider,
which herder runs inside the server (``--provider emulator``) against this emulator's control API.

It starts before the server does, so that an address it needs being taken ends the demo at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from herder.emu.control.emulator import Emulator
from herder.emu.control.registration import register_machines
from herder.emu.control.run import running
from herder.emu.options import DEFAULT_MACHINE_CIDR, EmulatorOptions

MACHINES = 4
"""Three control planes for the demo cluster, and one spare to scale with."""


class DemoEmulator:
    """The demo's emulator: started around the server (``running``), its machines registered with herder
    once the server listens (``register``)."""

    def __init__(
        self,
        directory: Path,
        kubeconfig: Path,
        *,
        listen: tuple[str, int],
        machine_cidr: str = DEFAULT_MACHINE_CIDR,
    ) -> None:
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.listen = listen
        self.machine_cidr = machine_cidr
        self._emulator: Emulator | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        options = EmulatorOptions(
            data_dir=self.directory / "emulator", machines=MACHINES, machine_cidr=self.machine_cidr
        )
        async with running(options, *self.listen, listen_option="--emulator-listen") as emulator:
            self._emulator = emulator
            try:
                yield
            finally:
                self._emulator = None

    async def register(self) -> None:
        """Register the emulator's machines with herder, which listens by now."""
        if self._emulator is not None:
            await register_machines(self._emulator, self.kubeconfig)
