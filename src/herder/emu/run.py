"""The emulator as a process (``herder emu run``): start, publish where it listens, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal

from herder.emu.control import ControlAPI
from herder.emu.emulator import Emulator, EmulatorOptions

log = logging.getLogger("herder.emu")


async def serve(options: EmulatorOptions, listen_host: str, listen_port: int) -> None:
    emulator = Emulator(options)
    await emulator.start()
    control = ControlAPI(emulator)
    try:
        url = await control.start(listen_host, listen_port)
        emulator.store.write_info(url)
        log.warning(
            "emulator: %d machines in %s (port %d); control API %s; data in %s",
            len(emulator.machines),
            options.machine_cidr,
            options.machine_port,
            url,
            options.data_dir,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await control.stop()
        await emulator.stop()
