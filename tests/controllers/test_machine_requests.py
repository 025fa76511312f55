"""MachineRequest's decisions: join the machine a provider reports, release it before the request goes
(herder's finalizer, the machine leaving its set first), drop a request whose machine is gone, and refuse
a second claim of one machine."""

from __future__ import annotations

from herder.controllers.provisioning.machine_requests import MACHINE_FINALIZER, MachineRequestController
from herder.resources.provisioning import RELEASE_FINALIZER
from herder.runtime.controller import ObjectKey
from tests.controllers.provisioned import bound, condition, provider, reported, request, workers
from tests.controllers.site import Site, obj

UUID = "0f6a3c52-4c1e-4b7e-9d35-6a2d1c9b7e10"


async def test_a_provisioned_request_gets_the_machine_it_reports(site: Site) -> None:
    await site.create(provider())
    (made,) = await site.create(request("r1"))
    await reported(site, made, UUID.upper(), "127.0.0.5")
    await site.reconcile(MachineRequestController(), ObjectKey.of(made))
    machine = await site.get("Machine", UUID)
    assert machine is not None  # named as Machines are: lowercase
    assert machine.metadata.labels["herder.dev/machine-request"] == "r1"
    assert machine.metadata.labels["herder.dev/infra-provider-id"] == "emu"
    assert machine.metadata.finalizers == [MACHINE_FINALIZER]
    assert machine.spec == {"endpoint": "127.0.0.5:50000"}
    current = await site.get("MachineRequest", "r1")
    assert current is not None and RELEASE_FINALIZER in current.metadata.finalizers
    assert "conditions" not in (current.status or {})  # nothing to say: no condition at all


async def test_a_machine_registered_first_is_adopted(site: Site) -> None:
    await site.create(provider())
    await site.create(obj("Machine", UUID, spec={"endpoint": "127.0.0.9:50000"}))
    (made,) = await site.create(request("r1"))
    await reported(site, made, UUID, "127.0.0.5:50001")
    await site.reconcile(MachineRequestController(), ObjectKey.of(made))
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.metadata.labels["herder.dev/machine-request"] == "r1"
    assert (machine.spec or {})["endpoint"] == "127.0.0.5:50001"


async def test_a_joined_machine_is_adopted_and_kept_on_its_tunnel(site: Site) -> None:
    await site.create(provider())
    tunnel = "[fdae:41e4:649b:9303::2a]:50000"
    await site.create(obj("Machine", UUID, spec={"endpoint": tunnel}))
    await site.create(
        obj(
            "SideroLink",
            UUID,
            spec={"nodePublicKey": "k" * 43 + "=", "nodeAddress": "fdae:41e4:649b:9303::2a/64"},
        )
    )
    (made,) = await site.create(request("r1"))
    await reported(site, made, UUID, "10.0.0.5")  # where the provider sees it: herder cannot reach that
    await site.reconcile(MachineRequestController(), ObjectKey.of(made))
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.metadata.labels["herder.dev/machine-request"] == "r1"
    assert machine.spec == {"endpoint": tunnel}


async def test_a_deleted_request_waits_for_its_machine_to_leave_its_set(site: Site) -> None:
    controller = MachineRequestController()
    await site.create(provider())
    (made,) = await site.create(request("r1"))
    await reported(site, made, UUID, "127.0.0.5")
    await site.show(controller, made)
    await site.reconcile(controller, ObjectKey.of(made))
    await workers(site)
    node = await bound(site, UUID)
    await site.store.delete("MachineRequest", "r1", "default")
    await site.reconcile(controller, ObjectKey.of(made))
    # The machine leaves its set first (marked, so that no set takes it again), and the request waits.
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.metadata.annotations["herder.dev/releasing"] == "true"
    assert await site.get("MachineSetNode", UUID) is None
    waiting = await site.get("MachineRequest", "r1")
    assert waiting is not None and RELEASE_FINALIZER in waiting.metadata.finalizers
    assert ("Normal", "Releasing", f"machine {UUID} leaves its machine set") in await site.told(made)
    # The node's deletion wakes the request; then the Machine goes, and herder's finalizer.
    assert await site.show(controller, node, deleted=True) == [ObjectKey.of(made)]
    await site.reconcile(controller, ObjectKey.of(made))
    assert await site.get("Machine", UUID) is None
    assert await site.get("MachineRequest", "r1") is None  # no provider finalizer held it
    assert ("Normal", "Released", "herder let the machine go: the provider destroys it") in await site.told(
        made
    )


