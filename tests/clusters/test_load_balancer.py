"""The load balancer controller on the in-memory store: a cluster without ``spec.endpoint`` gets the lowest
port of the range that it can listen on (one another process holds is skipped, since no config carries it
yet), and keeps it."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from herder.controllers.clusters.load_balancer import EndpointRange, LoadBalancerController
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.runtime.manager import Manager
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from tests.state.conftest import ns


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    s = await Store(MemoryBackend(), herder_registry()).start()
    await s.create(ns("default"))
    yield s
    await s.close()


def _cluster(name: str) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"},
        }
    )


async def _status(store: Store, name: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            status = (await store.get("Cluster", name, "default")).status or {}
            ready = [c for c in status.get("conditions") or () if c["type"] == "EndpointReady"]
            if ready and ready[0]["status"] == "True":
                return status
            await asyncio.sleep(0.05)


async def test_a_port_another_process_holds_is_skipped(store: Store) -> None:
    first = random.randrange(20000, 30000, 10)
    endpoints = EndpointRange("127.0.0.1", first, first + 9)
    manager = Manager(store, [LoadBalancerController(endpoints)])
    running = asyncio.create_task(manager.run())
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", first))
        other.listen()
        try:
            await store.create(_cluster("alpha"))
            assert (await _status(store, "alpha"))["endpoint"] == f"https://127.0.0.1:{first + 1}"
            await store.create(_cluster("beta"))
            assert (await _status(store, "beta"))["endpoint"] == f"https://127.0.0.1:{first + 2}"
        finally:
            manager.stop()
            await running
