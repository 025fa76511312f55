"""ClusterMachineReadiness's verdicts: what a member's machine is doing, and why it is not ready — missing,
invalid config, unreachable, its config still to be made and applied or failing to apply, not running, not
in etcd — or ready, an older config included."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from herder.controllers.clusters.cluster_machine_readiness import (
    PENDING_GRACE,
    ClusterMachineReadinessController,
)
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from tests.controllers.fleet import Fleet, ready
from tests.controllers.site import Site, eventually

PENDING = "waiting for the machine's config to be generated and applied"
KEY = ObjectKey("ClusterMachine", "default", "m1")


async def verdict(
    site: Site, readiness: ClusterMachineReadinessController | None = None
) -> tuple[bool, str, str]:
    """The member's verdict, once told (past the grace a new member's config has)."""
    readiness = readiness or ClusterMachineReadinessController()
    result = await site.reconcile(readiness, KEY)
    if result is not None and result.requeue_after is not None:
        site.clock.advance(result.requeue_after)
        await site.reconcile(readiness, KEY)
    status = await site.status("ClusterMachine", "m1")
    (condition,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert status["ready"] == (condition["status"] == "True")
    return status["ready"], condition["reason"], condition["message"]


@pytest.mark.parametrize(
    ("role", "machine", "member", "config", "expected"),
    [
        ("worker", None, {}, "c1", (False, "MachineMissing", "the machine is not registered")),
        (
            "worker",
            {},
            {"conditions": [ready("ConfigValid", False, "InvalidConfig", "patch 1: no such field")]},
            "c1",
            (False, "InvalidConfig", "patch 1: no such field"),
        ),
        ("worker", {}, {}, None, (False, "ConfigPending", PENDING)),
        ("worker", {"stage": "Maintenance"}, {}, "c1", (False, "ConfigPending", PENDING)),
        (
            "worker",
            {"connected": False, "stage": "Unreachable", "lastError": "connection refused"},
            {},
            None,
            (False, "Unreachable", "machine is unreachable: connection refused"),
        ),
        (
            "worker",
            {"stage": "Maintenance"},
            {"apply": {"attempts": 3, "lastError": "refused"}},
            "c1",
            (False, "ApplyFailed", "refused"),
        ),
        (
            "worker",
            {"stage": "Booting"},
            {"configHash": "c1"},
            "c1",
            (False, "NotRunning", "machine is booting"),
        ),
        (
            "controlplane",
            {},
            {"configHash": "c1"},
            "c1",
            (False, "EtcdNotJoined", "waiting for the machine to join etcd"),
        ),
        ("controlplane", {}, {"configHash": "c1", "etcdMember": True}, "c1", (True, "Ready", "")),
        # An older config, failing or not, keeps the machine in service while its new one rolls out.
        (
            "worker",
            {},
            {"configHash": "c1", "apply": {"lastError": "refused"}},
            "c2",
            (False, "ApplyFailed", "refused"),
        ),
        ("worker", {}, {"configHash": "c1"}, "c2", (True, "Ready", "")),
    ],
)
async def test_a_members_readiness_says_what_it_waits_for(
    site: Site,
    role: str,
    machine: dict[str, Any] | None,
    member: dict[str, Any],
    config: str | None,
    expected: tuple[bool, str, str],
) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    if machine is not None:
        await fleet.machine("m1", **machine)
    made = await fleet.member("m1", role, **member)
    if config is not None:
        await fleet.config(made, config)
    assert await verdict(site) == expected


async def test_the_member_shows_its_machines_stage_and_version(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    machine = await fleet.machine("m1", stage="Installing", talos="v1.13.2")
    await fleet.config(await fleet.member("m1", configHash="c1"), "c1")
    assert await verdict(site) == (False, "NotRunning", "machine is installing")
    status = await site.status("ClusterMachine", "m1")
    assert (status["stage"], status["talosVersion"]) == ("Installing", "v1.13.2")
    first = next(c for c in status["conditions"] if c["type"] == "Ready")

    site.clock.advance(30)
    await site.set_status(machine, stage="Running")
    assert await verdict(site) == (True, "Ready", "")
    flipped = next(
        c for c in (await site.status("ClusterMachine", "m1"))["conditions"] if c["type"] == "Ready"
    )
    # Told past the new member's grace (30 s), flipped 30 s later.
    assert (first["lastTransitionTime"], flipped["lastTransitionTime"]) == (
        "2026-01-01T00:00:30Z",
        "2026-01-01T00:01:00Z",
    )


async def test_a_new_member_that_comes_up_at_once_never_says_it_waited(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    machine = await fleet.machine("m1", stage="Maintenance")
    member = await fleet.member("m1")
    readiness = ClusterMachineReadinessController()
    waiting = await site.reconcile(readiness, KEY)
    assert waiting is not None and waiting.requeue_after == PENDING_GRACE
    assert "conditions" not in await site.status("ClusterMachine", "m1")  # nothing written yet
    site.clock.advance(2)
    await fleet.config(member, "c1")
    waiting = await site.reconcile(readiness, KEY)
    assert waiting is not None and waiting.requeue_after == PENDING_GRACE - 2
    await site.set_status(member, configHash="c1")  # applied within the grace
    waiting = await site.reconcile(readiness, KEY)  # its machine installs it: progress, not told yet
    assert waiting is not None and waiting.requeue_after == PENDING_GRACE - 2
    assert not (await site.status("ClusterMachine", "m1")).get("conditions")
    await site.set_status(machine, stage="Running")  # up within the grace: its first word is Ready
    assert await site.reconcile(readiness, KEY) is None
    assert await verdict(site, readiness) == (True, "Ready", "")


async def test_a_new_member_tells_its_progress_past_the_grace_and_a_fault_at_once(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Maintenance")
    member = await fleet.member("m1", configHash="c1")
    await fleet.config(member, "c1")
    readiness = ClusterMachineReadinessController()
    assert await verdict(site, readiness) == (False, "NotRunning", "machine is maintenance")
    await fleet.machine("m2", connected=False, stage="Unreachable", lastError="connection refused")
    await fleet.member("m2")
    assert await site.reconcile(readiness, ObjectKey("ClusterMachine", "default", "m2")) is None
    (told,) = (await site.status("ClusterMachine", "m2"))["conditions"]
    assert (told["reason"], told["message"]) == ("Unreachable", "machine is unreachable: connection refused")
    # A control plane running, not in etcd yet, is told at once: its cluster's bootstrap waits for it.
    await fleet.machine("cp1")
    await fleet.config(await fleet.member("cp1", "controlplane", configHash="c1"), "c1")
    assert await site.reconcile(readiness, ObjectKey("ClusterMachine", "default", "cp1")) is None
    (told,) = (await site.status("ClusterMachine", "cp1"))["conditions"]
    assert told["reason"] == "EtcdNotJoined"


async def test_stages_that_follow_each_other_closely_are_one_write(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    machine = await fleet.machine("m1")
    member = await fleet.member("m1", configHash="c1", ready=True, conditions=[ready("Ready")])
    await fleet.config(member, "c1")

    def stage(member: Resource) -> str:
        return str((member.status or {}).get("stage"))

    async with (
        site.writes("ClusterMachine", stage) as written,
        site.running(ClusterMachineReadinessController()),
    ):
        await eventually(lambda: written == ["Running"])
        for step in ("Upgrading", "Rebooting", "Booting"):  # a machine upgrading
            machine = await site.set_status(machine, stage=step)
            await asyncio.sleep(0.1)
        await eventually(lambda: written[-1:] == ["Booting"])
        await asyncio.sleep(1.5)
    assert written == ["Running", "Booting"]
