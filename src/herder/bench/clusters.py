"""``python -m herder.bench clusters --clusters 100``: herder forms N clusters of 3 control planes and 2
workers on one emulator, through its API, as users would ask for them.

A real ``herder serve`` (embedded SQLite, its load balancers on loopback) and the emulator run as
separate processes. The emulator's machines are registered with herder (MachineRegistrations, as
``herder machine add`` makes them) and, once every Machine is connected and the server has made its
spare RSA keys (one per cluster, as a herder that has been running has them; the time that takes is
printed apart), each cluster is created with
a control plane set listing 3 machines and a worker set listing 2. The clock runs from the first
cluster's creation until every Cluster's ``Ready`` condition is True. Prints that time, the RSS of the
server and of the emulator, and the store writes and reconciles per machine the clusters cost (counted
from the server's own metrics, registration excluded), and the CPU time both processes used while the
clusters formed and then, idle, over ``--idle`` seconds of a formed fleet (what following the machines
costs at rest).

With ``--replicas R`` the state is one etcd (Debian's etcd-server, started here on loopback) and R servers
share the controllers' work by shards (``herder serve --shards``, ``--shards S``): each replica's share of
the reconciles and the shards it held are printed; writes and reconciles per machine are all replicas'.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herder.bench.report import emit
from herder.client import Client
from herder.emu.control.process import EmulatorProcess
from herder.emu.options import spare_network
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, MACHINE_SET, control_plane_set_name
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_REGISTRATION, registration_name
from herder.resources.status import condition_true
from herder.state.etcd_process import EtcdCluster
from herder.state.free_ports import free_port

CONTROL_PLANES = 3
WORKERS = 2
TALOS = "v1.13.9"
KUBERNETES = "1.33.0"


class Server:
    """``herder serve`` as a child process, ended by its PID."""

    def __init__(
        self, data_dir: Path, clusters: int, extra: Sequence[str] = (), *, first_endpoint: int | None = None
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port(32000, 32767)
        # Below Linux's ephemeral ports (32768 on), which outgoing connections may hold.
        first = first_endpoint or endpoint_ports(clusters)
        self.args = [
            sys.executable,
            "-c",
            "from herder.cli.main import main; main()",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            # A free port of its own for the Talos API gateway (by default the API's + 1, which another
            # process may hold).
            "--talos-listen",
            f"127.0.0.1:{free_port(32000, 32767)}",
            "--cluster-endpoints",
            f"127.0.0.1:{first}-{first + clusters + 10}",
            # Every cluster's secrets need an RSA key: made while the machines register, as a running
            # herder makes them while idle (see controllers.clusters.key_pool).
            "--spare-keys",
            str(clusters),
            *extra,
        ]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self) -> None:
        log = self.log.open("wb")
        self.process = subprocess.Popen(
            self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    async def client(self, timeout: float = 60) -> Client:
        kubeconfig = self.data_dir / "admin.kubeconfig"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                # Its last words say why (a port taken, a bad flag): the log goes with the temporary folder.
                log = self.log.read_text(errors="replace").strip()
                last = "\n".join(log.splitlines()[-5:])
                raise RuntimeError(f"herder serve exited with {self.process.returncode}:\n{last}")
            if kubeconfig.exists():
                client = Client.from_kubeconfig(kubeconfig)
                try:
                    await client.list("namespaces")
                    return client
                except Exception:
                    await client.close()
            await asyncio.sleep(0.2)
        raise TimeoutError("herder serve did not come up")

    def cpu_seconds(self) -> float:
        """User and system CPU time the server has used so far."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def endpoint_ports(clusters: int) -> int:
    """The first of the ports the servers' load balancers take for ``clusters`` clusters: below Linux's
    ephemeral ports (32768 on), which outgoing connections may hold."""
    return random.randrange(10000, 32000 - clusters - 10, 100)


async def _metrics(client: Client) -> list[str]:
    """The lines of the server's /metrics."""
    response = await client._http.get("/metrics")
    response.raise_for_status()
    return response.text.splitlines()


