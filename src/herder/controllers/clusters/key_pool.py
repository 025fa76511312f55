"""RSA keys made ahead of need: each cluster's secrets hold an RSA-4096 key (the one Talos signs service
account tokens with), which takes about a second of CPU to make. A small pool, filled one key at a time
off the event loop while herder is otherwise idle, lets a burst of new clusters start at once. Keys are
made fresh in memory, handed out once, and never kept on disk.

"Otherwise idle" is the kernel's to decide: the pool's thread runs at the lowest priority (nice 19), so
refilling it after a burst takes only CPU that the clusters of the burst, and the rest of the machine,
leave unused. A key asked for while the pool is empty is made at once, at normal priority."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import Gauge

from herder.talos import pki
from herder.talos.pki import KeyType

log = logging.getLogger(__name__)

SPARE_KEYS = Gauge("herder_spare_keys", "RSA keys made ahead for new clusters' secrets, ready to use")


def _lowest_priority() -> None:
    # On Linux a thread's nice value is its own (PRIO_PROCESS with its thread id).
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class KeyPool:
    def __init__(self, size: int, key_type: KeyType = KeyType.RSA_4096) -> None:
        self.size = size
        self.key_type = key_type
        self._ready: list[pki.PrivateKey] = []
        self._filler: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._maker: ThreadPoolExecutor | None = None

    @property
    def ready(self) -> int:
        return len(self._ready)

    def start(self) -> None:
        if self._filler is None and self.size > 0:
            self._filler = asyncio.create_task(self._fill(), name="key-pool")

    async def stop(self) -> None:
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
            self._filler = None
        if self._maker is not None:
            self._maker.shutdown(wait=False, cancel_futures=True)
            self._maker = None

    async def take(self) -> pki.PrivateKey:
        """A key never handed out before: a ready one, else one made now. The pool starts filling once
        a key was asked for (a server that makes no clusters makes no keys), after this one is made."""
        if self._ready:
            key = self._ready.pop()
            SPARE_KEYS.set(len(self._ready))
            self._wake.set()
            return key
        key = await asyncio.to_thread(pki.generate_private_key, self.key_type)
        self.start()
        return key

    async def _fill(self) -> None:
        if self._maker is None:
            self._maker = ThreadPoolExecutor(1, "spare-keys", initializer=_lowest_priority)
        loop = asyncio.get_running_loop()
        while True:
            while len(self._ready) < self.size:
                key = await loop.run_in_executor(self._maker, pki.generate_private_key, self.key_type)
                self._ready.append(key)
                SPARE_KEYS.set(len(self._ready))
            self._wake.clear()
            await self._wake.wait()
