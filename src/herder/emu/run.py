"""The emulator as a process (``herder emu run``): start, publish where it listens, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import resource
import signal

from herder.emu.control import ControlAPI
from herder.emu.emulator import Emulator
from herder.emu.options import EmulatorOptions

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


def _raise_file_limit() -> None:
    """Each machine holds a listening socket and each call two more: lift the soft limit on open files
    (often 1024) to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(options: EmulatorOptions, listen_host: str, listen_port: int) -> None:
    _raise_file_limit()
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
        trimmer = asyncio.get_running_loop().create_task(_return_freed_memory())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        trimmer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await trimmer
    finally:
        await control.stop()
        await emulator.stop()
