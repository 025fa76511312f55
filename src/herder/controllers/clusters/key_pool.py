"""RSA keys made ahead of need: each cluster's secrets hold an RSA-4096 key (the one Talos signs service
account tokens with), which takes about a second of CPU to make. A small pool, filled one key at a time
off the event loop while herder is otherwise idle, lets a burst of new clusters start at once. Keys are
made fresh in memory, handed out once, and never kept on disk."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from herder.talos import pki
from herder.talos.pki import KeyType

log = logging.getLogger(__name__)


class KeyPool:
    def __init__(self, size: int, key_type: KeyType = KeyType.RSA_4096) -> None:
        self.size = size
        self.key_type = key_type
        self._ready: list[pki.PrivateKey] = []
        self._filler: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

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

    async def take(self) -> pki.PrivateKey:
        """A key never handed out before: a ready one, else one made now. The pool starts filling once
        a key was asked for (a server that makes no clusters makes no keys), after this one is made."""
        if self._ready:
            key = self._ready.pop()
            self._wake.set()
            return key
        key = await asyncio.to_thread(pki.generate_private_key, self.key_type)
        self.start()
        return key

    async def _fill(self) -> None:
        while True:
            while len(self._ready) < self.size:
                self._ready.append(await asyncio.to_thread(pki.generate_private_key, self.key_type))
            self._wake.clear()
            await self._wake.wait()
