"""MachineRequestSet's decisions: grow to its count, count what is provisioned (not a request whose
machine another holds), shrink the requests no cluster uses first, and replace a request that failed."""

from __future__ import annotations

import asyncio
from typing import Any

from herder.controllers.provisioning.machine_request_set import MachineRequestSetController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from tests.controllers.provisioned import bound, condition, provider, reported, request_set, workers
from tests.controllers.site import Site, eventually, names

SET = {"herder.dev/machine-request-set": "pool"}


async def _requests(site: Site) -> list[Resource]:
    listed = await site.store.list(
        "MachineRequest", "default", label_selector="herder.dev/machine-request-set"
    )
    return [r for r in listed.items if not r.metadata.deletion_timestamp]


async def _scale(site: Site, count: int) -> None:
    """The set given a new count, as a user gives it."""
    current = await site.get("MachineRequestSet", "pool")
    assert current is not None
    changed = current.clone()
    changed.spec = {**(changed.spec or {}), "machineCount": count}
    await site.store.update(changed)


async def _set_status(site: Site) -> dict[str, Any]:
    return await site.status("MachineRequestSet", "pool")


async def test_a_set_makes_its_requests_and_counts_them_provisioned(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 2))
    await site.reconcile(controller, ObjectKey.of(pool))
    made = await _requests(site)
    assert len(made) == 2 and all(r.name.startswith("pool-") for r in made)
    for each in made:
        assert each.metadata.labels["herder.dev/machine-request-set"] == "pool"
        # herder's finalizer and the provider's come with the request: no write adds them later.
        assert each.metadata.finalizers == ["herder.dev/machine-release", "herder.dev/infra-provider"]
        assert each.metadata.controller_ref().name == "pool"  # type: ignore[union-attr]
        assert "machineCount" not in (each.spec or {})
        assert await site.show(controller, each) == [ObjectKey.of(pool)]  # its creation wakes the set
    # The requests are counted in the status written with them: waking on them writes nothing more.
    first = await site.get("MachineRequestSet", "pool")
    assert first is not None and (await _set_status(site))["requests"] == 2
    await site.reconcile(controller, ObjectKey.of(pool))
    again = await site.get("MachineRequestSet", "pool")
    assert again is not None and again.metadata.resource_version == first.metadata.resource_version
    status = await _set_status(site)
    assert (status["requests"], status["provisioned"]) == (2, 0)
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Provisioning")
    assert ready["message"].startswith("0/2 provisioned; pool-")
    assert await site.told(pool) == []  # its first requests are its making, which its status counts
    for i, each in enumerate(made):
        await reported(site, each, f"m{i}", f"127.0.0.{i + 2}")
        await site.show(controller, each)
    await site.reconcile(controller, ObjectKey.of(pool))
    status = await _set_status(site)
    assert status["provisioned"] == 2
    assert condition(status, "Ready")["status"] == "True"


async def test_a_request_whose_machine_another_holds_is_not_provisioned(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 2))
    await site.reconcile(controller, ObjectKey.of(pool))
    first, second = sorted(await _requests(site), key=lambda r: r.name)
    await reported(site, first, "m1", "127.0.0.2")
    claimed = await reported(
        site,
        second,
        "m1",
        "127.0.0.2",
        conditions=[
            {
                "type": "Conflict",
                "status": "True",
                "reason": "MachineClaimed",
                "message": f"machine m1 is request {first.name}'s: the provider reported it for both",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    )
    for each in (first, claimed):
        await site.show(controller, each)
    await site.reconcile(controller, ObjectKey.of(pool))
    status = await _set_status(site)
    assert status["provisioned"] == 1
    ready = condition(status, "Ready")
    # Held up by an error, not mere progress: what a machine set allocating from the set tells too.
    assert (ready["status"], ready["reason"]) == ("False", "RequestsFailing")
    assert ready["message"] == (
        f"1/2 provisioned; {second.name}: Provisioned: machine m1 is request {first.name}'s: "
        "the provider reported it for both"
    )


async def test_a_set_shrinks_the_requests_no_machine_set_uses_first(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 3))
    await site.reconcile(controller, ObjectKey.of(pool))
    made = sorted(await _requests(site), key=lambda r: r.name)
    for i, each in enumerate(made):
        await reported(site, each, f"m{i}", f"127.0.0.{i + 2}")
    # The machine of one request is in a cluster: it stays, the other two go.
    await workers(site)
    await bound(site, "m1", "127.0.0.3:50000")
    await _scale(site, 1)
    await site.reconcile(controller, ObjectKey.of(pool))
    assert names(await _requests(site)) == [made[1].name]
    told = [e for e in await site.told(pool) if e[1] == "ScalingDown"]
    assert sorted(told) == sorted(
        ("Normal", "ScalingDown", f"machine request {r.name} deleted") for r in (made[0], made[2])
    )


async def test_a_set_growing_later_tells_the_requests_it_makes(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 1))
    await site.reconcile(controller, ObjectKey.of(pool))
    await _scale(site, 3)
    await site.reconcile(controller, ObjectKey.of(pool))
    (told,) = await site.told(pool)
    assert told[:2] == ("Normal", "Requested") and told[2].startswith("2 machine request(s) created: pool-")


