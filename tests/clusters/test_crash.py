"""kill -9 of ``herder serve`` while it forms a cluster: after a restart on the same data directory it
converges to Ready, etcd bootstrapped once, on the machine it chose before the crash, no machine given to
two clusters."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from tests.api.server import running
from tests.clusters.site import Site, cluster, machine_set, running_site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("crash"), 5) as s:
        yield s


def _kill(site: Site) -> None:
    os.kill(site.server.process.pid, signal.SIGKILL)
    site.server.process.wait()


def test_kill_9_while_forming_ends_ready_with_one_bootstrap(site: Site) -> None:
    machines = [m["uuid"] for m in site.machines]
    site.apply(
        [
            cluster("delta"),
            machine_set("delta", "delta-control-planes", "controlplane", machines=machines[:3]),
            machine_set("delta", "delta-workers", "worker", machines=machines[3:]),
        ]
    )
    # First crash: as soon as a machine has been given its config.
    site.until(
        lambda: any((m.get("status") or {}).get("configHash") for m in site.get("clustermachines")["items"]),
        every=0.05,
        what="a config applied",
    )
    _kill(site)
    data_dir = site.server.data_dir
    with running(data_dir, "--cluster-endpoints", site.endpoints) as again:
        site.server = again
        # Second crash: the moment the bootstrap is recorded.
        chosen = site.until(
            lambda: ((site.get("cluster", "delta").get("status") or {}).get("bootstrap") or {}).get(
                "machine"
            ),
            every=0.05,
            what="the bootstrap recorded",
        )
        _kill(site)
    with running(data_dir, "--cluster-endpoints", site.endpoints) as last:
        site.server = last
        site.wait("cluster", "delta", timeout=120)
        status = site.get("cluster", "delta")["status"]
        assert status["bootstrap"]["machine"] == chosen and status["bootstrap"]["completedAt"]
        # What the machines were asked: one Bootstrap, whichever process sent it.
        [emulated] = asyncio.run(site.emulator.control("GET", "/clusters"))
        assert emulated["bootstrapped"] and emulated["bootstrapRequests"] == 1, emulated
        # Told once (none when the kill came between the completion and its Event: Events are told, not kept).
        events = site.get("events", None, "--field-selector", "involvedObject.name=delta,reason=Bootstrapped")
        assert len(events["items"]) <= 1, events["items"]
        assert status["machines"] == {"total": 5, "ready": 5, "wanted": 5}
        owners = {
            m["metadata"]["name"]: m["metadata"]["labels"].get("herder.dev/cluster")
            for m in site.get("machines")["items"]
        }
        assert set(owners.values()) == {"delta"}
