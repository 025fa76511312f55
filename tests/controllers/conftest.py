"""Controller unit tests run on the in-memory store (see ``site``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from herder.controllers.catalog import register_admission
from herder.resources.catalog import herder_registry
from herder.state.encryption import Cipher
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from tests.controllers.site import NAMESPACE, Site, obj
from tests.controllers.workload import Workload, workload


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    made = await Site.start()
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def sealed_site() -> AsyncIterator[Site]:
    """A site whose store keeps sensitive kinds (sealed with a key of its own): clusters' secrets."""
    store = Store(MemoryBackend(), herder_registry(), cipher=Cipher(os.urandom(32)))
    register_admission(store)
    await store.start()
    await store.create(obj("Namespace", NAMESPACE, namespaced=False, api_version="v1"))
    made = Site(store)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def cluster_api() -> AsyncIterator[Workload]:
    """A workload cluster's Kubernetes API, in process (see ``workload``)."""
    async with workload() as made:
        yield made
