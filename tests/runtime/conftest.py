"""What the runtime's tests share: an in-memory store with the default namespace, and a real etcd (one per
module, started on loopback ports) with a backend on a key prefix of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from herder.resources.catalog import herder_registry
from herder.state.etcd import EtcdBackend
from herder.state.etcd_process import EtcdCluster, etcd_available
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from tests.state.conftest import ns


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    s = await Store(MemoryBackend(), herder_registry()).start()
    await s.create(ns("default"))
    yield s
    await s.close()


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdCluster]:
    if not etcd_available():
        pytest.skip("the etcd binary is not installed (make test installs Debian's etcd-server)")
    with EtcdCluster(1) as cluster:
        yield cluster


@pytest.fixture
async def backend(etcd: EtcdCluster) -> AsyncIterator[EtcdBackend]:
    b = await EtcdBackend(etcd.endpoints, prefix=f"/t-{uuid.uuid4().hex[:8]}").open()
    try:
        yield b
    finally:
        await b.close()
