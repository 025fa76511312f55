"""What herder asks a running cluster to tell its health: etcd's members and their health (over the Talos
API of the control planes), and whether the cluster's Kubernetes API answers herder's admin credentials.
Every probe is bounded in time and answers a verdict with a reason, never an exception."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from herder.controllers.clusters.cluster_keys import KubernetesCredentials
from herder.talos.machine import Credentials, MachineAPIError, MachineClient, split_endpoint
from herder.talos.pki import load_cert_chain

PROBE_TIMEOUT = 5.0


@dataclass(frozen=True)
class EtcdHealth:
    healthy: bool
    message: str
    members: frozenset[str] = field(default_factory=frozenset)
    """The Talos endpoints (of the control planes given) that are etcd members."""


async def probe_etcd(control_planes: list[str], credentials: Credentials) -> EtcdHealth:
    """Ask the control planes at these Talos endpoints whether etcd has every one of them, healthy."""
    if not control_planes:
        return EtcdHealth(False, "no control plane is running")
    hosts = {split_endpoint(e)[0]: e for e in control_planes}

    async def service_healthy(endpoint: str) -> str | None:
        try:
            async with MachineClient(
                endpoint, credentials=credentials, timeout=PROBE_TIMEOUT, retries=0
            ) as c:
                etcd = next((s for s in await c.service_list() if s.id == "etcd"), None)
        except MachineAPIError as exc:
            return f"{split_endpoint(endpoint)[0]}: {exc}"
        if etcd is None or not etcd.healthy:
            why = etcd.last_message if etcd is not None and etcd.last_message else "etcd is not running"
            return f"{split_endpoint(endpoint)[0]}: {why}"
        return None

    try:
        async with MachineClient(
            control_planes[0], credentials=credentials, timeout=PROBE_TIMEOUT, retries=0
        ) as client:
            listed = await client.etcd_member_list()
    except MachineAPIError as exc:
        return EtcdHealth(False, f"cannot list etcd members: {exc}")
    members = set()
    for member in listed:
        for url in member.peer_urls:
            host = urlsplit(url).hostname or ""
            if host in hosts:
                members.add(hosts[host])
    problems = [p for p in await asyncio.gather(*(service_healthy(e) for e in control_planes)) if p]
    missing = sorted(split_endpoint(e)[0] for e in control_planes if e not in members)
    if missing:
        problems.insert(0, f"not etcd members: {', '.join(missing)}")
    if len(listed) > len(members):
        problems.append(
            f"{len(listed) - len(members)} etcd member(s) belong to no control plane of the cluster"
        )
    return EtcdHealth(not problems, "; ".join(problems), frozenset(members))


def _context(credentials: KubernetesCredentials) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=credentials.ca.decode("ascii"))
    load_cert_chain(context, credentials.crt, credentials.key)
    return context


async def probe_kubernetes(endpoint: str, credentials: KubernetesCredentials) -> tuple[bool, str]:
    """Whether the cluster's Kubernetes API at ``endpoint`` is ready for herder's admin credentials."""
    try:
        async with httpx.AsyncClient(verify=_context(credentials), timeout=PROBE_TIMEOUT) as client:
            answer = await client.get(endpoint.rstrip("/") + "/readyz")
    except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
        return False, f"{endpoint}: {type(exc).__name__}: {exc}".rstrip(": ")
    if answer.status_code != 200:
        return False, f"{endpoint}/readyz answered {answer.status_code}: {answer.text.strip()[:200]}"
    return True, ""
