"""``python -m herder.bench steady --clusters 1000``: what a formed fleet costs at rest.

herder forms N clusters of 1 control plane and 1 worker on one emulator (as ``herder.bench clusters``
forms its clusters), waits ``--settle`` seconds once every Cluster is Ready, then measures over
``--window`` seconds in which nothing is asked of it: the server's CPU (% of one core) and RSS, the store
writes it made per minute (from its own metrics), the Talos API calls the emulator's machines answered
per minute (the emulator's ``/summary``) and the emulator's RSS; with the CPU, the reconciles a minute
by controller, which tell where it went. The settling starts once the server has made again the spare
RSA keys the clusters took (``--spare-keys``: a second of CPU each, at the lowest priority), as a
herder that has been running has them; how long that took is printed apart. Goals at 1,000 clusters: CPU ≤ 50 %,
RSS ≤ 2 GiB, at most one write per cluster a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from herder.bench.clusters import Fleet, fleet, form, spare_keys_ready, until
from herder.bench.report import emit

GOAL_CPU_PERCENT = 50.0
GOAL_RSS_MIB = 2048.0


async def _talos_calls(site: Fleet) -> int:
    summary: dict[str, Any] = await site.emulator.control("GET", "/summary")
    return int(summary["apiCalls"])


def _per_minute(after: dict[str, float], before: dict[str, float], per_minute: float) -> dict[str, float]:
    """What a counter gained by label, a minute, the most first (labels that gained nothing left out)."""
    gained = {k: (v - before.get(k, 0.0)) * per_minute for k, v in after.items() if v > before.get(k, 0.0)}
    return {k: round(v, 1) for k, v in sorted(gained.items(), key=lambda i: -i[1])}


async def run(clusters: int, timeout: float, settle: float, window: float) -> None:
    async with fleet("herder-bench-steady-", clusters, timeout, control_planes=1, workers=1) as site:
        await form(site, clusters, timeout)
        formed = time.monotonic()
        await until(
            f"{clusters} spare keys made again",
            formed + timeout,
            lambda: spare_keys_ready(site.clients, clusters),
        )
        emit("steady.spare_keys_made_again_after", time.monotonic() - formed, "s", keys=clusters)
        await asyncio.sleep(settle)
        before = await site.counters()
        calls = await _talos_calls(site)
        cpu = site.server.cpu_seconds()
        started = time.monotonic()
        await asyncio.sleep(window)
        elapsed = time.monotonic() - started
        cpu = site.server.cpu_seconds() - cpu
        calls = await _talos_calls(site) - calls
        after = await site.counters()
        per_minute = 60 / elapsed
        written, reconciled = (_per_minute(a, b, per_minute) for a, b in zip(after, before, strict=True))
        emit(
            "steady.cpu_percent",
            100 * cpu / elapsed,
            "%",
            clusters=clusters,
            window=round(elapsed, 1),
            cores=os.cpu_count(),
            load=round(os.getloadavg()[0], 2),
            goal_max_at_1000=GOAL_CPU_PERCENT,
            reconciles_per_minute=reconciled,
        )
        emit("steady.rss_mib", site.server.rss_mib(), "MiB", clusters=clusters, goal_max_at_1000=GOAL_RSS_MIB)
        emit(
            "steady.writes_per_minute",
            sum(written.values(), 0.0),
            "writes/min",
            clusters=clusters,
            goal_max=clusters,
            by_kind=written,
        )
        emit("steady.talos_calls_per_minute", calls * per_minute, "calls/min", clusters=clusters)
        emit("steady.emulator_rss_mib", site.emulator.rss_mib(), "MiB", clusters=clusters)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench steady", description=__doc__)
    parser.add_argument("--clusters", type=int, default=100, help="clusters of 1 control plane and 1 worker")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to give up forming them after")
    parser.add_argument(
        "--settle",
        type=float,
        default=90,
        help="seconds left alone once all are Ready, before measuring (the probes of a healthy control "
        "plane slow down to once a minute in about 70)",
    )
    parser.add_argument("--window", type=float, default=60, help="seconds measured")
    args = parser.parse_args(argv)
    asyncio.run(run(args.clusters, args.timeout, args.settle, args.window))
    return 0
