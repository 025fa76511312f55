"""LoadBalancer's decisions: a cluster's own endpoint is kept as given; without one, herder's balancer gets
the lowest free address of its range (kept for good: the configs carry it), with the running control
planes as backends; without a range, or with every address taken, EndpointReady says what to do."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from herder.controllers.clusters.load_balancer import EndpointRange, LoadBalancerController
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site


@pytest.fixture
async def ports() -> AsyncIterator[EndpointRange]:
    """Two loopback ports for balancers (below the ephemeral ports; a test's balancers are stopped)."""
    first = random.randrange(20000, 30000, 2)
    yield EndpointRange("127.0.0.1", first, first + 1)


async def endpoint_of(site: Site, fleet: Fleet, balancer: LoadBalancerController) -> tuple[str, bool, str]:
    """One reconcile: the endpoint recorded, and whether EndpointReady holds and why not."""
    await site.reconcile(balancer, fleet.key)
    status = await site.status("Cluster", fleet.name)
    (condition,) = [c for c in status["conditions"] if c["type"] == "EndpointReady"]
    return status.get("endpoint", ""), condition["status"] == "True", condition["message"]


async def test_a_clusters_own_endpoint_is_kept_and_gets_no_balancer(site: Site, ports: EndpointRange) -> None:
    fleet = Fleet(site)
    await fleet.cluster(endpoint="https://k8s.example.com:6443")
    balancer = LoadBalancerController(ports)
    try:
        assert await endpoint_of(site, fleet, balancer) == ("https://k8s.example.com:6443", True, "")
        assert balancer.health("default", fleet.name) is None
    finally:
        await balancer.shutdown()


async def test_without_a_range_a_cluster_says_how_to_get_an_endpoint(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    assert await endpoint_of(site, fleet, LoadBalancerController(None)) == (
        "",
        False,
        "set spec.endpoint, or start herder serve with --cluster-endpoints",
    )


async def test_each_cluster_gets_the_lowest_free_address_for_good(site: Site, ports: EndpointRange) -> None:
    alpha, beta, gamma = Fleet(site, "alpha"), Fleet(site, "beta"), Fleet(site, "gamma")
    for fleet in (alpha, beta, gamma):
        await fleet.cluster()
    balancer = LoadBalancerController(ports)
    try:
        assert await endpoint_of(site, beta, balancer) == (ports.url(ports.first), True, "")
        assert await endpoint_of(site, alpha, balancer) == (ports.url(ports.last), True, "")
        assert await endpoint_of(site, gamma, balancer) == (
            "",
            False,
            f"every address of 127.0.0.1 ports {ports.first}-{ports.last} is taken",
        )
    finally:
        await balancer.shutdown()
    # A new leader reads the addresses given out: each cluster keeps its own.
    again = LoadBalancerController(ports)
    try:
        assert (await endpoint_of(site, alpha, again))[0] == ports.url(ports.last)
        assert (await endpoint_of(site, gamma, again))[1] is False
    finally:
        await again.shutdown()


async def test_the_balancer_sends_to_the_running_control_planes(site: Site, ports: EndpointRange) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    for uuid, stage in (("cp1", "Running"), ("cp2", "Booting")):
        await fleet.machine(uuid, stage=stage)
        await fleet.member(uuid, "controlplane")
    await fleet.machine("w1")
    await fleet.member("w1")
    balancer = LoadBalancerController(ports)
    try:
        await endpoint_of(site, fleet, balancer)
        health = balancer.health("default", fleet.name)
        assert health is not None
        assert health[:2] == (ports.url(ports.first), 1)
        # Let the balancer's checker take in its new backends before it is stopped: a stop that comes
        # just as it wakes is lost by asyncio.wait_for on Python 3.11 (EndpointBalancer._check_loop).
        await asyncio.sleep(0.1)
    finally:
        await balancer.shutdown()
