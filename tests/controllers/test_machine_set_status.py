"""MachineSetStatus's verdicts: machines total, ready and wanted (its list, its class's size, its request
set's count), its phase, and a Ready condition naming what it waits for — machines it cannot get, more
to allocate, machines leaving, the first machine that is not ready (and why, when it is a fault)."""

from __future__ import annotations

import asyncio
from typing import Any

from herder.controllers.clusters.machine_set_allocation import MachineSetAllocationController
from herder.controllers.clusters.machine_set_status import MachineSetStatusController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from herder.state.store import WatchEvent
from tests.controllers.fleet import Fleet, ready
from tests.controllers.site import Site, eventually, obj

KEY = ObjectKey("MachineSet", "default", "workers")


async def verdict(site: Site) -> tuple[str, dict[str, Any], tuple[bool, str, str]]:
    await site.reconcile(MachineSetStatusController(), KEY)
    status = await site.status("MachineSet", "workers")
    (condition,) = status["conditions"]
    return (
        status["phase"],
        status["machines"],
        (condition["status"] == "True", condition["reason"], condition["message"]),
    )


async def listed(site: Site, *uuids: str) -> Fleet:
    """A worker set listing ``uuids``, each registered."""
    fleet = Fleet(site)
    await fleet.cluster()
    for uuid in uuids:
        await fleet.machine(uuid)
    await fleet.machine_set("workers", machines=list(uuids))
    return fleet


async def test_a_set_whose_machines_are_all_ready_is_ready(site: Site) -> None:
    fleet = await listed(site, "w1", "w2")
    for uuid in ("w1", "w2"):
        await fleet.member(uuid, ready=True)
    assert await verdict(site) == (
        "Running",
        {"total": 2, "ready": 2, "wanted": 2},
        (True, "Ready", "2/2 machines ready"),
    )


async def test_the_first_machine_not_ready_is_named_with_its_reason(site: Site) -> None:
    fleet = await listed(site, "w1", "w2")
    await fleet.member("w1", ready=True)
    await fleet.member("w2", conditions=[ready("Ready", False, "Unreachable", "machine is unreachable")])
    assert await verdict(site) == (
        "Running",
        {"total": 2, "ready": 1, "wanted": 2},
        (False, "MachinesNotReady", "1/2 ready; w2: machine is unreachable"),
    )


async def test_a_fault_is_named_before_a_machine_on_its_way_and_steps_are_no_writes(site: Site) -> None:
    fleet = await listed(site, "w1", "w2", "w3")
    await fleet.member("w1", ready=True)
    w2 = await fleet.member("w2", conditions=[ready("Ready", False, "NotRunning", "machine is maintenance")])
    w3 = await fleet.member("w3")  # no verdict yet: its config is being made
    on_its_way = "1/3 ready; w2: on its way (its ClusterMachine's Ready condition says how far)"
    assert (await verdict(site))[2] == (False, "MachinesNotReady", on_its_way)
    written = (await site.get("MachineSet", "workers")).metadata.resource_version  # type: ignore[union-attr]
    await site.set_status(w2, conditions=[ready("Ready", False, "NotRunning", "machine is booting")])
    assert (await verdict(site))[2] == (False, "MachinesNotReady", on_its_way)
    assert (await site.get("MachineSet", "workers")).metadata.resource_version == written  # type: ignore[union-attr]
    await site.set_status(w3, conditions=[ready("Ready", False, "ApplyFailed", "connection refused")])
    assert (await verdict(site))[2] == (False, "MachinesNotReady", "1/3 ready; w3: connection refused")


async def test_machines_the_set_cannot_get_come_first(site: Site) -> None:
    fleet = await listed(site, "w1", "w2")
    await fleet.member("w1", ready=True)
    workers = await site.get("MachineSet", "workers")
    assert workers is not None
    why = "machine w2 is still being released from cluster beta"
    await site.set_status(workers, allocation={"missing": ["w2"], "reason": why})
    phase, _, condition = await verdict(site)
    assert (phase, condition) == ("ScalingUp", (False, "MachinesMissing", why))
    await site.set_status(workers, allocation=None)
    phase, _, condition = await verdict(site)
    assert (phase, condition) == ("ScalingUp", (False, "ScalingUp", "1/2 machines allocated"))


async def test_a_set_with_machines_leaving_scales_down(site: Site) -> None:
    fleet = await listed(site, "w1")
    await fleet.member("w1", ready=True)
    await fleet.leave(await fleet.member("w2", ready=True))
    assert await verdict(site) == (
        "ScalingDown",
        {"total": 1, "ready": 1, "wanted": 1},
        (False, "ScalingDown", "1 machine(s) leaving"),
    )


async def test_a_set_of_a_request_set_wants_what_it_requests(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await site.create(obj("InfraProvider", "emu", namespaced=False, spec={}))
    await site.create(
        obj(
            "MachineRequestSet",
            "pool",
            spec={"providerID": "emu", "talosVersion": "v1.13.0", "machineCount": 3},
        )
    )
    await fleet.machine_set("workers", machineRequestSet="pool")
    await fleet.member("w1", ready=True)
    phase, machines, condition = await verdict(site)
    assert (phase, machines) == ("ScalingUp", {"total": 1, "ready": 1, "wanted": 3})
    assert condition == (False, "ScalingUp", "1/3 machines allocated")
    # The request set's event reaches the set allocating from it.
    controller = MachineSetStatusController()
    workers = await site.get("MachineSet", "workers")
    pool = await site.get("MachineRequestSet", "pool")
    assert workers is not None and pool is not None
    list(controller.watches[0].map(WatchEvent("ADDED", workers)))
    assert list(controller.watches[1].map(WatchEvent("MODIFIED", pool, pool))) == [KEY]


async def test_a_set_being_deleted_says_how_many_machines_leave(site: Site) -> None:
    fleet = await listed(site, "w1")
    await fleet.leave(await fleet.member("w1", ready=True))
    workers = await site.get("MachineSet", "workers")
    assert workers is not None
    held = workers.clone()
    held.metadata.finalizers = ["test.example/hold"]
    await site.store.update(held)
    await site.store.delete("MachineSet", "workers", "default")
    phase, _, condition = await verdict(site)
    assert (phase, condition) == ("Destroying", (False, "Destroying", "1 machine(s) leaving"))


async def test_a_new_set_short_of_machines_says_why_in_its_first_verdict(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await site.create(obj("MachineClass", "pool", spec={"selector": {"matchLabels": {"pool": "a"}}}))

    def told(machine_set: Resource) -> str | None:
        found = [c for c in (machine_set.status or {}).get("conditions", []) if c["type"] == "Ready"]
        return found[0]["reason"] if found else None

    controllers = (MachineSetAllocationController(), MachineSetStatusController())
    async with site.writes("MachineSet", told) as written, site.running(*controllers):
        await fleet.machine_set("workers", machineClass={"name": "pool", "size": 2})
        await eventually(lambda: "MachinesMissing" in written)
        await asyncio.sleep(1.5)
    # Its summary waits for the allocation's verdict: not "ScalingUp" first, then why, a write each.
    assert [reason for reason in written if reason] == ["MachinesMissing"]
