"""What the emulator and machine API tests share: cluster configs made with herder's Talos library, an
in-process emulator on a loopback network of its own, and small helpers to edit configs and wait."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any

import grpc
from typer.testing import CliRunner

from herder.cli.main import build
from herder.emu.control import formation
from herder.emu.control.emulator import Emulator
from herder.emu.control.formation import ClusterConfigs, bring_up
from herder.emu.machine.lifecycle import Machine
from herder.emu.options import EmulatorOptions
from herder.emu.timings import Timings
from herder.talos.contracts import VersionContract
from herder.talos.documents import dump_documents, is_legacy, load_documents
from herder.talos.machine import MachineClient, MachineStage, tls
from herder.talos.machine.tunnel import ClientTunnel
from herder.talos.secrets import SecretsBundle, generate_secrets
from tests.api.server import random_cidr

# ClusterConfigs and bring_up are the operator's tools from herder.emu.control.formation, shared here.
__all__ = [
    "CONTRACT",
    "ClusterConfigs",
    "admin",
    "bring_up",
    "cluster_configs",
    "edit_config",
    "herder_cli",
    "random_cidr",
    "raw_channel",
    "running_emulator",
    "wait_stage",
]

CONTRACT = VersionContract.parse("1.13")


@cache
def _secrets(name: str, contract: VersionContract) -> SecretsBundle:
    # Cached: generating the secrets costs an RSA-4096 key.
    return generate_secrets(contract)


@cache
def cluster_configs(
    name: str,
    endpoint: str | None = None,
    *,
    contract: VersionContract = CONTRACT,
    kubernetes_version: str = "1.33.0",
) -> ClusterConfigs:
    """Configs of one cluster (the same secrets for one name and contract) for its endpoint: by default
    ``https://NAME.example:6443``, which nothing serves (enough for the Talos API)."""
    return formation.cluster_configs(
        name,
        endpoint or f"https://{name}.example:6443",
        talos_version=str(contract),
        kubernetes_version=kubernetes_version,
        secrets=_secrets(name, contract),
    )


def edit_config(text: str, change: Callable[[dict[str, Any]], None]) -> str:
    """The config with its v1alpha1 document changed in place by ``change``."""
    documents = load_documents(text)
    change(next(d for d in documents if isinstance(d, dict) and is_legacy(d)))
    return dump_documents(documents)


@asynccontextmanager
async def running_emulator(
    data_dir: Path, machines: int, *, cidr: str | None = None, timings: Timings | None = None
) -> AsyncIterator[Emulator]:
    emulator = Emulator(
        EmulatorOptions(
            data_dir=data_dir,
            machines=machines,
            machine_cidr=cidr or random_cidr(),
            timings=timings or Timings(),
        )
    )
    await emulator.start()  # a start that fails has nothing to stop
    try:
        yield emulator
    finally:
        await emulator.stop()


async def wait_stage(
    emulator: Emulator, machine: Machine, stage: MachineStage, timeout: float = 10.0
) -> None:
    await emulator.wait_for(lambda: machine.stage is stage, timeout)


def admin(configs: ClusterConfigs, machine: Machine, **options: Any) -> MachineClient:
    return MachineClient.from_talosconfig(configs.talosconfig, endpoint=machine.record.endpoint, **options)


@asynccontextmanager
async def raw_channel(configs: ClusterConfigs, machine: Machine) -> AsyncIterator[grpc.aio.Channel]:
    """A gRPC channel to a machine's apid with the cluster's admin certificate, for calls herder's client
    does not make (raw metadata, raw replies)."""
    context = configs.talosconfig.current()
    tunnel = ClientTunnel(
        machine.address,
        machine.record.port,
        tls.client_context(context.ca, context.crt, context.key),
        server_hostname=machine.address,
    )
    port = await tunnel.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await tunnel.close()


async def herder_cli(*args: str) -> tuple[int, str, str]:
    """``herder ARGS`` in a worker thread (its own event loop, as from a shell): exit code, stdout, stderr."""
    result = await asyncio.to_thread(CliRunner().invoke, build(), list(args))
    return result.exit_code, result.stdout, result.stderr
