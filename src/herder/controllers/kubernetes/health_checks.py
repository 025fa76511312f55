"""Health checks: each ClusterHealthCheck's Job runs in its cluster's Kubernetes every interval (a new Job
``herder-check-<check>-<n>`` in the Job's namespace, ``kube-system`` when it names none; the run before it
is deleted once it has ended), and the newest verdict of every check of a cluster is on
``Cluster.status.healthChecks``, summed up by the condition ``Healthy``. A check that has not passed yet, or
failed its last run, holds the cluster's rollouts (see ``version_rollout``) until it passes.
"""

from __future__ import annotations

import time
from typing import Any

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.kubernetes.manifests import workload_api
from herder.controllers.kubernetes.workload import WorkloadAPI, WorkloadError
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.controllers.members import cluster_changes
from herder.resources import Resource, now_rfc3339
from herder.resources.clusters import CLUSTER, ClusterStatus
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.manifests import CLUSTER_HEALTH_CHECK, ClusterHealthCheckSpec, HealthCheckResult
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner
from herder.runtime.outputs import Writes

CONDITION = "Healthy"
POLL_EVERY = 1.0
"""Seconds between looks at a running check's Job."""
WAIT_EVERY = 5.0
CHECK_LABEL = "herder.dev/health-check"


def health_hold(cluster: Resource) -> str:
    """Why the cluster's rollouts wait for its health checks ('' when none holds them): the first check that
    has not passed yet, or failed its last run."""
    for result in status_of(cluster, ClusterStatus).health_checks:
        if not result.passed:
            verb = "failed" if result.state == "Failed" else "has not passed yet"
            return f"held: health check {result.name} {verb}" + (
                f" ({result.message})" if result.message else ""
            )
    return ""


