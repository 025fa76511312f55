"""HealthCheck's decisions, against a workload cluster's API in process (the emulator's Job controller and
kubelet run each Job's command): a check's Job runs at its interval, its verdict is on
``Cluster.status.healthChecks`` and sums up as ``Healthy``; a failing check makes the cluster unhealthy
naming it (and holds its rollouts), until a later run passes; nothing runs before the cluster can take it,
and an API that cannot be reached is told."""

from __future__ import annotations

from typing import Any

from herder.controllers.kubernetes.health_checks import (
    CHECK_LABEL,
    POLL_EVERY,
    WAIT_EVERY,
    HealthCheckController,
    health_hold,
)
from herder.resources import Resource
from herder.resources.machines import CLUSTER_LABEL
from herder.runtime.controller import Result
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site, obj
from tests.controllers.workload import ENDPOINT, Workload, cluster_of

INTERVAL = 30.0
FAILED = "the Job failed: BackoffLimitExceeded Job has reached the specified backoff limit"


async def _check(site: Site, name: str = "dns", command: str = "true") -> Resource:
    (made,) = await site.create(
        obj(
            "ClusterHealthCheck",
            name,
            spec={"job": _job(command), "interval": f"{INTERVAL:g}s"},
            metadata={"labels": {CLUSTER_LABEL: "alpha"}},
        )
    )
    return made


def _job(command: str) -> dict[str, Any]:
    container = {"name": "check", "image": "busybox:1.36", "command": ["sh", "-c", command]}
    return {"spec": {"template": {"spec": {"containers": [container]}}}}


def _controller(fleet: Fleet, api: Workload) -> HealthCheckController:
    return HealthCheckController(fleet.keys, clients=api)


async def _verdicts(site: Site) -> list[tuple[str, str, str]]:
    status = await site.status("Cluster", "alpha")
    return [(r["name"], r["state"], r["message"]) for r in status.get("healthChecks") or ()]


async def _healthy(site: Site) -> tuple[str, str, str]:
    status = await site.status("Cluster", "alpha")
    found = next(c for c in status.get("conditions") or () if c["type"] == "Healthy")
    return found["status"], found["reason"], found["message"]


async def test_a_check_runs_its_job_at_its_interval_and_its_verdict_is_on_the_cluster(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    await _check(site)
    controller = _controller(fleet, cluster_api)
    assert await site.reconcile(controller, fleet.key) == Result(requeue_after=POLL_EVERY)
    (job,) = (await cluster_api.store.list("Job", "kube-system")).items
    assert job.name.startswith("herder-check-dns-")
    assert job.metadata.labels[CHECK_LABEL] == "dns"
    assert await _verdicts(site) == [("dns", "Running", "the first run is running")]
    assert await _healthy(site) == (
        "False",
        "CheckPending",
        "health check dns has not passed yet: the first run is running",
    )

    await cluster_api.run_jobs()
    assert await site.reconcile(controller, fleet.key) == Result(requeue_after=WAIT_EVERY)
    assert await _verdicts(site) == [("dns", "Passed", "the Job completed")]
    assert await _healthy(site) == ("True", "ChecksPassing", "1 health check(s) pass")
    (result,) = (await site.status("Cluster", "alpha"))["healthChecks"]
    assert result["job"] == f"kube-system/{job.name}" and result["lastPassedTime"]

    # Not again before its interval is up...
    site.clock.advance(INTERVAL - 1)
    await site.reconcile(controller, fleet.key)
    assert [j.name for j in (await cluster_api.store.list("Job", "kube-system")).items] == [job.name]

    # ...then a new run, the one before it gone; the verdict before it stands while it runs.
    site.clock.advance(1)
    await site.reconcile(controller, fleet.key)
    (second,) = (await cluster_api.store.list("Job", "kube-system")).items
    assert second.name != job.name
    assert await _verdicts(site) == [("dns", "Passed", "the Job completed")]
    assert (await _healthy(site))[0] == "True"


async def test_a_failing_check_makes_the_cluster_unhealthy_naming_it_until_a_later_run_passes(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    await _check(site, "ingress")
    check = await _check(site, "dns", command="exit 1")
    controller = _controller(fleet, cluster_api)
    await site.reconcile(controller, fleet.key)
    await cluster_api.run_jobs()
    await site.reconcile(controller, fleet.key)
    assert await _verdicts(site) == [("dns", "Failed", FAILED), ("ingress", "Passed", "the Job completed")]
    assert await _healthy(site) == ("False", "CheckFailing", f"health check dns failed: {FAILED}")
    cluster = await site.get("Cluster", "alpha")
    assert cluster is not None and health_hold(cluster) == f"held: health check dns failed ({FAILED})"

    # What it checks is fixed (the emulated container answers as its command says).
    await site.store.update(check.model_copy(update={"spec": {**(check.spec or {}), "job": _job("exit 0")}}))
    site.clock.advance(INTERVAL)
    await site.reconcile(controller, fleet.key)
    assert (await _healthy(site))[1] == "CheckFailing"  # until the new run has ended
    await cluster_api.run_jobs()
    await site.reconcile(controller, fleet.key)
    assert await _verdicts(site) == [
        ("dns", "Passed", "the Job completed"),
        ("ingress", "Passed", "the Job completed"),
    ]
    assert await _healthy(site) == ("True", "ChecksPassing", "2 health check(s) pass")
    cluster = await site.get("Cluster", "alpha")
    assert cluster is not None and health_hold(cluster) == ""


async def test_nothing_runs_before_the_cluster_is_bootstrapped(site: Site, cluster_api: Workload) -> None:
    fleet = await cluster_of(site, reachable=False)
    await _check(site)
    await site.reconcile(_controller(fleet, cluster_api), fleet.key)
    assert cluster_api.endpoints == []
    assert await _verdicts(site) == [("dns", "Pending", "waiting: the cluster is not bootstrapped yet")]
    assert await _healthy(site) == (
        "False",
        "CheckPending",
        "health check dns has not passed yet: waiting: the cluster is not bootstrapped yet",
    )


async def test_an_unreachable_api_is_told_and_the_check_runs_once_it_answers(
    site: Site, cluster_api: Workload
) -> None:
    fleet = await cluster_of(site)
    await _check(site)
    controller = _controller(fleet, cluster_api)
    cluster_api.down = True
    assert await site.reconcile(controller, fleet.key) == Result(requeue_after=WAIT_EVERY)
    why = f"cannot run the check: {ENDPOINT}: ConnectError: connection refused"
    assert await _verdicts(site) == [("dns", "Pending", why)]
    assert await _healthy(site) == ("False", "CheckPending", f"health check dns has not passed yet: {why}")

    cluster_api.down = False
    await site.reconcile(controller, fleet.key)
    await cluster_api.run_jobs()
    await site.reconcile(controller, fleet.key)
    assert await _verdicts(site) == [("dns", "Passed", "the Job completed")]


async def test_a_cluster_whose_checks_are_gone_is_healthy_again(site: Site, cluster_api: Workload) -> None:
    fleet = await cluster_of(site)
    check = await _check(site, command="exit 1")
    controller = _controller(fleet, cluster_api)
    await site.reconcile(controller, fleet.key)
    await cluster_api.run_jobs()
    await site.reconcile(controller, fleet.key)
    assert (await _healthy(site))[0] == "False"
    await site.store.delete("ClusterHealthCheck", check.name, check.namespace)
    assert await site.reconcile(controller, fleet.key) is None
    assert await _verdicts(site) == []
    assert await _healthy(site) == ("True", "NoChecks", "the cluster has no health checks")
