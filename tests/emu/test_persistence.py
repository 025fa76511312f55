"""State survives a restart of the emulator, in process and as a real ``herder emu run`` child process."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from herder.emu.control.process import EmulatorProcess
from herder.talos.machine import MachineClient, MachineStage
from herder.talos.talosconfig import dump_talosconfig
from tests.emu.support import (
    ClusterConfigs,
    admin,
    bring_up,
    herder_cli,
    random_cidr,
    running_emulator,
    wait_stage,
)


async def test_restart_keeps_machines_configs_versions_and_etcd(
    tmp_path: Path, cluster_a: ClusterConfigs
) -> None:
    cidr = random_cidr()
    async with running_emulator(tmp_path, 2, cidr=cidr) as emulator:
        cp, spare = emulator.machines.values()
        await bring_up(emulator, cp, cluster_a.controlplane)
        async with admin(cluster_a, cp) as client:
            await client.bootstrap()
            await client.upgrade("ghcr.io/siderolabs/installer:v1.14.2")
        await wait_stage(emulator, cp, MachineStage.UPGRADING)
        await wait_stage(emulator, cp, MachineStage.RUNNING)
        await spare.power_off()
        published = json.loads((tmp_path / "machines.json").read_text())
    assert {m["uuid"] for m in published} == {cp.uuid, spare.uuid}
    assert {m["endpoint"] for m in published} == {cp.record.endpoint, spare.record.endpoint}

    async with running_emulator(tmp_path, 2, cidr=cidr) as emulator:
        assert set(emulator.machines) == {cp.uuid, spare.uuid}
        again = emulator.machines[cp.uuid]
        await wait_stage(emulator, again, MachineStage.RUNNING)
        assert not emulator.machines[spare.uuid].record.powered_on
        async with admin(cluster_a, again) as client:
            assert (await client.version()).tag == "v1.14.2"
            assert [m.hostname for m in await client.etcd_member_list()] == [again.hostname]


async def test_emu_run_process_survives_kill_and_drives_with_the_cli(
    tmp_path: Path, cluster_a: ClusterConfigs
) -> None:
    cidr = random_cidr()
    emulator = EmulatorProcess(data_dir=tmp_path, machines=2, machine_cidr=cidr)
    emulator.start()
    try:
        await emulator.wait_ready()
        first = emulator.published()[0]
        config = tmp_path / "controlplane.yaml"
        config.write_text(cluster_a.controlplane)
        talosconfig = tmp_path / "talosconfig"
        talosconfig.write_text(dump_talosconfig(cluster_a.talosconfig))
        await _wait_stage(emulator, first["uuid"], "MAINTENANCE")
        code, out, err = await herder_cli(
            "talos", "apply-config", "--insecure", "-e", first["endpoint"], "-f", str(config)
        )
        assert code == 0, err
        await _wait_stage(emulator, first["uuid"], "RUNNING")
        code, out, err = await herder_cli(
            "talos", "version", "--talosconfig", str(talosconfig), "-e", first["node"], "-n", first["node"]
        )
        assert code == 0, err
        assert "Tag: v1.13.9" in out
        code, out, err = await herder_cli(
            "emu", "fault", first["uuid"], "partition", "--data-dir", str(tmp_path)
        )
        assert code == 0 and '"partition"' in out
        code, out, err = await herder_cli(
            "talos", "version", "--talosconfig", str(talosconfig), "-e", first["node"], "--timeout", "0.5"
        )
        assert code == 1 and err.startswith("error: ")
        assert (await herder_cli("emu", "fault", first["uuid"], "heal", "--data-dir", str(tmp_path)))[0] == 0

        emulator.kill()
        emulator.start()
        await emulator.wait_ready()
        assert emulator.published()[0] == first
        await _wait_stage(emulator, first["uuid"], "RUNNING")
        async with MachineClient.from_talosconfig(
            cluster_a.talosconfig, endpoint=first["endpoint"]
        ) as client:
            assert (await client.version()).tag == "v1.13.9"
        code, out, err = await herder_cli("emu", "machines", "--data-dir", str(tmp_path))
        assert first["uuid"] in out and "RUNNING" in out, err
    finally:
        emulator.stop()


async def _wait_stage(emulator: EmulatorProcess, uuid: str, stage: str, timeout: float = 20.0) -> None:
    """Poll the control API of the emulator process until the machine reaches ``stage``."""
    deadline = time.monotonic() + timeout
    while True:
        if (await emulator.control("GET", f"/machines/{uuid}"))["stage"] == stage:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"machine {uuid} did not reach {stage}")
        await asyncio.sleep(0.05)
