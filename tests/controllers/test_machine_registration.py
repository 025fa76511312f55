"""MachineRegistration's decisions: an endpoint that answers in maintenance mode becomes the Machine of the
UUID it reports (or moves that Machine to it); one that does not answer, or answers only to a client
certificate, keeps its error and attempt count, is told once, and is tried again with backoff."""

from __future__ import annotations

from herder.controllers.clusters.machine_registration import RETRY_FIRST, MachineRegistrationController
from herder.resources.machines import registration_name
from herder.runtime.controller import ObjectKey
from herder.talos.machine import Unauthenticated, Unavailable
from herder.talos.machine.pool import ClientPool
from herder.talos.machine.resources import SystemInformationSpec
from tests.controllers.site import Site, obj

ENDPOINT = "127.0.9.7:50000"
NAME = registration_name(ENDPOINT)
KEY = ObjectKey("MachineRegistration", "default", NAME)
UUID = "0f9c6a52-2d1e-4b4c-9c55-6b3c1d2e3f40"


def controller(site: Site) -> MachineRegistrationController:
    return MachineRegistrationController(ClientPool(dialer=site.machines, keep=0))


async def registration(site: Site) -> None:
    await site.create(obj("MachineRegistration", NAME, spec={"endpoint": ENDPOINT}))


def ready_of(status: dict[str, object]) -> tuple[str, str, str]:
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    (found,) = [c for c in conditions if c["type"] == "Ready"]
    return found["status"], found["reason"], found["message"]


async def test_an_endpoint_in_maintenance_becomes_the_machine_of_its_uuid(site: Site) -> None:
    await registration(site)
    site.machines.answer("system_information", SystemInformationSpec(uuid=UUID.upper()))
    register = controller(site)
    assert await site.reconcile(register, KEY) is None
    (call,) = site.machines.made("system_information")
    assert (call.endpoint, call.secure) == (ENDPOINT, False)
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.spec == {"endpoint": ENDPOINT}
    status = await site.status("MachineRegistration", NAME)
    assert (status["machine"], status["attempts"], status["lastError"]) == (UUID, 0, "")
    assert ready_of(status) == ("True", "Registered", f"{ENDPOINT} is machine {UUID}")
    made = await site.get("MachineRegistration", NAME)
    assert await site.told(made) == [("Normal", "Registered", f"{ENDPOINT} is machine {UUID}")]
    # Registered for good: the endpoint is not asked again.
    await site.reconcile(register, KEY)
    assert len(site.machines.made("system_information")) == 1


async def test_a_known_machine_answering_on_a_new_endpoint_is_moved_there(site: Site) -> None:
    await site.create(obj("Machine", UUID, spec={"endpoint": "127.0.9.1:50000"}))
    await registration(site)
    site.machines.answer("system_information", SystemInformationSpec(uuid=UUID))
    await site.reconcile(controller(site), KEY)
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.spec == {"endpoint": ENDPOINT}


async def test_an_endpoint_that_does_not_answer_is_told_once_and_retried_with_backoff(site: Site) -> None:
    await registration(site)
    site.machines.fail("system_information", Unavailable(f"cannot reach {ENDPOINT}"))
    register = controller(site)
    delays = []
    for _ in range(3):
        result = await site.reconcile(register, KEY)
        assert result is not None
        delays.append(result.requeue_after)
    assert delays == [RETRY_FIRST, 2 * RETRY_FIRST, 4 * RETRY_FIRST]
    status = await site.status("MachineRegistration", NAME)
    assert (status["attempts"], status["lastError"]) == (3, f"cannot reach {ENDPOINT}")
    assert ready_of(status) == ("False", "Unreachable", f"cannot reach {ENDPOINT}")
    made = await site.get("MachineRegistration", NAME)
    assert await site.told(made) == [("Warning", "Unreachable", f"cannot reach {ENDPOINT}")]

    # It boots at last: registered, and the error is gone.
    site.machines.failures.clear()
    site.machines.answer("system_information", SystemInformationSpec(uuid=UUID))
    assert await site.reconcile(register, KEY) is None
    status = await site.status("MachineRegistration", NAME)
    assert (status["machine"], status["attempts"], status["lastError"]) == (UUID, 0, "")


async def test_a_configured_machine_is_not_registered_and_says_why(site: Site) -> None:
    await registration(site)
    site.machines.fail("system_information", Unauthenticated("a client certificate is required"))
    await site.reconcile(controller(site), KEY)
    status = await site.status("MachineRegistration", NAME)
    assert "is not in maintenance mode: it runs a config herder did not give it" in status["lastError"]
    assert await site.get("Machine", UUID) is None
