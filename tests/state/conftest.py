"""Backends for the conformance suite: every test taking ``store`` runs on each of them.

etcd runs use real etcd members started on free loopback ports: one single member, and a 3-member
cluster with one member killed (the suite must pass on a degraded cluster too).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.backend import Backend
from herder.state.encryption import Cipher
from herder.state.memory import MemoryBackend
from herder.state.sqlite import SQLiteBackend
from herder.state.store import Store

KEY = bytes(range(32))


@dataclass
class Harness:
    store: Store
    backend: Backend
    # The raw bytes every stored value holds, for the encryption-at-rest check.
    raw_values: Callable[[], Awaitable[list[bytes]]]


def _etcd_cluster(members: int, kill_one: bool) -> Iterator[list[str]]:
    from herder.state.etcd_process import EtcdCluster, etcd_available

    if not etcd_available():
        pytest.skip("the etcd binary is not installed (make test installs Debian's etcd-server)")
    with EtcdCluster(members=members) as cluster:
        if kill_one:
            cluster.kill(members - 1)
        yield cluster.endpoints[: members - 1] if kill_one else cluster.endpoints


@pytest.fixture(scope="session")
def etcd_single() -> Iterator[list[str]]:
    yield from _etcd_cluster(1, kill_one=False)


@pytest.fixture(scope="session")
def etcd_degraded() -> Iterator[list[str]]:
    yield from _etcd_cluster(3, kill_one=True)


def _stored_values(backend: Backend) -> Callable[[], Awaitable[list[bytes]]]:
    async def values() -> list[bytes]:
        return [kv.value for kv in (await backend.range("/"))[0]]

    return values


async def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    backend = MemoryBackend(history=1000)

    return Harness(Store(backend, herder_registry(), cipher=Cipher(KEY)), backend, _stored_values(backend))


async def _sqlite(tmp_path: Path, request: pytest.FixtureRequest, *, inline: bool = True) -> Harness:
    path = tmp_path / "herder.db"
    backend = await SQLiteBackend(path, inline_commit_budget=1.0 if inline else 0.0).open()

    async def raw() -> list[bytes]:
        # The database file and its write-ahead log, as they lie on disk.
        return [path.read_bytes() + Path(f"{path}-wal").read_bytes()]

    return Harness(Store(backend, herder_registry(), cipher=Cipher(KEY)), backend, raw)


async def _sqlite_threaded(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    """Commits in the writer thread, as on a disk too slow to commit on the event loop."""
    return await _sqlite(tmp_path, request, inline=False)


async def _etcd(endpoints: list[str]) -> Harness:
    from herder.state.etcd import EtcdBackend

    backend = await EtcdBackend(endpoints, prefix=f"/t-{uuid.uuid4().hex[:8]}").open()

    return Harness(Store(backend, herder_registry(), cipher=Cipher(KEY)), backend, _stored_values(backend))


async def _etcd_single(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    return await _etcd(request.getfixturevalue("etcd_single"))


async def _etcd_degraded(tmp_path: Path, request: pytest.FixtureRequest) -> Harness:
    return await _etcd(request.getfixturevalue("etcd_degraded"))


BACKENDS = {
    "memory": _memory,
    "sqlite": _sqlite,
    "sqlite-threaded-commits": _sqlite_threaded,
    "etcd": pytest.param(_etcd_single, marks=pytest.mark.etcd),
    "etcd-3-members-one-killed": pytest.param(_etcd_degraded, marks=pytest.mark.etcd),
}


@pytest.fixture(params=list(BACKENDS.values()), ids=list(BACKENDS))
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    h: Harness = await request.param(tmp_path, request)
    await h.store.start()
    await h.store.create(ns("default"))
    try:
        yield h
    finally:
        await h.store.close()


@pytest.fixture
def store(harness: Harness) -> Store:
    return harness.store


def ns(name: str) -> Resource:
    return Resource.model_validate({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def patch(name: str, data: str = "machine: {}", namespace: str = "default", **meta: object) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": {"data": data},
        }
    )
