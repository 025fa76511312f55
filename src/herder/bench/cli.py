"""``python -m herder.bench cli``: how fast herder's everyday commands answer, against a running server.

The medians of ``--runs`` wall times (each a new process, as a user's shell starts it) of ``herder get
clusters``, ``herder --help``, ``herder describe``, ``herder apply`` and ``herder cluster kubeconfig``,
with, as the raw baseline measured in the same run against the same server, kubectl's ``get clusters``
(and ``kubectl --help`` for the help). The server is ``herder serve`` with an in-memory store and a few
clusters. Python's bytecode caches are written before the clock starts, as a user's first run writes
them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from herder.bench.clusters import Server
from herder.bench.report import emit
from herder.client import ApiError
from herder.resources import Resource
from herder.resources.clusters import CLUSTER
from herder.resources.configuration import CONFIG_PATCH

KUBECTL = "/usr/bin/kubectl"
HERDER = str(Path(sys.executable).with_name("herder"))
CLUSTERS = 3


def _wall(args: Sequence[str], env: dict[str, str], runs: int) -> float:
    """The median wall time of ``args`` as a new process, after one run that warms the caches."""
    times = []
    for attempt in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
        if attempt:
            times.append(took)
    return statistics.median(times)


async def _fleet(server: Server) -> None:
    """A few clusters (without machines) whose secrets are made, and a ConfigPatch to apply again."""
    client = await server.client()
    try:
        for i in range(CLUSTERS):
            await client.create(
                Resource.model_validate(
                    {
                        "apiVersion": CLUSTER.api_version,
                        "kind": CLUSTER.kind,
                        "metadata": {"name": f"bench-{i}", "namespace": "default"},
                        "spec": {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"},
                    }
                )
            )
        # The clusters' secrets are made (their kubeconfigs can be issued) before the clock starts.
        deadline = time.monotonic() + 120
        for i in range(CLUSTERS):
            while True:
                try:
                    await client.run_action(CLUSTER, f"bench-{i}", "kubeconfig", {"ttlSeconds": 60})
                    break
                except ApiError:
                    if time.monotonic() > deadline:
                        raise TimeoutError("the clusters' secrets were not made in time") from None
                    await asyncio.sleep(0.5)
    finally:
        await client.close()


def run(runs: int) -> None:
    # As a user runs the command: with bytecode caches (a first run writes them), not recompiling.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="herder-bench-cli-") as tmp:
        root = Path(tmp)
        server = Server(root / "server", CLUSTERS, ["--state", "memory://"])
        server.start()
        try:
            asyncio.run(_fleet(server))
            kubeconfig = str(server.data_dir / "admin.kubeconfig")
            manifest = root / "patch.yaml"
            manifest.write_text(
                f"apiVersion: {CONFIG_PATCH.api_version}\nkind: {CONFIG_PATCH.kind}\n"
                "metadata: {name: bench, namespace: default}\nspec: {data: 'machine: {}'}\n"
            )
            get = _wall([HERDER, "get", "clusters", "--kubeconfig", kubeconfig], env, runs)
            kubectl_get = _wall([KUBECTL, "--kubeconfig", kubeconfig, "get", "clusters"], env, runs)
            helped = _wall([HERDER, "--help"], env, runs)
            kubectl_help = _wall([KUBECTL, "--help"], env, runs)
            described = _wall(
                [HERDER, "describe", "cluster", "bench-0", "--kubeconfig", kubeconfig], env, runs
            )
            applied = _wall([HERDER, "apply", "-f", str(manifest), "--kubeconfig", kubeconfig], env, runs)
            credentials = _wall(
                [
                    HERDER,
                    "cluster",
                    "kubeconfig",
                    "bench-0",
                    "-o",
                    str(root / "c"),
                    "--kubeconfig",
                    kubeconfig,
                ],
                env,
                runs,
            )
        finally:
            server.stop()
    load = round(os.getloadavg()[0], 2)
    common = {"runs": runs, "goal_max": 0.2, "load_avg_1m": load}
    emit("cli.get.wall_s", get, "s", baseline=kubectl_get, higher_is_better=False, **common)
    emit("cli.help.wall_s", helped, "s", baseline=kubectl_help, higher_is_better=False, **common)
    emit("cli.describe.wall_s", described, "s", baseline=kubectl_get, higher_is_better=False, **common)
    emit("cli.apply.wall_s", applied, "s", baseline=kubectl_get, higher_is_better=False, **common)
    emit(
        "cli.cluster_kubeconfig.wall_s",
        credentials,
        "s",
        baseline=kubectl_get,
        higher_is_better=False,
        **common,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench cli", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (the median is printed)")
    args = parser.parse_args(argv)
    run(args.runs)
    return 0
