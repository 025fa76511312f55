"""The emulator as a process (``herder emu run``): start, publish where it listens, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import signal
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from herder.emu.control.api import ControlAPI
from herder.emu.control.emulator import Emulator
from herder.emu.options import EmulatorOptions
from herder.state import open_files

log = logging.getLogger("herder.emu")

TRIM_INTERVAL = 2.0


async def _return_freed_memory() -> None:
    """Give freed heap back to the OS now and then. Thousands of short TLS connections leave glibc's heap
    fragmented and RSS far above what is in use (measured: 200 MiB resident for 75 MiB live)."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return
    while True:
        await asyncio.sleep(TRIM_INTERVAL)
        trim(0)


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("emulator: %s", task.exception(), exc_info=task.exception())


@asynccontextmanager
async def running(
    options: EmulatorOptions, listen_host: str, listen_port: int, *, listen_option: str = "--listen"
) -> AsyncIterator[Emulator]:
    """The emulator and its control API, listening until the block ends. An address in use (the control
    API's, named by ``listen_option``, or a machine's) ends the start with an ``OSError`` saying which."""
    open_files.raise_limit()
    emulator = Emulator(options)
    await emulator.start()
    control = ControlAPI(emulator)
    try:
        url = await control.start(listen_host, listen_port, option=listen_option)
        emulator.store.write_info(url, emulator.bmc_url)
        log.warning(
            "emulator: %d machines in %s (port %d); control API %s; data in %s",
            len(emulator.machines),
            options.machine_cidr,
            options.machine_port,
            url,
            options.data_dir,
        )
        if emulator.bmc_url:
            log.warning(
                "emulator: BMCs' Redfish service %s (its CA: %s)",
                emulator.bmc_url,
                emulator.store.bmc_ca_file,
            )
        yield emulator
    finally:
        await control.stop()
        await emulator.stop()


async def serve(
    options: EmulatorOptions,
    listen_host: str,
    listen_port: int,
    *,
    stop: asyncio.Event | None = None,
    ready: Callable[[Emulator], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Run the emulator and its control API until ``stop`` is set (default: until SIGTERM or SIGINT, from
    the start on: a signal while it starts stops it once started).

    ``ready`` runs once everything listens (the demo forms its cluster there); its failure is logged.
    """
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with running(options, listen_host, listen_port) as emulator:
        tasks = [asyncio.create_task(_return_freed_memory())]
        if ready is not None:
            tasks.append(asyncio.create_task(ready(emulator)))
            tasks[-1].add_done_callback(_report_failure)
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
