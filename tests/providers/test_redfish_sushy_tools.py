"""The Redfish provider's calls against someone else's Redfish: OpenStack's sushy-tools emulator (its fake
driver), over TLS checked against a CA file, with basic authentication. Booting a System inserts the Image
Factory ISO of the request in its virtual CD (which the BMC fetches), sets a one-time boot override to the
CD and powers it on; power off, on and reboot go through ``ComputerSystem.Reset``; releasing powers it off
and ejects the media; a System that is not there does not exist; a wrong password, an unreachable BMC and
a BMC without virtual media fail with messages naming the BMC and never the password."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.providers.redfish import BMCError, RedfishConfig, RedfishProvider
from tests.api.server import free_port
from tests.providers.redfish_sites import PASSWORD, USER, ImageServer, SushyEmulator
from tests.providers.steps import context, run_step

FIRST = "0b0c4e7a-5d2e-4c6a-9f3b-1a2b3c4d5e6f"
SECOND = "8f2e61d0-3c4b-4a59-8e7d-6b5a4c3d2e1f"


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageServer]:
    server = ImageServer(tmp_path_factory.mktemp("factory"))
    server.start(server.url + "/")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sushy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SushyEmulator]:
    emulator = SushyEmulator(tmp_path_factory.mktemp("sushy"), {FIRST: "rack1-u1", SECOND: "rack1-u2"})
    emulator.start_serving()
    try:
        yield emulator
    finally:
        emulator.stop()


def _config(sushy: SushyEmulator, images: ImageServer, system: str = FIRST, **bmc: Any) -> RedfishConfig:
    return RedfishConfig.model_validate(
        {
            "imageFactory": images.url,
            "bmcs": [
                {
                    "name": "u1",
                    "address": f"{sushy.url}/redfish/v1/Systems/{system}",
                    "username": USER,
                    "password": PASSWORD,
                    "caFile": str(sushy.ca),
                    **bmc,
                }
            ],
        }
    )


def _system(sushy: SushyEmulator, uuid: str = FIRST) -> dict[str, Any]:
    data: dict[str, Any] = sushy.get(f"/redfish/v1/Systems/{uuid}")
    return data


def _cd(sushy: SushyEmulator, uuid: str = FIRST) -> dict[str, Any]:
    data: dict[str, Any] = sushy.get(f"/redfish/v1/Systems/{uuid}/VirtualMedia/Cd")
    return data


async def _power_is(sushy: SushyEmulator, state: str, uuid: str = FIRST) -> None:
    """The fake driver applies a power change 1 to 11 seconds after it is asked, as hardware does."""
    deadline = time.monotonic() + 30
    while _system(sushy, uuid)["PowerState"] != state:
        assert time.monotonic() < deadline, f"the System never got {state}"
        await asyncio.sleep(0.5)


async def test_a_system_boots_the_requests_iso_from_its_virtual_cd_and_is_released(
    sushy: SushyEmulator, images: ImageServer
) -> None:
    provider = RedfishProvider()
    ctx = context(provider, _config(sushy, images), provider_id="metal")
    path = images.add(ctx.schematic_id, ctx.talos_version)
    ctx.state["bmc"] = "u1"  # claimed (the pool is tested against herder, end to end on the emulator)
    try:
        await run_step(provider, ctx, "media")
        cd = _cd(sushy)
        assert cd["Image"] == images.url + path and cd["Inserted"] is True
        assert path in images.fetched()  # the BMC fetched the ISO, as a real one does
        boot = _system(sushy)["Boot"]
        assert boot["BootSourceOverrideTarget"] == "Cd"
        # Once, as the provider asked the BMC (sushy-tools keeps no "enabled": it shows Continuous).
        (override,) = [patch["Boot"] for patch in sushy.patches(f"/redfish/v1/Systems/{FIRST}")]
        assert (
            override["BootSourceOverrideTarget"] == "Cd" and override["BootSourceOverrideEnabled"] == "Once"
        )
        await run_step(provider, ctx, "power")
        await _power_is(sushy, "On")
        await run_step(provider, ctx, "power")  # run again after a crash: not booted a second time
        await run_step(provider, ctx, "identify")
        assert (ctx.machine_uuid, ctx.machine_address) == (FIRST, "")
        assert await provider.exists(ctx)

        await provider.power(ctx, False)
        assert _system(sushy)["PowerState"] == "Off"
        await provider.power(ctx, True)
        await _power_is(sushy, "On")
        await provider.reboot(ctx)
        await _power_is(sushy, "On")

        await provider.deprovision(ctx)
        await _power_is(sushy, "Off")
        assert _cd(sushy)["Inserted"] is False
        await provider.deprovision(ctx)  # released already
    finally:
        await provider.stop()


async def test_a_system_that_is_not_there_does_not_exist(sushy: SushyEmulator, images: ImageServer) -> None:
    provider = RedfishProvider()
    ctx = context(provider, _config(sushy, images, system="3f7c0000-0000-4000-8000-00000000dead"))
    ctx.state["bmc"] = "u1"
    assert not await provider.exists(ctx)
    await provider.deprovision(ctx)  # nothing to release
    gone = context(provider, _config(sushy, images))
    gone.state["bmc"] = "removed-from-the-pool"
    assert not await provider.exists(gone)


async def test_a_service_of_several_systems_needs_the_systems_path(
    sushy: SushyEmulator, images: ImageServer
) -> None:
    provider = RedfishProvider()
    config = _config(sushy, images)
    config.bmcs[0].address = sushy.url
    ctx = context(provider, config)
    ctx.state["bmc"] = "u1"
    with pytest.raises(BMCError, match=r"BMC u1 \(https://127.0.0.1:\d+\): the service manages 2 Systems"):
        await run_step(provider, ctx, "media")


async def test_a_wrong_password_names_the_bmc_and_never_the_password(
    sushy: SushyEmulator, images: ImageServer
) -> None:
    wrong = "not-the-" + PASSWORD
    provider = RedfishProvider()
    ctx = context(provider, _config(sushy, images, password=wrong))
    ctx.state["bmc"] = "u1"
    with pytest.raises(BMCError) as failed:
        await run_step(provider, ctx, "media")
    message = str(failed.value)
    assert message.startswith(
        f"BMC u1 ({sushy.url}/redfish/v1/Systems/{FIRST}): refused the credentials of 'operator'"
    )
    assert "401" in message and wrong not in message and PASSWORD not in message


async def test_an_unreachable_bmc_and_one_without_virtual_media(
    tmp_path: Path, sushy: SushyEmulator, images: ImageServer
) -> None:
    provider = RedfishProvider()
    nobody = _config(sushy, images)
    nobody.bmcs[0].address = f"https://127.0.0.1:{free_port()}/redfish/v1/Systems/{FIRST}"
    ctx = context(provider, nobody)
    ctx.state["bmc"] = "u1"
    with pytest.raises(
        BMCError, match=r"BMC u1 \(https://127.0.0.1:\d+/redfish/v1/Systems/.*\): cannot be reached"
    ):
        await run_step(provider, ctx, "media")

    bare = SushyEmulator(tmp_path / "bare", {SECOND: "no-vmedia"}, vmedia=False).start_serving()
    try:
        ctx = context(provider, _config(bare, images, system=SECOND))
        ctx.state["bmc"] = "u1"
        with pytest.raises(BMCError, match="BMC u1 .*: it has no virtual media"):
            await run_step(provider, ctx, "media")
    finally:
        bare.stop()