async def test_a_request_whose_machine_is_gone_is_deleted_and_so_is_a_deleted_machines(site: Site) -> None:
    controller = MachineRequestController()
    await site.create(provider())
    (gone,) = await site.create(request("r1"))
    await site.set_status(gone, stage="Failed", reason="MachineGone", machine={"uuid": UUID})
    await site.reconcile(controller, ObjectKey.of(gone))
    going = await site.get("MachineRequest", "r1")
    assert going is not None and going.metadata.deletion_timestamp
    await site.reconcile(controller, ObjectKey.of(gone))  # no Machine to release: herder lets it go
    assert await site.get("MachineRequest", "r1") is None
    # A Machine deleted in herder (faulty hardware) takes its request with it.
    (faulty,) = await site.create(request("r2"))
    await reported(site, faulty, "m2", "127.0.0.6")
    await site.reconcile(controller, ObjectKey.of(faulty))
    await site.store.delete("Machine", "m2", "default")  # held by herder's finalizer
    await site.reconcile(controller, ObjectKey.of(faulty))
    leaving = await site.get("MachineRequest", "r2")
    assert leaving is not None and leaving.metadata.deletion_timestamp
    assert ("Normal", "Deleting", "machine m2 was deleted: the request goes, and its set replaces it") in (
        await site.told(faulty)
    )


async def test_a_second_claim_of_one_machine_is_refused_until_the_first_lets_it_go(site: Site) -> None:
    controller = MachineRequestController()
    await site.create(provider())
    first, second = await site.create(request("r1"), request("r2"))
    for each in (first, second):
        await reported(site, each, UUID, "127.0.0.5")
        await site.show(controller, each)
    await site.reconcile(controller, ObjectKey.of(first))
    await site.reconcile(controller, ObjectKey.of(second))
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.metadata.labels["herder.dev/machine-request"] == "r1"
    claimed = condition(await site.status("MachineRequest", "r2"), "Conflict")
    assert (claimed["status"], claimed["reason"]) == ("True", "MachineClaimed")
    assert "request r1" in claimed["message"]
    warned = [e for e in await site.told(second) if e[1] == "MachineClaimed"]
    assert warned == [("Warning", "MachineClaimed", claimed["message"])]
    assert "conditions" not in await site.status("MachineRequest", "r1")
    # Told once: a reconcile again changes nothing.
    await site.reconcile(controller, ObjectKey.of(second))
    assert len([e for e in await site.told(second) if e[1] == "MachineClaimed"]) == 1
    # The first goes: its machine is released, and the Machine's deletion wakes both claims.
    await site.store.delete("MachineRequest", "r1", "default")
    await site.reconcile(controller, ObjectKey.of(first))
    assert await site.get("Machine", UUID) is None
    assert await site.show(controller, machine, deleted=True) == [ObjectKey.of(first), ObjectKey.of(second)]
    await site.reconcile(controller, ObjectKey.of(second))
    taken = await site.get("Machine", UUID)
    assert taken is not None and taken.metadata.labels["herder.dev/machine-request"] == "r2"
    resolved = condition(await site.status("MachineRequest", "r2"), "Conflict")
    assert (resolved["status"], resolved["reason"]) == ("False", "Resolved")


async def test_a_claim_of_a_request_that_is_gone_does_not_hold_the_machine(site: Site) -> None:
    await site.create(provider())
    await site.create(
        obj(
            "Machine",
            UUID,
            spec={"endpoint": "127.0.0.5:50000"},
            metadata={"labels": {"herder.dev/machine-request": "long-gone"}},
        )
    )
    (made,) = await site.create(request("r1"))
    await reported(site, made, UUID, "127.0.0.5")
    await site.reconcile(MachineRequestController(), ObjectKey.of(made))
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.metadata.labels["herder.dev/machine-request"] == "r1"
    assert "conditions" not in await site.status("MachineRequest", "r1")


async def test_provisioned_is_told_only_after_failed_attempts(site: Site) -> None:
    await site.create(provider())
    controller = MachineRequestController()
    (plain, flaky) = await site.create(request("r1"), request("r2"))
    fault = {"message": "the cloud is out of capacity", "time": "2026-01-01T00:00:00Z"}
    for made, error in ((plain, None), (flaky, fault)):
        await site.reconcile(controller, ObjectKey.of(made))  # seen as it starts
        status = {"stage": "Provisioning", "attempts": 1 if error else 0, "lastError": error}
        made = await site.set_status(made, **{k: v for k, v in status.items() if v is not None})
        await site.reconcile(controller, ObjectKey.of(made))
        await reported(site, made, f"m-{made.name}", "127.0.0.5", attempts=0, lastError=None)
        await site.reconcile(controller, ObjectKey.of(made))
    # Its status and its Machine tell it: no Event of its own.
    assert await site.told(plain) == []
    assert [e[:2] for e in await site.told(flaky)] == [
        ("Warning", "ProvisioningFailed"),
        ("Normal", "Provisioned"),
    ]
