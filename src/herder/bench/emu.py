"""``python -m herder.bench emu [--machines N]``: the Talos emulator at scale.

Starts ``herder emu run`` with N machines (1,000 by default) as a child process and prints: the
emulator's RSS, the time from its start until every machine answers Version, and the time until N
ApplyConfiguration calls (herder's client, 50 in flight; 3 control planes and N-3 workers of one
cluster) have every machine running, as the emulator's control API reports stages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from herder.bench import emu_clusters
from herder.bench.report import emit
from herder.emu.control.process import EmulatorProcess
from herder.emu.options import spare_network
from herder.talos.contracts import VersionContract
from herder.talos.generate import generate_bundle
from herder.talos.generate_input import ConfigInput
from herder.talos.machine import MachineAPIError, MachineClient
from herder.talos.secrets import generate_secrets

CONTROL_PLANES = 3


async def _bounded(n: int, in_flight: int, job: Callable[[int], Awaitable[None]]) -> None:
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            await job(i)

    await asyncio.gather(*(one(i) for i in range(n)))


async def _version_until_answered(endpoint: str, deadline: float) -> None:
    pause = 0.1
    while True:
        try:
            async with MachineClient.insecure(endpoint, timeout=10, retries=0) as client:
                await client.version()
                return
        except MachineAPIError:
            if time.monotonic() > deadline:
                raise
            # A machine still booting refuses connections; polling it hard would only slow the others.
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)


async def run(machines: int, in_flight: int, timeout: float) -> None:
    contract = VersionContract.parse("1.13")
    bundle = generate_bundle(
        ConfigInput(
            cluster_name="bench",
            endpoint="https://bench.invalid:6443",
            kubernetes_version="1.33.0",
            contract=contract,
            secrets=generate_secrets(contract),
        )
    )
    with tempfile.TemporaryDirectory(prefix="herder-bench-emu-") as tmp:
        emulator = EmulatorProcess(data_dir=Path(tmp), machines=machines, machine_cidr=spare_network())
        load = round(os.getloadavg()[0], 2)
        started = time.monotonic()
        emulator.start()
        try:
            await emulator.wait_ready(timeout)
            endpoints = [m["endpoint"] for m in emulator.published()]
            deadline = started + timeout
            await _bounded(
                len(endpoints), in_flight, lambda i: _version_until_answered(endpoints[i], deadline)
            )
            answered = time.monotonic() - started
            cpu_answered = emulator.cpu_seconds()
            rss_idle = emulator.rss_mib()

            apply_started = time.monotonic()

            async def apply(i: int) -> None:
                config = bundle.controlplane if i < CONTROL_PLANES else bundle.worker
                async with MachineClient.insecure(endpoints[i], timeout=60, retries=0) as client:
                    await client.apply_configuration(config)

            await _bounded(len(endpoints), in_flight, apply)
            while True:
                stages = [m["stage"] for m in await emulator.control("GET", "/machines")]
                if all(s == "RUNNING" for s in stages):
                    break
                if time.monotonic() - apply_started > timeout:
                    raise TimeoutError(f"not all machines running after {timeout}s")
                await asyncio.sleep(0.2)
            running = time.monotonic() - apply_started
            cpu_running = emulator.cpu_seconds()
            rss = max(rss_idle, emulator.rss_mib())
        finally:
            emulator.stop()
    # The host is shared: the load and the CPU each side used say how much of a wall time is this run's.
    emit("emu_rss", rss, "MiB", machines=machines, goal_max=300)
    emit(
        "emu_all_answer_version",
        answered,
        "s",
        machines=machines,
        goal_max=10,
        emulator_cpu_s=round(cpu_answered, 2),
        load_avg_1m=load,
    )
    emit(
        "emu_apply_until_all_running",
        running,
        "s",
        machines=machines,
        in_flight=in_flight,
        goal_max=60,
        emulator_cpu_s=round(cpu_running - cpu_answered, 2),
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench emu", description=__doc__)
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--clusters",
        type=int,
        default=0,
        help="instead: form this many clusters of 3 control planes and 2 workers (see bench.emu_clusters)",
    )
    args = parser.parse_args(argv)
    if args.clusters:
        asyncio.run(emu_clusters.run(args.clusters, args.in_flight, args.timeout))
        return 0
    asyncio.run(run(args.machines, args.in_flight, args.timeout))
    return 0
