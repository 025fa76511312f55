"""What herder asks a running cluster to tell its health: etcd's members, each one's own status (the leader
it follows, its database, its errors) over the Talos API of the control planes; whether the cluster's
Kubernetes API answers herder's admin credentials; and its control plane components' static pods. Every
probe is bounded in time and answers a verdict with its reasons, never an exception."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from herder.controllers.cluster_keys import KubernetesCredentials
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.talos.machine import (
    Credentials,
    EtcdMember,
    EtcdMemberStatus,
    MachineAPIError,
    split_endpoint,
)
from herder.talos.machine.pool import ClientPool, MachineDialer, dial

PROBE_TIMEOUT = 5.0
KEEP = 1024
"""Connections kept between rounds (beyond them, the least recently used are closed)."""
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class MemberReport:
    id: int
    machine: str
    """The UUID of the member's machine, or '' for a member that belongs to no control plane."""
    status: EtcdMemberStatus | None
    error: str = ""


@dataclass(frozen=True)
class EtcdReport:
    healthy: bool
    message: str
    listed: bool
    """Whether the member list could be read at all (when not, membership is unknown)."""
    members: tuple[MemberReport, ...] = ()
    leader: int = 0

    @property
    def quorum(self) -> bool:
        up = sum(1 for m in self.members if m.status is not None and not m.status.errors)
        return bool(self.members) and up > len(self.members) // 2

    @property
    def machines(self) -> frozenset[str]:
        """The control planes (by machine) that are etcd members."""
        return frozenset(m.machine for m in self.members if m.machine)


async def probe_etcd(
    clients: ClientPool,
    control_planes: dict[str, str],
    credentials: Credentials,
    known: dict[str, str] | None = None,
) -> EtcdReport:
    """Ask the running control planes (Talos endpoint → machine UUID) about etcd: its members, and each
    member's own status (through ``clients``, made with ``machine_clients()``); healthy when every
    control plane is a member and every member answers. ``known`` (every control plane of the cluster,
    running or not) names the machine of a member that is down."""
    if not control_planes:
        return EtcdReport(False, "no control plane is running", False)
    by_host = {split_endpoint(e)[0]: e for e in control_planes}
    known_by_host = {split_endpoint(e)[0]: uuid for e, uuid in (known or {}).items()}
    listed: list[EtcdMember] | None = None
    problems: list[str] = []
    for endpoint in sorted(control_planes):
        try:
            async with clients.client(endpoint, credentials) as c:
                listed = await c.etcd_member_list()
            break
        except MachineAPIError as exc:
            problems.append(f"{split_endpoint(endpoint)[0]}: {exc}")
    if listed is None:
        return EtcdReport(False, "cannot list etcd members: " + "; ".join(problems), False)

    async def report(member: EtcdMember) -> MemberReport:
        hosts = [urlsplit(u).hostname or "" for u in member.peer_urls]
        endpoint = next((by_host[h] for h in hosts if h in by_host), "")
        machine = control_planes.get(endpoint, "")
        if not endpoint:
            down = next((known_by_host[h] for h in hosts if h in known_by_host), "")
            if down:
                return MemberReport(member.id, down, None, "its machine does not run")
            return MemberReport(member.id, "", None, "belongs to no running control plane of the cluster")
        try:
            async with clients.client(endpoint, credentials) as c:
                return MemberReport(member.id, machine, await c.etcd_status())
        except MachineAPIError as exc:
            return MemberReport(member.id, machine, None, str(exc))

    members = tuple(await asyncio.gather(*(report(m) for m in listed)))
    leaders = {m.status.leader for m in members if m.status is not None and m.status.leader}
    problems = []
    missing = sorted(
        split_endpoint(e)[0] for e, uuid in control_planes.items() if uuid not in {m.machine for m in members}
    )
    if missing:
        problems.append(f"not etcd members: {', '.join(missing)}")
    for m in members:
        who = m.machine or f"member {m.id:x}"
        if m.error:
            problems.append(f"{who}: {m.error}")
        elif m.status is not None and m.status.errors:
            problems.append(f"{who}: {'; '.join(m.status.errors)}")
    if not leaders:
        problems.append("etcd has no leader")
    elif len(leaders) > 1:
        problems.append("etcd members follow different leaders")
    return EtcdReport(not problems, "; ".join(problems), True, members, min(leaders) if leaders else 0)


def machine_clients(dialer: MachineDialer = dial, keep: int = KEEP) -> ClientPool:
    """The machine API clients the etcd probe keeps between rounds."""
    return ClientPool(dialer=dialer, keep=keep, timeout=PROBE_TIMEOUT, retries=0)


@dataclass(frozen=True)
class KubernetesReport:
    reachable: bool
    message: str
    components: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Node address → component (``kube-apiserver``…) → ready, from the static pods' mirrors."""


async def probe_kubernetes(
    clients: KubernetesClients, endpoint: str, credentials: KubernetesCredentials
) -> KubernetesReport:
    """Whether the cluster's Kubernetes API at ``endpoint`` is ready for herder's admin credentials, and
    how its control plane components' pods are."""
    client = clients.client(endpoint, credentials)
    try:
        ready = await client.get(endpoint.rstrip("/") + "/readyz")
        if ready.status_code != 200:
            text = ready.text.strip()[:200]
            return KubernetesReport(False, f"{endpoint}/readyz answered {ready.status_code}: {text}")
        pods = await client.get(
            endpoint.rstrip("/") + "/api/v1/namespaces/kube-system/pods",
            params={"labelSelector": "tier=control-plane"},
        )
    except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
        return KubernetesReport(False, f"{endpoint}: {type(exc).__name__}: {exc}".rstrip(": "))
    components: dict[str, dict[str, bool]] = {}
    if pods.status_code == 200:
        for pod in pods.json().get("items") or ():
            component = ((pod.get("metadata") or {}).get("labels") or {}).get("component", "")
            host = (pod.get("status") or {}).get("hostIP", "")
            if component in COMPONENTS and host:
                components.setdefault(host, {})[component] = _pod_ready(pod)
    return KubernetesReport(True, "", components)


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
