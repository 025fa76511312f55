"""``herder talos …`` machine commands against emulated machines (the CLI runs in a worker thread with its
own event loop while the emulator runs on the test's)."""

from __future__ import annotations

from pathlib import Path

import yaml

from herder.emu.control.emulator import Emulator
from herder.talos.machine import MachineStage
from herder.talos.talosconfig import dump_talosconfig
from tests.emu.support import ClusterConfigs, herder_cli, wait_stage


async def test_machine_commands(emulator: Emulator, cluster_a: ClusterConfigs, tmp_path: Path) -> None:
    cp, worker = list(emulator.machines.values())[:2]
    talosconfig = tmp_path / "talosconfig"
    talosconfig.write_text(dump_talosconfig(cluster_a.talosconfig))
    (tmp_path / "cp.yaml").write_text(cluster_a.controlplane)
    (tmp_path / "worker.yaml").write_text(cluster_a.worker)
    auth = ["--talosconfig", str(talosconfig), "-e", cp.address]
    await wait_stage(emulator, cp, MachineStage.MAINTENANCE)
    await wait_stage(emulator, worker, MachineStage.MAINTENANCE)

    code, out, _ = await herder_cli("talos", "--insecure", "-e", cp.record.endpoint, "version")
    assert code == 0 and "Tag: v1.13.9" in out
    code, _, err = await herder_cli(
        "talos", "apply-config", "--insecure", "-e", cp.address, "-f", str(tmp_path / "nope")
    )
    assert code == 1 and err.startswith("error: cannot read")
    code, out, err = await herder_cli(
        "talos", "apply-config", "--insecure", "-n", cp.address, "-f", str(tmp_path / "cp.yaml")
    )
    assert code == 0, err
    code, out, err = await herder_cli(
        "talos", "apply-config", "-i", "-e", worker.address, "-f", str(tmp_path / "worker.yaml")
    )
    assert code == 0, err
    await wait_stage(emulator, cp, MachineStage.RUNNING)
    await wait_stage(emulator, worker, MachineStage.RUNNING)

    # Connection options may come before the command too, as with talosctl.
    code, out, err = await herder_cli("talos", *auth, "-n", worker.address, "services")
    assert code == 0 and "kubelet" in out, err
    code, out, err = await herder_cli("talos", "bootstrap", *auth)
    assert code == 0, err
    code, _, err = await herder_cli("talos", "bootstrap", *auth)
    assert code == 1 and "etcd data directory is not empty" in err
    code, out, err = await herder_cli("talos", "etcd", "members", *auth)
    assert code == 0 and cp.hostname in out, err
    code, out, err = await herder_cli("talos", "etcd", "forfeit-leadership", *auth)
    assert code == 0, err
    code, _, err = await herder_cli("talos", "etcd", "remove-member", "zz", *auth)
    assert code == 1 and "hexadecimal" in err
    code, out, err = await herder_cli("talos", "etcd", "snapshot", str(tmp_path / "db.snapshot"), *auth)
    assert code == 0 and (tmp_path / "db.snapshot").stat().st_size > 0, err
    code, out, err = await herder_cli("talos", "kubeconfig", str(tmp_path / "kubeconfig"), *auth)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "kubeconfig").read_text())["kind"] == "Config"
    code, out, err = await herder_cli("talos", "events", *auth, "--tail", "-1", "--duration", "0.5")
    assert code == 0 and "stage: RUNNING" in out, err
    code, out, err = await herder_cli(
        "talos", "upgrade", *auth, "-n", worker.address, "--image", "ghcr.io/siderolabs/installer:v1.14.0"
    )
    assert code == 0 and "Upgrade request received" in out, err
    await wait_stage(emulator, worker, MachineStage.UPGRADING)
    await wait_stage(emulator, worker, MachineStage.RUNNING)
    code, out, err = await herder_cli("talos", "reboot", *auth, "-n", worker.address)
    assert code == 0 and "rebooting" in out, err
    await wait_stage(emulator, worker, MachineStage.REBOOTING)
    await wait_stage(emulator, worker, MachineStage.RUNNING)
    code, out, err = await herder_cli("talos", "reset", *auth, "-n", worker.address, "--reboot")
    assert code == 0, err
    await wait_stage(emulator, worker, MachineStage.MAINTENANCE)
    code, out, err = await herder_cli("talos", "shutdown", *auth)
    assert code == 0, err
    await emulator.wait_for(lambda: not cp.record.powered_on, 5)
    code, _, err = await herder_cli("talos", "version", *auth, "--timeout", "2")
    assert code == 1 and err.startswith("error: ")
