"""The emulator as ``herder demo`` runs it: in the server's process, with four machines that it registers
with herder through herder's API (as ``herder emu run --register`` does), so that herder forms the demo
cluster's control planes on them itself; its workers are made on demand by the emulator's infra provider,
which herder runs inside the server (``--provider emulator``) against this emulator's control API."""

from __future__ import annotations

import asyncio
from pathlib import Path

from herder.emu.control.emulator import Emulator
from herder.emu.control.registration import register_machines
from herder.emu.control.run import serve
from herder.emu.options import EmulatorOptions

MACHINES = 4
"""Three control planes for the demo cluster, and one spare to scale with."""
CONTROL_API = ("127.0.0.1", 50080)


class DemoEmulator:
    """Background work for ``herder serve``: run the emulator until stopped."""

    def __init__(self, directory: Path, kubeconfig: Path, *, listen: tuple[str, int] = CONTROL_API) -> None:
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.listen = listen
        self._stop = asyncio.Event()

    async def run(self) -> None:
        options = EmulatorOptions(data_dir=self.directory / "emulator", machines=MACHINES)
        await serve(options, *self.listen, stop=self._stop, ready=self._register)

    def stop(self) -> None:
        self._stop.set()

    async def _register(self, emulator: Emulator) -> None:
        await register_machines(emulator, self.kubeconfig)
