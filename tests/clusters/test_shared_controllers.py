"""Two ``herder serve --shards`` replicas on one etcd share the controllers: both hold shards and form
clusters on the emulator; one is killed (-9) mid-formation, the other takes its shards within 15 s, and
every cluster still becomes Ready with one bootstrap each."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from herder.bench.clusters import Fleet, _shards_held, all_ready, fleet, form
from herder.resources.clusters import CLUSTER
from herder.state.etcd_process import etcd_available

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(
        not etcd_available(),
        reason="the etcd binary is not installed (make test installs Debian's etcd-server)",
    ),
]

CLUSTERS = 6
SHARDS = [str(i) for i in range(8)]


async def _bootstrapping(site: Fleet) -> bool:
    """Whether some cluster's bootstrap has begun (the first control plane was asked to bootstrap)."""
    listed = await site.client.list(CLUSTER)
    return any((c.status or {}).get("bootstrap") for c in listed.items)


async def _why(site: Fleet) -> str:
    """What the clusters say of themselves: for a formation that did not come as far as asked."""
    listed = await site.client.list(CLUSTER)
    return "; ".join(
        f"{c.name}: {[(x.get('type'), x.get('message')) for x in (c.status or {}).get('conditions', [])]}"
        for c in listed.items
    )


async def test_a_replica_killed_mid_formation_leaves_its_shards_to_the_other() -> None:
    async with fleet("herder-test-shards-", CLUSTERS, 180, control_planes=1, workers=1, replicas=2) as site:
        survivor = site.clients[0]
        # Both replicas run controllers, for shards that are not each other's.
        async with asyncio.timeout(30):
            while True:
                held = [await _shards_held(c) for c in site.clients]
                if all(held) and sorted(held[0] + held[1], key=int) == SHARDS:
                    break
                await asyncio.sleep(0.2)
        formation = asyncio.create_task(form(site, CLUSTERS, 180))
        try:
            deadline = time.monotonic() + 150
            while not await _bootstrapping(site):
                if formation.done():
                    formation.result()  # its error
                assert time.monotonic() < deadline, await _why(site)
                await asyncio.sleep(0.1)
            assert not await all_ready(site.client, CLUSTERS)
            process = site.replicas[1].process
            assert process is not None
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            killed = time.monotonic()
            async with asyncio.timeout(20):
                while await _shards_held(survivor) != SHARDS:  # noqa: ASYNC110 - as above
                    await asyncio.sleep(0.2)
            assert time.monotonic() - killed < 15
            await formation
        finally:
            formation.cancel()
        clusters = await site.emulator.control("GET", "/clusters")
        assert len(clusters) == CLUSTERS
        assert {c["name"]: c["bootstrapRequests"] for c in clusters} == {c["name"]: 1 for c in clusters}, (
            clusters
        )
