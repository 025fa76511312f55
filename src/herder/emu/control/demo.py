"""The emulator as ``herder demo`` runs it: in the server's process, with five machines of which a
three-control-plane, two-worker cluster is formed once (and kept across restarts), its talosconfig and
kubeconfig written where the user can reach them with talosctl-style commands and kubectl."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from herder.emu.control.emulator import Emulator
from herder.emu.control.formation import cluster_configs, form_cluster
from herder.emu.control.run import serve
from herder.emu.options import EmulatorOptions
from herder.talos.talosconfig import dump_talosconfig

log = logging.getLogger("herder.demo")

CLUSTER = "demo"
CONTROL_PLANES = 3
WORKERS = 2


class DemoEmulator:
    """Background work for ``herder serve``: run the emulator until stopped."""

    def __init__(self, directory: Path, *, listen: tuple[str, int] = ("127.0.0.1", 50080)) -> None:
        self.directory = directory
        self.listen = listen
        self._stop = asyncio.Event()

    @property
    def cluster_dir(self) -> Path:
        return self.directory / CLUSTER

    async def run(self) -> None:
        options = EmulatorOptions(data_dir=self.directory / "emulator", machines=CONTROL_PLANES + WORKERS)
        await serve(options, *self.listen, stop=self._stop, ready=self._form)

    def stop(self) -> None:
        self._stop.set()

    async def _form(self, emulator: Emulator) -> None:
        kubeconfig = self.cluster_dir / "kubeconfig"
        if kubeconfig.exists():
            log.info("demo cluster: kubectl --kubeconfig %s get nodes", kubeconfig)
            return
        machines = [m for m in emulator.machines.values() if m.config is None][: CONTROL_PLANES + WORKERS]
        if len(machines) < CONTROL_PLANES + WORKERS:
            log.warning(
                "demo cluster: not enough free emulated machines; remove %s to start over", self.directory
            )
            return
        control_planes, workers = machines[:CONTROL_PLANES], machines[CONTROL_PLANES:]
        # As on real hardware, the first control plane's address is the cluster endpoint.
        configs = await asyncio.to_thread(
            cluster_configs, CLUSTER, f"https://{control_planes[0].address}:6443"
        )
        self.cluster_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, text in (
            ("controlplane.yaml", configs.controlplane),
            ("worker.yaml", configs.worker),
            ("talosconfig", dump_talosconfig(configs.talosconfig)),
        ):
            _write_private(self.cluster_dir / name, text.encode())
        _write_private(kubeconfig, await form_cluster(emulator, configs, control_planes, workers))
        log.warning(
            "demo cluster %r formed on the emulator: kubectl --kubeconfig %s get nodes; "
            "herder talos --talosconfig %s -e %s -n %s version",
            CLUSTER,
            kubeconfig,
            self.cluster_dir / "talosconfig",
            control_planes[0].record.endpoint,
            control_planes[0].address,
        )


def _write_private(path: Path, data: bytes) -> None:
    # Written aside, then renamed: whoever waits for the file never reads half of it.
    partial = path.with_name(path.name + ".partial")
    partial.touch(mode=0o600)
    partial.write_bytes(data)
    os.replace(partial, path)
