"""MachineLink and a joined machine's tunnel: while the machine's SideroLink says its tunnel carries nothing,
the Machine is Connected=False at once with why and the last handshake (a stream through a dead tunnel
neither fails nor ends by itself), and nothing is dialled; once the tunnel is back the link connects again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.machine_link import MachineLinkController
from herder.resources.status import set_condition
from herder.runtime.controller import ObjectKey
from herder.talos.machine import Unavailable
from herder.talos.machine.pool import ClientPool
from tests.controllers.site import Site, obj

UUID = "5b1c7e1a-90d4-4c1e-8b61-0d7f5c3a2e11"
KEY = ObjectKey("Machine", "default", UUID)
ENDPOINT = "[fdae:41e4:649b:9303::2a]:50000"
DOWN = "no WireGuard packet from the machine for 95s; last handshake at 2026-12-02T03:50:08Z"


async def _tunnel(site: Site, up: bool) -> None:
    link = await site.get("SideroLink", UUID)
    assert link is not None
    conditions = set_condition(
        [], "Connected", up, "Handshaking" if up else "HandshakeStale", "" if up else DOWN
    )
    await site.set_status(link, lastHandshake="2026-12-02T03:50:08Z", conditions=conditions)


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll: the link writes from its own task, which tells nobody when it did."""
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {check.__name__}")


async def test_a_dead_tunnel_disconnects_the_machine_at_once_and_a_live_one_reconnects(site: Site) -> None:
    await site.create(obj("Machine", UUID, spec={"endpoint": ENDPOINT}))
    await site.create(
        obj(
            "SideroLink",
            UUID,
            spec={"nodePublicKey": "k" * 43 + "=", "nodeAddress": "fdae:41e4:649b:9303::2a/64"},
        )
    )
    await _tunnel(site, False)
    site.machines.fail("version", Unavailable("unreachable"))
    controller = MachineLinkController(
        ClusterKeys(site.store), clients=ClientPool(dialer=site.machines, keep=0)
    )
    try:
        await site.reconcile(controller, KEY)

        async def disconnected() -> bool:
            status = await site.status("Machine", UUID)
            return any(c["type"] == "Connected" for c in status.get("conditions", []))

        await _until(disconnected)
        status = await site.status("Machine", UUID)
        (connected,) = [c for c in status["conditions"] if c["type"] == "Connected"]
        assert (connected["status"], connected["reason"]) == ("False", "Unreachable")
        assert connected["message"] == f"SideroLink tunnel down: {DOWN}"
        assert status["stage"] == "Unreachable" and not site.machines.calls
        await _tunnel(site, True)
        await site.reconcile(controller, KEY)

        async def dialled() -> bool:
            return bool(site.machines.made("version"))

        await _until(dialled)
        (call, *_) = site.machines.made("version")
        assert call.endpoint == ENDPOINT
    finally:
        await controller.shutdown()