async def read_counters(client: Client, name: str, label: str) -> dict[str, float]:
    """A Prometheus counter from the server's /metrics, summed by one of its labels."""
    out: dict[str, float] = {}
    for line in await _metrics(client):
        if not line.startswith(name + "{"):
            continue
        labels, _, value = line[len(name) + 1 :].rpartition("} ")
        found = next(
            (p.split("=", 1)[1].strip('"') for p in labels.split(",") if p.startswith(label + "=")), ""
        )
        out[found] = out.get(found, 0.0) + float(value)
    return out


async def _gauge(client: Client, name: str) -> float:
    """A Prometheus gauge without labels from the server's /metrics (0 when it is not there)."""
    for line in await _metrics(client):
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def per_machine(after: dict[str, float], before: dict[str, float], machines: int) -> dict[str, float]:
    return {
        k: round((v - before.get(k, 0.0)) / machines, 1)
        for k, v in sorted(after.items(), key=lambda i: -i[1])
    }


def new_object(info: Any, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": info.api_version,
            "kind": info.kind,
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": spec,
        }
    )


async def create_all(client: Client, objects: list[Resource], width: int = 50) -> None:
    """Create objects ``width`` at a time, as a busy client would: the Clusters first, which their machine
    sets' admission wants to exist."""
    for batch in (
        [o for o in objects if o.kind == CLUSTER.kind],
        [o for o in objects if o.kind != CLUSTER.kind],
    ):
        for i in range(0, len(batch), width):
            await asyncio.gather(*(client.create(obj) for obj in batch[i : i + width]))


@dataclass
class Fleet:
    """A running server and emulator whose machines are registered with the server and connected."""

    client: Client
    server: Server
    emulator: EmulatorProcess
    uuids: list[str]
    """The machines' UUIDs, sorted: cluster ``i`` takes the ``i``-th run of ``control_planes + workers``."""
    control_planes: int = CONTROL_PLANES
    workers: int = WORKERS
    replicas: list[Server] = field(default_factory=list)
    """Every server (the first is ``server``)."""
    clients: list[Client] = field(default_factory=list)
    """An Admin's client of each server (the first is ``client``)."""

    def machines_of(self, i: int) -> list[str]:
        per = self.control_planes + self.workers
        return self.uuids[i * per : i * per + per]

    async def counters(self) -> tuple[dict[str, float], dict[str, float]]:
        """Store writes by kind and reconciles by controller, so far, of every replica."""
        writes: dict[str, float] = {}
        reconciles: dict[str, float] = {}
        for client in self.clients or [self.client]:
            for into, name, label in (
                (writes, "herder_store_writes_total", "kind"),
                (reconciles, "herder_reconcile_total", "controller"),
            ):
                for key, value in (await read_counters(client, name, label)).items():
                    into[key] = into.get(key, 0.0) + value
        return writes, reconciles


@dataclass
class Processes:
    """``herder serve`` (one or more replicas) and the emulator, running side by side under one folder."""

    root: Path
    server: Server
    emulator: EmulatorProcess
    control_url: str
    """The emulator's control API."""
    client: Client
    """An Admin's client of the server."""
    replicas: list[Server] = field(default_factory=list)
    clients: list[Client] = field(default_factory=list)


