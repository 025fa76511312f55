"""MachineLogs' following of a fake machine: every log it has is kept, redacted; a restart of herder or a
new connection reads the backlog again and keeps nothing twice; a reboot's new lines follow the old ones;
a machine no longer connected is no longer followed, and its logs stay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from herder.controllers.catalog import ControllerOptions, controllers, replica_controllers
from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.machine_link import MachineLinkController
from herder.controllers.observability.machine_logs import MachineLogController, after_known
from herder.resources.catalog import herder_registry
from herder.runtime.controller import ObjectKey
from herder.state.machine_logs import KERNEL, LogScope, MachineLogs
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from herder.talos.machine.pool import ClientPool
from herder.talos.machine.types import ServiceStatus
from herder.talos.secrets import load_secrets
from tests.controllers.site import Site, obj, secrets_bundle

UUID = "m1"
ENDPOINT = "127.0.0.9:50000"


def everything(_scope: LogScope) -> bool:
    return True


@pytest.fixture
def site(sealed_site: Site) -> Site:
    return sealed_site  # the cluster's secrets are sealed


class FakeMachine:
    """A machine's logs as machined keeps them: a buffer per service and the kernel's, followed by its
    clients until it reboots (which ends their streams and starts every buffer afresh)."""

    def __init__(self) -> None:
        self.buffers: dict[str, list[str]] = {"kubelet": [], "etcd": [], KERNEL: []}
        self.followers: dict[str, list[asyncio.Queue[str | None]]] = {}
        self.dialed = 0
        self.open = 0

    def say(self, source: str, *lines: str) -> None:
        for line in lines:
            self.buffers[source].append(line)
            for queue in self.followers.get(source, []):
                queue.put_nowait(line)

    def reboot(self) -> None:
        for queues in self.followers.values():
            for queue in queues:
                queue.put_nowait(None)
        self.followers.clear()
        self.buffers = {name: [] for name in self.buffers}

    async def follow(self, source: str) -> AsyncIterator[str]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.followers.setdefault(source, []).append(queue)
        for line in list(self.buffers[source]):
            yield line
        while (line := await queue.get()) is not None:
            yield line

    def dialer(self, endpoint: str, *, credentials: Any, **options: Any) -> FakeClient:
        assert endpoint == ENDPOINT and credentials is not None
        self.dialed += 1
        return FakeClient(self)


class FakeClient:
    def __init__(self, machine: FakeMachine) -> None:
        self.machine = machine

    async def __aenter__(self) -> FakeClient:
        self.machine.open += 1
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.machine.open -= 1

    async def service_list(self) -> list[ServiceStatus]:
        return [
            ServiceStatus(id=n, state="Running", healthy=True, health_unknown=False, last_message="")
            for n in self.machine.buffers
            if n != KERNEL
        ]

    async def logs(self, id: str, *, follow: bool, tail: int) -> AsyncIterator[bytes]:
        async for line in self.machine.follow(id):
            # Talos sends a log's bytes in chunks, not line by line.
            data = (line + "\n").encode()
            yield data[:3]
            yield data[3:]

    async def dmesg(self, *, follow: bool) -> AsyncIterator[str]:
        async for line in self.machine.follow(KERNEL):
            yield line


async def until(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def machine_in_cluster(site: Site) -> ObjectKey:
    (cluster,) = await site.create(
        obj("Cluster", "alpha", spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"})
    )
    await site.cluster_secrets(cluster)
    labels = {"herder.dev/cluster": "alpha"}
    (member,) = await site.create(
        obj(
            "ClusterMachine",
            UUID,
            spec={"role": "controlplane", "talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"},
            metadata={"labels": labels},
        )
    )
    await site.set_status(member, configHash="abc")
    (machine,) = await site.create(
        obj("Machine", UUID, spec={"endpoint": ENDPOINT}, metadata={"labels": labels})
    )
    await site.set_status(machine, connected=True, stage="Running")
    return ObjectKey.of(machine)


def texts(logs: MachineLogs, source: str) -> list[str]:
    return [e.text for e in logs.entries("default", UUID, allowed=everything, sources=[source])]


async def test_every_log_is_kept_once_across_restarts_and_reboots(site: Site, tmp_path: Path) -> None:
    fake = FakeMachine()
    token = load_secrets(secrets_bundle("1.13"), check_keys=False).trustd_token
    fake.say("kubelet", "registered node", f"joining with {token}")
    fake.say(KERNEL, "Linux version 6.12", "[talos] config applied")
    key = await machine_in_cluster(site)

    logs = MachineLogs(tmp_path)
    controller = MachineLogController(logs, ClusterKeys(site.store), clients=ClientPool(dialer=fake.dialer))
    await site.reconcile(controller, key)
    await until(lambda: len(texts(logs, "kubelet")) == 2 and len(texts(logs, KERNEL)) == 2)
    assert texts(logs, "kubelet") == ["registered node", "joining with <redacted>"]
    fake.say("etcd", "member joined")
    await until(lambda: texts(logs, "etcd") == ["member joined"])
    await controller.shutdown()
    assert fake.open == 0

    # A restart: the machine still holds what was kept, and says more meanwhile.
    fake.say("kubelet", "said while herder was away")
    logs = MachineLogs(tmp_path)
    controller = MachineLogController(logs, ClusterKeys(site.store), clients=ClientPool(dialer=fake.dialer))
    await site.reconcile(controller, key)
    await until(lambda: "said while herder was away" in texts(logs, "kubelet"))
    fake.say("kubelet", "live again")
    await until(lambda: "live again" in texts(logs, "kubelet"))
    assert texts(logs, "kubelet") == [
        "registered node",
        "joining with <redacted>",
        "said while herder was away",
        "live again",
    ]
    assert texts(logs, KERNEL) == ["Linux version 6.12", "[talos] config applied"]

    # A reboot: the streams end, the new boot's lines follow the old ones.
    fake.reboot()
    fake.say(KERNEL, "Linux version 6.12")  # the same words, of a new boot
    fake.say("kubelet", "registered node")
    await until(lambda: len(texts(logs, KERNEL)) == 3, timeout=15)
    await until(
        lambda: texts(logs, "kubelet")[-1:] == ["registered node"] and len(texts(logs, "kubelet")) == 5
    )
    assert texts(logs, KERNEL) == ["Linux version 6.12", "[talos] config applied", "Linux version 6.12"]

    # No longer connected: no longer followed; what was kept stays.
    machine = await site.get("Machine", UUID)
    assert machine is not None
    await site.set_status(machine, connected=False, stage="Unreachable")
    await site.reconcile(controller, key)
    assert fake.open == 0
    assert len(texts(logs, "kubelet")) == 5
    assert logs.scopes("default", UUID) == [LogScope("default", "alpha")]
    await controller.shutdown()


async def test_a_machine_in_maintenance_or_without_its_config_is_not_followed(
    site: Site, tmp_path: Path
) -> None:
    fake = FakeMachine()
    key = await machine_in_cluster(site)
    member = await site.get("ClusterMachine", UUID)
    assert member is not None
    await site.set_status(member, configHash="")
    controller = MachineLogController(
        MachineLogs(tmp_path), ClusterKeys(site.store), clients=ClientPool(dialer=fake.dialer)
    )
    await site.reconcile(controller, key)
    await asyncio.sleep(0.1)
    assert fake.dialed == 0
    await controller.shutdown()


def test_a_backlog_is_kept_from_after_its_last_run_of_known_lines() -> None:
    assert after_known(["a", "b", "c", "d"], ["b", "c"]) == ["d"]
    assert after_known(["a", "b", "a", "b", "e"], ["a", "b"]) == ["e"]  # its last run
    assert after_known(["x", "y"], ["b", "c"]) == ["x", "y"]  # a new boot: all of it
    assert after_known(["a"], []) == ["a"]


async def test_a_replicas_log_follower_uses_the_keys_of_the_leaders_controllers(tmp_path: Path) -> None:
    """One client certificate per cluster in the process: the machine link's status stream and the log
    follower of a machine share its one connection (keyed by endpoint and certificate)."""
    store = await Store(MemoryBackend(), herder_registry()).start()
    try:
        options = ControllerOptions()
        link = next(c for c in controllers(store, options) if isinstance(c, MachineLinkController))
        (follower,) = replica_controllers(store, options, MachineLogs(tmp_path))
        assert isinstance(follower, MachineLogController)
        assert link._keys is follower._keys is ClusterKeys.shared(store)
    finally:
        await store.close()
