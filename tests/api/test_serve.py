"""``serve`` in-process: background work starts once the server listens and stops with it."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from herder.api.serve import ServeOptions, serve
from herder.state.store import Store
from tests.api.server import free_port


class Work:
    """Background work shaped as the controller manager is: run until stopped."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.running = asyncio.Event()
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        self.running.set()
        await self.stopping.wait()

    def stop(self) -> None:
        self.stopping.set()


async def test_background_runs_beside_the_server_and_stops_with_it(tmp_path: Path) -> None:
    made: list[Work] = []

    def make(store: Store) -> Work:
        made.append(Work(store))
        return made[-1]

    async def ready(store: Store) -> None:
        await made[0].running.wait()
        assert (await store.get("namespaces", "default")).status == {"phase": "Active"}
        os.kill(os.getpid(), signal.SIGTERM)

    options = ServeOptions(data_dir=tmp_path, listen=f"127.0.0.1:{free_port()}", state="memory://")
    await asyncio.wait_for(serve(options, background=[make], ready=ready), 30)
    assert made[0].stopping.is_set()
    assert (tmp_path / "admin.kubeconfig").exists()
