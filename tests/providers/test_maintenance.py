"""What the real providers ask of a machine before they report it, against the emulator's Talos API: the
UUID it answers with in maintenance mode, and a wait (``Retry``) while nothing answers at its address or
while it answers only to a client certificate."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from herder.emu.control.process import EmulatorProcess
from herder.infra import Retry
from herder.providers.maintenance import endpoint_of, maintenance_uuid
from tests.api.server import free_port


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    process = EmulatorProcess(
        data_dir=tmp_path_factory.mktemp("maintenance"),
        machines=1,
        machine_cidr=f"127.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24",
        machine_port=free_port(),
    )
    process.start()
    try:
        asyncio.run(process.wait_ready())
        yield process
    finally:
        process.stop()


async def test_the_uuid_of_a_machine_in_maintenance_mode(emulator: EmulatorProcess) -> None:
    (machine,) = emulator.published()
    for _ in range(100):
        try:
            assert (
                await maintenance_uuid(machine["endpoint"], waiting_for="the machine boots")
                == machine["uuid"]
            )
            return
        except Retry:
            await asyncio.sleep(0.1)
    raise AssertionError("the emulated machine never answered in maintenance mode")


async def test_nothing_answering_is_waited_for_naming_what_is_awaited(emulator: EmulatorProcess) -> None:
    (machine,) = emulator.published()
    await emulator.control("POST", f"/machines/{machine['uuid']}/power", {"state": "off"})
    try:
        with pytest.raises(
            Retry, match=f"the machine boots: Talos does not answer at {machine['endpoint']} yet"
        ):
            await maintenance_uuid(machine["endpoint"], waiting_for="the machine boots", timeout=1)
    finally:
        await emulator.control("POST", f"/machines/{machine['uuid']}/power", {"state": "on"})


def test_addresses_with_and_without_a_port() -> None:
    assert endpoint_of("10.0.0.7") == "10.0.0.7:50000"
    assert endpoint_of("10.0.0.7:50001") == "10.0.0.7:50001"
    assert endpoint_of("fd00::7") == "[fd00::7]:50000"
    assert endpoint_of("[fd00::7]:50001") == "[fd00::7]:50001"
