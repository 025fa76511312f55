"""The emulator's control API: list, create, power and destroy machines; refuse nonsense with 4xx."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import yaml

from herder.emu.control.api import ControlAPI
from herder.emu.control.emulator import Emulator
from herder.talos.machine import ApplyMode, MachineClient, MachineStage
from tests.emu.clusters import form_cluster
from tests.emu.support import admin, herder_cli, wait_stage


async def test_control_api(emulator: Emulator) -> None:
    control = ControlAPI(emulator)
    url = await control.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            assert (await http.get("/healthz")).json() == {"ok": True}
            listed = (await http.get("/machines")).json()
            assert len(listed) == 4 and {"uuid", "endpoint", "node", "stage", "hardware"} <= set(listed[0])
            created = await http.post("/machines", json={"count": 2, "talos_version": "v1.12.5"})
            assert created.status_code == 201
            new = created.json()
            assert [m["talos_version"] for m in new] == ["v1.12.5", "v1.12.5"]
            machine = emulator.machines[new[0]["uuid"]]
            await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
            off = await http.post(f"/machines/{machine.address}/power", json={"state": "off"})
            assert off.json()["power"] == "off"
            on = await http.post(f"/machines/{machine.hostname}/power", json={"state": "on"})
            assert on.json()["power"] == "on"
            await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
            assert (await http.post(f"/machines/{machine.uuid}/fault", json={"fault": "slow-boot"})).json()[
                "faults"
            ] == ["slow-boot"]
            assert (
                await http.post(f"/machines/{machine.uuid}/fault", json={"fault": "nope"})
            ).status_code == 400
            assert (
                await http.post(f"/machines/{machine.uuid}/power", json={"state": "maybe"})
            ).status_code == 400
            assert (await http.get("/machines/nothing")).status_code == 404
            assert (await http.post("/machines", content=b"[1]")).status_code == 400
            assert (await http.post("/machines", content=b"{not json")).status_code == 400
            assert (await http.delete(f"/machines/{machine.uuid}")).status_code == 200
            assert machine.uuid not in emulator.machines
            assert len((await http.get("/machines")).json()) == 5
    finally:
        await control.stop()


async def test_the_summary_counts_every_talos_api_call_the_machines_answer(emulator: Emulator) -> None:
    control = ControlAPI(emulator)
    url = await control.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            machine = next(iter(emulator.machines.values()))
            await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
            before = (await http.get("/summary")).json()
            assert before["machines"] == 4 and before["clusters"] == 0
            async with MachineClient.insecure(machine.record.endpoint) as client:
                await client.version()
                await client.version()
            assert (await http.get("/summary")).json()["apiCalls"] == before["apiCalls"] + 2
    finally:
        await control.stop()


async def test_emu_machines_prints_a_header_and_json_or_yaml(emulator: Emulator) -> None:
    """``herder emu machines``: a table under the header its help names, or the control API's view of each
    machine as JSON or YAML for scripts."""
    control = ControlAPI(emulator)
    url = await control.start("127.0.0.1", 0)
    try:
        await emulator.machines[next(iter(emulator.machines))].inject("slow-boot")
        code, out, err = await herder_cli("emu", "machines", "--url", url)
        assert code == 0, err
        header, *rows = out.splitlines()
        assert header.split() == ["UUID", "ENDPOINT", "HOSTNAME", "STAGE", "POWER", "VERSION", "FAULTS"]
        assert sorted(row.split()[0] for row in rows) == sorted(emulator.machines)
        for row in rows:
            machine = emulator.machines[row.split()[0]]
            cells = row.split()
            assert cells[1:3] == [machine.record.endpoint, machine.hostname]
            assert cells[4:7] == ["on", "v1.13.9", ",".join(sorted(machine.faults)) or "-"]
        code, listed, err = await herder_cli("emu", "machines", "--url", url, "-o", "json")
        assert code == 0, err
        assert {m["uuid"] for m in json.loads(listed)} == set(emulator.machines)
        code, dumped, err = await herder_cli("emu", "machines", "--url", url, "-o", "yaml")
        assert code == 0, err
        assert {m["uuid"] for m in yaml.safe_load(dumped)} == set(emulator.machines)
        code, helped, err = await herder_cli("emu", "machines", "--help")
        assert all(column in helped for column in header.split())
    finally:
        await control.stop()


async def test_each_machine_counts_its_boots_and_the_configs_it_took(
    emulator: Emulator, tmp_path: Path
) -> None:
    """``herder emu machines -o json`` shows ``boots`` and ``configApplies``: a config taken in maintenance
    counts once (its install goes on without a power cycle, then reboots into the system); a config
    applied without a reboot counts without a boot; a reboot counts a boot and no config."""
    control = ControlAPI(emulator)
    url = await control.start("127.0.0.1", 0)
    try:

        async def counts() -> dict[str, tuple[int, int]]:
            code, listed, err = await herder_cli("emu", "machines", "--url", url, "-o", "json")
            assert code == 0, err
            return {m["uuid"]: (m["boots"], m["configApplies"]) for m in json.loads(listed)}

        fresh = await counts()
        assert set(fresh.values()) == {(1, 0)}  # powered on once, into maintenance
        formed = await form_cluster(emulator, "counts", tmp_path, control_planes=1, workers=0)
        (machine,) = formed.control_planes
        # Taken in maintenance, installed, rebooted into the installed system.
        assert (await counts())[machine.uuid] == (2, 1)
        assert [v for k, v in (await counts()).items() if k != machine.uuid] == [(1, 0)] * (len(fresh) - 1)
        assert machine.config is not None
        async with admin(formed.configs, machine) as client:
            await client.apply_configuration(machine.config.text, mode=ApplyMode.NO_REBOOT)
            assert (await counts())[machine.uuid] == (2, 2)
            await client.reboot()
        await wait_stage(emulator, machine, MachineStage.RUNNING)
        assert (await counts())[machine.uuid] == (3, 2)
        # Kept across a crash of the machine, as the rest of what it persisted.
        await machine.crash()
        await wait_stage(emulator, machine, MachineStage.RUNNING)
        assert (await counts())[machine.uuid] == (4, 2)
    finally:
        await control.stop()