def _job_state(job: dict[str, Any]) -> tuple[str, str]:
    """(Passed | Failed | Running, message) of a Job as its conditions say."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Passed", "the Job completed"
        if condition.get("type") == "Failed":
            return (
                "Failed",
                f"the Job failed: {condition.get('reason', '')} {condition.get('message', '')}".strip(),
            )
    return "Running", "the Job is running"


def run_of(check: Resource, spec: ClusterHealthCheckSpec, run: int) -> dict[str, Any]:
    """The Job of one run of a check."""
    job = dict(spec.job)
    metadata = dict(job.get("metadata") or {})
    labels = {**(metadata.get("labels") or {}), CHECK_LABEL: check.name}
    job_spec = {"backoffLimit": 0, **(job.get("spec") or {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"herder-check-{check.name}-{run}"[:63].rstrip("-"),
            "namespace": metadata.get("namespace") or "kube-system",
            "labels": labels,
        },
        "spec": job_spec,
    }


class HealthCheckController(Controller):
    name = "HealthCheck"
    primary = CLUSTER.kind
    outputs = (Writes(CLUSTER.kind, "status.healthChecks", f"status.conditions[{CONDITION}]"),)
    concurrency = 4
    watches = (
        Watch(CLUSTER.kind, cluster_changes("bootstrap", "endpoint")),
        Watch(CLUSTER_HEALTH_CHECK.kind, labelled_owner(CLUSTER.kind, CLUSTER_LABEL)),
    )

    def __init__(self, keys: ClusterKeys, clients: KubernetesClients | None = None) -> None:
        self._keys = keys
        self._clients = clients or KubernetesClients()
        self._due: dict[tuple[str, str, str], float] = {}
        """When each check runs next (monotonic), by (namespace, cluster, check)."""
        self._running: dict[tuple[str, str, str], str] = {}
        """The Job (namespace/name) of each check's run that has not ended yet."""

    async def shutdown(self) -> None:
        await self._clients.close()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        checks = await ctx.list(
            CLUSTER_HEALTH_CHECK.kind, cluster.namespace, label_selector=f"{CLUSTER_LABEL}={cluster.name}"
        )
        status = status_of(cluster, ClusterStatus)
        if not checks:
            if status.health_checks or status.condition(CONDITION) is not None:
                await self._write(ctx, cluster, [], True, "NoChecks", "the cluster has no health checks")
            return None
        previous = {r.name: r for r in status.health_checks}
        api, why = await workload_api(self._keys, self._clients, cluster)
        results: list[HealthCheckResult] = []
        next_look = WAIT_EVERY
        for check in sorted(checks, key=lambda c: c.name):
            result = previous.get(check.name) or HealthCheckResult(name=check.name, message="not run yet")
            if api is None:
                result = (
                    result.model_copy(update={"message": f"waiting: {why}"})
                    if not result.last_run_time
                    else result
                )
            else:
                result, wait = await self._check(api, cluster, check, result)
                next_look = min(next_look, wait)
            results.append(result)
        failing = [r for r in results if not r.passed]
        if failing:
            first = failing[0]
            message = f"health check {first.name} {'failed' if first.state == 'Failed' else 'has not passed yet'}: {first.message}"
            await self._write(
                ctx,
                cluster,
                results,
                False,
                "CheckFailing" if first.state == "Failed" else "CheckPending",
                message,
            )
        else:
            await self._write(
                ctx, cluster, results, True, "ChecksPassing", f"{len(results)} health check(s) pass"
            )
        return Result(requeue_after=max(next_look, 0.2))

    async def _check(
        self, api: WorkloadAPI, cluster: Resource, check: Resource, result: HealthCheckResult
    ) -> tuple[HealthCheckResult, float]:
        """The check's verdict now (its running Job looked at, or a new run started when due), and the
        seconds until it needs a look again."""
        spec = CLUSTER_HEALTH_CHECK.spec_of(check, ClusterHealthCheckSpec)
        where = (cluster.namespace or "", cluster.name, check.name)
        now = time.monotonic()
        running = self._running.get(where)
        if running is None and result.job and result.state in ("Pending", "Running"):
            running = result.job  # herder restarted while it ran
        try:
            if running:
                namespace, _, name = running.partition("/")
                job = await api.get(("batch/v1", "Job", namespace, name))
                state, message = _job_state(job) if job is not None else ("Failed", f"Job {running} is gone")
                if state == "Running":
                    if result.state in ("Passed", "Failed"):
                        return result, POLL_EVERY  # the verdict before it stands until this run ends
                    return result.model_copy(update={"state": "Running", "message": message}), POLL_EVERY
                update: dict[str, Any] = {"state": state, "message": message}
                if state == "Passed":
                    update["last_passed_time"] = now_rfc3339()
                result = result.model_copy(update=update)
                self._running.pop(where, None)
            due = self._due.get(where, 0.0)
            if due > now:
                return result, due - now
            if result.job:
                namespace, _, name = result.job.partition("/")
                await api.delete(("batch/v1", "Job", namespace, name))
            job = await api.create(run_of(check, spec, int(time.time() * 1000) % 10**10))
            metadata = job.get("metadata") or {}
            started = f"{metadata.get('namespace')}/{metadata.get('name')}"
            self._running[where] = started
            self._due[where] = now + spec.interval_seconds
            update = {"job": started, "last_run_time": now_rfc3339()}
            if result.state == "Pending":
                update.update(state="Running", message="the first run is running")
            return result.model_copy(update=update), POLL_EVERY
        except WorkloadError as exc:
            return result.model_copy(update={"message": f"cannot run the check: {exc}"}), WAIT_EVERY

    async def _write(
        self,
        ctx: Context,
        cluster: Resource,
        results: list[HealthCheckResult],
        ok: bool,
        reason: str,
        message: str,
    ) -> None:
        def record(_: Resource, status: ClusterStatus) -> None:
            status.health_checks = results

        await ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, record)
        await ctx.condition(cluster, CONDITION, ok, reason, message, event="Normal" if ok else "Warning")
