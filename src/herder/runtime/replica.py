"""Controllers every replica runs, leader or not: those that write nothing to the store and keep what they
learn in their own process or data directory (the machine logs a replica follows), so that each replica
can answer for it. They declare no outputs: a write would raise ``UndeclaredOutput``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from herder.runtime.controller import Controller
from herder.runtime.manager import ControllerRunner
from herder.state.store import Store


class EveryReplica:
    """Runs ``controllers`` from ``run`` until ``stop``, whoever leads."""

    def __init__(
        self, store: Store, controllers: Sequence[Controller], *, shutdown_grace: float = 5.0
    ) -> None:
        for controller in controllers:
            if controller.outputs:
                raise ValueError(
                    f"controller {controller.name} writes to the store: it runs on the leader only"
                )
        self.store = store
        self.controllers = list(controllers)
        self.shutdown_grace = shutdown_grace
        self._stop = asyncio.Event()

    async def run(self) -> None:
        runners = [ControllerRunner(self.store, c) for c in self.controllers]
        for runner in runners:
            runner.start()
        try:
            await self._stop.wait()
        finally:
            await asyncio.gather(*(r.stop(self.shutdown_grace) for r in runners))

    def stop(self) -> None:
        self._stop.set()
