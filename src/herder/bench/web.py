"""``python -m herder.bench web``: the web UI's Clusters page with 100 clusters and 1,000 machines, and
its live updates under a stream of writes.

herder's API app and the UI over it run in this process on an SQLite store in a temporary directory, as
``herder serve`` wires them (the UI calls the API in-process as the signed-in user), with the objects
written straight into the store. The page is asked for through the UI's ASGI app, so the time is the
server's alone: the session check, the API's authentication, authorization and lists, and the rendering;
no TLS, no network. Then a page's event stream (``/ui/events``) follows the clusters while their statuses
are written at a fixed rate: the events it delivers per second are reported against the writes per
second (the baseline), with the delay from each write to its event.

Prints ``web_clusters_page_render`` (median, with p95; the target is under 300 ms) and
``web_live_updates`` (events/s against writes/s; with p95 latency).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from herder.api import tokens
from herder.api.app import build_app
from herder.api.audit import AuditLog
from herder.api.policy import HerderPolicy
from herder.api.serve import with_ui
from herder.bench.report import emit, percentile
from herder.resources import Resource
from herder.resources.access import SERVICE_ACCOUNT
from herder.resources.catalog import herder_registry
from herder.state.store import SYSTEM, Store
from herder.state.url import open_store
from herder.web.app import build
from herder.web.sessions import SESSION_COOKIE
from herder.web.transport import StreamingASGITransport

TALOS = "v1.13.9"
KUBERNETES = "1.33.0"
READY = [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": ""}]


def _object(kind: str, name: str, *, spec: Any = None, status: Any = None, **labels: str) -> Resource:
    data: dict[str, Any] = {
        "apiVersion": "herder.dev/v1alpha1" if kind != "ServiceAccount" else SERVICE_ACCOUNT.api_version,
        "kind": kind,
        "metadata": {"name": name, "labels": labels},
    }
    if kind != "ServiceAccount":
        data["metadata"]["namespace"] = "default"
    if spec is not None:
        data["spec"] = spec
    if status is not None:
        data["status"] = status
    return Resource.model_validate(data)


async def _fleet(store: Store, clusters: int, machines: int) -> None:
    per = max(1, machines // max(clusters, 1))
    for i in range(clusters):
        name = f"c{i:03d}"
        status: dict[str, Any] = {
            "phase": "Running",
            "machines": {"total": per, "ready": per},
            "conditions": READY,
        }
        spec = {"talosVersion": TALOS, "kubernetesVersion": KUBERNETES}
        await store.create(_object("Cluster", name, spec=spec, status=status), actor=SYSTEM)
        health: dict[str, Any] = {"etcd": {"quorum": True}, "conditions": READY}
        await store.create(_object("ControlPlaneStatus", name, status=health), actor=SYSTEM)
    for m in range(machines):
        labels = {"herder.dev/cluster": f"c{m // per:03d}"} if m // per < clusters else {}
        status = {
            "connected": True,
            "stage": "Running",
            "talosVersion": TALOS,
            "hardware": {"cpus": 4, "memoryMiB": 8192, "disks": [{"name": "sda", "size": 10**11}]},
        }
        uuid = f"00000000-0000-0000-0000-{m:012d}"
        spec = {"endpoint": f"10.0.{m // 250}.{m % 250 + 1}:50000"}
        await store.create(_object("Machine", uuid, spec=spec, status=status, **labels), actor=SYSTEM)


@contextlib.asynccontextmanager
async def signed_in(data: Path) -> AsyncIterator[tuple[Store, httpx.AsyncClient]]:
    """herder's API and UI in this process on an SQLite store in ``data``, wired as ``herder serve``
    wires them, and an HTTP client of the UI signed in as an Admin (the tests use it too)."""
    store = await open_store(f"sqlite://{data / 'herder.db'}", herder_registry(), key=b"\0" * 32)
    audit = AuditLog(store, data / "audit.log")
    try:
        policy = HerderPolicy(store, audit)
        ui = with_ui(build_app(store, policy), policy, build, None)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
        await store.create(Resource.model_validate(namespace), actor=SYSTEM)
        await store.create(_object("ServiceAccount", "bench", spec={"role": "Admin"}), actor=SYSTEM)
        token = (await tokens.issue(store, SERVICE_ACCOUNT, "bench")).token
        # A session as sign-in makes one (the login form's path is measured by the tests, not here).
        cookies = {SESSION_COOKIE: await _sign_in(ui, token)}
        transport = StreamingASGITransport(ui, ("127.0.0.1", 1), "bench")
        async with httpx.AsyncClient(
            transport=transport, base_url="https://bench/ui", cookies=cookies, timeout=60
        ) as http:
            yield store, http
    finally:
        audit.close()
        await store.close()


async def _run(args: argparse.Namespace, data: Path) -> None:
    async with signed_in(data) as (store, http):
        await _fleet(store, args.clusters, args.machines)
        await _render(http, args)
        await _live(http, store, args)


async def _sign_in(ui: Any, token: str) -> str:
    transport = StreamingASGITransport(ui, ("127.0.0.1", 1), "bench")
    async with httpx.AsyncClient(transport=transport, base_url="https://bench/ui") as http:
        form = await http.get("/login")
        csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
        http.cookies.update(form.cookies)
        answer = await http.post("/login", data={"csrf": csrf, "token": token})
        if answer.status_code != 303:
            raise RuntimeError(f"sign-in failed: {answer.status_code}")
        return answer.cookies[SESSION_COOKIE]


async def _render(http: httpx.AsyncClient, args: argparse.Namespace) -> None:
    samples = []
    for i in range(args.renders + 2):
        start = time.perf_counter()
        page = await http.get("/clusters")
        elapsed = (time.perf_counter() - start) * 1000
        if page.status_code != 200 or f"{args.clusters} cluster" not in page.text:
            raise RuntimeError(f"the clusters page answered {page.status_code}: {page.text[:300]}")
        if i >= 2:  # the first renders load the templates and warm the store's caches
            samples.append(elapsed)
    emit(
        "web_clusters_page_render",
        statistics.median(samples),
        "ms",
        higher_is_better=False,
        p95=round(percentile(samples, 95), 3),
        clusters=args.clusters,
        machines=args.machines,
        bytes=len(page.content),
    )


async def _live(http: httpx.AsyncClient, store: Store, args: argparse.Namespace) -> None:
    page = (await http.get("/clusters")).text
    rv = page.split('data-rv="')[1].split('"')[0]
    written: dict[str, float] = {}
    latencies: list[float] = []
    received = 0
    total = int(args.write_rate * args.seconds)

    async def listen() -> None:
        nonlocal received
        params = {"watch": "clusters", "rv": rv}
        async with http.stream("GET", "/events", params=params) as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data: "):
                    continue
                change = json.loads(line[6:])
                sent = written.pop(change["rv"], None)
                if sent is not None:
                    latencies.append((time.perf_counter() - sent) * 1000)
                received += 1
                if received >= total:
                    return

    listening = asyncio.create_task(listen())
    await asyncio.sleep(0.2)
    clusters = [await store.get("Cluster", f"c{i:03d}", "default") for i in range(min(args.clusters, 20))]
    start = time.perf_counter()
    for n in range(total):
        due = start + n / args.write_rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        obj = clusters[n % len(clusters)]
        status = dict(obj.status or {})
        status["observedGeneration"] = n + 1
        changed = obj.model_copy(update={"status": status})
        changed.metadata.resource_version = None
        sent = time.perf_counter()
        done = await store.update_status(changed, actor=SYSTEM)
        written[done.metadata.resource_version or ""] = sent
    writes_per_second = total / (time.perf_counter() - start)
    try:
        await asyncio.wait_for(listening, timeout=30)
    except TimeoutError:
        listening.cancel()
    elapsed = time.perf_counter() - start
    emit(
        "web_live_updates",
        received / elapsed,
        "events/s",
        baseline=writes_per_second,
        delivered=received,
        written=total,
        latency_p95_ms=round(percentile(latencies, 95), 3),
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench web")
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--renders", type=int, default=20, help="renders of the page measured")
    parser.add_argument("--write-rate", type=float, default=200.0, help="cluster status writes per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the writes go on")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="herder-bench-web-") as data:
        asyncio.run(_run(args, Path(data)))
    return 0