async def test_a_set_shrinks_the_requests_without_a_machine_before_idle_machines(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 3))
    await site.reconcile(controller, ObjectKey.of(pool))
    made = sorted(await _requests(site), key=lambda r: r.metadata.creation_timestamp or "")
    # The oldest two have idle machines; the newest has none yet: it goes first, though newest.
    for i, each in enumerate(made[:2]):
        await reported(site, each, f"m{i}", f"127.0.0.{i + 2}")
    await _scale(site, 2)
    await site.reconcile(controller, ObjectKey.of(pool))
    assert names(await _requests(site)) == names(made[:2])
    await _scale(site, 1)
    await site.reconcile(controller, ObjectKey.of(pool))
    assert names(await _requests(site)) == [made[1].name]  # then the oldest idle machine


async def test_a_set_owned_by_a_machine_set_leaves_the_used_requests_to_it(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    machine_set = await workers(site)
    owner = {"apiVersion": "herder.dev/v1alpha1", "kind": "MachineSet", "name": "workers"}
    (pool,) = await site.create(
        request_set(
            "pool", 1, ownerReferences=[{**owner, "uid": machine_set.metadata.uid, "controller": True}]
        )
    )
    await site.reconcile(controller, ObjectKey.of(pool))
    (made,) = await _requests(site)
    await reported(site, made, "m0", "127.0.0.2")
    await bound(site, "m0", "127.0.0.2:50000")
    await _scale(site, 0)
    await site.reconcile(controller, ObjectKey.of(pool))
    assert names(await _requests(site)) == [made.name]  # its machine set lets the machine go first


async def test_a_failed_request_is_replaced(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 1))
    await site.reconcile(controller, ObjectKey.of(pool))
    (failed,) = await _requests(site)
    await site.set_status(failed, stage="Failed", reason="ProvisioningFailed", message="no capacity")
    await site.show(controller, failed)
    await site.reconcile(controller, ObjectKey.of(pool))
    (replacement,) = await _requests(site)
    assert replacement.name != failed.name
    assert ("Normal", "Replacing", f"request {failed.name} failed (ProvisioningFailed)") in await site.told(
        pool
    )
    assert (await _set_status(site))["failed"] == 1


async def test_progress_within_a_stage_does_not_wake_the_set(site: Site) -> None:
    controller = MachineRequestSetController()
    await site.create(provider())
    (pool,) = await site.create(request_set("pool", 1))
    await site.reconcile(controller, ObjectKey.of(pool))
    (made,) = await _requests(site)
    before = await site.set_status(made, stage="Provisioning", step="boot", stepNumber=1, steps=3)
    after = await site.set_status(made, step="install", stepNumber=2)
    assert await site.show(controller, after, before=before) == []
    provisioned = await reported(site, after, "m0", "127.0.0.2")
    assert await site.show(controller, provisioned, before=after) == [ObjectKey.of(pool)]


async def test_requests_provisioned_together_are_one_write_of_the_set(site: Site) -> None:
    await site.create(provider())

    def counted(made: Resource) -> tuple[int, int]:
        status = made.status or {}
        return int(status.get("requests", 0)), int(status.get("provisioned", 0))

    async with (
        site.writes("MachineRequestSet", counted) as written,
        site.running(MachineRequestSetController()),
    ):
        await site.create(request_set("pool", 2))
        await eventually(lambda: written[-1:] == [(2, 0)])  # its requests made, none provisioned
        before = len(written)
        for i, each in enumerate(await _requests(site)):  # a provider's machines come within a moment
            await reported(site, each, f"m{i}")
            await asyncio.sleep(0.1)
        await eventually(lambda: written[-1:] == [(2, 2)])
        await asyncio.sleep(1)
    assert written[before:] == [(2, 2)]
