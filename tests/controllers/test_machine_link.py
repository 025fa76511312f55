"""MachineLink's safety net: a machine's status stream that stops telling while a passing stage stands is
read afresh on a new connection, and the metric counts whether that repaired something."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from prometheus_client import REGISTRY

from herder.controllers.clusters.machine_link import MachineLinkController
from herder.runtime.controller import ObjectKey
from herder.talos.machine import MachineAPIError, MachineStage, Unauthenticated
from herder.talos.machine.pool import ClientPool
from herder.talos.machine.resources import (
    MACHINE_STATUS,
    RUNTIME,
    MachineStatusSpec,
    ResourceEvent,
    ResourceEventType,
    ResourceMetadata,
    TalosResource,
)
from tests.controllers.fleet import Fleet
from tests.controllers.site import Call, Site, Stream


def _status(stage: MachineStage) -> ResourceEvent:
    spec = MachineStatusSpec.of(stage, ready=True)
    resource = TalosResource(
        ResourceMetadata(RUNTIME, MACHINE_STATUS, "machine"), spec.model_dump(mode="json", by_alias=True)
    )
    return ResourceEvent(ResourceEventType.CREATED, resource)


def _stalling_streams(stages: list[MachineStage]) -> Stream:
    """Each connection's stream tells one stage of ``stages`` in turn, then nothing more, never ending: a
    stream that stopped telling."""

    async def events(_: Call) -> AsyncIterator[Any]:
        yield _status(stages.pop(0) if len(stages) > 1 else stages[0])
        await asyncio.Event().wait()

    return Stream(events)


async def _stage_becomes(site: Site, uuid: str, wanted: str) -> None:
    for _ in range(100):
        if (await site.status("Machine", uuid)).get("stage") == wanted:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{uuid} stayed {(await site.status('Machine', uuid)).get('stage')}")


def _resyncs(outcome: str) -> float:
    return REGISTRY.get_sample_value("herder_machine_link_resyncs_total", {"outcome": outcome}) or 0.0


async def test_a_stalled_stream_is_read_afresh_and_the_repair_counted(site: Site) -> None:
    fleet = Fleet(site)
    machine = await fleet.machine("m1", stage="Booting")
    site.machines.answer("version", SimpleNamespace(tag="v1.13.0"))
    site.machines.fail("system_information", MachineAPIError("not answered here"))
    site.machines.answer("watch_resources", _stalling_streams([MachineStage.BOOTING, MachineStage.RUNNING]))
    controller = MachineLinkController(
        fleet.keys, resync_after=0.4, clients=ClientPool(dialer=site.machines, keep=0)
    )
    repaired = _resyncs("repaired")
    try:
        await site.reconcile(controller, ObjectKey.of(machine))
        await _stage_becomes(site, "m1", "Running")
        assert _resyncs("repaired") == repaired + 1
        assert len(site.machines.made("watch_resources")) == 2
        # Running is no passing stage: a silent stream then is a quiet machine, not a stalled one.
        await asyncio.sleep(0.8)
        assert len(site.machines.made("watch_resources")) == 2
    finally:
        await controller.shutdown()


async def test_a_passing_stage_that_stands_is_read_afresh_and_counted_unchanged(site: Site) -> None:
    fleet = Fleet(site)
    machine = await fleet.machine("m1", stage="Booting")
    site.machines.answer("version", SimpleNamespace(tag="v1.13.0"))
    site.machines.fail("system_information", MachineAPIError("not answered here"))
    site.machines.answer("watch_resources", _stalling_streams([MachineStage.BOOTING]))
    controller = MachineLinkController(
        fleet.keys, resync_after=0.4, clients=ClientPool(dialer=site.machines, keep=0)
    )
    unchanged = _resyncs("unchanged")
    try:
        await site.reconcile(controller, ObjectKey.of(machine))
        for _ in range(100):
            if _resyncs("unchanged") > unchanged:
                break
            await asyncio.sleep(0.05)
        assert _resyncs("unchanged") > unchanged
        assert (await site.status("Machine", "m1"))["stage"] == "Booting"
    finally:
        await controller.shutdown()


async def test_a_configured_member_whose_secrets_come_later_is_reached_with_herders_certificate(
    site: Site,
) -> None:
    # An imported cluster's machines run their configs before herder has the cluster's secrets.
    fleet = Fleet(site)
    cluster = await fleet.cluster(secrets=False)
    machine = await fleet.machine("m1", connected=False, stage="Unknown")

    def version(call: Call) -> Any:
        if not call.secure:
            raise Unauthenticated("TLS with 127.0.9.1:50000 failed: TLSV13_ALERT_CERTIFICATE_REQUIRED")
        return SimpleNamespace(tag="v1.13.0")

    site.machines.answer("version", version)
    site.machines.fail("system_information", MachineAPIError("not answered here"))
    site.machines.answer("watch_resources", _stalling_streams([MachineStage.RUNNING]))
    controller = MachineLinkController(fleet.keys, clients=ClientPool(dialer=site.machines, keep=0))
    try:
        await site.reconcile(controller, ObjectKey.of(machine))
        member = await fleet.member("m1")
        # A new member is news to its machine's link, and so are its cluster's secrets when they come.
        assert await site.show(controller, member) == [ObjectKey.of(machine)]
        await site.reconcile(controller, ObjectKey.of(machine))
        secrets = await site.cluster_secrets(cluster)
        assert await site.show(controller, secrets) == [ObjectKey.of(machine)]
        await site.reconcile(controller, ObjectKey.of(machine))
        await _stage_becomes(site, "m1", "Running")
        status = await site.status("Machine", "m1")
        assert status["connected"] is True and status["maintenance"] is False
        assert site.machines.made("version")[-1].secure
    finally:
        await controller.shutdown()


async def test_a_machine_its_provider_powered_off_is_powered_off_as_soon_as_it_stops_answering(
    site: Site,
) -> None:
    """No grace to wait out for a machine that is off by its provider's word; one that should answer gets
    it (it may be rebooting)."""
    fleet = Fleet(site)
    await fleet.machine("off", power={"on": False})
    await fleet.machine("on", power={"on": True})
    site.machines.fail("version", OSError("connection refused"))
    controller = MachineLinkController(
        fleet.keys, unreachable_after=60, clients=ClientPool(dialer=site.machines, keep=0)
    )
    try:
        for uuid in ("off", "on"):
            await site.reconcile(controller, ObjectKey("Machine", "default", uuid))
        await _stage_becomes(site, "off", "PoweredOff")
        assert (await site.status("Machine", "off"))["connected"] is False
        assert (await site.status("Machine", "on"))["stage"] == "Running"
    finally:
        await controller.shutdown()


async def test_a_reconnect_of_herders_own_keeps_when_the_machine_was_reached(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    machine = await fleet.machine("m1", connected=False, stage="Unknown")
    site.machines.answer("version", SimpleNamespace(tag="v1.13.0"))
    site.machines.fail("system_information", MachineAPIError("not answered here"))
    site.machines.answer("watch_resources", _stalling_streams([MachineStage.MAINTENANCE]))
    controller = MachineLinkController(fleet.keys, clients=ClientPool(dialer=site.machines, keep=0))
    try:
        await site.reconcile(controller, ObjectKey.of(machine))
        await _stage_becomes(site, "m1", "Maintenance")
        reached = (await site.status("Machine", "m1"))["connectedAt"]
        written = (await site.get("Machine", "m1")).metadata.resource_version  # type: ignore[union-attr]
        site.clock.advance(5)
        await fleet.member("m1")  # herder's credentials for it: the link connects again
        await site.reconcile(controller, ObjectKey.of(machine))
        for _ in range(100):
            if len(site.machines.made("watch_resources")) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(site.machines.made("watch_resources")) == 2
        for _ in range(60):  # what the new connection reports comes a moment after it
            if (await site.status("Machine", "m1"))["connectedAt"] != reached:
                break
            await asyncio.sleep(0.05)
        # Not a boot: nothing the machine's status tells changed, and nothing is written.
        assert (await site.status("Machine", "m1"))["connectedAt"] == reached
        assert (await site.get("Machine", "m1")).metadata.resource_version == written  # type: ignore[union-attr]
    finally:
        await controller.shutdown()
