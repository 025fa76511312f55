"""``python -m herder.bench emu --clusters N``: N emulated clusters of 3 control planes and 2 workers in one
emulator (100 by default).

Each cluster's secrets and configs come from herder's Talos library (made before the clock starts, on
every core), with the first control plane's API server (``https://IP:6443``) as the cluster endpoint.
Then, as herder would drive them: the configs are applied through the Talos API (herder's client, 50 in
flight), the first control plane of each cluster is bootstrapped once it runs, and each cluster's admin
kubeconfig is fetched through the Talos API. A cluster is Ready when its etcd has 3 healthy members (the
emulator's control API) and its emulated Kubernetes API, reached with that kubeconfig, lists 5 Ready
nodes. Prints the emulator's RSS and the time from the first apply until every cluster is Ready.
"""

from __future__ import annotations

import asyncio
import base64
import multiprocessing
import os
import ssl
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from herder.bench.report import emit
from herder.emu.control.process import EmulatorProcess
from herder.emu.options import spare_network
from herder.talos.contracts import VersionContract
from herder.talos.generate import GeneratedBundle, generate_bundle
from herder.talos.generate_input import ConfigInput
from herder.talos.machine import MachineAPIError, MachineClient
from herder.talos.secrets import generate_secrets

CONTROL_PLANES = 3
WORKERS = 2
CONTRACT = "1.13"


def _bundle(name: str, endpoint: str) -> GeneratedBundle:
    contract = VersionContract.parse(CONTRACT)
    return generate_bundle(
        ConfigInput(
            cluster_name=name,
            endpoint=endpoint,
            kubernetes_version="1.33.0",
            contract=contract,
            secrets=generate_secrets(contract),
        )
    )


async def _retry(call: Any, deadline: float) -> Any:
    """A call to a machine that may still be coming up (refusing connections or not yet configured)."""
    pause = 0.1
    while True:
        try:
            return await call()
        except MachineAPIError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)


def _tls(kubeconfig: bytes, directory: Path) -> tuple[str, ssl.SSLContext]:
    config = yaml.safe_load(kubeconfig)
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    pem = directory / f"{os.urandom(6).hex()}.pem"
    pem.write_bytes(
        base64.b64decode(user["client-certificate-data"]) + base64.b64decode(user["client-key-data"])
    )
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    context.load_cert_chain(str(pem))
    pem.unlink()
    return str(cluster["server"]), context


async def _cluster_ready(
    bundle: GeneratedBundle, endpoints: list[str], directory: Path, gate: asyncio.Semaphore, deadline: float
) -> None:
    """Apply, bootstrap, fetch the kubeconfig, and wait until 5 nodes are Ready."""
    for i, endpoint in enumerate(endpoints):
        config = bundle.controlplane if i < CONTROL_PLANES else bundle.worker
        async with gate, MachineClient.insecure(endpoint, timeout=60, retries=0) as client:
            # A machine still booting refuses connections until its maintenance service is up.
            await _retry(lambda c=client, text=config: c.apply_configuration(text), deadline)
    async with MachineClient.from_talosconfig(bundle.talosconfig, endpoint=endpoints[0], retries=0) as client:
        await _retry(client.bootstrap, deadline)
        kubeconfig = await _retry(client.kubeconfig, deadline)
    server, context = _tls(kubeconfig, directory)
    async with httpx.AsyncClient(base_url=server, verify=context, timeout=30) as http:
        while True:
            try:
                nodes = (await http.get("/api/v1/nodes")).json().get("items", [])
            except httpx.TransportError:
                nodes = []
            ready = [
                n
                for n in nodes
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
            ]
            if len(ready) == CONTROL_PLANES + WORKERS:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{server}: {len(ready)} nodes Ready")
            await asyncio.sleep(0.5)


async def _etcd_ready(emulator: EmulatorProcess, clusters: int, deadline: float) -> None:
    while True:
        summaries = await emulator.control("GET", "/clusters")
        healthy = [
            s
            for s in summaries
            if s["quorum"] and sum(1 for m in s["members"] if m["healthy"]) == CONTROL_PLANES
        ]
        if len(healthy) == clusters:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(healthy)} of {clusters} clusters have a healthy etcd")
        await asyncio.sleep(0.5)


async def run(clusters: int, in_flight: int, timeout: float) -> None:
    size = CONTROL_PLANES + WORKERS
    names = [f"bench-{i}" for i in range(clusters)]
    with tempfile.TemporaryDirectory(prefix="herder-bench-emu-clusters-") as tmp:
        emulator = EmulatorProcess(
            data_dir=Path(tmp) / "emu",
            machines=clusters * size,
            machine_cidr=spare_network(),
        )
        (Path(tmp) / "emu").mkdir()
        emulator.start()
        try:
            await emulator.wait_ready(timeout)
            published = emulator.published()
            endpoints = [m["endpoint"] for m in published]
            # As on hardware without a load balancer: the first control plane's API server is the endpoint.
            apis = [f"https://{published[i * size]['node']}:6443" for i in range(clusters)]
            setup = time.monotonic()
            # Spawned, not forked: a fork of a process that runs gRPC's threads (this one, or the pytest worker
            # that runs it) can hang in the child.
            with ProcessPoolExecutor(mp_context=multiprocessing.get_context("spawn")) as pool:
                bundles = list(pool.map(_bundle, names, apis))
            generated = time.monotonic() - setup
            gate = asyncio.Semaphore(in_flight)
            started = time.monotonic()
            deadline = started + timeout
            await asyncio.gather(
                *(
                    _cluster_ready(bundle, endpoints[i * size : (i + 1) * size], Path(tmp), gate, deadline)
                    for i, bundle in enumerate(bundles)
                )
            )
            await _etcd_ready(emulator, clusters, deadline)
            ready = time.monotonic() - started
            rss = emulator.rss_mib()
        finally:
            emulator.stop()
    emit("emu_clusters_rss", rss, "MiB", clusters=clusters, machines=clusters * size)
    emit("emu_clusters_until_all_ready", ready, "s", clusters=clusters, in_flight=in_flight)
    emit("emu_clusters_config_generation", generated, "s", clusters=clusters, cores=os.cpu_count())
