"""Cluster endpoints: a cluster without ``spec.endpoint`` gets herder's own load balancer in front of its
control planes' API servers, on an address from the range herder serves them on
(``herder serve --cluster-endpoints HOST:FIRST-LAST``).

The address is chosen once and kept on ``status.endpoint`` (the configs carry it, so it must never move);
the balancer runs while this replica leads, with the cluster's running control planes as backends. A
cluster with ``spec.endpoint`` has that endpoint and no balancer. Without a range, a cluster without an
endpoint says so on its ``EndpointReady`` condition (and so on ``Ready``) and waits.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from herder.controllers.clusters.endpoint_balancer import EndpointBalancer
from herder.controllers.members import (
    cluster_changes,
    cluster_machines,
    is_control_plane,
    machine_of,
)
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, ClusterSpec, ClusterStatus
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes
from herder.talos.machine import split_endpoint

KUBERNETES_PORT = 6443
# Who holds a port of the range that another process listened on when a cluster wanted it.
_ELSEWHERE = ObjectKey("", None, "")
_RANGE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):(\d{1,5})-(\d{1,5})$")


@dataclass(frozen=True)
class EndpointRange:
    """Where herder's balancers listen: one host, ports ``first`` to ``last``."""

    host: str
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> EndpointRange:
        match = _RANGE.match(text.strip())
        if match is None:
            raise ValueError(
                f"--cluster-endpoints {text!r}: expected HOST:FIRST-LAST, e.g. 10.0.0.5:7000-7999"
            )
        first, last = int(match.group(2)), int(match.group(3))
        if not 0 < first <= last < 65536:
            raise ValueError(f"--cluster-endpoints {text!r}: ports must rise within 1-65535")
        return cls(match.group(1).strip("[]"), first, last)

    def url(self, port: int) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{port}"

    def port_of(self, url: str) -> int | None:
        """The port of ``url`` if it is an address of this range's host. A port outside the range is
        still this cluster's (the range may have changed since): its configs carry that address."""
        parts = urlsplit(url)
        if parts.hostname != self.host or parts.port is None:
            return None
        return parts.port


class LoadBalancerController(Controller):
    name = "LoadBalancer"
    primary = CLUSTER.kind
    outputs = (Writes(CLUSTER.kind, "status.endpoint", "status.conditions[EndpointReady]"),)

    def __init__(self, endpoints: EndpointRange | None) -> None:
        self._range = endpoints
        self._balancers: dict[ObjectKey, EndpointBalancer] = {}
        self._taken: dict[int, ObjectKey] | None = None
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes("endpoint")),
            Watch(
                CLUSTER_MACHINE.kind, on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "status.stage")
            ),
        )

    def health(self, namespace: str, cluster: str) -> tuple[str, int, int] | None:
        """The endpoint of a cluster's balancer, its backends and how many of them answer (None: no
        balancer of herder's)."""
        balancer = self._balancers.get(ObjectKey(CLUSTER.kind, namespace, cluster))
        if balancer is None or self._range is None:
            return None
        return self._range.url(balancer.port), len(balancer.backends), len(balancer.healthy)

    async def shutdown(self) -> None:
        balancers, self._balancers = list(self._balancers.values()), {}
        for balancer in balancers:
            await balancer.stop()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            await self._stop(key)
            return None
        spec = CLUSTER.spec_of(cluster, ClusterSpec)
        if spec.endpoint:
            await self._stop(key)
            await self._record(ctx, key, spec.endpoint, "")
            return None
        if self._range is None:
            await self._record(
                ctx, key, "", "set spec.endpoint, or start herder serve with --cluster-endpoints"
            )
            return None
        # A port no config carries yet that another process holds is skipped for the next free one.
        fresh = self._range.port_of(status_of(cluster, ClusterStatus).endpoint) is None
        balancer = self._balancers.get(key)
        while True:
            port = await self._port(ctx, cluster)
            if port is None:
                await self._record(
                    ctx,
                    key,
                    "",
                    f"every address of {self._range.host} ports {self._range.first}-{self._range.last} is taken",
                )
                return None
            if balancer is not None:
                break
            balancer = EndpointBalancer(self._range.host, port)
            try:
                await balancer.start()
                break
            except OSError as exc:
                balancer = None
                if fresh and exc.errno == errno.EADDRINUSE and self._taken is not None:
                    self._taken[port] = _ELSEWHERE
                    continue
                problem = f"cannot listen on {self._range.host}:{port}: {exc}"
                ephemeral = _ephemeral_ports()
                if exc.errno == errno.EADDRINUSE and ephemeral and ephemeral[0] <= port <= ephemeral[1]:
                    problem += (
                        f" (the port is among the system's ephemeral ports, {ephemeral[0]}-{ephemeral[1]},"
                        " which outgoing connections take: give --cluster-endpoints a range outside them)"
                    )
                await self._record(ctx, key, self._range.url(port), problem)
                return Result(requeue_after=5)
        self._balancers[key] = balancer
        balancer.set_backends(await _backends(ctx, cluster))
        await self._record(ctx, key, self._range.url(port), "")
        return None

    async def _port(self, ctx: Context, cluster: Resource) -> int | None:
        """This cluster's port: the one it has, else the lowest free one (recorded before it is used)."""
        assert self._range is not None
        key = ObjectKey.of(cluster)
        if self._taken is None:
            self._taken = {}
            for other in await ctx.list(CLUSTER.kind):
                port = self._range.port_of(status_of(other, ClusterStatus).endpoint)
                if port is not None:
                    self._taken[port] = ObjectKey.of(other)
        current = self._range.port_of(status_of(cluster, ClusterStatus).endpoint)
        if current is not None:
            self._taken[current] = key
            return current
        port = next((p for p in range(self._range.first, self._range.last + 1) if p not in self._taken), None)
        if port is not None:
            self._taken[port] = key
        return port

    async def _record(self, ctx: Context, key: ObjectKey, endpoint: str, problem: str) -> None:
        """The endpoint, and the ``EndpointReady`` condition saying whether herder serves it (or why not)."""
        now = ctx.clock.rfc3339()

        def record(_: Resource, status: ClusterStatus) -> None:
            if endpoint:
                status.endpoint = endpoint
            status.set_condition(
                "EndpointReady", not problem, "NoEndpoint" if problem else "Serving", problem, now=now
            )

        await ctx.mutate_status(key, ClusterStatus, record)

    async def _stop(self, key: ObjectKey) -> None:
        balancer = self._balancers.pop(key, None)
        if balancer is not None:
            await balancer.stop()
        if self._taken is not None:
            for port, owner in list(self._taken.items()):
                if owner == key:
                    del self._taken[port]


async def _backends(ctx: Context, cluster: Resource) -> list[str]:
    """``IP:6443`` of each control plane of the cluster that runs."""
    out = []
    for member in await cluster_machines(ctx, cluster):
        if not is_control_plane(member):
            continue
        machine = await machine_of(ctx, member)
        if machine is None or status_of(machine, MachineStatus).stage != "Running":
            continue
        host, _ = split_endpoint(MACHINE.spec_of(machine, MachineSpec).endpoint)
        out.append(f"[{host}]:{KUBERNETES_PORT}" if ":" in host else f"{host}:{KUBERNETES_PORT}")
    return out


def _ephemeral_ports() -> tuple[int, int] | None:
    """The ports the system gives outgoing connections (Linux), if it says."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None