@asynccontextmanager
async def processes(
    prefix: str,
    *,
    machines: int,
    clusters: int,
    serve: Sequence[str] = (),
    replicas: int = 1,
    shards: int = 8,
) -> AsyncIterator[Processes]:
    """An emulator of ``machines`` and a server with load balancers for ``clusters`` (and the flags
    ``serve``), in a temporary folder; with ``replicas`` above 1, that many servers on one etcd sharing
    ``shards`` shards. All are ended by their PIDs on the way out."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        (root / "emulator").mkdir()
        emulator = EmulatorProcess(
            data_dir=root / "emulator",
            machines=machines,
            machine_cidr=spare_network(),
        )
        flags = list(serve)
        if replicas > 1:
            etcd = stack.enter_context(EtcdCluster(1, root / "etcd"))
            key = root / "encryption.key"
            key.write_bytes(os.urandom(32))
            key.chmod(0o600)
            flags += ["--state", "etcd://" + ",".join(etcd.endpoints), "--encryption-key-file", str(key)]
            flags += ["--shards", str(shards)]
        # The replicas serve the clusters' endpoints from one range: a cluster's moves with its shard.
        first = endpoint_ports(clusters)
        servers = [
            Server(root / ("server" if i == 0 else f"server-{i}"), clusters, flags, first_endpoint=first)
            for i in range(replicas)
        ]
        emulator.start()
        for server in servers:
            server.start()
        clients: list[Client] = []
        try:
            url = await emulator.wait_ready(120)
            for server in servers:
                clients.append(await server.client())
            yield Processes(root, servers[0], emulator, url, clients[0], servers, clients)
        finally:
            for client in clients:
                await client.close()
            for server in servers:
                server.stop()
            emulator.stop()


@asynccontextmanager
async def fleet(
    prefix: str,
    clusters: int,
    timeout: float,
    *,
    serve: Sequence[str] = (),
    control_planes: int = CONTROL_PLANES,
    workers: int = WORKERS,
    replicas: int = 1,
) -> AsyncIterator[Fleet]:
    """A server (with the flags ``serve``) and an emulator with machines for ``clusters`` clusters of
    ``control_planes`` and ``workers``, registered (as ``herder machine add`` registers them) and
    connected."""
    machines = clusters * (control_planes + workers)
    async with processes(
        prefix, machines=machines, clusters=clusters, serve=serve, replicas=replicas
    ) as running:
        started = time.monotonic()
        client = running.client
        published = running.emulator.published()
        await create_all(
            client,
            [
                new_object(
                    MACHINE_REGISTRATION, registration_name(m["endpoint"]), {"endpoint": m["endpoint"]}
                )
                for m in published
            ],
        )
        await until(
            f"{machines} machines registered and connected",
            time.monotonic() + timeout,
            lambda: _connected(client, machines),
        )
        # A herder that has been running has its spare keys made (--spare-keys): so has this one,
        # before the clock starts. The minutes they take are printed apart.
        # Each replica makes its own (any may come to hold any cluster).
        await until(
            f"{clusters} spare keys made",
            time.monotonic() + timeout,
            lambda: spare_keys_ready(running.clients, clusters),
        )
        emit("spare_keys_ready_after_start", time.monotonic() - started, "s", keys=clusters)
        yield Fleet(
            client,
            running.server,
            running.emulator,
            sorted(m["uuid"] for m in published),
            control_planes,
            workers,
            running.replicas,
            running.clients,
        )


async def spare_keys_ready(clients: Sequence[Client], keys: int) -> bool:
    """Whether every server has ``keys`` spare RSA keys made (``--spare-keys``)."""
    return all([await _gauge(client, "herder_spare_keys") >= keys for client in clients])


async def _shards_held(client: Client) -> list[str]:
    """The shards whose controllers a replica runs now (its herder_shard_held gauges)."""
    held = []
    for line in await _metrics(client):
        if line.startswith('herder_shard_held{shard="') and line.endswith(" 1.0"):
            held.append(line.split('"')[1])
    return sorted(held, key=int)


async def _reconciles(client: Client) -> float:
    return sum((await read_counters(client, "herder_reconcile_total", "controller")).values())


async def _connected(client: Client, machines: int) -> bool:
    listed = await client.list(MACHINE)
    return sum(1 for m in listed.items if (m.status or {}).get("connected")) >= machines


async def until(what: str, deadline: float, check: Callable[[], Awaitable[bool]]) -> None:
    """Wait for ``check()``, every half second, failing at ``deadline`` (``time.monotonic()``) naming
    ``what``."""
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def all_ready(client: Client, clusters: int) -> bool:
    listed = await client.list(CLUSTER)
    return sum(1 for c in listed.items if condition_true(c.status, "Ready")) >= clusters


def emit_costs(
    name: str,
    fleet: Fleet,
    before: tuple[dict[str, float], dict[str, float]],
    after: tuple[dict[str, float], dict[str, float]],
    **extra: Any,
) -> None:
    """The store writes and reconciles per machine between two readings of the counters."""
    machines = len(fleet.uuids)
    writes = per_machine(after[0], before[0], machines)
    reconciles = per_machine(after[1], before[1], machines)
    emit(f"{name}_store_writes_per_machine", sum(writes.values()), "writes", **extra, by_kind=writes)
    emit(f"{name}_reconciles_per_machine", sum(reconciles.values()), "reconciles", by_controller=reconciles)


def _cpu(site: Fleet) -> tuple[float, float]:
    return site.server.cpu_seconds(), site.emulator.cpu_seconds()


async def form(site: Fleet, clusters: int, timeout: float) -> None:
    """Create ``clusters`` clusters through the API, each a control plane set and a worker set of its own
    machines, as users would ask for them, and wait until every one is Ready."""
    created: list[Resource] = []
    sets: list[Resource] = []
    for i in range(clusters):
        name = f"bench-{i:03d}"
        own = site.machines_of(i)
        labels = {CLUSTER_LABEL: name}
        created.append(new_object(CLUSTER, name, {"talosVersion": TALOS, "kubernetesVersion": KUBERNETES}))
        sets.append(
            new_object(
                MACHINE_SET,
                control_plane_set_name(name),
                {"role": "controlplane", "machines": own[: site.control_planes]},
                labels,
            )
        )
        sets.append(
            new_object(
                MACHINE_SET,
                f"{name}-workers",
                {"role": "worker", "machines": own[site.control_planes :]},
                labels,
            )
        )
    await create_all(site.client, created)
    await create_all(site.client, sets)
    await until(
        f"{clusters} clusters Ready", time.monotonic() + timeout, lambda: all_ready(site.client, clusters)
    )


async def run(clusters: int, timeout: float, idle: float = 30.0, replicas: int = 1) -> None:
    async with fleet("herder-bench-clusters-", clusters, timeout, replicas=replicas) as site:
        before = await site.counters()
        done_before = [await _reconciles(c) for c in site.clients]
        cpu_before = _cpu(site)
        started = time.monotonic()
        await form(site, clusters, timeout)
        elapsed = time.monotonic() - started
        cpu_ready = _cpu(site)
        shape: dict[str, Any] = {"replicas": replicas} if replicas > 1 else {}
        emit(
            "clusters_until_all_ready",
            elapsed,
            "s",
            clusters=clusters,
            machines=len(site.uuids),
            goal_max=120,
            cores=os.cpu_count(),
            **shape,
        )
        if replicas > 1:
            done = [await _reconciles(c) - b for c, b in zip(site.clients, done_before, strict=True)]
            for i, client in enumerate(site.clients):
                emit(
                    "clusters_replica_share",
                    done[i] / max(1.0, sum(done)),
                    "ratio",
                    replica=i,
                    reconciles=round(done[i]),
                    shards=await _shards_held(client),
                    rss_mib=round(site.replicas[i].rss_mib(), 1),
                    cpu_s=round(site.replicas[i].cpu_seconds(), 1),
                )
        emit("clusters_server_rss", site.server.rss_mib(), "MiB", clusters=clusters)
        emit("clusters_emulator_rss", site.emulator.rss_mib(), "MiB", machines=len(site.uuids))
        emit_costs("clusters", site, before, await site.counters(), goal_max=40)
        emit("clusters_server_cpu", cpu_ready[0] - cpu_before[0], "s", clusters=clusters)
        emit("clusters_emulator_cpu", cpu_ready[1] - cpu_before[1], "s", machines=len(site.uuids))
        if idle > 0:
            resting = _cpu(site)
            await asyncio.sleep(idle)
            for who, at, end in zip(("server", "emulator"), resting, _cpu(site), strict=True):
                emit(f"clusters_idle_{who}_cpu", 100 * (end - at) / idle, "%", seconds=idle)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench clusters", description=__doc__)
    parser.add_argument(
        "--clusters", type=int, default=100, help="clusters of 3 control planes and 2 workers"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds to give up after")
    parser.add_argument(
        "--idle", type=float, default=30, help="seconds the formed fleet is left idle, its CPU measured"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="servers on one etcd sharing the controllers by shards (1: one server on SQLite)",
    )
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas: at least 1")
    asyncio.run(run(args.clusters, args.timeout, args.idle, args.replicas))
    return 0
