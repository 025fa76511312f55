"""``python -m herder.bench proxy``: what herder's Kubernetes proxy costs, against going straight to the
emulated cluster's API in the same run.

One cluster is formed on the emulator. Then, through herder's proxy (an Admin's token) and straight to the
cluster (its break-glass admin kubeconfig), in turn:

- ``proxy.get.rate``: GETs of one ConfigMap per second by ``--clients`` concurrent clients, each on its
  own connection; the goal is a ratio of at least 0.5;
- ``proxy.get.p99_added``: the 99th percentile latency of one client's GETs, one after the other, through
  the proxy minus straight (what the proxy adds to each request when nothing queues), goal at most 5 ms;
- ``proxy.watch.rate``: events per second delivered to ``--watchers`` watches of ConfigMaps while one
  writer changes a ConfigMap as fast as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import ssl
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
import yaml

from herder.bench.clusters import (
    CONTROL_PLANES,
    KUBERNETES,
    TALOS,
    all_ready,
    create_all,
    fleet,
    new_object,
    until,
)
from herder.bench.report import emit, percentile
from herder.resources.clusters import CLUSTER, MACHINE_SET, control_plane_set_name
from herder.resources.machines import CLUSTER_LABEL
from herder.talos.pki import load_cert_chain

NAME = "bench-000"
CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"


@dataclass(frozen=True)
class Way:
    """One way to the cluster's API: a base URL and how to authenticate."""

    name: str
    url: str
    context: ssl.SSLContext
    headers: dict[str, str]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, verify=self.context, headers=self.headers, timeout=60)


def _context(ca: bytes, crt: bytes | None = None, key: bytes | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.decode())
    if crt is not None and key is not None:
        load_cert_chain(context, crt, key)
    return context


def _direct(kubeconfig: bytes) -> Way:
    doc = yaml.safe_load(kubeconfig)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    ca = base64.b64decode(cluster["certificate-authority-data"])
    crt = base64.b64decode(user["client-certificate-data"])
    key = base64.b64decode(user["client-key-data"])
    return Way("direct", cluster["server"], _context(ca, crt, key), {})


def _proxied(admin_kubeconfig: str) -> Way:
    doc = yaml.safe_load(admin_kubeconfig)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    ca = base64.b64decode(cluster["certificate-authority-data"])
    url = f"{cluster['server']}/k8s/clusters/default/{NAME}"
    return Way("proxy", url, _context(ca), {"Authorization": f"Bearer {user['token']}"})


async def _get_rate(way: Way, clients: int, seconds: float) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done
        async with way.client() as http:
            while time.monotonic() < stop:
                answer = await http.get(f"{CONFIG_MAPS}/bench")
                answer.raise_for_status()
                done += 1

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(clients)))
    return done / (time.monotonic() - started)


async def _latencies(way: Way, requests: int) -> list[float]:
    samples = []
    async with way.client() as http:
        for _ in range(requests):
            started = time.perf_counter()
            (await http.get(f"{CONFIG_MAPS}/bench")).raise_for_status()
            samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _watch_rate(way: Way, watchers: int, seconds: float) -> float:
    seen = 0
    ready = asyncio.Event()
    opened = 0

    async def watch(http: httpx.AsyncClient) -> None:
        nonlocal seen, opened
        async with http.stream(
            "GET", CONFIG_MAPS, params={"watch": "1", "fieldSelector": "metadata.name=bench"}
        ) as answer:
            opened += 1
            if opened == watchers:
                ready.set()
            async for line in answer.aiter_lines():
                if line:
                    seen += 1

    clients = [way.client() for _ in range(watchers)]
    tasks = [asyncio.create_task(watch(c)) for c in clients]
    try:
        await asyncio.wait_for(ready.wait(), 30)
        await asyncio.sleep(0.5)
        before = seen
        stop = time.monotonic() + seconds
        started = time.monotonic()
        async with way.client() as writer:
            n = 0
            while time.monotonic() < stop:
                n += 1
                patch = {"data": {"n": str(n)}}
                headers = {"Content-Type": "application/merge-patch+json"}
                (await writer.patch(f"{CONFIG_MAPS}/bench", json=patch, headers=headers)).raise_for_status()
        await asyncio.sleep(0.5)
        return (seen - before) / (time.monotonic() - started)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            await c.aclose()


async def _alternate(
    ways: tuple[Way, Way], measure: Callable[[Way], Awaitable[float]], rounds: int
) -> tuple[float, float]:
    """The median of ``rounds`` measurements of each way, taken in turn (the machine's load drifts)."""
    results: dict[str, list[float]] = {w.name: [] for w in ways}
    for _ in range(rounds):
        for way in ways:
            results[way.name].append(await measure(way))
    return statistics.median(results[ways[0].name]), statistics.median(results[ways[1].name])


async def run(clients: int, watchers: int, seconds: float, rounds: int, timeout: float) -> None:
    async with fleet("herder-bench-proxy-", 1, timeout) as site:
        own = site.machines_of(0)
        labels = {CLUSTER_LABEL: NAME}
        await create_all(
            site.client,
            [
                new_object(CLUSTER, NAME, {"talosVersion": TALOS, "kubernetesVersion": KUBERNETES}),
                new_object(
                    MACHINE_SET,
                    control_plane_set_name(NAME),
                    {"role": "controlplane", "machines": own[:CONTROL_PLANES]},
                    labels,
                ),
                new_object(
                    MACHINE_SET,
                    f"{NAME}-workers",
                    {"role": "worker", "machines": own[CONTROL_PLANES:]},
                    labels,
                ),
            ],
        )
        await until("the cluster Ready", time.monotonic() + timeout, lambda: all_ready(site.client, 1))
        direct = _direct(
            await site.client.run_action(CLUSTER, NAME, "kubeconfig", {"ttlSeconds": 3600}, "default")
        )
        proxy = _proxied((site.server.data_dir / "admin.kubeconfig").read_text())
        async with direct.client() as http:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "bench"},
                "data": {"n": "0"},
            }
            (await http.post(CONFIG_MAPS, json=body)).raise_for_status()
        ways = (proxy, direct)
        rate, baseline = await _alternate(ways, lambda w: _get_rate(w, clients, seconds), rounds)
        emit(
            "proxy.get.rate",
            rate,
            "req/s",
            baseline=baseline,
            clients=clients,
            goal_min_ratio=0.5,
            cores=os.cpu_count(),
        )
        samples: dict[str, list[float]] = {w.name: [] for w in ways}
        for _ in range(rounds):
            for way in ways:
                samples[way.name] += await _latencies(way, 300)
        added = percentile(samples["proxy"], 99) - percentile(samples["direct"], 99)
        emit(
            "proxy.get.p99_added",
            added,
            "ms",
            proxy_p99=round(percentile(samples["proxy"], 99), 3),
            direct_p99=round(percentile(samples["direct"], 99), 3),
            goal_max=5,
        )
        rate, baseline = await _alternate(ways, lambda w: _watch_rate(w, watchers, seconds), rounds)
        emit("proxy.watch.rate", rate, "events/s", baseline=baseline, watchers=watchers)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench proxy", description=__doc__)
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients of the GET rate")
    parser.add_argument("--watchers", type=int, default=10, help="watches of the watch rate")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each measurement runs")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each way, in turn")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to give up after")
    args = parser.parse_args(argv)
    asyncio.run(run(args.clients, args.watchers, args.seconds, args.rounds, args.timeout))
    return 0
