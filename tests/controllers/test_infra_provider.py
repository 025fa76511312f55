"""InfraProvider's decisions: connected while its heartbeats are fresh, ready when its schema and config
are usable, its JoinConfig, a conflict among its requests shown, and a deleted provider letting go of
its requests."""

from __future__ import annotations

from herder.controllers.provisioning.infra_provider import CLEANUP_FINALIZER, InfraProviderController
from herder.resources.provisioning import PROVIDER_FINALIZER
from herder.runtime.controller import ObjectKey, Result
from tests.controllers.provisioned import condition, provider, request
from tests.controllers.site import Site

KEY = ObjectKey("InfraProvider", None, "emu")


async def _beat(site: Site, interval: float = 10, **status: object) -> None:
    current = await site.get("InfraProvider", "emu", None)
    assert current is not None
    await site.set_status(
        current, lastHeartbeat=site.clock.rfc3339(), heartbeatIntervalSeconds=interval, **status
    )


async def test_a_provider_is_connected_while_its_heartbeats_are_fresh(site: Site) -> None:
    controller = InfraProviderController("https://herder.example:8443")
    await site.create(provider())
    assert await site.reconcile(controller, KEY) is None
    status = await site.status("InfraProvider", "emu", None)
    assert condition(status, "Connected")["message"] == "the provider has not connected yet"
    assert condition(status, "Ready")["reason"] == "NotConnected"
    await _beat(site)
    site.clock.advance(5)
    # Stale after three missed beats: looked at again just after that.
    assert await site.reconcile(controller, KEY) == Result(requeue_after=25.5)
    status = await site.status("InfraProvider", "emu", None)
    assert condition(status, "Connected")["status"] == "True"
    assert (condition(status, "Ready")["status"], condition(status, "Ready")["message"]) == (
        "True",
        "provisioning machines",
    )
    site.clock.advance(30)
    assert await site.reconcile(controller, KEY) is None
    status = await site.status("InfraProvider", "emu", None)
    connected = condition(status, "Connected")
    assert (connected["status"], connected["reason"]) == ("False", "NoHeartbeat")
    assert connected["lastTransitionTime"] == site.clock.rfc3339()
    join = await site.get("JoinConfig", "emu", None)
    assert join is not None and (join.spec or {})["endpoint"] == "https://herder.example:8443"
    current = await site.get("InfraProvider", "emu", None)
    assert current is not None and CLEANUP_FINALIZER in current.metadata.finalizers


async def test_a_connected_provider_with_an_unusable_schema_is_not_ready(site: Site) -> None:
    controller = InfraProviderController()
    await site.create(provider())
    await _beat(site, schema={"type": "no-such-type"})
    await site.reconcile(controller, KEY)
    ready = condition(await site.status("InfraProvider", "emu", None), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NotUsable")
    assert "not a valid JSON schema" in ready["message"]


async def test_a_provider_shows_the_requests_refused_a_machine_another_holds(site: Site) -> None:
    controller = InfraProviderController()
    await site.create(provider())
    await _beat(site)
    first, second = await site.create(request("r1"), request("r2"))
    assert await site.show(controller, second) == []  # no conflict: nothing to wake it for
    conflict = {
        "type": "Conflict",
        "status": "True",
        "reason": "MachineClaimed",
        "message": "machine m1 is request r1's: the provider reported it for both",
        "lastTransitionTime": site.clock.rfc3339(),
    }
    claimed = await site.set_status(
        second, stage="Provisioned", machine={"uuid": "m1"}, conditions=[conflict]
    )
    assert await site.show(controller, claimed, before=second) == [KEY]
    await site.reconcile(controller, KEY)
    shown = condition(await site.status("InfraProvider", "emu", None), "Conflict")
    assert (shown["status"], shown["reason"]) == ("True", "MachineClaimed")
    assert shown["message"] == "1 request(s) report a machine that another request holds: default/r2"
    told = [e for e in await site.told() if e[1] == "MachineClaimed"]
    assert told == [("Warning", "MachineClaimed", shown["message"])]
    # The conflict ends (the request went): the provider says so.
    assert await site.show(controller, claimed, deleted=True) == [KEY]
    await site.reconcile(controller, KEY)
    shown = condition(await site.status("InfraProvider", "emu", None), "Conflict")
    assert (shown["status"], shown["reason"]) == ("False", "NoConflict")
    assert "conditions" not in await site.status("MachineRequest", first.name)


async def test_a_hidden_request_in_conflict_is_counted_not_named(site: Site) -> None:
    controller = InfraProviderController()
    await site.create(provider("herder-emu", hidden=True))
    (hidden,) = await site.create(request("herder-r1", "herder-emu", labels={"herder.dev/hidden": "true"}))
    conflict = {"type": "Conflict", "status": "True", "reason": "MachineClaimed", "message": "…"}
    claimed = await site.set_status(
        hidden, conditions=[{**conflict, "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    )
    await site.show(controller, claimed)
    await site.reconcile(controller, ObjectKey("InfraProvider", None, "herder-emu"))
    shown = condition(await site.status("InfraProvider", "herder-emu", None), "Conflict")
    assert shown["message"] == "1 request(s) report a machine that another request holds"


async def test_a_deleted_provider_lets_go_of_its_requests(site: Site) -> None:
    controller = InfraProviderController()
    await site.create(provider())
    await site.reconcile(controller, KEY)
    await site.create(request("r1", finalizers=[PROVIDER_FINALIZER]))
    await site.store.delete("InfraProvider", "emu")
    await site.reconcile(controller, KEY)
    assert await site.get("MachineRequest", "r1") is None  # deleted, and its provider's finalizer dropped
    assert await site.get("InfraProvider", "emu", None) is None
    assert ("Normal", "RequestsReleased", "1 machine request(s) let go of infra provider emu") in (
        await site.told()
    )


async def test_with_siderolink_the_join_config_carries_the_kernel_args_talos_reads(site: Site) -> None:
    controller = InfraProviderController(
        "https://herder.example:8443", "grpc://192.0.2.7:8099", "fdae:41e4:649b:9303::1"
    )
    await site.create(provider())
    await site.reconcile(controller, KEY)
    join = await site.get("JoinConfig", "emu", None)
    assert join is not None
    spec = join.spec or {}
    assert spec["kernelArgs"] == [
        f"siderolink.api=grpc://192.0.2.7:8099?jointoken={spec['token']}",
        "talos.events.sink=[fdae:41e4:649b:9303::1]:8090",
        "talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092",
    ]
