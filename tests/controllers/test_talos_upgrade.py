"""TalosUpgrade's decisions: a running machine whose member wants another version is asked once, with the
request recorded first; it is followed until it runs the target, and fails — kept, told, never retried
for that version — when it comes back on the old one, does not go down in time, or stays away."""

from __future__ import annotations

import pytest

from herder.controllers.clusters.talos_upgrade import RETURN_TIMEOUT, TalosUpgradeController
from herder.runtime.controller import ObjectKey
from herder.talos.machine import FailedPrecondition
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import TALOS, Fleet
from tests.controllers.site import Site

KEY = ObjectKey("ClusterMachine", "default", "m1")
TARGET = "v1.13.2"
START_TIMEOUT = 120.0


def controller(site: Site, fleet: Fleet) -> TalosUpgradeController:
    return TalosUpgradeController(
        fleet.keys, start_timeout=START_TIMEOUT, clients=ClientPool(dialer=site.machines, keep=0)
    )


async def upgrading(site: Site) -> tuple[Fleet, TalosUpgradeController]:
    """m1 runs TALOS and its member wants TARGET; the upgrade has been asked for."""
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", connectedAt="2025-12-31T23:00:00.000000Z")
    await fleet.member("m1", talos=TARGET, configHash="c1")
    upgrade = controller(site, fleet)
    result = await site.reconcile(upgrade, KEY)
    assert result is not None and result.requeue_after == START_TIMEOUT
    return fleet, upgrade


async def upgrade_status(site: Site) -> dict[str, str] | None:
    return (await site.status("ClusterMachine", "m1")).get("upgrade")


async def test_an_upgrade_is_recorded_then_asked_for_once(site: Site) -> None:
    fleet, upgrade = await upgrading(site)
    (call,) = site.machines.made("upgrade")
    assert call.endpoint == fleet.endpoint("m1") and call.secure
    assert call.args[0].endswith(f":{TARGET}")
    assert await upgrade_status(site) == {
        "target": TARGET,
        "fromVersion": TALOS,
        "requestedAt": "2026-01-01T00:00:00.000000Z",
        "error": "",
    }
    site.clock.advance(5)
    assert await site.reconcile(upgrade, KEY) is not None  # followed, not asked again
    assert len(site.machines.made("upgrade")) == 1


async def test_a_machine_back_on_the_target_is_upgraded(site: Site) -> None:
    _, upgrade = await upgrading(site)
    machine = await site.get("Machine", "m1")
    assert machine is not None
    await site.set_status(machine, talosVersion=TARGET, connectedAt="2026-01-01T00:01:00.000000Z")
    assert await site.reconcile(upgrade, KEY) is None
    assert await upgrade_status(site) is None
    member = await site.get("ClusterMachine", "m1")
    assert ("Normal", "Upgraded", f"Talos {TARGET} runs") in await site.told(member)


@pytest.mark.parametrize(
    ("after", "machine", "error"),
    [
        (
            30,
            {"connectedAt": "2026-01-01T00:00:30.000000Z"},
            f"the machine came back on {TALOS}: the new system did not boot",
        ),
        (START_TIMEOUT + 1, {}, "the machine did not start the upgrade in 121s"),
        (
            RETURN_TIMEOUT + 1,
            {"connected": False, "stage": "Unreachable"},
            "the machine did not come back in 901s",
        ),
    ],
)
async def test_a_failed_upgrade_is_kept_and_not_tried_again(
    site: Site, after: float, machine: dict[str, object], error: str
) -> None:
    _, upgrade = await upgrading(site)
    found = await site.get("Machine", "m1")
    assert found is not None
    await site.set_status(found, **machine)
    site.clock.advance(after)
    assert await site.reconcile(upgrade, KEY) is None
    failed = await upgrade_status(site)
    assert failed is not None and failed["error"] == error
    member = await site.get("ClusterMachine", "m1")
    assert ("Warning", "UpgradeFailed", f"upgrade to {TARGET} failed: {error}") in await site.told(member)
    # Up and on the old version, for as long as the target stays: never asked again.
    await site.set_status(found, connected=True, stage="Running")
    site.clock.advance(3600)
    assert await site.reconcile(upgrade, KEY) is None
    assert len(site.machines.made("upgrade")) == 1


async def test_a_machine_still_down_within_the_timeout_is_followed(site: Site) -> None:
    _, upgrade = await upgrading(site)
    machine = await site.get("Machine", "m1")
    assert machine is not None
    await site.set_status(machine, connected=False, stage="Rebooting")
    site.clock.advance(RETURN_TIMEOUT - 1)
    result = await site.reconcile(upgrade, KEY)
    assert result is not None and result.requeue_after == 10.0
    assert (await upgrade_status(site) or {}).get("error") == ""


async def test_a_refused_upgrade_fails_at_once(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1")
    await fleet.member("m1", talos=TARGET, configHash="c1")
    site.machines.fail("upgrade", FailedPrecondition("an upgrade is in progress"))
    assert await site.reconcile(controller(site, fleet), KEY) is None
    failed = await upgrade_status(site)
    assert failed is not None and failed["error"] == "the upgrade was refused: an upgrade is in progress"


async def test_a_target_set_back_drops_the_pending_upgrade(site: Site) -> None:
    _, upgrade = await upgrading(site)
    member = await site.get("ClusterMachine", "m1")
    assert member is not None
    moved_back = member.clone()
    moved_back.spec = {**(member.spec or {}), "talosVersion": TALOS}
    await site.store.update(moved_back)
    assert await site.reconcile(upgrade, KEY) is None
    assert await upgrade_status(site) is None
    assert len(site.machines.made("upgrade")) == 1


async def test_nothing_starts_before_the_machine_runs_its_config(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("m1", stage="Booting")
    await fleet.member("m1", talos=TARGET, configHash="c1")
    await fleet.machine("m2")
    await fleet.member("m2", talos=TARGET)  # not configured yet: its config installs the target
    upgrade = controller(site, fleet)
    assert await site.reconcile(upgrade, KEY) is None
    assert await site.reconcile(upgrade, ObjectKey("ClusterMachine", "default", "m2")) is None
    assert site.machines.calls == []
