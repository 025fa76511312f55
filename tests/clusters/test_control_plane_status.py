"""Control plane monitoring, as a platform operator reads it: ``kubectl get controlplanestatus`` shows etcd
(members, leader, quorum, database sizes), each control plane's components and the load balancer; a
control plane that goes down shows on it and on the Cluster's conditions within seconds, and in the
per-cluster metrics; it comes back the same way."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from herder.client.kubeconfig import load
from tests.clusters.site import Site, cluster, machine_set, running_site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("cps"), 3) as s:
        machines = [m["uuid"] for m in s.machines]
        s.apply(
            [cluster("golf"), machine_set("golf", "golf-control-planes", "controlplane", machines=machines)]
        )
        s.wait("cluster", "golf", timeout=120)
        yield s


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def _metrics(site: Site) -> str:
    token = load(site.server.kubeconfig).token
    context = ssl.create_default_context(cadata=site.server.ca.decode())
    answer = httpx.get(
        f"{site.server.url}/metrics", headers={"Authorization": f"Bearer {token}"}, verify=context
    )
    answer.raise_for_status()
    return answer.text


def test_a_healthy_control_plane_as_kubectl_shows_it(site: Site) -> None:
    status = site.until(
        lambda: (
            (s := site.get("controlplanestatus", "golf"))
            and _condition(s, "Ready").get("status") == "True"
            and s
        )
    )
    etcd = status["status"]["etcd"]
    machines = {m["uuid"] for m in site.machines}
    assert {m["machine"] for m in etcd["members"]} == machines
    assert all(m["healthy"] and m["dbSize"] > 0 for m in etcd["members"])
    assert etcd["quorum"] and etcd["leader"] in machines
    assert sum(1 for m in etcd["members"] if m["leader"]) == 1
    components = status["status"]["components"]
    assert len(components) == 3 and all(
        c["apiServer"] and c["controllerManager"] and c["scheduler"] for c in components
    )
    assert status["status"]["loadBalancer"]["healthy"] == 3
    for kind in ("EtcdHealthy", "APIReachable", "APIServersReady", "LoadBalancerReady"):
        assert _condition(status, kind)["status"] == "True", kind
    table = site.run("kubectl", "get", "controlplanestatuses").stdout
    assert "golf" in table and "3/3" in table
    assert 'herder_cluster_etcd_members_healthy{cluster="golf",namespace="default"} 3.0' in _metrics(site)


def test_a_control_plane_going_down_shows_within_seconds(site: Site) -> None:
    down = site.machines[2]["uuid"]
    asyncio.run(site.emulator.control("POST", f"/machines/{down}/power", {"state": "off"}))
    try:

        def degraded() -> dict[str, Any] | None:
            health = site.get("controlplanestatus", "golf")
            return health if _condition(health, "EtcdHealthy").get("status") == "False" else None

        health = site.until(degraded, timeout=30, what="etcd to be seen unhealthy")
        assert (
            down in _condition(health, "EtcdHealthy")["message"]
            or "not etcd members" in _condition(health, "EtcdHealthy")["message"]
        )
        assert health["status"]["etcd"]["quorum"]  # two of three still answer
        site.until(
            lambda: _condition(site.get("cluster", "golf"), "EtcdHealthy").get("status") == "False",
            timeout=30,
            what="the cluster's EtcdHealthy to turn False",
        )
        assert "herder_cluster_etcd_members_healthy" in _metrics(site)
    finally:
        asyncio.run(site.emulator.control("POST", f"/machines/{down}/power", {"state": "on"}))
    site.wait("cluster", "golf", timeout=120)
    health = site.until(
        lambda: (
            (h := site.get("controlplanestatus", "golf"))
            and _condition(h, "Ready").get("status") == "True"
            and h
        )
    )
    assert all(m["healthy"] for m in health["status"]["etcd"]["members"])
