"""``python -m herder.bench upgrades --clusters 20``: N Omni-format cluster templates of 3 control planes
and 2 workers are synced with ``herder cluster template sync`` (as a user's GitOps job runs it), then all
of them are upgraded to the next Talos minor at once by syncing the templates again.

Prints the time until every cluster is Ready with every machine on the new version and no rollout left,
and the store writes and reconciles per machine that the upgrade cost (counted from the server's own
metrics, from the second sync on). The sync to Ready beforehand is timed too, for reference.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from herder.bench.clusters import (
    CONTROL_PLANES,
    KUBERNETES,
    TALOS,
    Fleet,
    all_ready,
    emit_costs,
    fleet,
    until,
)
from herder.bench.report import emit
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE

TARGET = "v1.14.1"
# Syncs run this many at a time: each is a CLI process, as a GitOps runner would start them.
SYNCS_AT_ONCE = 4


def template(name: str, machines: list[str], talos: str) -> str:
    documents = [
        {
            "kind": "Cluster",
            "name": name,
            "kubernetes": {"version": f"v{KUBERNETES}"},
            "talos": {"version": talos},
        },
        {"kind": "ControlPlane", "machines": machines[:CONTROL_PLANES]},
        {"kind": "Workers", "machines": machines[CONTROL_PLANES:]},
    ]
    return yaml.safe_dump_all(documents, sort_keys=False)


async def _sync_all(site: Fleet, folder: Path, clusters: int, talos: str) -> None:
    kubeconfig = site.server.data_dir / "admin.kubeconfig"
    gate = asyncio.Semaphore(SYNCS_AT_ONCE)

    async def sync(i: int) -> None:
        path = folder / f"bench-{i:03d}.yaml"
        path.write_text(template(f"bench-{i:03d}", site.machines_of(i), talos))
        async with gate:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                "from herder.cli.main import main; main()",
                "cluster",
                "template",
                "sync",
                "-f",
                str(path),
                "--kubeconfig",
                str(kubeconfig),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"sync of {path.name} failed: {err.decode().strip()}")

    await asyncio.gather(*(sync(i) for i in range(clusters)))


async def _all_upgraded(site: Fleet, clusters: int) -> bool:
    members = await site.client.list(CLUSTER_MACHINE)
    on_target = sum(1 for m in members.items if (m.status or {}).get("talosVersion") == TARGET)
    if on_target < len(site.uuids):
        return False
    listed = await site.client.list(CLUSTER)
    rolling = any(
        r.get("state") != "Done" for c in listed.items for r in ((c.status or {}).get("rollouts") or [])
    )
    return not rolling and await all_ready(site.client, clusters)


async def run(clusters: int, timeout: float) -> None:
    async with fleet("herder-bench-upgrades-", clusters, timeout) as site:
        with tempfile.TemporaryDirectory(prefix="herder-bench-templates-") as folder:
            started = time.monotonic()
            await _sync_all(site, Path(folder), clusters, TALOS)
            await until(
                f"{clusters} clusters Ready",
                time.monotonic() + timeout,
                lambda: all_ready(site.client, clusters),
            )
            emit("upgrades_sync_until_all_ready", time.monotonic() - started, "s", clusters=clusters)

            before = await site.counters()
            started = time.monotonic()
            await _sync_all(site, Path(folder), clusters, TARGET)
            await until(
                f"{clusters} clusters upgraded to {TARGET}",
                time.monotonic() + timeout,
                lambda: _all_upgraded(site, clusters),
            )
            emit(
                "upgrades_until_all_upgraded",
                time.monotonic() - started,
                "s",
                clusters=clusters,
                machines=len(site.uuids),
                fromVersion=TALOS,
                toVersion=TARGET,
                cores=os.cpu_count(),
            )
            emit_costs("upgrades", site, before, await site.counters())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench upgrades", description=__doc__)
    parser.add_argument(
        "--clusters", type=int, default=20, help="templates of 3 control planes and 2 workers"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds to give up after, per phase")
    args = parser.parse_args(argv)
    asyncio.run(run(args.clusters, args.timeout))
    return 0
